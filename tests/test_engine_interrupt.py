"""A call's ``timeout``: the engine stops a call soon after its deadline
(cpp/engine/interrupt.h) and NgramIndex raises TimeoutError with nothing
returned; with time to spare the answers are the untimed ones, bit for bit."""
from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

from ngram_service import NgramIndex
from ngram_service.proposals import propose_lookup

# Time to spare: no call here comes near it.
GENEROUS = 60.0
# How long a stopped call may take in all, for a loaded 2-core CI machine:
# the heavy calls below take several seconds each without a deadline.
RETURNS_WITHIN = 1.0


@pytest.fixture(scope="module")
def idx(sample_trie: Path) -> NgramIndex:
    return NgramIndex.open(sample_trie)


def lattice(rng: np.random.Generator, depth: int, k: int, vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """depth levels of k distinct candidates, probabilities sorted descending."""
    tokens = np.stack([rng.choice(vocab, k, replace=False) for _ in range(depth)]).astype(np.int64)
    probs = np.ascontiguousarray(np.sort(rng.random((depth, k)).astype(np.float32), axis=1)[:, ::-1])
    return tokens, probs


def same_tree(a: Any, b: Any) -> None:
    for field in ("tokens", "parents", "depths", "scores", "tree_mask", "retrieve_indices"):
        x, y = getattr(a, field), getattr(b, field)
        assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), field


def test_time_to_spare_changes_no_answer(idx: NgramIndex) -> None:
    rng = np.random.default_rng(0)
    lattices = [(np.array([1, 2 + i]), *lattice(rng, 6, 20, idx.vocab_size)) for i in range(8)]
    for prefix, toks, probs in lattices:
        same_tree(idx.prune(prefix, toks, probs, timeout=GENEROUS), idx.prune(prefix, toks, probs))
    requests = [dict(prefix=p, topk_tokens=t, topk_probs=q) for p, t, q in lattices]
    for a, b in zip(idx.prune_batch(requests, threads=2, timeout=GENEROUS, beam_width=30),
                    idx.prune_batch(requests, threads=2, beam_width=30)):
        same_tree(a, b)

    contexts = [rng.integers(0, idx.vocab_size, n) for n in (1, 2, 5, 40, 300)]
    for c in contexts:
        same_tree(idx.propose(c, timeout=GENEROUS, max_nodes=200), idx.propose(c, max_nodes=200))
        same_tree(propose_lookup(c, idx.vocab_size, timeout=GENEROUS), propose_lookup(c, idx.vocab_size))
    for a, b in zip(idx.propose_batch(contexts, threads=2, timeout=GENEROUS), idx.propose_batch(contexts, threads=2)):
        same_tree(a, b)

    for dtype in (np.int64, np.int32):  # the engine's two entry points
        ctx = rng.integers(0, idx.vocab_size, (500, 2)).astype(dtype)
        cand = rng.integers(0, idx.vocab_size, (500, 25)).astype(dtype)
        p, m = idx.conditional_probs(ctx, cand, timeout=GENEROUS)
        p0, m0 = idx.conditional_probs(ctx, cand)
        assert p.tobytes() == p0.tobytes() and m.tobytes() == m0.tobytes()


def stopped_at_once(call: Callable[[], object], message: str) -> float:
    """Runs a call whose timeout passes before its first check: TimeoutError,
    worded by the binding. Returns how long the call took."""
    t0 = time.perf_counter()
    with pytest.raises(TimeoutError, match=message):
        call()
    return time.perf_counter() - t0


def test_a_passed_deadline_raises_timeout_error(idx: NgramIndex) -> None:
    """A nanosecond has passed by the engine's first check, whatever the machine."""
    toks, probs = lattice(np.random.default_rng(1), 4, 8, idx.vocab_size)
    ctx = np.arange(1, 50)
    ns = 1e-9
    stopped_at_once(lambda: idx.prune([1, 2], toks, probs, timeout=ns),
                    r"^prune: timeout of 1e-09 s passed; no tree returned$")
    stopped_at_once(lambda: idx.prune_batch([([1, 2], toks, probs)] * 3, timeout=ns),
                    r"^prune_batch: timeout of 1e-09 s passed; no trees returned$")
    stopped_at_once(lambda: idx.propose(ctx, timeout=ns), r"^propose: timeout of 1e-09 s passed; no tree returned$")
    stopped_at_once(lambda: idx.propose_batch([ctx] * 3, timeout=ns),
                    r"^propose_batch: timeout of 1e-09 s passed; no trees returned$")
    stopped_at_once(lambda: propose_lookup(ctx, idx.vocab_size, timeout=ns), r"^propose_lookup: timeout of 1e-09 s")
    stopped_at_once(lambda: idx.conditional_probs([[1, 2]], [[3, 4]], timeout=ns),
                    r"^conditional_probs: timeout of 1e-09 s passed; no probabilities returned$")
    # A thread stopped mid-call keeps its workspace usable: the next call answers as before.
    same_tree(idx.propose(ctx, timeout=GENEROUS), idx.propose(ctx))
    same_tree(idx.prune([1, 2], toks, probs, timeout=GENEROUS), idx.prune([1, 2], toks, probs))


