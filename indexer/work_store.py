"""The layout of a build's work store and the records kept in it.

A build's work lives under one ``Store`` prefix (a local folder or an
object-storage prefix) keyed by everything that determines its result, so
re-running the same command resumes:

    plan.json                      the range plan (a resumed build cuts like the first)
    sample/NNNNN.npz               ids a sample encoded of map NNNNN's shard's first documents
    map/NNNNN.json                 map NNNNN's result, written last: the task is done
    shuffle/rRRRRR/<attempt>/oK.parquet
                                   runs of order K for range RRRRR, by the map attempt that wrote them
    reduce/NNNNN.json              reduce NNNNN's result, written last
    reduce/rRRRRR/levelK.parquet   range RRRRR's slice of level K: w (last token), c (count), n (children)
    faults/PHASE-NNNNN             markers of injected faults (fault_injection)
"""
from __future__ import annotations

import io
import json
from dataclasses import asdict
from typing import Any, TypeVar

import numpy as np

from indexer.storage import Store

PLAN_KEY = "plan.json"

R = TypeVar("R")


class MissingRunsError(RuntimeError):
    """The work directory lost runs a reduce task needs."""


def sample_ids_key(index: int) -> str:
    """The ids a sample encoded of map ``index``'s shard: its first documents."""
    return f"sample/{index:05d}.npz"


def map_done_key(index: int) -> str:
    return f"map/{index:05d}.json"


def shuffle_prefix(range_index: int) -> str:
    return f"shuffle/r{range_index:05d}"


def reduce_done_key(index: int) -> str:
    return f"reduce/{index:05d}.json"


def level_key(range_index: int, k: int) -> str:
    """Reduce output for level k: columns w (last token, int32), c (count), n (children)."""
    return f"reduce/r{range_index:05d}/level{k}.parquet"


def recorded_result(store: Store, key: str, result_type: type[R]) -> R | None:
    """A task's recorded result if it finished before (resume), else None."""
    if not store.exists(key):
        return None
    r = result_type(**json.loads(store.read_bytes(key)))
    r.resumed = True  # type: ignore[attr-defined]
    return r


def record_result(store: Store, key: str, result: Any) -> None:
    """Records a task's result (a dataclass): the last thing a task writes."""
    store.write_bytes(key, json.dumps(asdict(result), sort_keys=True).encode())


def write_sample_ids(store: Store, index: int, ids: np.ndarray, lengths: np.ndarray) -> None:
    """Keeps the ids a sample encoded of map ``index``'s first documents."""
    buf = io.BytesIO()
    np.savez(buf, ids=ids, lengths=lengths)
    store.write_bytes(sample_ids_key(index), buf.getvalue())


def read_sample_ids(store: Store, index: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The ids a sample encoded of map ``index``'s first documents, if it kept them."""
    key = sample_ids_key(index)
    if not store.exists(key):
        return None
    with np.load(io.BytesIO(store.read_bytes(key))) as z:
        ids, lengths = z["ids"], z["lengths"]
    if ids.dtype != np.int32 or lengths.dtype != np.int64 or int(lengths.sum()) != len(ids):
        raise MissingRunsError(f"{store.location(key)}: not the ids of whole documents; re-run with --no-resume")
    return ids, lengths
