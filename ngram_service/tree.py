"""DART tree pruning: a draft lattice in, a draft tree out.

The search runs in the C++ engine (``cpp/engine/prune_tree.cc``), which also
checks every request and owns the defaults; the binding converts Python
objects to the engine's types and nothing more. docs/PRUNING.md specifies
the semantics: scores, tie rules, node order, limits.

    tree = prune(trie, prefix, topk_tokens, topk_probs)       # one lattice
    trees = prune_batch(trie, [(prefix, toks, probs), ...])   # all cores

``trie`` is the engine's ``_engine.Trie`` (``NgramIndex.prune`` passes its own)
or ``NoTrie(vocab_size)``.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ngram_service import _engine

__all__ = ["DEFAULTS", "LIMITS", "NoTrie", "PrunedTree", "fit_lattice", "prune", "prune_batch", "prune_params"]

#: A draft tree: numpy views of the engine's output (see docs/PRUNING.md).
PrunedTree = _engine.PrunedTree

#: No trie: ``NoTrie(vocab_size)`` where a search takes a trie prunes by the
#: drafter alone (ids in [0, vocab_size), every n-gram lookup finding
#: nothing; with ngram_weight 0, exactly the tree any trie of that vocabulary
#: gives). What a client prunes with while its trie cannot serve a lattice.
NoTrie = _engine.NoTrie

#: ``fit_lattice(prefix, topk_tokens, topk_probs, order, vocab_size)``: one
#: lattice fitted to a trie as the GPU worker's pruners fit theirs
#: (cpp/engine/lattice_batch.h): (prefix, level tokens, level probabilities),
#: or None when the trie cannot serve its root or first level.
fit_lattice = _engine.fit_lattice

#: The engine's bounds on a request (cpp/engine/prune_tree.h, PruneLimits).
LIMITS = {
    "max_depth": _engine.PruneLimits.max_depth,
    "max_candidates": _engine.PruneLimits.max_candidates,
    "max_beam_width": _engine.PruneLimits.max_beam_width,
    "max_nodes": _engine.PruneLimits.max_nodes,
    "max_weight": _engine.PruneLimits.max_weight,
}

#: The engine's defaults (cpp/engine/prune_tree.h, PruneParams): DART's production settings.
DEFAULTS: dict[str, Any] = dict(_engine.PRUNE_DEFAULTS)


def prune(trie: _engine.Trie | NoTrie, prefix: Any, topk_tokens: Any, topk_probs: Any, **params: Any) -> PrunedTree:
    """DART tree pruning of one draft lattice.

    prefix: int [P] (P >= 1; its last order-1 tokens matter, its last token is
    the root). topk_tokens: int [D, K] and topk_probs: float32 [D, K], the
    drafter's candidates per position; or lists of D 1-D arrays when K
    differs per level. Keyword parameters: beam_width (default 20),
    max_nodes (60), ngram_weight (0.5), level_weights / logit_weights
    (float32 [D]; None gives DART's (l+1)**-0.7 and 0.9**l), eos_token_id
    (None: the trie's EOS; -1: no EOS rule), ngram_on_first_level (False
    scores level 0 by the drafter alone, as DART's production build does).
    timeout: seconds (None: no limit); the engine stops soon after it passes
    (it checks before each level) and raises TimeoutError, no tree returned.

    Raises ValueError naming the field for malformed input (shapes, limits,
    ids outside the vocabulary, probabilities outside [0, 1] or NaN or of a
    dtype that is not real numbers, a token twice in one level, weights
    outside [0, 1e6], a timeout that is not > 0 and finite).
    """
    return _engine.prune(trie, prefix, topk_tokens, topk_probs, **params)


def prune_batch(trie: _engine.Trie | NoTrie, requests: Iterable[Any], *, threads: int | None = None,
                timeout: float | None = None, **params: Any) -> list[PrunedTree]:
    """Prunes many lattices on ``threads`` threads (None: all cores), the GIL
    released. Each request is a dict with keys prefix, topk_tokens,
    topk_probs or a tuple of those three; the keyword parameters (as in
    ``prune``) apply to all. Returns the trees in request order. An invalid
    request raises ValueError prefixed ``requests[i]:``. timeout: seconds for
    the whole batch (None: no limit); once it passes every thread stops and
    the call raises TimeoutError, returning none of the trees."""
    return _engine.prune_batch(trie, requests, threads=threads, timeout=timeout, **params)


def prune_params(**params: Any) -> dict[str, Any]:
    """``prune``'s keyword parameters converted as ``prune`` converts them
    (ValueError for a float beam width, say), unset ones at the engine's
    defaults; eos_token_id None means the trie's."""
    return _engine.prune_params(**params)
