"""The build: corpus shards -> k-gram counts -> one trie file.

    find shards -> vocabulary (the tokenizer, loaded in a worker)
                -> sample tasks (the start of a few shards) -> range plan
                   (range_planning: ranges of equal mass, as many as memory needs)
                -> map tasks (map_task: shard -> count runs already split by range)
                -> reduce tasks (reduce_task: range -> its slice of every
                   order, from only its range's runs)
                -> write (trie_output: slices streamed, in order, into the trie writer)

Each task is a plain function of a picklable description, run by an
executor (a local process pool, a Ray cluster). Work lives in a work store
(work_store) keyed by everything that determines the result, so re-running
the same command resumes from finished tasks. docs/BUILD.md has the cost model.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

from indexer import __version__
from indexer.allocator import active_allocator
from indexer.build_config import BuildConfig, BuildError, NothingToCountError, check_config, work_dir
from indexer.documents import NextMapReadAhead, ReadSpec
from indexer.executor import Executor, LocalExecutor, make_executor
from indexer.fault_injection import FAULT_ENV, FaultPlan, fault_for, faults_from_env
from indexer.map_task import MapResult, MapTask, ShardOfMap, run_map
from indexer.out_checks import refuse_out_read
from indexer.progress import PhaseProgress, Progress, format_bytes
from indexer.range_planning import RangePlan, SampleTask, plan_ranges, run_sample
from indexer.reduce_task import ReduceResult, ReduceTask, run_reduce
from indexer.shard_discovery import Shard, find_shards
from indexer.storage import Store, join
from indexer.trie_assembly import FORMAT_VERSION, LevelPlan
from indexer.trie_meta import tokenizer_meta, trie_meta
from indexer.trie_output import compress_file, split_children, write_output
from indexer.vocabulary import Vocabulary, load_vocabulary
from indexer.work_store import PLAN_KEY
from ngram_service.index import index_name

__all__ = ["BuildConfig", "BuildError", "BuildReport", "build", "compress_file", "work_dir"]

#: Sample this many tokens from the start of each of up to SAMPLE_SHARDS shards.
SAMPLE_TOKENS = 500_000
SAMPLE_SHARDS = 4
#: A task gets at least this much memory (DuckDB's floor is 64 MB a connection).
MIN_TASK_MEMORY = 128 << 20


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


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def build(cfg: BuildConfig, executor: Executor | None = None, progress: Progress = _stderr) -> BuildReport:
    """Runs the whole build; with no executor, the one cfg.executor names
    (a LocalExecutor of cfg.workers processes, or Ray)."""
    if executor is not None:
        return _build(cfg, executor, progress)
    check_config(cfg)
    with make_executor(cfg.executor, cfg.workers, cfg.ray_address) as ex:
        return _build(cfg, ex, progress)


def _build(cfg: BuildConfig, executor: Executor, progress: Progress) -> BuildReport:
    t_start = time.perf_counter()
    check_config(cfg)
    shards = find_shards(cfg.inputs)
    refuse_out_read(cfg.out, (("the input shard", s.location) for s in shards))
    vocab = load_vocabulary(cfg, executor)
    progress(f"ngram-build: {len(shards)} shard(s), order {cfg.order}, {vocab.describe}, "
             f"{executor.workers} worker(s), malloc {active_allocator()}")
    faults = faults_from_env(os.environ.get(FAULT_ENV))
    tokenizer: Any = vocab.tokenizer
    if tokenizer is not None and not isinstance(executor, LocalExecutor):
        # On a cluster the tokenizer file is not on every node: ship its
        # definition, once, through the cluster's object store.
        tokenizer.make_self_contained()
        share = getattr(executor, "share", None)
        tokenizer = share(tokenizer) if share else tokenizer
    spec = ReadSpec(tokenizer, vocab.vocab_size, vocab.eos_id, cfg.text_field, cfg.token_field,
                    cfg.token_dtype, cfg.skip_bad, cfg.add_special_tokens)
    run_key = _digest([FORMAT_VERSION, vocab.fingerprint, vocab.vocab_size, vocab.eos_id, cfg.order, cfg.min_count,
                       cfg.text_field, cfg.token_field, cfg.token_dtype, cfg.skip_bad, cfg.add_special_tokens,
                       [(s.location, s.size, s.mtime_ns) for s in shards]])
    store = Store(join(work_dir(cfg), f"build-{run_key}"))
    try:
        report = _run(cfg, executor, progress, shards, vocab, spec, store, faults, t_start)
    except NothingToCountError:
        _remove_work(cfg, store, everything=False)  # running again would find nothing again
        raise
    except BaseException:
        if store.exists(""):
            progress(f"ngram-build: the work directory {store.root} was kept: run the same command again "
                     "to resume from the finished tasks (--no-resume starts afresh)")
        raise
    if not cfg.keep_tmp:
        _remove_work(cfg, store, everything=True)
    return report


def _remove_work(cfg: BuildConfig, store: Store, everything: bool) -> None:
    """Deletes this build's work folder, and OUT.build (ours; a --tmp-dir is
    the user's) whole after a success, else only when nothing else is in it."""
    store.delete("")
    if cfg.tmp_dir:
        return
    work = Store(work_dir(cfg))
    if everything or not work.list(""):
        work.delete("")


