"""k-gram extraction from token arrays, vectorised (no per-token Python).

Documents arrive as one flat int32 array plus per-document lengths (each
document already ends with its EOS). A k-gram is counted at every position
whose document still has k tokens from there on, so k-grams never cross a
document boundary and those ending in EOS are included.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa


def kgram_table(flat: np.ndarray, doc_lengths: np.ndarray, k: int) -> pa.Table:
    """All k-grams of the documents as columns w0..w{k-1} (int32), one row per occurrence."""
    if flat.size == 0:
        return pa.table({f"w{j}": pa.array([], pa.int32()) for j in range(k)})
    ends = np.cumsum(doc_lengths, dtype=np.int64)
    remaining = np.repeat(ends, doc_lengths) - np.arange(flat.size, dtype=np.int64)
    start = np.flatnonzero(remaining >= k)
    return pa.table({f"w{j}": pa.array(flat[start + j], pa.int32()) for j in range(k)})


def column_list(k: int, prefix: str = "") -> str:
    """'w0, w1, ...' for SQL over k-gram columns."""
    return ", ".join(f"{prefix}w{j}" for j in range(k))
