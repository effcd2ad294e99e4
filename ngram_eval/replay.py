"""Replaying lattices through a trie's pruning: the trees, and what DART would accept from them.

A step's *accepted length* is what DART counts per verification step (its
tau): the longest prefix of the target's continuation that is a path of the
pruned tree from the root, plus the bonus token the target adds after it.
When the continuation is shorter than the accepted path + 1 (the end of a
logged generation), only its tokens count: ``min(accepted + 1, len(continuation))``.

The trees are the engine's own (``NgramIndex.prune_batch``, the code the
server and ``dart_client`` run), so a replayed tree is the tree DART would
have verified for that lattice with that trie and those parameters.
"""
from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from dart_client.lattice_log import LatticeSet
from ngram_service import NgramIndex
from ngram_service.tree import DEFAULTS, NoTrie, DraftTree, fit_lattice, prune_batch

__all__ = ["PruneSetting", "ReplayResult", "accepted_length", "accepted_lengths", "hit_rates", "prune_lattices",
           "replay"]

_CHUNK = 2048  # requests per prune_batch call: bounds the trees held at once


@dataclass(frozen=True)
class PruneSetting:
    """The pruning parameters varied by ngram-eval; the rest are DART's defaults (docs/PRUNING.md)."""

    beam_width: int = DEFAULTS["beam_width"]
    max_nodes: int = DEFAULTS["max_nodes"]
    ngram_weight: float = DEFAULTS["ngram_weight"]

    def label(self) -> str:
        return f"beam {self.beam_width}, nodes {self.max_nodes}, lambda {self.ngram_weight:g}"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ReplayResult:
    accepted: np.ndarray  # int32 [steps]: the accepted length of each step (bonus included)
    prune_s: float  # wall seconds in prune_batch, all steps
    threads: int

    @property
    def prune_us_per_tree(self) -> float:
        return 1e6 * self.prune_s / max(1, len(self.accepted))


def accepted_length(tree: DraftTree, continuation: Sequence[int]) -> int:
    """One tree, walked node by node: the reference for ``accepted_lengths``."""
    cont = [int(t) for t in continuation]
    children: dict[tuple[int, int], int] = {}
    for i in range(1, len(tree.tokens)):
        children[(int(tree.parents[i]), int(tree.tokens[i]))] = i
    node, accepted = 0, 0
    for tok in cont:
        nxt = children.get((node, tok))
        if nxt is None:
            break
        node, accepted = nxt, accepted + 1
    return min(accepted + 1, len(cont))


def accepted_lengths(trees: Sequence[DraftTree], continuations: Sequence[np.ndarray]) -> np.ndarray:
    """``accepted_length`` of many trees at once, depth by depth over all
    nodes (parents precede children, so a node matches when its parent
    matched and its token is the continuation's token at its depth)."""
    if len(trees) != len(continuations):
        raise ValueError(f"{len(trees)} trees but {len(continuations)} continuations")
    if not trees:
        return np.zeros(0, np.int32)
    sizes = np.array([len(t.tokens) for t in trees])
    base = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    tree_of = np.repeat(np.arange(len(trees)), sizes)
    tokens = np.concatenate([t.tokens for t in trees]).astype(np.int64)
    depths = np.concatenate([t.depths for t in trees]).astype(np.int64)
    parents = np.concatenate([t.parents for t in trees]).astype(np.int64) + np.repeat(base, sizes)
    width = int(depths.max())
    cont_len = np.array([len(c) for c in continuations])
    cont = np.full((len(trees), max(1, width)), -1, np.int64)
    for i, c in enumerate(continuations):
        m = min(len(c), width)
        cont[i, :m] = c[:m]
    match = depths == 0  # the roots
    deepest = np.zeros(len(trees), np.int64)
    for d in range(1, width + 1):
        at = np.nonzero(depths == d)[0]
        ok = match[parents[at]] & (tokens[at] == cont[tree_of[at], d - 1])
        match[at] = ok
        hit = tree_of[at[ok]]
        deepest[hit] = d  # every matched node of depth d: d is the deepest so far
    return np.minimum(deepest + 1, cont_len).astype(np.int32)


def _fit(prefix: np.ndarray, toks: Any, probs: Any, index: NgramIndex) -> tuple[np.ndarray, Any, Any] | None:
    """The request as dart_client's pruner sends it, fitted by the engine
    (cpp/engine/lattice_batch.h): candidates outside the trie's ids dropped
    (and every level after the first emptied one), the context cut after its
    last unknown token; None when the root is unknown."""
    return fit_lattice(prefix, toks, probs, index.order, index.vocab_size)


