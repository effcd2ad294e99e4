"""The reduce task: one range [lo, hi) of range keys -> its slice of every order.

Per order k: the merged counts of every k-gram in the range with count >=
min_count, sorted, with each entry's number of children in order k+1, from
only the runs the finished map attempts wrote for this range (DuckDB, out of
core). It records its result last (``reduce/NNNNN.json``) and then deletes
the runs it merged.
"""
from __future__ import annotations

import shutil
import time
from dataclasses import dataclass

from indexer.fault_injection import Fault, inject_fault
from indexer.kgrams import column_list
from indexer.storage import Store, local_scratch
from indexer.task_resources import DiskMeter, duckdb_connection, peak_rss_bytes
from indexer.work_store import (
    MissingRunsError,
    level_key,
    record_result,
    recorded_result,
    reduce_done_key,
    shuffle_prefix,
)


@dataclass
class ReduceTask:
    index: int
    lo: list[int]  # range keys in [lo, hi): [first token, second token or -1]
    hi: list[int]
    attempts: list[str]  # the finished map attempts that wrote runs for this range
    store: Store
    order: int
    min_count: int = 1
    memory_limit_bytes: int = 512 << 20
    fault: Fault | None = None

    @property
    def label(self) -> str:
        return f"reduce {self.index} (range keys {self.lo} .. {self.hi})"


@dataclass
class ReduceResult:
    index: int
    sizes: list[int]  # entries per level
    count_values: list[list[list[int]]]  # per level: [count value, entries with it] pairs
    input_bytes: int = 0  # run bytes read (and deleted afterwards)
    # A range starting inside first token t (lo = [t, s >= 0]): its bigrams
    # that start with t, children of unigram t (which an earlier range holds).
    carried_children: int = 0
    output_bytes: int = 0
    scratch_peak_bytes: int = 0
    peak_rss_bytes: int = 0  # the worker process' peak RSS when the task ended
    seconds: float = 0.0
    resumed: bool = False


def run_reduce(task: ReduceTask) -> ReduceResult:
    """Runs one reduce task (its recorded result, if it finished before)."""
    store = task.store
    if (finished := recorded_result(store, reduce_done_key(task.index), ReduceResult)) is not None:
        return finished
    inject_fault(store, task.fault)
    t_start = time.perf_counter()
    wanted = set(task.attempts)
    runs = [f for f in store.list(shuffle_prefix(task.index)) if f.key.split("/")[2] in wanted]
    missing = wanted - {f.key.split("/")[2] for f in runs}
    if missing:
        raise MissingRunsError(f"range {task.index}: the runs of map attempt(s) {sorted(missing)} are gone from "
                               f"the work directory {store.root}; re-run with --no-resume")
    scratch = local_scratch(store, f"r{task.index:05d}")
    n = task.order
    sizes, values = [], []
    with DiskMeter(scratch) as meter:
        by_order: dict[int, list[str]] = {k: [] for k in range(1, n + 1)}
        for f in runs:
            k = int(f.key.rsplit("/", 1)[1].split(".")[0][1:])  # .../oK.parquet
            by_order[k].append(str(store.fetch(f.key, scratch)))
        # In-memory tables spill to temp_directory beyond memory_limit, and are
        # faster than a database file for these write-once intermediates.
        con = duckdb_connection(task.memory_limit_bytes, scratch / "spill")
        for k in range(1, n + 1):
            cols = column_list(k)
            if by_order[k]:
                con.execute(
                    f"CREATE TABLE lvl{k} AS SELECT {cols}, sum(c)::UBIGINT AS c "
                    f"FROM read_parquet({by_order[k]!r}) GROUP BY ALL HAVING sum(c) >= {task.min_count}"
                )
            else:
                con.execute(f"CREATE TABLE lvl{k} ({', '.join(f'w{j} INTEGER' for j in range(k))}, c UBIGINT)")
        output_bytes = 0
        for k in range(1, n + 1):
            cols = column_list(k)
            if k < n:
                children = (
                    f"LEFT JOIN (SELECT {cols}, count(*) AS n FROM lvl{k + 1} GROUP BY ALL) b "
                    f"USING ({cols})"
                )
                n_expr = "coalesce(b.n, 0)::UBIGINT"
            else:
                children, n_expr = "", "0::UBIGINT"
            local = scratch / f"level{k}.parquet"
            con.execute(
                f"COPY (SELECT a.w{k - 1}::INTEGER AS w, a.c AS c, {n_expr} AS n FROM lvl{k} a {children} "
                f"ORDER BY {column_list(k, 'a.')}) TO '{local}' (FORMAT parquet, COMPRESSION zstd)"
            )
            output_bytes += store.put(local, level_key(task.index, k))
            sizes.append(con.execute(f"SELECT count(*) FROM lvl{k}").fetchall()[0][0])
            values.append(sorted([v, f] for v, f in con.execute(f"SELECT c, count(*) FROM lvl{k} GROUP BY c").fetchall()))
        carried = 0
        if task.lo[1] >= 0 and n >= 2:
            carried = con.execute(f"SELECT count(*) FROM lvl2 WHERE w0 = {int(task.lo[0])}").fetchall()[0][0]
        con.close()
    shutil.rmtree(scratch, ignore_errors=True)
    result = ReduceResult(task.index, sizes, values, input_bytes=sum(f.size for f in runs), carried_children=carried,
                          output_bytes=output_bytes, scratch_peak_bytes=meter.peak, peak_rss_bytes=peak_rss_bytes(),
                          seconds=time.perf_counter() - t_start)
    record_result(store, reduce_done_key(task.index), result)
    # The runs are merged: free their space now (a retry finds the record above).
    store.delete(shuffle_prefix(task.index))
    return result
