"""`ngram-build`: the command line over indexer.pipeline and indexer.dart_convert."""
from __future__ import annotations

import os
import re
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import click

from indexer.build_config import BuildConfig, BuildError, OutIsInputError
from indexer.executor import available_cores
from indexer.out_checks import check_out
from indexer.trie_assembly import FORMAT_VERSION, FORMAT_VERSIONS
from ngram_service import _engine
from ngram_service.cli_options import (CONTEXT_SETTINGS, ToolCommand, deprecated_option, quiet_option, refuse_given,
                                       threads_option)

SAMPLE_DIR = Path(__file__).parent / "sample"

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "M": 1 << 20, "MB": 1 << 20, "G": 1 << 30, "GB": 1 << 30,
          "T": 1 << 40, "TB": 1 << 40, "KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30, "TIB": 1 << 40}


#: Below this, DuckDB's per-connection floor and the map's token chunks
#: leave nothing to share among workers.
MIN_MEMORY_LIMIT = 256 << 20
#: Counts are 64-bit signed integers in the count runs (DuckDB BIGINT).
MAX_COUNT = 2**63 - 1


def parse_size(text: str) -> int:
    """'2GB', '512MiB', '1.5G', '1000000' -> bytes (binary units)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).upper() not in _UNITS:
        raise click.BadParameter(f"{text!r} is not a size such as 2GB, 512MB or 1073741824")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def _memory_limit(_ctx: click.Context, _param: click.Parameter, value: str) -> int:
    size = parse_size(value)
    if size < MIN_MEMORY_LIMIT:
        raise click.BadParameter(f"{value!r} is below the minimum of {MIN_MEMORY_LIMIT >> 20}MB")
    return size


def _eos(value: str | None) -> int | str | None:
    if value is None:
        return None
    return int(value) if value.lstrip("-").isdigit() else value


class _BuildCommand(ToolCommand):
    """ngram-build's command: run as the command with the local executor, it
    first starts itself again under mimalloc (indexer/allocator.py;
    NGRAM_BUILD_ALLOCATOR=system keeps glibc's), before its options are
    parsed, so that what parsing prints (a deprecated spelling) is said once."""

    def main(self, args: Any = None, *rest: Any, **kwargs: Any) -> Any:
        if args is None and _run_as_the_command() and not _ray_executor(sys.argv[1:]):
            from indexer.allocator import restart_under_mimalloc

            restart_under_mimalloc()
        return super().main(args, *rest, **kwargs)


def _ray_executor(argv: list[str]) -> bool:
    return "--executor=ray" in argv or any(a == "--executor" and b == "ray" for a, b in zip(argv, argv[1:]))


@click.command("ngram-build", cls=_BuildCommand, context_settings=CONTEXT_SETTINGS)
@click.argument("inputs", nargs=-1, metavar="[INPUT]...")
@click.option("--out", "-o", required=True, callback=check_out,
              help="Trie file to write (written atomically), a path or s3:// / gs:// URI.")
@click.option("--tokenizer", "-t", default=None,
              help="Hugging Face hub id, folder with tokenizer.json, a tokenizer.json file, or a "
                   "tiktoken rank file. Default with no INPUT: the bundled sample tokenizer. Optional "
                   "when every INPUT is pre-tokenized (then give --vocab-size and --eos).")
@click.option("--order", "-n", default=3, show_default=True, type=click.IntRange(1, _engine.MAX_ORDER),
              help="N: count k-grams for k = 1..N.")
@click.option("--min-count", default=1, show_default=True, type=click.IntRange(1, MAX_COUNT),
              help="Drop every n-gram seen fewer than C times (and so all its extensions); a warning says when "
                   "that leaves an order empty.")
@threads_option("Map/reduce tasks run at once by the local executor, each in a worker process (1: all in this "
                "process). With fewer than the cores, each map reads and encodes its shard ahead of its counting "
                "on a free core. Ray runs one task per cluster CPU.", default=available_cores(),
                show_default="all cores")
@deprecated_option("--workers", new="--threads", param="threads", type=click.IntRange(1))
@click.option("--memory-limit", default="2GB", show_default=True, callback=_memory_limit,
              help="Memory for all concurrent tasks together (with Ray: the cluster's CPUs), at least "
                   "256MB; DuckDB spills beyond it, and it sets the number of reduce ranges.")
@click.option("--tmp-dir",
              help="Work directory for count runs, a path or s3:// / gs:// URI [default: OUT.build next "
                   "to OUT; removed after success].")
@click.option("--executor", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="local: a process pool of --threads; ray: Ray tasks on a Ray cluster (pip install "
                   "'ngram-trie-host[ray]').")
@click.option("--ray-address", default=None,
              help="With --executor ray: the cluster to join [default: RAY_ADDRESS, else a local one].")
@click.option("--token-field", default="input_ids", show_default=True,
              help="Parquet column of token id lists (pre-tokenized); Parquet files without it are read "
                   "as text.")
@click.option("--token-dtype", type=click.Choice(["uint16", "uint32"]), default=None,
              help="Id type of headerless .npy token arrays [default: uint16 when the vocabulary fits, "
                   "else uint32, as Dolma writes them].")
@click.option("--text-field", default="text", show_default=True, help="JSON field / Parquet column with the text.")
@click.option("--eos", default=None, help="EOS token id or string appended to every document "
                                          "[default: the tokenizer's].")
@click.option("--skip-bad", is_flag=True, help="Skip malformed documents (and report how many) "
                                               "instead of failing on the first.")
@click.option("--compress", is_flag=True, help="Write a zstd-compressed trie for shipping (decompressed into RAM "
                                               "when opened: NgramIndex.open, ngram-serve).")
@click.option("--format", "format_version", type=click.Choice([str(v) for v in FORMAT_VERSIONS]),
              default=str(FORMAT_VERSION), show_default=True,
              help="Trie file format version: 1, the fastest lookups (decoded in RAM with ngram-serve --ram); 2, "
                   "about half the file and a fifth of version 1's RAM, with slower lookups (how much slower, and "
                   "which to choose: docs/FORMAT.md, \"Which to choose\").")
@click.option("--resume/--no-resume", default=True, show_default=True,
              help="Reuse the finished map and reduce tasks of an earlier run with the same arguments "
                   "(its work directory); --no-resume deletes that first.")
@click.option("--keep-tmp", is_flag=True, help="Keep the work directory after success.")
@click.option("--tokenizer-backend", type=click.Choice(["auto", "hf", "tiktoken"]), default="auto",
              show_default=True, help="auto: tiktoken when it is exact for this vocabulary, else HF.")
@click.option("--add-special-tokens", is_flag=True,
              help="Encode as DART's build does (add_special_tokens=True): the tokenizer's post-processor "
                   "runs, e.g. a BOS before every document for Llama-2-style tokenizers (HF backend).")
@click.option("--name", default=None, help="Index name stored in the header [default: OUT's file name less .zst and its last extension, the name ngram-serve gives the index].")
@click.option("--from-dart-trie", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Convert a trie saved by DART's TrieNgram::save instead of building from shards.")
@click.option("--vocab-size", type=click.IntRange(1), default=None,
              help="Vocabulary size: needed for pre-tokenized INPUT without --tokenizer; with "
                   "--from-dart-trie [default: the tokenizer's, else max id + 1].")
@quiet_option()
def main(inputs: tuple[str, ...], out: str, tokenizer: str | None, order: int, min_count: int, threads: int,
         memory_limit: int, tmp_dir: str | None, executor: str, ray_address: str | None, token_field: str,
         token_dtype: str | None, text_field: str, eos: str | None, skip_bad: bool,
         compress: bool, format_version: str, resume: bool, keep_tmp: bool, tokenizer_backend: str,
         add_special_tokens: bool,
         name: str | None,
         from_dart_trie: str | None, vocab_size: int | None, quiet: bool) -> None:
    """Build an n-gram trie from corpus shards.

    INPUT: shard files, folders or glob patterns, local or s3:// / gs://:
    .jsonl, .json, .json.gz, .jsonl.gz, .jsonl.zst, .json.zst (Dolma
    documents, one JSON object a line) and .parquet (a text column, or a
    --token-field column of token id lists); pre-tokenized .npy token arrays
    (Dolma / OLMo, EOS-separated). With no INPUT (and no --tokenizer), the
    bundled sample corpus and tokenizer are used:

        ngram-build --out sample.ngt

    Every document is tokenized and followed by one EOS token; k-grams are
    counted within documents. Progress goes to stderr. With the local
    executor the command runs under mimalloc when libmimalloc.so.2 is
    installed (the HF tokenizer's many small allocations);
    NGRAM_BUILD_ALLOCATOR=system keeps the C library's malloc.
    """
    from indexer.eos_lookup import NoEosError
    from indexer.out_checks import check_work_dir
    from indexer.out_lock import OutNotWritableError, out_lock
    from indexer.pipeline import build
    from indexer.progress import ProgressPrinter
    from indexer.shards import ShardError

    progress = (lambda _m: None) if quiet else ProgressPrinter(sys.stderr)
    if from_dart_trie:
        _check_dart_options(inputs, out, tokenizer, from_dart_trie)
    else:
        if not inputs:
            if tokenizer is not None:
                raise click.UsageError("give INPUT shards (the bundled sample goes with the bundled tokenizer)")
            inputs = (str(SAMPLE_DIR / "corpus"),)
            tokenizer = str(SAMPLE_DIR / "tokenizer.json")
            progress(f"no INPUT: building the bundled sample corpus {inputs[0]}")
        elif tokenizer is None and (vocab_size is None or eos is None):
            raise click.UsageError("--tokenizer is required with INPUT (or, for pre-tokenized INPUT, "
                                   "--vocab-size and --eos)")
        check_work_dir(out, tmp_dir)
        _refuse_out_read(out, tokenizer, None)
    try:
        with _sigterm_as_interrupt(), out_lock(out):
            if from_dart_trie:
                from indexer.dart_convert import convert_dart_trie

                convert_dart_trie(from_dart_trie, out, tokenizer=tokenizer, vocab_size=vocab_size, eos=_eos(eos),
                                  compress=compress, name=name, format_version=int(format_version),
                                  progress=progress)
                return
            cfg = BuildConfig(inputs=list(inputs), out=out, tokenizer=tokenizer, order=order, min_count=min_count,
                              workers=threads, memory_limit_bytes=memory_limit, tmp_dir=tmp_dir,
                              text_field=text_field, eos=_eos(eos), skip_bad=skip_bad, compress=compress,
                              keep_tmp=keep_tmp, tokenizer_backend=tokenizer_backend, name=name,
                              token_field=token_field, token_dtype=token_dtype, vocab_size=vocab_size,
                              executor=executor, ray_address=ray_address, add_special_tokens=add_special_tokens,
                              format_version=int(format_version))
            if not resume:
                _delete_work(cfg)
            report = build(cfg, progress=progress)
        warn_empty_orders(report.ngrams, min_count)
    except OutIsInputError as e:
        raise click.UsageError(str(e)) from None
    except OutNotWritableError as e:
        raise click.BadParameter(str(e), param_hint="'--out'") from None
    except NoEosError as e:
        _fail(e.message("give --eos ID or --eos TOKEN"))
    except (BuildError, ShardError, ValueError, OSError, RuntimeError) as e:
        # RuntimeError: a worker process died (BrokenProcessPool), a task failed on every retry.
        _fail(f"{type(e).__name__ + ': ' if isinstance(e, RuntimeError) else ''}{e}")


#: Options of a build from shards that a --from-dart-trie conversion has no use for.
BUILD_ONLY = ("order", "min_count", "threads", "memory_limit", "tmp_dir", "executor", "ray_address", "token_field",
              "token_dtype", "text_field", "skip_bad", "resume", "keep_tmp", "tokenizer_backend",
              "add_special_tokens")


def _check_dart_options(inputs: tuple[str, ...], out: str, tokenizer: str | None, source: str) -> None:
    """--from-dart-trie converts one local file into another: no INPUT, none
    of the build's options, and --out none of the files it reads."""
    if inputs:
        raise click.UsageError("--from-dart-trie takes no INPUT")
    refuse_given(click.get_current_context(), BUILD_ONLY, "not with --from-dart-trie (a conversion counts nothing)")
    from indexer.storage import is_uri

    if is_uri(out):
        raise click.BadParameter("--from-dart-trie writes a local file", param_hint="'--out'")
    _refuse_out_read(out, tokenizer, source)


def _refuse_out_read(out: str, tokenizer: str | None, dart_source: str | None) -> None:
    """A usage error when --out is the tokenizer's file or the DART trie (the
    input shards: the build checks them once it has found them)."""
    from indexer.out_checks import refuse_out_read, tokenizer_files

    reads = [("the --tokenizer file", f) for f in tokenizer_files(tokenizer)] if tokenizer else []
    if dart_source:
        reads.append(("the --from-dart-trie source", Path(dart_source)))
    try:
        refuse_out_read(out, reads)
    except OutIsInputError as e:
        raise click.UsageError(str(e)) from None


def _delete_work(cfg: BuildConfig) -> None:
    """--no-resume: this tool's work folders only; a --tmp-dir is the user's folder and may hold other files."""
    from indexer.build_config import work_dir
    from indexer.storage import Store

    store = Store(work_dir(cfg))
    for folder in sorted({f.key.split("/", 1)[0] for f in store.list("")}):
        if folder.startswith("build-"):
            store.delete(folder)


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (kill, a container's stop) ends the run as Ctrl-C does: the
    interrupted write removes its temporary file, the pool is shut down and
    the driver says where its work waits, instead of dying mid-step."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return

    def interrupt(_sig: int, _frame: Any) -> None:
        # A terminal's Ctrl-C reaches the pool's workers too (its process group); kill reaches the driver
        # alone, which would then wait for the tasks running: pass them the interrupt, on which they exit.
        import multiprocessing

        for child in multiprocessing.active_children():
            if child.pid is not None:
                os.kill(child.pid, signal.SIGINT)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _fail(message: str) -> NoReturn:
    click.echo(f"ngram-build: error: {message}", err=True)
    sys.exit(1)


def warn_empty_orders(ngrams: list[int], min_count: int) -> None:
    """One warning line when the trie stores no n-grams of some order: with
    --min-count above 1 that is the count cut (every longer n-gram goes
    too), else a corpus with no document that long."""
    empty = [k + 1 for k, n in enumerate(ngrams) if n == 0]
    if not empty:
        return
    orders = ("order " if len(empty) == 1 else "orders ") + ", ".join(map(str, empty))
    why = (f"--min-count {min_count} left no n-grams of {orders}" if min_count > 1
           else f"the corpus holds no n-grams of {orders}")
    click.echo(f"ngram-build: warning: {why} (n-grams per order {ngrams})", err=True)


def _run_as_the_command() -> bool:
    """This process is `ngram-build` (or `python -m indexer.cli`), not a
    program that calls main() (a test's CliRunner): only then may it start
    itself again."""
    script = Path(sys.argv[0])
    return script.name == "ngram-build" or script.resolve() == Path(__file__).resolve()


if __name__ == "__main__":
    main()