def _range_plan(store: Store, shards: list[Shard], spec: ReadSpec, cfg: BuildConfig, executor: Executor,
                reduce_memory: int, faults: FaultPlan, progress: Progress) -> RangePlan:
    """The range plan, sampled once and kept in the store (a resumed build
    must split its remaining maps exactly like its finished ones)."""
    if store.exists(PLAN_KEY):
        return RangePlan(**json.loads(store.read_bytes(PLAN_KEY)))
    step = max(len(shards) / SAMPLE_SHARDS, 1.0)
    sampled = sorted({int(i * step) for i in range(min(SAMPLE_SHARDS, len(shards)))})
    tasks = [SampleTask(shards[i].location, spec, cfg.order, SAMPLE_TOKENS, store, i) for i in sampled]
    for i in sampled:
        if ("sample", i) in faults:
            raise BuildError(f"{FAULT_ENV}: sample tasks take no faults")
    samples = sorted(executor.map_unordered(run_sample, tasks), key=lambda s: s.location)
    plan = plan_ranges(samples, sum(shards[i].size for i in sampled), sum(s.size for s in shards),
                       vocab_size=spec.vocab_size, order=cfg.order, workers=executor.workers,
                       reduce_memory_bytes=reduce_memory)
    split = f", {len(plan.split_tokens)} frequent first token(s) split by their second token" if plan.split_tokens else ""
    progress(f"[plan] sampled {sum(s.tokens for s in samples):,} tokens of {len(samples)} shard(s): about "
             f"{plan.estimated_tokens:,} tokens in all, {plan.ranges} reduce range(s){split} "
             f"(reduce memory wanted {format_bytes(plan.estimated_reduce_bytes)}, the largest range "
             f"{format_bytes(plan.largest_range_bytes)}, {format_bytes(reduce_memory)} a task)")
    store.write_bytes(PLAN_KEY, json.dumps(plan.__dict__).encode())
    return plan


