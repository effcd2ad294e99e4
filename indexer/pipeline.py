"""The build: corpus shards -> k-gram counts -> one trie file.

    find shards -> sample tasks (the start of a few shards: unigram mass,
                   distinct k-grams per token) -> range plan (first-token
                   ranges of equal mass, as many as memory needs)
                -> map tasks (shard -> count runs already split by range)
                -> reduce tasks (range -> its slice of every order, from only
                   its range's runs)
                -> assembly (slices streamed, in order, into TrieWriter)

Work lives in a work store (a local folder or an object-storage prefix)
keyed by everything that determines the result, so re-running the same
command resumes from finished tasks. docs/BUILD.md has the cost model.
"""
from __future__ import annotations

import bisect
import hashlib
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pyarrow.parquet as pq

from indexer import __version__
from indexer.allocator import active_allocator
from indexer.build_tasks import (
    FAULT_ENV,
    MapResult,
    MapTask,
    ReadSpec,
    ReduceResult,
    ReduceTask,
    SampleResult,
    SampleTask,
    drop_read_ahead,
    faults_from_env,
    level_key,
    run_map,
    run_reduce,
    run_sample,
)
from indexer.executor import Executor, LocalExecutor, make_executor
from indexer.progress import PhaseProgress, Progress, format_bytes
from indexer.shards import Shard, find_shards
from indexer.storage import Store, is_uri, join, upload_atomic
from indexer.trie_assembly import FORMAT_VERSION, LevelChunk, LevelPlan, write_trie
from ngram_service import _engine

#: At most this many equal-mass reduce ranges (each map writes up to one file
#: per range and order; docs/BUILD.md); only a range heavier than one range's
#: share is cut again beyond it. Past that, reduce tasks spill to disk.
MAX_RANGES = 8192
#: Sample this many tokens from the start of each of up to SAMPLE_SHARDS shards.
SAMPLE_TOKENS = 500_000
SAMPLE_SHARDS = 4
#: A task gets at least this much memory (DuckDB's floor is 64 MB a connection).
MIN_TASK_MEMORY = 128 << 20


class BuildError(Exception):
    """A build that cannot go on; the message says why."""


