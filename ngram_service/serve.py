"""ngram-serve: starts the native gRPC trie host with the same arguments.

    ngram-serve corpus3.ngt [--port 50051] [--name corpus ...]
    ngram-serve s3://bucket/corpus3.ngt --cache-dir /var/cache/ngram --port 50051

The port defaults to 50051, where ``ngram-query`` looks by default.

The server is C++ (cpp/server, ``ngram-serve-native``); this entry point only
finds the binary and replaces itself with it (exec), so signals (SIGTERM
drain, SIGHUP reload) reach the server directly. Before that, a trie given as
``s3://``, ``gs://`` or ``https://`` is fetched once into ``--cache-dir`` and
every section's CRC verified, and a local zstd-compressed trie
(``ngram-build --compress``) is decompressed into memory
(ngram_service/trie_fetch.py); the server then gets the plain copy, under the
index name the original would have had. ``--fetch-only`` stops after the
fetch (a Kubernetes init container). ``ngram-serve --help`` lists the flags,
the native server's and then this wrapper's, in one format (docs/CLI.md reads
them from it); docs/SERVER.md describes operations, docs/OPERATIONS.md
deployment.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import NoReturn

from ngram_service.index import NgramIndex, TrieFormatError, index_name
from ngram_service.trie_fetch import (REMOTE_SCHEMES, TrieFetchError, decompress_to_memory, fetch_trie, is_compressed,
                                      is_remote)

BINARY = "ngram-serve-native"
ENV = "NGRAM_SERVE_NATIVE"
CACHE_ENV = "NGRAM_CACHE_DIR"
# The native server's options that take no value (cpp/server/server_config.cc;
# tests/test_serve_fetch.py checks this set against its --help). Every other
# option takes one, which is how a FILE is told from an option's value.
NATIVE_SWITCHES = frozenset({"--ram", "--verify", "--admin", "--log-requests"})
# The first line of the native server's --help and of its usage errors
# (cpp/server/server_config.cc, kUsageLine; tests/test_cli_messages.py checks
# that they agree).
USAGE_LINE = "Usage: ngram-serve FILE [FILE ...] [--port P] [options]"

# The options handled here, before the native server starts: (flag, metavar, help), shown after the
# native server's in its format (two spaces, the flag and metavar, the help from column 28).
WRAPPER_OPTIONS = (
    ("FILE", "", "may also be zstd-compressed (ngram-build --compress): decompressed into memory at start, "
                 "then checked and served as a plain trie (with --ram, held twice); or s3://BUCKET/KEY, "
                 "gs://BUCKET/KEY (pyarrow.fs; AWS_* / AWS_ENDPOINT_URL, Google application default "
                 "credentials) or an https:// URL: fetched once into --cache-dir, every section's CRC checked "
                 "(a compressed one decompressed there), then served from there"),
    ("--cache-dir", "DIR", "where fetched tries are kept (default $NGRAM_CACHE_DIR, else ~/.cache/ngram-serve); "
                           "a valid cached copy is used without downloading again; may be read-only once filled "
                           "(e.g. by an init container)"),
    ("--fetch-only", "", "fetch and verify the remote tries, print the local paths of all, exit (no server)"),
)
HELP_COLUMN = 27  # where the native server's --help starts an option's help text (0-based)


def wrapper_help() -> str:
    """WRAPPER_OPTIONS as the native --help writes its options."""
    import textwrap

    lines = ["", "Options of ngram-serve itself (handled before the native server starts):"]
    for flag, metavar, text in WRAPPER_OPTIONS:
        head = f"  {flag} {metavar}".rstrip()
        body = textwrap.wrap(text, 88 - HELP_COLUMN)
        lines.append(head.ljust(HELP_COLUMN) + body[0])
        lines += [" " * HELP_COLUMN + b for b in body[1:]]
    return "\n".join(lines) + "\n"


def usage_error(message: str) -> NoReturn:
    """Exits 2 with the usage line, a pointer to --help and the reason, as the
    native server and the click tools do on a usage error."""
    sys.stderr.write(f"{USAGE_LINE}\nTry 'ngram-serve --help' for help.\n\nError: {message}\n")
    sys.exit(2)


def _candidates() -> list[Path]:
    pkg = Path(__file__).resolve().parent
    found: list[Path] = []
    env = os.environ.get(ENV)
    if env:
        found.append(Path(env))
    # A wheel install: next to this module.
    found.append(pkg / "bin" / BINARY)
    # An editable install: scikit-build-core installs compiled files into
    # site-packages/ngram_service while the sources stay in the checkout.
    for entry in sys.path:
        if entry:
            found.append(Path(entry) / "ngram_service" / "bin" / BINARY)
    # A checkout's build tree (pip install -e . or cmake -B build/...).
    builds = sorted((pkg.parent / "build").glob(f"*/cpp/server/{BINARY}"), key=lambda p: p.stat().st_mtime,
                    reverse=True)
    found.extend(builds)
    which = shutil.which(BINARY)
    if which:
        found.append(Path(which))
    return found


def find_native_binary() -> Path | None:
    """The ngram-serve-native executable, or None when it was not built
    (grpc++/protobuf missing at build time: run infra/install-system-deps.sh
    and reinstall). $NGRAM_SERVE_NATIVE overrides the search."""
    for p in _candidates():
        if p.is_file() and os.access(p, os.X_OK):
            return p
    return None


def default_cache_dir() -> Path:
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path.home() / ".cache" / "ngram-serve"


class ServeArgs:
    """The command line split into ngram-serve's own options and the native
    server's arguments, with the positions of the FILE arguments."""

    def __init__(self, argv: list[str]) -> None:
        self.native: list[str] = []
        self.file_positions: list[int] = []  # indexes into self.native
        self.cache_dir: Path | None = None
        self.fetch_only = False
        self.help = False
        self.names = 0  # --name options given
        i = 0
        while i < len(argv):
            a = argv[i]
            name, eq, value = a.partition("=")
            if name == "--cache-dir":
                if not eq:
                    if i + 1 >= len(argv):
                        usage_error("--cache-dir needs a value")
                    i += 1
                    value = argv[i]
                self.cache_dir = Path(value)
            elif a == "--fetch-only":
                self.fetch_only = True
            elif a in ("-h", "--help"):
                self.help = True
                self.native.append(a)
            elif a.startswith("--"):
                self.names += name == "--name"
                self.native.append(a)
                # The option's value follows unless it is a switch or written --opt=value.
                if not eq and name not in NATIVE_SWITCHES and i + 1 < len(argv):
                    i += 1
                    self.native.append(argv[i])
            else:
                self.file_positions.append(len(self.native))
                self.native.append(a)
            i += 1

    def files(self) -> list[str]:
        return [self.native[p] for p in self.file_positions]