def _run(cfg: BuildConfig, executor: Executor, progress: Progress, shards: list[Shard], vocab: Vocabulary,
         spec: ReadSpec, store: Store, faults: FaultPlan, t_start: float) -> BuildReport:
    # Memory: each concurrent task gets an equal share; DuckDB gets half of
    # it, the k-gram arrays of one chunk (about 4 * N(N+1)/2 + 16 bytes a
    # token) the other half.
    per_task = max(cfg.memory_limit_bytes // executor.workers, MIN_TASK_MEMORY)
    bytes_per_token = 4 * cfg.order * (cfg.order + 1) // 2 + 24
    chunk_tokens = int(min(max(per_task // 2 // bytes_per_token, 1 << 16), 8_000_000))
    plan = _range_plan(store, shards, spec, cfg, executor, per_task // 2, faults, progress)

    map_tasks = [
        MapTask(index=i, location=s.location, name=s.name, store=store, edges=plan.edges, order=cfg.order,
                spec=spec, chunk_tokens=chunk_tokens, memory_limit_bytes=per_task // 2,
                fault=fault_for(faults, "map", i), read_ahead=executor.spare_core)
        for i, s in enumerate(shards)
    ]
    t_map = time.perf_counter()
    map_results = _run_maps(executor, map_tasks, shards, progress)
    t_reduce = time.perf_counter()
    if sum(r.documents for r in map_results) == 0:
        skipped = sum(r.skipped for r in map_results)
        why = f"every one of its {skipped:,} documents was skipped as bad" if skipped else "every shard is empty"
        raise NothingToCountError(f"no documents in the input ({len(shards)} shard(s): {why}): nothing to count; "
                                  "give INPUT shards that hold documents")

    reduce_tasks = [
        ReduceTask(i, lo, hi, [r.attempt for r in map_results if r.range_bytes[i]], store, cfg.order,
                   cfg.min_count, per_task // 2, fault_for(faults, "reduce", i))
        for i, (lo, hi) in enumerate(zip(plan.edges[:-1], plan.edges[1:]))
    ]
    reduces, work_peak = _run_reduces(executor, reduce_tasks, sum(sum(r.range_bytes) for r in map_results), progress)
    t_write = time.perf_counter()

    plans = [LevelPlan() for _ in range(cfg.order)]
    for r in reduces:
        for k in range(cfg.order):
            plans[k].size += r.sizes[k]
            plans[k].count_values.update(dict(r.count_values[k]))
    progress(f"[write] {sum(p.size for p in plans):,} n-grams -> {cfg.out}")
    size = write_output(cfg, store, _trie_meta(cfg, vocab, map_results), plans, vocab.vocab_size, vocab.eos_id,
                        len(reduce_tasks), split_children(plan, reduces))
    t_end = time.perf_counter()
    phases = {"start": t_map - t_start, "map": t_reduce - t_map, "reduce": t_write - t_reduce, "write": t_end - t_write}
    concurrency = min(executor.workers, max(len(map_tasks), len(reduce_tasks)))
    report = _report(cfg.out, size, map_results, reduces, plans, phases, work_peak, concurrency)
    scratch = report.peak_task_scratch_bytes
    progress(
        f"done: {cfg.out} ({size:,} bytes), {report.documents:,} documents, {report.tokens:,} tokens, "
        f"n-grams per order {report.ngrams}, {report.seconds:.1f} s (end to end "
        f"{report.tokens / max(report.seconds, 1e-9) / 1e6:.2f} "
        f"M tokens/s; " + ", ".join(f"{k} {v:.1f} s" for k, v in phases.items()) + "), "
        f"{report.ranges} reduce ranges, peak temporary {format_bytes(report.peak_tmp_bytes)} "
        f"(work {format_bytes(work_peak)}, one task's scratch {format_bytes(scratch)})"
        + (f", {report.skipped:,} bad documents skipped" if report.skipped else "")
    )
    return report


def _run_maps(executor: Executor, tasks: list[MapTask], shards: list[Shard], progress: Progress) -> list[MapResult]:
    """The map results, in task order."""
    by_index: dict[int, MapResult] = {}
    phase = PhaseProgress("map", len(tasks), progress, total_work=sum(s.size for s in shards),
                          workers=executor.workers)
    # Largest shards first, so that no big shard runs alone at the end.
    run_order = sorted(tasks, key=lambda t: -shards[t.index].size)
    next_read_ahead = None
    run = run_map
    if isinstance(executor, LocalExecutor) and executor.workers == 1 and executor.spare_core:
        # One after another in this process: each task reads and encodes the
        # next one's shard while it counts its own last chunk.
        for task, after in zip(run_order, run_order[1:]):
            task.next_map = ShardOfMap(after.index, after.location)
        next_read_ahead = NextMapReadAhead()
        run = functools.partial(run_map, next_read_ahead=next_read_ahead)
    try:
        for r in executor.map_unordered(run, run_order):
            by_index[r.index] = r
            note = " (resumed)" if r.resumed else ""
            skipped = f", {r.skipped} bad skipped" if r.skipped else ""
            phase.task_done(f"{r.name.rsplit('/', 1)[-1]}{note}: {r.documents:,} docs, {r.tokens:,} tokens{skipped}",
                            work=shards[r.index].size, documents=r.documents, tokens=r.tokens, resumed=r.resumed,
                            seconds=r.seconds)
            for e in r.errors[:3]:
                progress(f"  skipped: {e}")
    finally:
        if next_read_ahead is not None:
            next_read_ahead.close()  # a failed build's next shard
    return [by_index[t.index] for t in tasks]


def _run_reduces(executor: Executor, tasks: list[ReduceTask], run_bytes: int,
                 progress: Progress) -> tuple[list[ReduceResult], int]:
    """The reduce results, in task order, and the peak bytes in the work store
    (``run_bytes`` of runs at the start; each reduce adds its output and
    frees its input)."""
    by_index: dict[int, ReduceResult] = {}
    work_live = work_peak = run_bytes
    phase = PhaseProgress("reduce", len(tasks), progress, workers=executor.workers)
    for r in executor.map_unordered(run_reduce, tasks):
        by_index[r.index] = r
        work_peak = max(work_peak, work_live + r.output_bytes)
        work_live += r.output_bytes - (0 if r.resumed else r.input_bytes)
        phase.task_done(f"part {r.index}: {sum(r.sizes):,} n-grams from {format_bytes(r.input_bytes)} of runs",
                        work=1, resumed=r.resumed, seconds=r.seconds)
    return [by_index[t.index] for t in tasks], work_peak


def _trie_meta(cfg: BuildConfig, vocab: Vocabulary, map_results: list[MapResult]) -> dict[str, Any]:
    """The trie file's metadata (docs/FORMAT.md)."""
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
    # Names relative to the INPUT that found them: the same shards elsewhere
    # (another folder, node or bucket) give the same file.
    corpus = {
        "documents": sum(r.documents for r in map_results),
        "tokens": sum(r.tokens for r in map_results),
        "skipped_documents": sum(r.skipped for r in map_results),
        "shards": [{"path": r.name, "bytes": r.bytes, "documents": r.documents, "tokens": r.tokens}
                   for r in map_results],
    }
    return trie_meta(name=cfg.name or index_name(cfg.out),
                     tokenizer=tokenizer_meta(vocab.name, vocab.fingerprint, vocab.vocab_size), corpus=corpus,
                     build=build_meta)


def _report(out: str, size: int, map_results: list[MapResult], reduces: list[ReduceResult], plans: list[LevelPlan],
            phases: dict[str, float], work_peak: int, concurrency: int) -> BuildReport:
    tokens = sum(r.tokens for r in map_results)
    scratch = max([r.scratch_peak_bytes for r in map_results + reduces] or [0])
    return BuildReport(
        out=out,
        file_bytes=size,
        documents=sum(r.documents for r in map_results),
        tokens=tokens,
        skipped=sum(r.skipped for r in map_results),
        ngrams=[p.size for p in plans],
        seconds=sum(phases.values()),
        tokenize_seconds=sum(r.tokenize_seconds for r in map_results),
        shards_resumed=sum(r.resumed for r in map_results),
        phase_seconds=phases,
        ranges=len(reduces),
        map_tokens_per_second=tokens / max(phases["map"], 1e-9),
        peak_work_bytes=work_peak,
        peak_task_scratch_bytes=scratch,
        peak_tmp_bytes=work_peak + concurrency * scratch,
        reduce_input_bytes=[r.input_bytes for r in reduces],
        peak_task_rss_bytes=max([r.peak_rss_bytes for r in map_results + reduces if not r.resumed] or [0]),
        map_scratch_peak_bytes=[r.scratch_peak_bytes for r in map_results],
        reduce_scratch_peak_bytes=[r.scratch_peak_bytes for r in reduces],
    )
