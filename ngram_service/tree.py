"""DART tree pruning: a draft lattice in, a draft tree out.

The search runs in the C++ engine (``cpp/engine/prune_tree.cc``); this module
normalizes arguments and wraps the result. docs/PRUNING.md specifies the
semantics: scores, tie rules, node order, limits.

    tree = prune(trie, prefix, topk_tokens, topk_probs)       # one lattice
    trees = prune_batch(trie, [(prefix, toks, probs), ...])   # all cores

``trie`` is the engine's ``_engine.Trie`` (``NgramIndex.prune`` passes its own).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ngram_service import _engine

__all__ = ["LIMITS", "PrunedTree", "prune", "prune_batch"]

#: The engine's bounds on a request (cpp/engine/prune_tree.h, PruneLimits).
LIMITS = {
    "max_depth": _engine.PruneLimits.max_depth,
    "max_candidates": _engine.PruneLimits.max_candidates,
    "max_beam_width": _engine.PruneLimits.max_beam_width,
    "max_nodes": _engine.PruneLimits.max_nodes,
    "max_weight": _engine.PruneLimits.max_weight,
}


@dataclass(frozen=True, slots=True, eq=False)
class PrunedTree:
    """A draft tree of ``1 + n`` nodes; node 0 is the root (the prefix's last token).

    Nodes are ordered by depth, within one depth by score descending (ties in
    the order the search generated them); every parent precedes its children.
    """

    tokens: np.ndarray  # int32 [1 + n]
    parents: np.ndarray  # int32 [1 + n], -1 for the root
    depths: np.ndarray  # int32 [1 + n], 0 for the root
    scores: np.ndarray  # float32 [1 + n], the search's score of each node (0 for the root)
    tree_mask: np.ndarray  # bool [1 + n, 1 + n]: row i marks i and its ancestors
    retrieve_indices: np.ndarray  # int32 [leaves, max depth + 1]: root-to-leaf node indices, -1 padded

    @property
    def tree_position_ids(self) -> np.ndarray:
        """Position offset of each node from the root (= depths), as DART names it."""
        return self.depths

    @property
    def n_nodes(self) -> int:
        """Nodes kept, the root excluded."""
        return len(self.tokens) - 1

    def paths(self) -> list[tuple[int, ...]]:
        """The token path (root excluded) of every node, in node order; () for the root."""
        out: list[tuple[int, ...]] = [()]
        tok = self.tokens.tolist()
        par = self.parents.tolist()
        for i in range(1, len(tok)):
            out.append(out[par[i]] + (tok[i],))
        return out

    def __repr__(self) -> str:
        depth = int(self.depths.max()) if len(self.depths) else 0
        return f"PrunedTree(nodes={self.n_nodes}, depth={depth}, leaves={len(self.retrieve_indices)})"


def _ids(x: Any, field: str) -> np.ndarray:
    """Integer ids as an array; floats are refused rather than truncated."""
    a = np.asarray(x)
    if a.dtype.char in "lqi":  # int64, int32: the common case, nothing to check
        return a
    if a.dtype.kind not in "iu":
        if a.size == 0 and a.dtype.kind == "f":  # [] from an empty list
            return a.astype(np.int64)
        raise ValueError(f"{field}: token ids must be integers, got dtype {a.dtype}")
    if a.dtype == np.uint64 and a.size and int(a.max()) > np.iinfo(np.int64).max:
        raise ValueError(f"{field}: token id {int(a.max())} out of range")
    return a


def _probs(x: Any, field: str) -> np.ndarray:
    try:
        return np.asarray(x, dtype=np.float32)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{field}: probabilities must be numbers: {e}") from None


def _lattice(topk_tokens: Any, topk_probs: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(tokens, probs, level_offsets): 2-D [D, K] arrays with None, or, when
    K differs per level (a list of 1-D arrays), the levels concatenated and
    their offsets [D + 1]."""
    if isinstance(topk_tokens, np.ndarray) or not isinstance(topk_tokens, (list, tuple)):
        return _ids(topk_tokens, "topk_tokens"), _probs(topk_probs, "topk_probs"), None
    levels = [_ids(t, f"topk_tokens[{l}]") for l, t in enumerate(topk_tokens)]
    if not isinstance(topk_probs, (list, tuple, np.ndarray)) or len(topk_probs) != len(levels):
        n = len(topk_probs) if hasattr(topk_probs, "__len__") else "no"
        raise ValueError(f"topk_probs has {n} levels, topk_tokens {len(levels)}: they must match")
    probs = [_probs(p, f"topk_probs[{l}]") for l, p in enumerate(topk_probs)]
    for l, (t, p) in enumerate(zip(levels, probs)):
        if t.ndim != 1 or p.ndim != 1 or t.shape != p.shape:
            raise ValueError(
                f"level {l}: topk_tokens[{l}] has shape {t.shape}, topk_probs[{l}] {p.shape}: "
                "each level must be 1-D and both must match"
            )
    if len(levels) > 0 and len({len(t) for t in levels}) == 1:  # uniform K: the 2-D fast path
        return np.stack(levels), np.stack(probs), None
    offsets = np.zeros(len(levels) + 1, dtype=np.uint64)
    np.cumsum([len(t) for t in levels], out=offsets[1:])
    tok = np.concatenate(levels) if levels else np.zeros(0, np.int64)
    pr = np.concatenate(probs) if probs else np.zeros(0, np.float32)
    return tok, pr, offsets


def _weights(w: Any, field: str) -> np.ndarray | None:
    if w is None:
        return None
    a = _probs(w, field)
    if a.ndim != 1:
        raise ValueError(f"{field} must be 1-D [D], got shape {a.shape}")
    return a


def _params(
    beam_width: int,
    max_nodes: int,
    ngram_weight: float,
    level_weights: Any,
    logit_weights: Any,
    eos_token_id: int | None,
    ngram_on_first_level: bool,
) -> tuple[Any, ...]:
    for name, v in (("beam_width", beam_width), ("max_nodes", max_nodes)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise ValueError(f"{name} must be an integer, got {v!r}")  # noqa: TRY004 (one error type)
    if eos_token_id is not None and (isinstance(eos_token_id, bool) or not isinstance(eos_token_id, (int, np.integer))):
        raise ValueError(f"eos_token_id must be an integer or None, got {eos_token_id!r}")
    return (
        int(beam_width),
        int(max_nodes),
        float(ngram_weight),
        _weights(level_weights, "level_weights"),
        _weights(logit_weights, "logit_weights"),
        None if eos_token_id is None else int(eos_token_id),
        bool(ngram_on_first_level),
    )


def prune(
    trie: _engine.Trie,
    prefix: Any,
    topk_tokens: Any,
    topk_probs: Any,
    *,
    beam_width: int = 20,
    max_nodes: int = 60,
    ngram_weight: float = 0.5,
    level_weights: Any = None,
    logit_weights: Any = None,
    eos_token_id: int | None = None,
    ngram_on_first_level: bool = False,
) -> PrunedTree:
    """DART tree pruning of one draft lattice.

    prefix: int [P] (P >= 1; its last order-1 tokens matter, its last token is
    the root). topk_tokens: int [D, K] and topk_probs: float32 [D, K], the
    drafter's candidates per position; or lists of D 1-D arrays when K
    differs per level. level_weights / logit_weights: float32 [D]; None gives
    DART's (l+1)**-0.7 and 0.9**l. eos_token_id None: the trie's EOS; -1:
    no EOS rule. ngram_on_first_level False scores level 0 by the drafter
    alone, as DART's production build does.

    Raises ValueError naming the field for malformed input (shapes, limits,
    ids outside the vocabulary, probabilities outside [0, 1] or NaN, a token
    twice in one level, weights outside [0, 1e6]).
    """
    pre = _ids(prefix, "prefix")
    tok, pr, offsets = _lattice(topk_tokens, topk_probs)
    res = _engine.prune(
        trie, pre, tok, pr, offsets,
        *_params(beam_width, max_nodes, ngram_weight, level_weights, logit_weights, eos_token_id, ngram_on_first_level),
    )
    return PrunedTree(*res)


def _request(r: Any, i: int) -> tuple[Any, ...]:
    if isinstance(r, Mapping):
        extra = set(r) - {"prefix", "topk_tokens", "topk_probs"}
        if extra:
            raise ValueError(f"requests[{i}]: unknown keys {sorted(extra)}; parameters apply to the whole batch")
        try:
            r = (r["prefix"], r["topk_tokens"], r["topk_probs"])
        except KeyError as e:
            raise ValueError(f"requests[{i}]: missing key {e.args[0]!r}") from None
    if not isinstance(r, Sequence) or len(r) != 3:
        raise ValueError(f"requests[{i}] must be a dict or a (prefix, topk_tokens, topk_probs) tuple")
    try:
        pre = _ids(r[0], "prefix")
        tok, pr, offsets = _lattice(r[1], r[2])
    except ValueError as e:
        raise ValueError(f"requests[{i}]: {e}") from None
    return pre, tok, pr, offsets


def prune_batch(
    trie: _engine.Trie,
    requests: Iterable[Any],
    *,
    threads: int | None = None,
    beam_width: int = 20,
    max_nodes: int = 60,
    ngram_weight: float = 0.5,
    level_weights: Any = None,
    logit_weights: Any = None,
    eos_token_id: int | None = None,
    ngram_on_first_level: bool = False,
) -> list[PrunedTree]:
    """Prunes many lattices on ``threads`` threads (None: all cores), the GIL
    released. Each request is a dict with keys prefix, topk_tokens,
    topk_probs or a tuple of those three; the keyword parameters (as in
    ``prune``) apply to all. Returns the trees in request order. An invalid
    request raises ValueError prefixed ``requests[i]:``."""
    reqs = [_request(r, i) for i, r in enumerate(requests)]
    if threads is None:
        threads = 0
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 0:
        raise ValueError(f"threads must be a non-negative integer or None, got {threads!r}")
    res = _engine.prune_batch(
        trie, reqs,
        *_params(beam_width, max_nodes, ngram_weight, level_weights, logit_weights, eos_token_id, ngram_on_first_level),
        int(threads),
    )
    return [PrunedTree(*r) for r in res]