def _prune_into(trees: list[DraftTree | None], trie: Any, reqs: list[Any], rows: list[int],
                params: dict[str, Any], threads: int, source: str, row_offset: int) -> float:
    """trees[rows[i]] = the tree of reqs[i]; returns the engine's seconds."""
    seconds = 0.0
    for a in range(0, len(reqs), _CHUNK):
        t0 = time.perf_counter()
        try:
            out = prune_batch(trie, reqs[a:a + _CHUNK], threads=threads, **params)
        except ValueError as e:
            m = re.match(r"requests\[(\d+)\]:\s*(.*)", str(e), re.S)
            row, why = (rows[a + int(m.group(1))], m.group(2)) if m else (rows[a], str(e))
            raise ValueError(f"{source}: lattice {row + row_offset}: {why}") from None
        seconds += time.perf_counter() - t0
        for j, t in zip(rows[a:a + _CHUNK], out):
            trees[j] = t
    return seconds


def prune_lattices(index: NgramIndex, lattices: LatticeSet, setting: PruneSetting = PruneSetting(), *,
                   threads: int = 1, row_offset: int = 0) -> tuple[list[DraftTree], float]:
    """Every lattice's tree, in order (the engine's prune_batch, requests
    fitted to the trie's ids as dart_client's pruner fits them: a root the
    trie does not know is pruned without the n-gram, on no trie); seconds
    spent in the engine. A bad lattice raises ValueError naming its row (+
    row_offset)."""
    params = dict(beam_width=setting.beam_width, max_nodes=setting.max_nodes, ngram_weight=setting.ngram_weight)
    trees: list[DraftTree | None] = [None] * len(lattices)
    reqs, where, unknown_root = [], [], []
    for i in range(len(lattices)):
        fitted = _fit(lattices.prefixes[i], lattices.topk_tokens[i], lattices.topk_probs[i], index)
        if fitted is None:
            unknown_root.append(i)
        else:
            reqs.append(fitted)
            where.append(i)
    seconds = _prune_into(trees, index.engine, reqs, where, params, threads, lattices.source, row_offset)
    if unknown_root:
        need = 1 + max(max(int(lattices.prefixes[i][-1]), max(int(np.max(t)) for t in lattices.topk_tokens[i]))
                       for i in unknown_root)
        reqs = [(lattices.prefixes[i][-1:], lattices.topk_tokens[i], lattices.topk_probs[i]) for i in unknown_root]
        seconds += _prune_into(trees, NoTrie(need), reqs, unknown_root, dict(params, ngram_weight=0.0), threads,
                               lattices.source, row_offset)
    return trees, seconds  # type: ignore[return-value]


def replay(index: NgramIndex, lattices: LatticeSet, setting: PruneSetting = PruneSetting(), *,
           threads: int = 1) -> ReplayResult:
    """Prunes every lattice with ``index`` and ``setting`` and measures the
    accepted length against its continuation. Trees are made in chunks and
    dropped once measured."""
    accepted = np.zeros(len(lattices), np.int32)
    seconds = 0.0
    for a in range(0, len(lattices), _CHUNK):
        part = _slice(lattices, a, a + _CHUNK)
        trees, s = prune_lattices(index, part, setting, threads=threads, row_offset=a)
        seconds += s
        accepted[a:a + len(part)] = accepted_lengths(trees, part.continuations)
    return ReplayResult(accepted, seconds, threads)


def _slice(lat: LatticeSet, a: int, b: int) -> LatticeSet:
    part = LatticeSet(lat.prefixes[a:b], lat.topk_tokens[a:b], lat.topk_probs[a:b], lat.continuations[a:b],
                      lat.sequence_ids[a:b], lat.steps[a:b], source=lat.source)
    return part


def hit_rates(index: NgramIndex, lattices: LatticeSet) -> dict[int, float]:
    """Per order k = 2..N: the share of continuation tokens (at depths 1..D,
    each after the prefix and the continuation before it) whose k-gram, the
    last k-1 context tokens and the token, occurs in the trie. The n-gram
    term can only help a token it finds; this says how often it does."""
    n = index.order
    if n < 2 or not len(lattices):
        return {}
    keep = n - 1
    groups: dict[int, tuple[list[np.ndarray], list[int]]] = {}
    for i in range(len(lattices)):
        seq = np.concatenate((lattices.prefixes[i], lattices.continuations[i]))
        p = len(lattices.prefixes[i])
        for d in range(min(len(lattices.topk_tokens[i]), len(lattices.continuations[i]))):
            end = p + d  # the token at seq[end] follows seq[:end]
            ctx = seq[max(0, end - keep):end]
            g = groups.setdefault(len(ctx), ([], []))
            g[0].append(ctx)
            g[1].append(int(seq[end]))
    matched_all = []
    for ctx_len, (ctxs, toks) in groups.items():
        c = np.stack(ctxs)
        w = np.asarray(toks, np.int64)[:, None]
        ok = (w[:, 0] >= 0) & (w[:, 0] < index.vocab_size) & ((c >= 0) & (c < index.vocab_size)).all(axis=1)
        m = np.zeros(len(w), np.int32)
        if ok.any():
            m[ok] = index.conditional_probs(c[ok], w[ok])[1][:, 0]
        matched_all.append(m)
    matched = np.concatenate(matched_all)
    return {k: float(np.mean(matched >= k - 1)) for k in range(2, n + 1)}
