"""The map task: one shard -> count runs already split by reduce range.

Per order k and per reduce range r, runs of (w0..w{k-1}, c), counted with
DuckDB in bounded memory chunk by chunk, the chunks' runs of one range and
order joined as row groups of ``shuffle/rRRRRR/<attempt>/oK.parquet`` (zstd).
The shuffle happens here: a reduce task reads only its range's files.

The task computes in a local scratch folder and moves only finished files
into the work store; it records its result last (``map/NNNNN.json``), so a
retried or resumed task either finds that record or starts afresh.
"""
from __future__ import annotations

import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from indexer.documents import (
    READ_AHEAD_BATCHES,
    Documents,
    NextMapReadAhead,
    ReadSpec,
    open_documents,
)
from indexer.fault_injection import Fault, inject_fault
from indexer.kgrams import column_list, kgram_table, tokens_left
from indexer.range_planning import RangeLookup
from indexer.storage import Store, local_scratch
from indexer.task_resources import DiskMeter, duckdb_connection, peak_rss_bytes
from indexer.work_store import (
    map_done_key,
    read_sample_ids,
    record_result,
    recorded_result,
    shuffle_prefix,
)


class ShardOfMap(NamedTuple):
    """A map task's shard: the task's index and the shard's location."""

    index: int
    location: str


@dataclass
class MapTask:
    index: int
    location: str  # the shard: local path or URI
    name: str  # as the manifest records it
    store: Store
    edges: list[list[int]]  # reduce range r holds range keys [edges[r], edges[r+1]) (range_planning.range_keys)
    order: int
    spec: ReadSpec
    chunk_tokens: int = 4_000_000
    memory_limit_bytes: int = 512 << 20
    fault: Fault | None = None
    # Whether a core is free beside the task (Executor.spare_core) to read
    # and encode its shard ahead of the counting on; without one, doing so
    # only interleaves the two on one core.
    read_ahead: bool = True
    # The map task this process runs next, when it runs them one after
    # another (-j 1): its shard is read and encoded, into the NextMapReadAhead
    # run_map is given, while this one counts its last chunk.
    next_map: ShardOfMap | None = None

    @property
    def label(self) -> str:
        return f"map {self.index} ({self.name})"


@dataclass
class MapResult:
    index: int
    name: str
    bytes: int
    documents: int
    tokens: int  # including one EOS per document
    attempt: str = ""  # the shuffle folder name of the attempt that finished
    range_bytes: list[int] = field(default_factory=list)  # run bytes written per reduce range
    pretokenized: bool = False
    skipped: int = 0
    errors: list[str] = field(default_factory=list)
    runs: int = 0
    tokenize_seconds: float = 0.0
    seconds: float = 0.0
    scratch_peak_bytes: int = 0
    peak_rss_bytes: int = 0  # the worker process' peak RSS when the task ended
    resumed: bool = False


def run_map(task: MapTask, next_read_ahead: NextMapReadAhead | None = None) -> MapResult:
    """Runs one map task. ``next_read_ahead``: where a process running maps
    one after another keeps the next task's documents (``MapTask.next_map``);
    this task's own are taken from it when they were read ahead."""
    store = task.store
    docs: Documents | None = next_read_ahead.take(store, task.index) if next_read_ahead is not None else None
    try:
        if (finished := recorded_result(store, map_done_key(task.index), MapResult)) is not None:
            return finished
        inject_fault(store, task.fault)
        if docs is None:
            docs = open_documents(task.location, task.spec, ahead=READ_AHEAD_BATCHES if task.read_ahead else 0,
                                  known=read_sample_ids(store, task.index))
        return _count_shard(task, docs, next_read_ahead)
    finally:
        if docs is not None:
            docs.close()