@dataclass
class BuildConfig:
    inputs: list[str]
    out: str
    tokenizer: str | None
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
    token_field: str = "input_ids"
    token_dtype: str | None = None
    vocab_size: int | None = None
    executor: str = "local"
    ray_address: str | None = None
    add_special_tokens: bool = False
    format_version: int = FORMAT_VERSION  # of the trie file written (docs/FORMAT.md)


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
    ranges: int = 0
    map_tokens_per_second: float = 0.0  # tokens / map phase wall time
    peak_work_bytes: int = 0  # runs and reduce outputs in the work store at once
    peak_task_scratch_bytes: int = 0  # the largest local scratch (DuckDB spill, runs before upload) of one task
    peak_tmp_bytes: int = 0  # peak_work_bytes + one task's scratch per concurrent task
    reduce_input_bytes: list[int] | None = None  # run bytes each reduce task read
    peak_task_rss_bytes: int = 0  # the largest worker-process peak RSS any task reported
    map_scratch_peak_bytes: list[int] | None = None
    reduce_scratch_peak_bytes: list[int] | None = None


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _key(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def work_dir(cfg: BuildConfig) -> str:
    """Where a build keeps its work: --tmp-dir, else OUT.build beside OUT
    (a local path or a URI)."""
    return cfg.tmp_dir if cfg.tmp_dir else cfg.out.rstrip("/") + ".build"


def _load_tokenizer_task(cfg: BuildConfig | None) -> Any:
    """Loads the tokenizer (and picks its fastest exact backend); with None,
    only warms a worker up (its imports), so that one worker's load does
    not wait for another's start."""
    import indexer.build_tasks  # noqa: F401  (what every map task needs)

    if cfg is None:
        return None
    from indexer.tokenizer import load_tokenizer

    # The post-processor that adds a BOS exists only in the HF backend.
    backend = "hf" if cfg.add_special_tokens and cfg.tokenizer_backend == "auto" else cfg.tokenizer_backend
    tok = load_tokenizer(cfg.tokenizer, backend=backend, eos=cfg.eos)
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
    """Runs the whole build; with no executor, the one cfg.executor names
    (a LocalExecutor of cfg.workers processes, or Ray)."""
    if executor is not None:
        return _build(cfg, executor, progress)
    _check_config(cfg)
    with make_executor(cfg.executor, cfg.workers, cfg.ray_address) as ex:
        return _build(cfg, ex, progress)


def _check_config(cfg: BuildConfig) -> None:
    if cfg.order < 1 or cfg.order > _engine.MAX_ORDER:
        raise BuildError(f"--order must be in 1..{_engine.MAX_ORDER}, got {cfg.order}")
    if cfg.min_count < 1:
        raise BuildError(f"--min-count must be >= 1, got {cfg.min_count}")
    if cfg.tokenizer is None and (cfg.vocab_size is None or not isinstance(cfg.eos, int)):
        raise BuildError("without --tokenizer (pre-tokenized input), give --vocab-size and --eos as a token id")


@dataclass
class _Vocabulary:
    """What the build needs of the tokenizer, or of --vocab-size/--eos."""

    tokenizer: Any | None
    name: str
    fingerprint: str
    vocab_size: int
    eos_id: int
    describe: str


def _vocabulary(cfg: BuildConfig, executor: Executor) -> _Vocabulary:
    if cfg.tokenizer is None:
        if not 0 <= int(cfg.eos) < int(cfg.vocab_size):  # type: ignore[arg-type]
            raise BuildError(f"--eos {cfg.eos} is outside [0, --vocab-size {cfg.vocab_size})")
        return _Vocabulary(None, "", "", int(cfg.vocab_size), int(cfg.eos),  # type: ignore[arg-type]
                           f"no tokenizer (pre-tokenized; vocab {cfg.vocab_size}, eos {cfg.eos})")
    # Loaded (and checked for the fastest exact backend) in one worker while
    # the others start: the driver keeps only the picklable facts, not the
    # vocabulary, and one load at a time keeps the peak memory down (the
    # check builds both backends); other workers build just the chosen
    # backend with their first shard.
    warmups = executor.workers - 1 if isinstance(executor, LocalExecutor) else 0
    loaded = executor.map_unordered(_load_tokenizer_task, [cfg] + [None] * warmups)
    tok = next(t for t in loaded if t is not None)
    if cfg.vocab_size is not None and cfg.vocab_size != tok.vocab_size:
        raise BuildError(f"--vocab-size {cfg.vocab_size} differs from the tokenizer's {tok.vocab_size}")
    return _Vocabulary(tok, tok.name, tok.fingerprint, tok.vocab_size, tok.eos_id,
                       f"tokenizer {tok.name} ({tok.backend}, vocab {tok.vocab_size}, eos {tok.eos_id})")


@dataclass
class RangePlan:
    """The reduce ranges: range r holds range keys [edges[r], edges[r+1]),
    each edge ``[first token, second token or -1]`` (build_tasks.range_keys)."""

    edges: list[list[int]]
    estimated_tokens: int
    estimated_run_rows: int
    estimated_reduce_bytes: int  # DuckDB memory all ranges together would want
    largest_range_bytes: int = 0  # the largest range's share of that, estimated
    split_tokens: list[int] = field(default_factory=list)  # first tokens cut by their second token

    def __post_init__(self) -> None:
        # plan.json of a build started before ranges had second tokens: plain first-token edges
        self.edges = [[int(e), -1] if isinstance(e, int) else [int(e[0]), int(e[1])] for e in self.edges]

    @property
    def ranges(self) -> int:
        return len(self.edges) - 1


def plan_ranges(samples: list[SampleResult], sampled_bytes: int, total_bytes: int, *, vocab_size: int,
                order: int, workers: int, reduce_memory_bytes: int) -> RangePlan:
    """Cuts the range-key space into ranges before the map.

    The corpus' tokens are estimated from the samples (tokens per input byte,
    scaled to all shards); a reduce task's input rows from the distinct
    k-grams per token of a sample (a map run holds each distinct k-gram of its
    chunk once; the ratio only falls as chunks grow, so this overestimates);
    each row held by DuckDB costs about 8k + 32 bytes. Enough ranges that
    each reduce's share fits its memory, at least 4 per worker for balance;
    cut where the sampled unigram mass (a proxy for the n-grams starting
    there) is equal. A first token heavier than one range's share is cut by
    its second token (its mass spread as its sampled bigrams are), and a
    range still over the memory budget is cut again, so only a single
    (first, second) pair heavier than the budget makes a range exceed it.
    The trie does not depend on the cuts.
    """
    sample_tokens = sum(s.tokens for s in samples)
    shard_tokens = sum(s.tokens / s.fraction for s in samples)
    tokens = int(shard_tokens * total_bytes / max(sampled_bytes, 1))
    rows_per_token = [sum(s.distinct[k] for s in samples) / max(sample_tokens, 1) for k in range(order)]
    rows = int(tokens * sum(rows_per_token))
    need = int(tokens * sum(r * (8 * (k + 1) + 32) for k, r in enumerate(rows_per_token)))
    mass: dict[int, int] = {}
    for s in samples:
        for t, c in s.unigrams:
            mass[t] = mass.get(t, 0) + c
    whole = [[0, -1], [vocab_size, -1]]
    parts = max(4 * workers, -(-need // max(reduce_memory_bytes, 1)))
    parts = int(min(parts, MAX_RANGES))
    if parts <= 1 or not mass:
        return RangePlan(whole, tokens, rows, need, need)
    first = np.array(sorted(mass), dtype=np.int64)
    weight = np.array([mass[t] for t in first], dtype=np.float64)
    total = float(weight.sum())
    target = total / parts
    bigrams = [s.bigrams for s in samples if s.bigrams is not None] if order >= 2 else []
    a0, a1, am = _range_atoms(first, weight, bigrams, target)
    cum = np.cumsum(am)
    cuts = np.searchsorted(cum, total * np.arange(1, parts) / parts, side="right")
    cuts = sorted({int(min(c, len(am) - 1)) for c in cuts} - {0})
    # A range heavier than a task's memory (or than one range's share when
    # MAX_RANGES binds) is cut again at its atoms.
    cap = max(target, total * reduce_memory_bytes / max(need, 1))
    cuts = _cut_heavy_ranges(am, cuts, cap)
    bounds = [0] + cuts + [len(am)]
    heaviest = max(float(am[a:b].sum()) for a, b in zip(bounds, bounds[1:]))
    edges = [[0, -1]] + [[int(a0[c]), int(a1[c])] for c in cuts] + [[vocab_size, -1]]
    split = sorted({e[0] for e in edges if e[1] >= 0})
    return RangePlan(edges, tokens, rows, need, int(need * heaviest / total), split)


def _range_atoms(first: np.ndarray, weight: np.ndarray, bigrams: list[np.ndarray],
                 target: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pieces ranges are cut from, in range-key order: (first token,
    second token or -1, sampled mass). A first token is one piece, unless its
    mass exceeds ``target`` and the sample saw it followed by other tokens:
    then one piece per second token, its mass shared out as the bigram
    counts are, the first piece keyed [t, -1] so that it holds the unigram."""
    hot = first[weight > target]
    pairs = np.concatenate(bigrams) if bigrams else np.zeros((0, 3), np.int64)
    pairs = pairs[np.isin(pairs[:, 0], hot)]
    if not len(pairs):
        return first, np.full(len(first), -1, np.int64), weight
    keys, where = np.unique((pairs[:, 0] << 32) | pairs[:, 1], return_inverse=True)
    counts = np.bincount(where, weights=pairs[:, 2].astype(np.float64))
    p0, p1 = keys >> 32, keys & 0xFFFFFFFF
    split = np.unique(p0)
    keep = ~np.isin(first, split)
    # each split token's mass, shared out over its second tokens
    token_of = np.searchsorted(first, p0)
    per_token = np.bincount(np.searchsorted(split, p0), weights=counts)
    share = weight[token_of] * counts / per_token[np.searchsorted(split, p0)]
    head = np.r_[True, p0[1:] != p0[:-1]]  # each split token's first piece holds its unigram
    a0 = np.concatenate([first[keep], p0])
    a1 = np.concatenate([np.full(int(keep.sum()), -1, np.int64), np.where(head, -1, p1)])
    am = np.concatenate([weight[keep], share])
    order = np.lexsort((a1, a0))
    return a0[order], a1[order], am[order]


def _cut_heavy_ranges(mass: np.ndarray, cuts: list[int], cap: float) -> list[int]:
    """Cuts (piece indices) with every range heavier than ``cap`` cut again,
    greedily, so each holds at most ``cap`` unless it is a single piece."""
    bounds = [0] + cuts + [len(mass)]
    out: list[int] = []
    for a, b in zip(bounds, bounds[1:]):
        if a > 0:
            out.append(a)
        if float(mass[a:b].sum()) <= cap:
            continue
        held = 0.0
        for i in range(a, b):
            if i > a and held + mass[i] > cap:
                out.append(i)
                held = 0.0
            held += float(mass[i])
    return out


def _plan(store: Store, shards: list[Shard], spec: ReadSpec, cfg: BuildConfig, executor: Executor,
          reduce_memory: int, faults: dict[tuple[str, int], str], progress: Progress) -> RangePlan:
    """The range plan, sampled once and kept in the store (a resumed build
    must split its remaining maps exactly like its finished ones)."""
    if store.exists("plan.json"):
        return RangePlan(**json.loads(store.read_bytes("plan.json")))
    step = max(len(shards) / SAMPLE_SHARDS, 1.0)
    picked = sorted({int(i * step) for i in range(min(SAMPLE_SHARDS, len(shards)))})
    tasks = [SampleTask(shards[i].location, spec, cfg.order, SAMPLE_TOKENS, store, i) for i in picked]
    for i in picked:
        if ("sample", i) in faults:
            raise BuildError(f"{FAULT_ENV}: sample tasks take no faults")
    samples = sorted(executor.map_unordered(run_sample, tasks), key=lambda s: s.location)
    plan = plan_ranges(samples, sum(shards[i].size for i in picked), sum(s.size for s in shards),
                       vocab_size=spec.vocab_size, order=cfg.order, workers=executor.workers,
                       reduce_memory_bytes=reduce_memory)
    split = f", {len(plan.split_tokens)} frequent first token(s) split by their second token" if plan.split_tokens else ""
    progress(f"[plan] sampled {sum(s.tokens for s in samples):,} tokens of {len(samples)} shard(s): about "
             f"{plan.estimated_tokens:,} tokens in all, {plan.ranges} reduce range(s){split} "
             f"(reduce memory wanted {format_bytes(plan.estimated_reduce_bytes)}, the largest range "
             f"{format_bytes(plan.largest_range_bytes)}, {format_bytes(reduce_memory)} a task)")
    store.write_bytes("plan.json", json.dumps(plan.__dict__).encode())
    return plan


def _build(cfg: BuildConfig, executor: Executor, progress: Progress) -> BuildReport:
    t_start = time.perf_counter()
    _check_config(cfg)
    shards = find_shards(cfg.inputs)
    vocab = _vocabulary(cfg, executor)
    progress(f"ngram-build: {len(shards)} shard(s), order {cfg.order}, {vocab.describe}, "
             f"{executor.workers} worker(s), malloc {active_allocator()}")
    faults = faults_from_env(os.environ.get(FAULT_ENV))
    tokenizer = vocab.tokenizer
    if tokenizer is not None and not isinstance(executor, LocalExecutor):
        # On a cluster the tokenizer file is not on every node: ship its
        # definition, once, through the cluster's object store.
        tokenizer.make_self_contained()
        share = getattr(executor, "share", None)
        tokenizer = share(tokenizer) if share else tokenizer
    spec = ReadSpec(tokenizer, vocab.vocab_size, vocab.eos_id, cfg.text_field, cfg.token_field,
                    cfg.token_dtype, cfg.skip_bad, cfg.add_special_tokens)
    run_key = _key([FORMAT_VERSION, vocab.fingerprint, vocab.vocab_size, vocab.eos_id, cfg.order, cfg.min_count,
                    cfg.text_field, cfg.token_field, cfg.token_dtype, cfg.skip_bad, cfg.add_special_tokens,
                    [(s.location, s.size, s.mtime_ns) for s in shards]])
    store = Store(join(work_dir(cfg), f"build-{run_key}"))
    try:
        report = _run(cfg, executor, progress, shards, vocab, spec, store, faults, t_start)
    except BaseException:
        if store.exists(""):
            progress(f"ngram-build: the work directory {store.root} was kept: run the same command again "
                     "to resume from the finished tasks (--no-resume starts afresh)")
        raise
    if not cfg.keep_tmp:
        store.delete("")
        if not cfg.tmp_dir:  # OUT.build is ours; a --tmp-dir is the user's
            Store(work_dir(cfg)).delete("")
    return report


def _run(cfg: BuildConfig, executor: Executor, progress: Progress, shards: list[Shard], vocab: _Vocabulary,
         spec: ReadSpec, store: Store, faults: dict[tuple[str, int], str], t_start: float) -> BuildReport:
    # Memory: each concurrent task gets an equal share; DuckDB gets half of
    # it, the k-gram arrays of one chunk (about 4 * N(N+1)/2 + 16 bytes a
    # token) the other half.
    per_task = max(cfg.memory_limit_bytes // executor.workers, MIN_TASK_MEMORY)
    bytes_per_token = 4 * cfg.order * (cfg.order + 1) // 2 + 24
    chunk_tokens = int(min(max(per_task // 2 // bytes_per_token, 1 << 16), 8_000_000))
    plan = _plan(store, shards, spec, cfg, executor, per_task // 2, faults, progress)

    def fault(phase: str, index: int) -> tuple[str, str] | None:
        mode = faults.get((phase, index))
        return (mode, f"faults/{phase}-{index:05d}") if mode else None

    map_tasks = [
        MapTask(index=i, location=s.location, name=s.name, store=store, edges=plan.edges, order=cfg.order,
                spec=spec, chunk_tokens=chunk_tokens, memory_limit_bytes=per_task // 2, fault=fault("map", i),
                read_ahead=executor.spare_core)
        for i, s in enumerate(shards)
    ]
    t_map = time.perf_counter()
    map_results = _run_maps(executor, map_tasks, shards, progress)
    t_reduce = time.perf_counter()
    documents = sum(r.documents for r in map_results)
    tokens = sum(r.tokens for r in map_results)
    skipped = sum(r.skipped for r in map_results)
    if documents == 0:
        raise BuildError("no documents in the input: nothing to count")
    work_live = work_peak = sum(sum(r.range_bytes) for r in map_results)

    reduce_tasks = [
        ReduceTask(i, lo, hi, [r.attempt for r in map_results if r.range_bytes[i]], store, cfg.order,
                   cfg.min_count, per_task // 2, fault("reduce", i))
        for i, (lo, hi) in enumerate(zip(plan.edges[:-1], plan.edges[1:]))
    ]
    reduce_results: dict[int, ReduceResult] = {}
    phase = PhaseProgress("reduce", len(reduce_tasks), progress, workers=executor.workers)
    for r in executor.map_unordered(run_reduce, reduce_tasks):
        reduce_results[r.index] = r
        work_peak = max(work_peak, work_live + r.output_bytes)
        work_live += r.output_bytes - (0 if r.resumed else r.input_bytes)
        phase.task_done(f"part {r.index}: {sum(r.sizes):,} n-grams from {format_bytes(r.input_bytes)} of runs",
                        work=1, resumed=r.resumed, seconds=r.seconds)
    reduces = [reduce_results[t.index] for t in reduce_tasks]
    t_write = time.perf_counter()

    plans = [LevelPlan() for _ in range(cfg.order)]
    for r in reduces:
        for k in range(cfg.order):
            plans[k].size += r.sizes[k]
            plans[k].count_values.update(dict(r.count_values[k]))
    name = cfg.name or cfg.out.rstrip("/").rsplit("/", 1)[-1].split(".")[0]
    build_meta: dict[str, Any] = {
        "tool": f"ngram-build {__version__}",
        "order": cfg.order,
        "min_count": cfg.min_count,
        "text_field": cfg.text_field,
        "eos_id": vocab.eos_id,
        "skip_bad": cfg.skip_bad,
    }
    if any(r.pretokenized for r in map_results):
        build_meta["token_field"] = cfg.token_field
    if cfg.add_special_tokens:
        build_meta["add_special_tokens"] = True
    meta = {
        "format_version": FORMAT_VERSION,
        "name": name,
        "tokenizer": {"name": vocab.name, "fingerprint": vocab.fingerprint, "vocab_size": vocab.vocab_size},
        "corpus": {
            "documents": documents,
            "tokens": tokens,
            "skipped_documents": skipped,
            # Names relative to the INPUT that found them: the same shards
            # elsewhere (another folder, node or bucket) give the same file.
            "shards": [
                {"path": r.name, "bytes": r.bytes, "documents": r.documents, "tokens": r.tokens}
                for r in map_results
            ],
        },
        "build": build_meta,
    }
    progress(f"[write] {sum(p.size for p in plans):,} n-grams -> {cfg.out}")
    size = _write_output(cfg, store, meta, plans, vocab, len(reduce_tasks), _split_children(plan, reduces))
    t_end = time.perf_counter()
    seconds = t_end - t_start
    phases = {"start": t_map - t_start, "map": t_reduce - t_map, "reduce": t_write - t_reduce, "write": t_end - t_write}
    scratch = max([r.scratch_peak_bytes for r in map_results + reduces] or [0])
    concurrency = min(executor.workers, max(len(map_tasks), len(reduce_tasks)))
    report = BuildReport(
        out=cfg.out,
        file_bytes=size,
        documents=documents,
        tokens=tokens,
        skipped=skipped,
        ngrams=[p.size for p in plans],
        seconds=seconds,
        tokenize_seconds=sum(r.tokenize_seconds for r in map_results),
        shards_resumed=sum(r.resumed for r in map_results),
        phase_seconds=phases,
        ranges=len(reduce_tasks),
        map_tokens_per_second=tokens / max(phases["map"], 1e-9),
        peak_work_bytes=work_peak,
        peak_task_scratch_bytes=scratch,
        peak_tmp_bytes=work_peak + concurrency * scratch,
        reduce_input_bytes=[r.input_bytes for r in reduces],
        peak_task_rss_bytes=max([r.peak_rss_bytes for r in map_results + reduces if not r.resumed] or [0]),
        map_scratch_peak_bytes=[r.scratch_peak_bytes for r in map_results],
        reduce_scratch_peak_bytes=[r.scratch_peak_bytes for r in reduces],
    )
    progress(
        f"done: {cfg.out} ({size:,} bytes), {documents:,} documents, {tokens:,} tokens, "
        f"n-grams per order {report.ngrams}, {seconds:.1f} s (end to end {tokens / max(seconds, 1e-9) / 1e6:.2f} "
        f"M tokens/s; " + ", ".join(f"{k} {v:.1f} s" for k, v in phases.items()) + "), "
        f"{report.ranges} reduce ranges, peak temporary {format_bytes(report.peak_tmp_bytes)} "
        f"(work {format_bytes(work_peak)}, one task's scratch {format_bytes(scratch)})"
        + (f", {skipped:,} bad documents skipped" if skipped else "")
    )
    return report


def _write_output(cfg: BuildConfig, store: Store, meta: dict[str, Any], plans: list[LevelPlan],
                  vocab: _Vocabulary, ranges: int, split_children: dict[int, tuple[int, int]]) -> int:
    """Writes the trie atomically to a local path, or locally and then uploaded
    whole to a URI (an object appears only once its upload completes)."""
    chunks = _reduce_chunks(store, ranges, cfg.order, split_children)
    if not is_uri(cfg.out):
        out = Path(cfg.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        plain = out.with_name(out.name + ".plain.tmp") if cfg.compress else out
        size = write_trie(plain, order=cfg.order, vocab_size=vocab.vocab_size, eos_id=vocab.eos_id, meta=meta,
                          plans=plans, chunks=chunks, format_version=cfg.format_version)
        if cfg.compress:
            size = compress_file(plain, out)
            plain.unlink()
        return size
    with tempfile.TemporaryDirectory(prefix="ngram-out-") as tmp:
        local = Path(tmp) / "trie.ngt"
        size = write_trie(local, order=cfg.order, vocab_size=vocab.vocab_size, eos_id=vocab.eos_id, meta=meta,
                          plans=plans, chunks=chunks, format_version=cfg.format_version)
        if cfg.compress:
            packed = Path(tmp) / "trie.ngt.zst"
            size = compress_file(local, packed)
            local.unlink()
            local = packed
        upload_atomic(local, cfg.out)
        return size


def _run_maps(executor: Executor, tasks: list[MapTask], shards: list[Shard], progress: Progress) -> list[MapResult]:
    by_index: dict[int, MapResult] = {}
    phase = PhaseProgress("map", len(tasks), progress, total_work=sum(s.size for s in shards),
                          workers=executor.workers)
    # Largest shards first, so that no big shard runs alone at the end.
    run_order = sorted(tasks, key=lambda t: -shards[t.index].size)
    if isinstance(executor, LocalExecutor) and executor.workers == 1 and executor.spare_core:
        # One after another in this process: each task reads and encodes the
        # next one's shard while it counts its own last chunk.
        for task, after in zip(run_order, run_order[1:]):
            task.then = (after.index, after.location)
    try:
        for r in executor.map_unordered(run_map, run_order):
            by_index[r.index] = r
            note = " (resumed)" if r.resumed else ""
            skipped = f", {r.skipped} bad skipped" if r.skipped else ""
            phase.task_done(f"{r.name.rsplit('/', 1)[-1]}{note}: {r.documents:,} docs, {r.tokens:,} tokens{skipped}",
                            work=shards[r.index].size, documents=r.documents, tokens=r.tokens, resumed=r.resumed,
                            seconds=r.seconds)
            for e in r.errors[:3]:
                progress(f"  skipped: {e}")
    finally:
        drop_read_ahead()  # a failed build's next shard
    return [by_index[t.index] for t in tasks]


def _split_children(plan: RangePlan, reduces: list[ReduceResult]) -> dict[int, tuple[int, int]]:
    """For a first token t split over several ranges, its unigram's children
    that the ranges after the one holding the unigram counted:
    {range holding unigram t: (t, children to add)}."""
    keys = [tuple(e) for e in plan.edges]
    extra: dict[int, tuple[int, int]] = {}
    for r in reduces:
        t, second = keys[r.index]
        if second < 0 or not r.carried_children:
            continue
        head = bisect.bisect_right(keys, (t, -1)) - 1  # the range holding key [t, -1]
        extra[head] = (t, extra.get(head, (t, 0))[1] + r.carried_children)
    return extra


def _reduce_chunks(store: Store, ranges: int, order: int,
                   split_children: dict[int, tuple[int, int]]) -> Iterator[tuple[int, LevelChunk]]:
    for k in range(1, order + 1):
        for i in range(ranges):
            location = store.location(level_key(i, k))
            if store.remote:
                from indexer.storage import filesystem

                fs, path = filesystem(location)
                pf = pq.ParquetFile(fs.open_input_file(path))
            else:
                pf = pq.ParquetFile(location)
            if k == 1 and i in split_children:
                yield k, _with_split_children(pf.read(), *split_children[i], location)
                continue
            for batch in pf.iter_batches(batch_size=1 << 20):
                yield k, LevelChunk(
                    batch.column("w").to_numpy().astype(np.int32, copy=False),
                    batch.column("c").to_numpy().astype(np.uint64, copy=False),
                    batch.column("n").to_numpy().astype(np.uint64, copy=False) if k < order else None,
                )


def _with_split_children(table: Any, token: int, extra: int, location: str) -> LevelChunk:
    """Level 1 of the range holding a split token's unigram, the unigram's
    children counted in the later ranges added (it is the range's last
    unigram: the range ends inside that token's n-grams)."""
    tokens = table.column("w").to_numpy().astype(np.int32)
    children = table.column("n").to_numpy().astype(np.uint64)
    if not len(tokens) or tokens[-1] != token:
        raise BuildError(f"{location}: unigram {token} is missing, but later ranges hold {extra} of its bigrams")
    children[-1] += np.uint64(extra)
    return LevelChunk(tokens, table.column("c").to_numpy().astype(np.uint64), children)


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
