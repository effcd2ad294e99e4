"""The build: corpus shards -> k-gram counts -> one trie file.

    expand inputs -> map tasks (shard -> sorted count runs)
                  -> partition plan (ranges of first tokens, balanced by unigram mass)
                  -> reduce tasks (range -> its slice of every order)
                  -> assembly (slices streamed, in order, into TrieWriter)

Work lives under a work directory keyed by everything that determines the
runs, so re-running the same command resumes from finished tasks.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import duckdb
import numpy as np
import pyarrow.parquet as pq

from indexer import __version__
from indexer.build_tasks import (
    MapResult,
    MapTask,
    ReduceResult,
    ReduceTask,
    level_file,
    run_map,
    run_reduce,
)
from indexer.executor import Executor, LocalExecutor
from indexer.shards import expand_inputs
from indexer.trie_assembly import FORMAT_VERSION, LevelChunk, LevelPlan, write_trie


class BuildError(Exception):
    """A build that cannot go on; the message says why."""


@dataclass
class BuildConfig:
    inputs: list[str]
    out: str
    tokenizer: str
    order: int = 3
    min_count: int = 1
    workers: int = 1
    memory_limit_bytes: int = 2 << 30
    tmp_dir: str | None = None
    text_field: str = "text"
    eos: int | str | None = None
    skip_bad: bool = False
    compress: bool = False
    keep_tmp: bool = False
    tokenizer_backend: str = "auto"
    name: str | None = None


@dataclass
class BuildReport:
    out: str
    file_bytes: int
    documents: int
    tokens: int
    skipped: int
    ngrams: list[int]
    seconds: float
    tokenize_seconds: float
    shards_resumed: int
    phase_seconds: dict[str, float]


Progress = Callable[[str], None]


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _key(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def work_dir(cfg: BuildConfig) -> Path:
    """Where a build keeps its runs: --tmp-dir, else OUT.build beside OUT."""
    out = Path(cfg.out)
    return Path(cfg.tmp_dir) if cfg.tmp_dir else out.with_name(out.name + ".build")


def _load_tokenizer_task(cfg: BuildConfig | None) -> Any:
    """Loads the tokenizer (and picks its fastest exact backend); with None,
    only warms a worker up (its imports), so that one worker's load does
    not wait for another's start."""
    import indexer.build_tasks  # noqa: F401  (what every map task needs)

    if cfg is None:
        return None
    from indexer.tokenizer import load_tokenizer

    tok = load_tokenizer(cfg.tokenizer, backend=cfg.tokenizer_backend, eos=cfg.eos)
    _release_freed_memory()
    return tok


