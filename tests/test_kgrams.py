"""k-gram extraction (the map's counting input) against a plain enumeration."""
from __future__ import annotations

from collections import Counter

import numpy as np

from indexer.kgrams import kgram_table, tokens_left


def test_kgrams_are_every_window_inside_a_document() -> None:
    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 9, size=300)  # documents of 1..8 tokens, some shorter than k
    flat = rng.integers(0, 50, size=int(lengths.sum())).astype(np.int32)
    docs = np.split(flat, np.cumsum(lengths)[:-1])
    left = tokens_left(lengths)
    for k in range(1, 6):
        table = kgram_table(flat, left, k)
        got = Counter(zip(*(table.column(f"w{j}").to_pylist() for j in range(k))))
        want = Counter(tuple(int(t) for t in d[i:i + k]) for d in docs for i in range(len(d) - k + 1))
        assert got == want, k
        assert table.schema.field("w0").type == "int32"
