"""ngram-serve: starts the native gRPC trie host with the same arguments.

    ngram-serve corpus3.ngt --port 50051 [--name corpus ...]

The server is C++ (cpp/server, ``ngram-serve-native``); this entry point only
finds the binary and replaces itself with it (exec), so signals (SIGTERM
drain, SIGHUP reload) reach the server directly. ``ngram-serve --help`` lists
the flags; docs/SERVER.md describes operations.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

BINARY = "ngram-serve-native"
ENV = "NGRAM_SERVE_NATIVE"


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


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    binary = find_native_binary()
    if binary is None:
        sys.stderr.write(
            "ngram-serve: the native server (ngram-serve-native) was not built: install grpc++ and protobuf "
            "(infra/install-system-deps.sh), then reinstall the package (pip install --no-build-isolation -e .), "
            f"or point ${ENV} at the binary.\n")
        sys.exit(2)
    os.execv(str(binary), [str(binary), *args])


if __name__ == "__main__":
    main()