def test_heavy_calls_stop_soon_after_their_deadline(idx: NgramIndex) -> None:
    """Calls many times longer than their timeouts raise TimeoutError, every
    thread stopped, well within RETURNS_WITHIN. Untimed, here: a prune of
    64 levels of 1,024 candidates (beam 1,024, 4,096 nodes) takes a fifth of
    a second, 32 of them on two threads over three seconds, 200 proposals
    from a 2**20-token context of one repeated token (its matches measured
    at every position) about three, and a million queries of 25 candidates
    a sixth of a second; none is run untimed here."""
    toks, probs = lattice(np.random.default_rng(2), 64, 1024, idx.vocab_size)
    heavy = dict(beam_width=1024, max_nodes=4096)
    took = stopped_at_once(lambda: idx.prune([1, 2], toks, probs, timeout=0.02, **heavy), "^prune: timeout")
    assert took < RETURNS_WITHIN
    # The same arrays in every request: the engine reads them where they lie.
    took = stopped_at_once(lambda: idx.prune_batch([([1, 2], toks, probs)] * 32, threads=2, timeout=0.05, **heavy),
                           "^prune_batch: timeout")
    assert took < RETURNS_WITHIN

    long_context = np.full(1 << 20, 5, dtype=np.int64)
    wide = dict(max_nodes=256, max_branch=32, min_prob=0.0, max_depth=64)
    took = stopped_at_once(lambda: idx.propose_batch([long_context] * 200, threads=2, timeout=0.05, **wide),
                           "^propose_batch: timeout")
    assert took < RETURNS_WITHIN

    rng = np.random.default_rng(3)
    ctx = rng.integers(0, idx.vocab_size, (1_000_000, 2), dtype=np.int32)
    cand = rng.integers(0, idx.vocab_size, (1_000_000, 25), dtype=np.int32)
    took = stopped_at_once(lambda: idx.conditional_probs(ctx, cand, timeout=0.005), "^conditional_probs: timeout")
    assert took < RETURNS_WITHIN


@pytest.mark.parametrize("bad", [0, -1, 0.0, math.nan, math.inf, -math.inf, "x", True, [1.0]],
                         ids=["0", "-1", "0.0", "nan", "inf", "-inf", "str", "bool", "list"])
def test_a_bad_timeout_is_refused_naming_it(idx: NgramIndex, bad: object) -> None:
    toks, probs = lattice(np.random.default_rng(4), 2, 4, idx.vocab_size)
    calls: list[Callable[[], object]] = [
        lambda: idx.prune([1, 2], toks, probs, timeout=bad),
        lambda: idx.prune_batch([([1, 2], toks, probs)], timeout=bad),
        lambda: idx.propose([1, 2], timeout=bad),
        lambda: idx.propose_batch([[1, 2]], timeout=bad),
        lambda: propose_lookup([1, 2], idx.vocab_size, timeout=bad),
        lambda: idx.conditional_probs([[1, 2]], [[3, 4]], timeout=bad),
    ]
    for call in calls:
        with pytest.raises((ValueError, TypeError), match="^timeout"):
            call()


def test_no_timeout_is_no_limit(idx: NgramIndex) -> None:
    toks, probs = lattice(np.random.default_rng(5), 2, 4, idx.vocab_size)
    same_tree(idx.prune([1, 2], toks, probs, timeout=None), idx.prune([1, 2], toks, probs))
    same_tree(idx.propose([1, 2], timeout=None), idx.propose([1, 2]))
    # A timeout beyond any call's life is none.
    same_tree(idx.propose([1, 2], timeout=1e300), idx.propose([1, 2]))
