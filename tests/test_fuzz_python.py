"""Property-based fuzzing of the Python surface (Hypothesis): NgramIndex's
queries and prune with arbitrary integers, floats, arrays and parameters.

Each call either answers within the documented invariants or raises
ValueError; no other exception, no crash. docs/RELIABILITY.md lists what the
libFuzzer targets in fuzz/ add below this layer.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import require_module

hypothesis = require_module("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from ngram_service import NgramIndex  # noqa: E402

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))

# Anything a caller might pass where an integer is expected.
ANY_INT = st.one_of(st.integers(), st.integers(-2**70, 2**70), st.sampled_from([2**63, 2**64, -2**63 - 1, -1, 0]))
LOOSE = st.one_of(ANY_INT, st.floats(allow_nan=True), st.none(), st.booleans(), st.text(max_size=3),
                  st.lists(st.integers(-5, 5), max_size=3))
TOKEN = st.one_of(st.integers(0, 50), ANY_INT)
IDS = st.lists(TOKEN, min_size=0, max_size=6)


@pytest.fixture(scope="module")
def index(sample_trie: Path) -> NgramIndex:
    return NgramIndex.open(sample_trie)


def _ok_or_value_error(call: Any) -> Any:
    try:
        return call()
    except ValueError:
        return None


@SETTINGS
@given(ctx=st.lists(IDS, min_size=0, max_size=3), cand=st.lists(IDS, min_size=0, max_size=3))
def test_conditional_probs(index: NgramIndex, ctx: list, cand: list) -> None:
    out = _ok_or_value_error(lambda: index.conditional_probs(ctx, cand))
    if out is not None:
        p, m = out
        assert np.all((p >= 0) & (p <= 1))
        assert np.all((m >= 0) & (m < index.order))
        assert np.array_equal(p == 0, m == 0)


@SETTINGS
@given(ctx=IDS, k=LOOSE)
def test_topk(index: NgramIndex, ctx: list, k: Any) -> None:
    out = _ok_or_value_error(lambda: index.topk(ctx, k))
    if out is not None:
        assert len(out.tokens) <= k
        assert np.all(np.diff(out.counts.astype(np.float64)) <= 0)


@SETTINGS
@given(prefix=IDS, levels=st.lists(st.lists(st.tuples(TOKEN, st.floats(width=32)), max_size=5), max_size=5),
       params=st.dictionaries(st.sampled_from(["beam_width", "max_nodes", "eos_token_id", "ngram_weight",
                                               "level_weights", "logit_weights", "ngram_on_first_level"]),
                              LOOSE, max_size=4),
       batch=st.booleans())
def test_prune(index: NgramIndex, prefix: list, levels: list, params: dict, batch: bool) -> None:
    toks = [[t for t, _ in lv] for lv in levels]
    probs = [[p for _, p in lv] for lv in levels]
    if batch:
        out = _ok_or_value_error(lambda: index.prune_batch([(prefix, toks, probs)], **params))
        trees = out or []
    else:
        out = _ok_or_value_error(lambda: index.prune(prefix, toks, probs, **params))
        trees = [out] if out is not None else []
    for t in trees:
        n = len(t.tokens)
        assert n >= 1 and t.parents[0] == -1
        assert all(0 <= t.parents[i] < i for i in range(1, n))
        assert t.tree_mask.shape == (n, n)