def resolve_tries(args: ServeArgs) -> list[str]:
    """Fetches every remote FILE (cached, verified) and, unless --fetch-only,
    decompresses every local compressed one into memory; returns the FILEs
    with those replaced by their plain copies, in order."""
    cache_dir = args.cache_dir or default_cache_dir()
    out = []
    for f in args.files():
        if is_remote(f):
            out.append(str(fetch_trie(f, cache_dir)))
        elif "://" in f:
            raise TrieFetchError(f"{f}: not a location ngram-serve can fetch ({', '.join(REMOTE_SCHEMES)}, or a "
                                 "local path)")
        elif args.fetch_only:
            check_local_trie(f)
            out.append(f)
        elif is_compressed(f):
            out.append(decompress_to_memory(f))
        else:
            out.append(f)
    return out


def check_local_trie(path: str) -> None:
    """--fetch-only's word that a local FILE will serve: a readable file
    whose header the engine accepts (a compressed one: its zstd magic; the
    server checks its content when it decompresses it)."""
    try:
        if not is_compressed(path):
            NgramIndex.open(path)
        elif not os.path.isfile(path):
            raise OSError("not a regular file")
    except (OSError, TrieFormatError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise TrieFetchError(f"{path}: {reason.removeprefix(path + ': ')}") from None


def main(argv: list[str] | None = None) -> None:
    args = ServeArgs(sys.argv[1:] if argv is None else argv)
    if not args.help:
        try:
            local = resolve_tries(args)
        except TrieFetchError as e:
            sys.stderr.write(f"ngram-serve: {e}\n")
            sys.exit(1)
        files = args.files()
        if any(f != copy for f, copy in zip(files[args.names:], local[args.names:])):
            # Names are given to FILEs in order: name every FILE after the named ones.
            for f in files[args.names:]:
                args.native += ["--name", index_name(f)]
        for pos, path in zip(args.file_positions, local):
            args.native[pos] = path
        if args.fetch_only:
            if not local:
                usage_error("--fetch-only: no trie FILE given")
            print("\n".join(local))
            sys.exit(0)
    binary = find_native_binary()
    if binary is None:
        sys.stderr.write(
            "ngram-serve: the native server (ngram-serve-native) was not built: install grpc++ and protobuf "
            "(infra/install-system-deps.sh), then reinstall the package (pip install -e ., docs/SERVER.md), "
            f"or point ${ENV} at the binary.\n")
        sys.exit(2)
    if args.help:  # the native usage, then the options handled here
        import subprocess

        rc = subprocess.call([str(binary), "--help"])
        try:
            sys.stdout.write(wrapper_help())
            sys.stdout.flush()
        except BrokenPipeError:  # `ngram-serve --help | head`: the reader has what it wanted; exit as click does
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(1)
        sys.exit(rc)
    os.execv(str(binary), [str(binary), *args.native])


if __name__ == "__main__":
    main()
