"""The build's map and reduce tasks.

Both are plain functions of a picklable task description, writing their
outputs under the build's work directory and returning a small result, so
any executor (a local process pool, a Ray cluster) can run them unchanged.
A task that finds its done-marker returns the recorded result: a killed
build resumes from the tasks already finished.

map:    one shard -> per order k, runs of (w0..w{k-1}, c) as zstd Parquet,
        each sorted, counted with DuckDB in bounded memory.
reduce: one range [lo, hi) of first tokens -> per order k, the merged counts
        of every k-gram starting in the range with count >= min_count, sorted,
        with each entry's number of children in order k+1.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from indexer.kgrams import column_list, kgram_table, tokens_left


def _write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, sort_keys=True))
    os.replace(tmp, path)


def _finished_or_fresh(out: Path, result_type: type) -> Any:
    """A task's recorded result if it finished before (resume); otherwise an
    empty output folder (a killed attempt's leftovers are removed)."""
    done = out / "done.json"
    if done.exists():
        r = result_type(**json.loads(done.read_text()))
        r.resumed = True
        return r
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    return None


def _connect(memory_limit_bytes: int, tmp_dir: Path) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(":memory:")
    con.execute(f"SET memory_limit = '{max(memory_limit_bytes // (1 << 20), 64)}MB'")
    con.execute(f"SET temp_directory = '{tmp_dir}'")
    con.execute("SET threads = 1")  # one task per core; the executor provides parallelism
    con.execute("SET preserve_insertion_order = false")
    return con


@dataclass
class MapTask:
    shard: str
    out_dir: str  # this shard's run folder
    order: int
    tokenizer: Any  # indexer.tokenizer.Tokenizer (picklable)
    text_field: str = "text"
    skip_bad: bool = False
    chunk_tokens: int = 4_000_000
    memory_limit_bytes: int = 512 << 20


@dataclass
class MapResult:
    shard: str
    bytes: int
    documents: int
    tokens: int  # including one EOS per document
    skipped: int = 0
    errors: list[str] = field(default_factory=list)
    runs: int = 0
    tokenize_seconds: float = 0.0
    seconds: float = 0.0
    resumed: bool = False


def run_map(task: MapTask) -> MapResult:
    from indexer.shards import ShardReader

    out = Path(task.out_dir)
    if (finished := _finished_or_fresh(out, MapResult)) is not None:
        return finished
    t_start = time.perf_counter()
    con = _connect(task.memory_limit_bytes, out)
    result = MapResult(shard=task.shard, bytes=os.path.getsize(task.shard), documents=0, tokens=0)
    pending: list[tuple[np.ndarray, np.ndarray]] = []
    pending_tokens = 0

    def flush() -> None:
        nonlocal pending, pending_tokens
        if not pending:
            return
        flat = np.concatenate([p[0] for p in pending])
        left = tokens_left(np.concatenate([p[1] for p in pending]))
        for k in range(1, task.order + 1):
            con.register("grams", kgram_table(flat, left, k))
            cols = column_list(k)
            con.execute(
                f"COPY (SELECT {cols}, count(*)::UBIGINT AS c FROM grams GROUP BY ALL ORDER BY {cols}) "
                f"TO '{out / f'order{k}-{result.runs:05d}.parquet'}' (FORMAT parquet, COMPRESSION zstd)"
            )
            con.unregister("grams")
        result.runs += 1
        pending, pending_tokens = [], 0

    reader = ShardReader(task.shard, task.text_field, skip_bad=task.skip_bad)
    for texts in reader:
        t0 = time.perf_counter()
        flat, lengths = task.tokenizer.encode_to_arrays(texts)
        result.tokenize_seconds += time.perf_counter() - t0
        result.documents += len(lengths)
        result.tokens += int(flat.size)
        pending.append((flat, lengths))
        pending_tokens += int(flat.size)
        if pending_tokens >= task.chunk_tokens:
            flush()
    flush()
    result.skipped = reader.stats.skipped
    result.errors = list(reader.stats.errors[:10])
    con.close()
    result.seconds = time.perf_counter() - t_start
    _write_json_atomic(out / "done.json", asdict(result))
    return result


@dataclass
class ReduceTask:
    index: int
    lo: int  # first tokens in [lo, hi)
    hi: int
    run_dirs: list[str]
    out_dir: str
    order: int
    min_count: int = 1
    memory_limit_bytes: int = 512 << 20


@dataclass
class ReduceResult:
    index: int
    sizes: list[int]  # entries per level
    count_values: list[list[list[int]]]  # per level: [count value, entries with it] pairs
    seconds: float = 0.0
    resumed: bool = False


def level_file(out_dir: str | Path, k: int) -> Path:
    """Reduce output for level k: columns w (last token, int32), c (count), n (children)."""
    return Path(out_dir) / f"level{k}.parquet"


def run_reduce(task: ReduceTask) -> ReduceResult:
    out = Path(task.out_dir)
    if (finished := _finished_or_fresh(out, ReduceResult)) is not None:
        return finished
    t_start = time.perf_counter()
    # In-memory tables spill to temp_directory beyond memory_limit, and are
    # faster than a database file for these write-once intermediates.
    con = _connect(task.memory_limit_bytes, out / "spill")
    n = task.order
    for k in range(1, n + 1):
        files = [str(Path(d) / f"order{k}-*.parquet") for d in task.run_dirs]
        cols = column_list(k)
        con.execute(
            f"CREATE TABLE lvl{k} AS SELECT {cols}, sum(c)::UBIGINT AS c "
            f"FROM read_parquet({files!r}) WHERE w0 >= {task.lo} AND w0 < {task.hi} "
            f"GROUP BY ALL HAVING sum(c) >= {task.min_count}"
        )
    sizes, values = [], []
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
        con.execute(
            f"COPY (SELECT a.w{k - 1}::INTEGER AS w, a.c AS c, {n_expr} AS n FROM lvl{k} a {children} "
            f"ORDER BY {column_list(k, 'a.')}) TO '{level_file(out, k)}' (FORMAT parquet, COMPRESSION zstd)"
        )
        sizes.append(con.execute(f"SELECT count(*) FROM lvl{k}").fetchone()[0])
        values.append(sorted([v, f] for v, f in con.execute(f"SELECT c, count(*) FROM lvl{k} GROUP BY c").fetchall()))
    con.close()
    shutil.rmtree(out / "spill", ignore_errors=True)
    result = ReduceResult(task.index, sizes, values, seconds=time.perf_counter() - t_start)
    _write_json_atomic(out / "done.json", asdict(result))
    return result