def _release_freed_memory() -> None:
    """Loading a tokenizer parses its JSON and builds a second backend to
    check the first: hundreds of MB freed again, but held by the C heap
    unless trimmed (glibc only)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def build(cfg: BuildConfig, executor: Executor | None = None, progress: Progress = _stderr) -> BuildReport:
    """Runs the whole build; with no executor, a LocalExecutor of cfg.workers processes."""
    if executor is not None:
        return _build(cfg, executor, progress)
    with LocalExecutor(cfg.workers) as local:
        return _build(cfg, local, progress)


def _build(cfg: BuildConfig, executor: Executor, progress: Progress) -> BuildReport:
    t_start = time.perf_counter()
    if cfg.order < 1 or cfg.order > 16:
        raise BuildError(f"--order must be in 1..16, got {cfg.order}")
    if cfg.min_count < 1:
        raise BuildError(f"--min-count must be >= 1, got {cfg.min_count}")
    shards = expand_inputs(cfg.inputs)
    # Loaded (and checked for the fastest exact backend) in one worker while
    # the others start: the driver keeps only the picklable facts, not the
    # vocabulary, and one load at a time keeps the peak memory down (the
    # check builds both backends); other workers build just the chosen
    # backend with their first shard.
    loaded = executor.map_unordered(_load_tokenizer_task, [cfg] + [None] * (executor.workers - 1))
    tok = next(t for t in loaded if t is not None)
    progress(
        f"ngram-build: {len(shards)} shard(s), order {cfg.order}, tokenizer {tok.name} "
        f"({tok.backend}, vocab {tok.vocab_size}, eos {tok.eos_id}), {executor.workers} worker(s)"
    )

    out = Path(cfg.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    stat = [(str(s), s.stat().st_size, s.stat().st_mtime_ns) for s in shards]
    run_key = _key([tok.fingerprint, tok.eos_id, cfg.order, cfg.text_field, cfg.skip_bad, stat])
    work = work_dir(cfg) / f"runs-{run_key}"
    work.mkdir(parents=True, exist_ok=True)

    # Memory: each concurrent task gets an equal share; DuckDB gets half of
    # it, the k-gram arrays of one chunk (about 4 * N(N+1)/2 + 16 bytes a
    # token) the other half.
    per_task = cfg.memory_limit_bytes // executor.workers
    bytes_per_token = 4 * cfg.order * (cfg.order + 1) // 2 + 24
    chunk_tokens = int(min(max(per_task // 2 // bytes_per_token, 1 << 16), 8_000_000))
    map_tasks = [
        MapTask(
            shard=str(s),
            out_dir=str(work / "map" / f"{i:05d}-{_key(str(s))}"),
            order=cfg.order,
            tokenizer=tok,
            text_field=cfg.text_field,
            skip_bad=cfg.skip_bad,
            chunk_tokens=chunk_tokens,
            memory_limit_bytes=per_task // 2,
        )
        for i, s in enumerate(shards)
    ]
    t_map = time.perf_counter()
    map_results = _run_maps(executor, map_tasks, progress)
    t_reduce = time.perf_counter()
    documents = sum(r.documents for r in map_results)
    tokens = sum(r.tokens for r in map_results)
    skipped = sum(r.skipped for r in map_results)
    if documents == 0:
        raise BuildError("no documents in the input: nothing to count")

    run_dirs = [t.out_dir for t, r in zip(map_tasks, map_results) if r.runs > 0]
    ranges = _partition(run_dirs, tok.vocab_size, executor.workers, per_task)
    red_dir = work / f"reduce-{_key([cfg.min_count, ranges])}"
    reduce_tasks = [
        ReduceTask(i, lo, hi, run_dirs, str(red_dir / f"part-{i:05d}"), cfg.order, cfg.min_count, per_task // 2)
        for i, (lo, hi) in enumerate(ranges)
    ]
    reduce_results = _run_reduces(executor, reduce_tasks, progress)
    t_write = time.perf_counter()

    plans = [LevelPlan() for _ in range(cfg.order)]
    for r in reduce_results:
        for k in range(cfg.order):
            plans[k].size += r.sizes[k]
            plans[k].count_values.update(dict(r.count_values[k]))
    meta = {
        "format_version": FORMAT_VERSION,
        "name": cfg.name or out.name.split(".")[0],
        "tokenizer": {"name": tok.name, "fingerprint": tok.fingerprint, "vocab_size": tok.vocab_size},
        "corpus": {
            "documents": documents,
            "tokens": tokens,
            "skipped_documents": skipped,
            "shards": [
                {"path": r.shard, "bytes": r.bytes, "documents": r.documents, "tokens": r.tokens}
                for r in map_results
            ],
        },
        "build": {
            "tool": f"ngram-build {__version__}",
            "order": cfg.order,
            "min_count": cfg.min_count,
            "text_field": cfg.text_field,
            "eos_id": tok.eos_id,
            "skip_bad": cfg.skip_bad,
        },
    }
    progress(f"[write] {sum(p.size for p in plans[1:]) + plans[0].size:,} n-grams -> {out}")
    plain = out.with_name(out.name + ".plain.tmp") if cfg.compress else out
    size = write_trie(
        plain,
        order=cfg.order,
        vocab_size=tok.vocab_size,
        eos_id=tok.eos_id,
        meta=meta,
        plans=plans,
        chunks=_reduce_chunks(reduce_tasks, cfg.order),
    )
    if cfg.compress:
        size = compress_file(plain, out)
        plain.unlink()
    if not cfg.keep_tmp:
        shutil.rmtree(work, ignore_errors=True)
        if not cfg.tmp_dir:  # OUT.build is ours; a --tmp-dir is the user's
            shutil.rmtree(work.parent, ignore_errors=True)
    t_end = time.perf_counter()
    seconds = t_end - t_start
    phases = {"start": t_map - t_start, "map": t_reduce - t_map, "reduce": t_write - t_reduce, "write": t_end - t_write}
    report = BuildReport(
        out=str(out),
        file_bytes=size,
        documents=documents,
        tokens=tokens,
        skipped=skipped,
        ngrams=[p.size for p in plans],
        seconds=seconds,
        tokenize_seconds=sum(r.tokenize_seconds for r in map_results),
        shards_resumed=sum(r.resumed for r in map_results),
        phase_seconds=phases,
    )
    progress(
        f"done: {out} ({size:,} bytes), {documents:,} documents, {tokens:,} tokens, "
        f"n-grams per order {report.ngrams}, {seconds:.1f} s ({tokens / max(seconds, 1e-9) / 1e6:.2f} M tokens/s; "
        + ", ".join(f"{k} {v:.1f} s" for k, v in phases.items()) + ")"
        + (f", {skipped:,} bad documents skipped" if skipped else "")
    )
    return report


def _run_maps(executor: Executor, tasks: list[MapTask], progress: Progress) -> list[MapResult]:
    by_shard: dict[str, MapResult] = {}
    t0 = time.perf_counter()
    docs = toks = 0
    # Largest shards first, so that no big shard runs alone at the end.
    for r in executor.map_unordered(run_map, sorted(tasks, key=lambda t: -os.path.getsize(t.shard))):
        by_shard[r.shard] = r
        docs += r.documents
        toks += r.tokens
        el = time.perf_counter() - t0
        note = " (resumed)" if r.resumed else ""
        skipped = f", {r.skipped} bad skipped" if r.skipped else ""
        progress(
            f"[map {len(by_shard)}/{len(tasks)}] {Path(r.shard).name}{note}: {r.documents:,} docs, "
            f"{r.tokens:,} tokens{skipped} | total {docs:,} docs, {toks:,} tokens, "
            f"{toks / max(el, 1e-9) / 1e6:.2f} M tokens/s"
        )
        for e in r.errors[:3]:
            progress(f"  skipped: {e}")
    return [by_shard[t.shard] for t in tasks]


def _run_reduces(executor: Executor, tasks: list[ReduceTask], progress: Progress) -> list[ReduceResult]:
    results: dict[int, ReduceResult] = {}
    for r in executor.map_unordered(run_reduce, tasks):
        results[r.index] = r
        progress(f"[reduce {len(results)}/{len(tasks)}] part {r.index}: {sum(r.sizes):,} n-grams")
    return [results[t.index] for t in tasks]


def _partition(run_dirs: list[str], vocab_size: int, workers: int, per_task_bytes: int) -> list[tuple[int, int]]:
    """Ranges of first tokens with about equal unigram mass (a proxy for the
    number of n-grams that start there), enough of them that each reduce
    works on a bounded share of the runs."""
    files = [str(Path(d) / "order1-*.parquet") for d in run_dirs]
    con = duckdb.connect()
    con.execute("SET threads = 1")
    tokens, mass = con.execute(
        f"SELECT w0, sum(c)::DOUBLE FROM read_parquet({files!r}) GROUP BY w0 ORDER BY w0"
    ).fetchnumpy().values()
    run_bytes = sum(f.stat().st_size for d in run_dirs for f in Path(d).glob("order*.parquet"))
    parts = max(4 * workers, -(-run_bytes // max(per_task_bytes // 8, 1 << 20)))
    parts = int(min(parts, len(tokens), 4096)) or 1
    cum = np.cumsum(mass)
    cuts = np.searchsorted(cum, cum[-1] * np.arange(1, parts) / parts, side="right")
    bounds = sorted(set(int(tokens[min(c, len(tokens) - 1)]) for c in cuts) - {int(tokens[0])})
    edges = [0] + bounds + [vocab_size]
    return [(edges[i], edges[i + 1]) for i in range(len(edges) - 1)]


def _reduce_chunks(tasks: list[ReduceTask], order: int) -> Iterator[tuple[int, LevelChunk]]:
    for k in range(1, order + 1):
        for t in tasks:
            pf = pq.ParquetFile(level_file(t.out_dir, k))
            for batch in pf.iter_batches(batch_size=1 << 20):
                yield k, LevelChunk(
                    batch.column("w").to_numpy().astype(np.int32, copy=False),
                    batch.column("c").to_numpy().astype(np.uint64, copy=False),
                    batch.column("n").to_numpy().astype(np.uint64, copy=False) if k < order else None,
                )


def compress_file(src: Path, dst: Path, level: int = 10) -> int:
    """zstd-compresses a finished trie for shipping; atomic like every write."""
    import zstandard

    tmp = dst.with_name(dst.name + f".tmp-{os.getpid()}")
    cctx = zstandard.ZstdCompressor(level=level, threads=-1, write_content_size=True)
    with open(src, "rb") as fi, open(tmp, "wb") as fo:
        cctx.copy_stream(fi, fo, size=src.stat().st_size)
        fo.flush()
        os.fsync(fo.fileno())
    os.replace(tmp, dst)
    return dst.stat().st_size