def _count_shard(task: MapTask, docs: Documents, next_read_ahead: NextMapReadAhead | None) -> MapResult:
    store = task.store
    t_start = time.perf_counter()
    # A fresh folder name per attempt: a killed attempt's files are never
    # mistaken for this one's (reduce reads only the recorded attempt).
    attempt = f"m{task.index:05d}-{uuid.uuid4().hex[:8]}"
    scratch = local_scratch(store, attempt)
    parts = len(task.edges) - 1
    lookup = RangeLookup(task.edges, task.spec.vocab_size)
    result = MapResult(index=task.index, name=task.name, bytes=0, documents=0, tokens=0, attempt=attempt,
                       range_bytes=[0] * parts)
    result.pretokenized = docs.pretokenized
    pending: list[tuple[np.ndarray, np.ndarray]] = []
    pending_tokens = 0
    chunk_files: dict[tuple[int, int], list[Path]] = {}  # (range, order) -> one run file per chunk

    with DiskMeter(scratch) as meter:
        con = duckdb_connection(task.memory_limit_bytes, scratch / "spill")

        def count_pending_chunk() -> None:
            """Writes the pending documents' k-gram runs, split by range, into the scratch folder."""
            nonlocal pending, pending_tokens
            if not pending:
                return
            flat = np.concatenate([p[0] for p in pending])
            left = tokens_left(np.concatenate([p[1] for p in pending]))
            pending, pending_tokens = [], 0
            for k in range(1, task.order + 1):
                grams = kgram_table(flat, left, k)
                second = grams.column("w1").to_numpy() if k >= 2 else None
                part = lookup.ranges(grams.column("w0").to_numpy(), second)
                con.register("grams", grams.append_column("p", pa.array(part)))
                cols = column_list(k)
                run_dir = scratch / f"o{k}-{result.runs:05d}"
                con.execute(
                    f"COPY (SELECT p, {cols}, count(*)::UBIGINT AS c FROM grams GROUP BY ALL ORDER BY {cols}) "
                    f"TO '{run_dir}' (FORMAT parquet, COMPRESSION zstd, PARTITION_BY (p), "
                    f"FILENAME_PATTERN 'f{{i}}')"
                )
                con.unregister("grams")
                for part_dir in run_dir.glob("p=*"):
                    chunk_files.setdefault((int(part_dir.name[2:]), k), []).extend(sorted(part_dir.glob("*.parquet")))
            result.runs += 1

        for flat, lengths in docs:
            result.documents += len(lengths)
            result.tokens += int(flat.size)
            pending.append((flat, lengths))
            pending_tokens += int(flat.size)
            if pending_tokens >= task.chunk_tokens:
                count_pending_chunk()
        if task.next_map is not None and next_read_ahead is not None:
            next_read_ahead.start(store, task.next_map.index, task.next_map.location, task.spec)
        count_pending_chunk()
        con.close()
        # One object per (range, order): the chunks' runs as row groups of one
        # file, so the store holds maps x ranges x orders objects, not x chunks.
        # (A shard of one chunk has one file each: moved as it is.)
        for (r, k), files in sorted(chunk_files.items()):
            merged = files[0]
            if len(files) > 1:
                merged = scratch / f"r{r:05d}-o{k}.parquet"
                _concatenate_parquet(files, merged)
            result.range_bytes[r] += store.put(merged, f"{shuffle_prefix(r)}/{attempt}/o{k}.parquet")
    shutil.rmtree(scratch, ignore_errors=True)
    result.bytes = _size_of(task.location)
    result.skipped = docs.stats.skipped
    result.errors = list(docs.stats.errors[:10])
    result.tokenize_seconds = docs.tokenize_seconds
    result.scratch_peak_bytes = meter.peak
    result.peak_rss_bytes = peak_rss_bytes()
    result.seconds = time.perf_counter() - t_start
    record_result(store, map_done_key(task.index), result)
    return result


def _concatenate_parquet(files: list[Path], out: Path) -> None:
    """Row groups of several Parquet files (same schema) into one file,
    streamed, then the inputs deleted."""
    import pyarrow.parquet as pq

    writer = None
    for f in files:
        table = pq.read_table(f)
        if writer is None:
            writer = pq.ParquetWriter(out, table.schema, compression="zstd")
        writer.write_table(table, row_group_size=1 << 20)
        f.unlink()
    if writer is not None:
        writer.close()


def _size_of(location: str) -> int:
    from indexer.storage import filesystem

    fs, path = filesystem(location)
    return int(fs.get_file_info(path).size or 0)
