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

import warnings
from collections.abc import Iterable, Mapping
from typing import Any

from ngram_service import _engine

__all__ = ["DEFAULTS", "FIELD_DEFAULTS", "LIMITS", "DraftTree", "NoTrie", "fit_lattice", "prune", "prune_batch",
           "prune_keywords", "prune_params"]

#: The draft tree: numpy views of the engine's one tree (cpp/engine/draft_tree.h; docs/PRUNING.md), what
#: prune, propose and the clients return. ``dart_client.DraftTree`` is the same tree as tensors on a device.
DraftTree = _engine.DraftTree


def __getattr__(name: str) -> Any:
    # PrunedTree: the draft tree's name until it had one name everywhere.
    if name == "PrunedTree":
        warnings.warn("ngram_service.tree.PrunedTree is deprecated: use ngram_service.tree.DraftTree",
                      DeprecationWarning, stacklevel=2)
        return DraftTree
    raise AttributeError(f"module 'ngram_service.tree' has no attribute {name!r}")

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

#: The engine's bounds on a request (cpp/engine/prune_params.h, PruneLimits).
LIMITS = {
    "max_depth": _engine.PruneLimits.max_depth,
    "max_candidates": _engine.PruneLimits.max_candidates,
    "max_beam_width": _engine.PruneLimits.max_beam_width,
    "max_nodes": _engine.PruneLimits.max_nodes,
    "max_weight": _engine.PruneLimits.max_weight,
}

#: The engine's defaults of the parameters with one default value (cpp/engine/prune_params.h,
#: PruneParams): DART's production settings.
DEFAULTS: dict[str, Any] = dict(_engine.PRUNE_DEFAULTS)

#: Every parameter's default, from the engine's table (kPruneFields; None: DART's weights, the trie's
#: EOS): the signatures of prune's wrappers read it.
FIELD_DEFAULTS: dict[str, Any] = {row["name"]: row["default"] for row in _engine.PRUNE_FIELDS}


def prune_keywords(values: Mapping[str, Any]) -> dict[str, Any]:
    """prune's keyword parameters (kPruneFields' names, in order) picked
    from ``values``, a signature's locals: how the wrappers below, whose
    signatures name each parameter, pass them on."""
    return {row["name"]: values[row["name"]] for row in _engine.PRUNE_FIELDS}


def prune(trie: _engine.Trie | NoTrie, prefix: Any, topk_tokens: Any, topk_probs: Any, *,
          beam_width: int = FIELD_DEFAULTS["beam_width"], max_nodes: int = FIELD_DEFAULTS["max_nodes"],
          ngram_weight: float = FIELD_DEFAULTS["ngram_weight"], level_weights: Any = FIELD_DEFAULTS["level_weights"],
          logit_weights: Any = FIELD_DEFAULTS["logit_weights"], eos_token_id: int | None = FIELD_DEFAULTS["eos_token_id"],
          ngram_on_first_level: bool = FIELD_DEFAULTS["ngram_on_first_level"], timeout: float | None = None) -> DraftTree:
    """DART tree pruning of one draft lattice.

    prefix: int [P] (P >= 1; its last order-1 tokens matter, its last token is
    the root). topk_tokens: int [D, K] and topk_probs: float32 [D, K], the
    drafter's candidates per position; or lists of D 1-D arrays when K
    differs per level. beam_width: extensions kept per level; max_nodes:
    nodes kept, the root excluded; ngram_weight: the n-gram term's weight;
    level_weights / logit_weights: float32 [D] (None: DART's (l+1)**-0.7
    and 0.9**l); eos_token_id: None for the trie's EOS, -1 for no EOS rule;
    ngram_on_first_level: False scores level 0 by the drafter alone, as
    DART's production build does. Any of these given as None is its
    default (the engine's table, kPruneFields). timeout: seconds (None: no
    limit); the engine stops soon after it passes (it checks before each
    level) and raises TimeoutError, no tree returned.

    Raises ValueError naming the field for malformed input (shapes, limits,
    ids outside the vocabulary, probabilities outside [0, 1] or NaN or of a
    dtype that is not real numbers, a token twice in one level, weights
    outside [0, 1e6], a timeout that is not > 0 and finite).
    """
    return _engine.prune(trie, prefix, topk_tokens, topk_probs, **prune_keywords(locals()), timeout=timeout)


def prune_batch(trie: _engine.Trie | NoTrie, requests: Iterable[Any], *, threads: int | None = None,
                timeout: float | None = None, beam_width: int = FIELD_DEFAULTS["beam_width"],
                max_nodes: int = FIELD_DEFAULTS["max_nodes"], ngram_weight: float = FIELD_DEFAULTS["ngram_weight"],
                level_weights: Any = FIELD_DEFAULTS["level_weights"], logit_weights: Any = FIELD_DEFAULTS["logit_weights"],
                eos_token_id: int | None = FIELD_DEFAULTS["eos_token_id"],
                ngram_on_first_level: bool = FIELD_DEFAULTS["ngram_on_first_level"]) -> list[DraftTree]:
    """Prunes many lattices on ``threads`` threads (None: all cores), the GIL
    released. Each request is a dict with keys prefix, topk_tokens,
    topk_probs or a tuple of those three; the parameters (as in ``prune``)
    apply to all. Returns the trees in request order. An invalid request
    raises ValueError prefixed ``requests[i]:``. timeout: seconds for the
    whole batch (None: no limit); once it passes every thread stops and the
    call raises TimeoutError, returning none of the trees."""
    return _engine.prune_batch(trie, requests, threads=threads, timeout=timeout, **prune_keywords(locals()))


def prune_params(*, beam_width: int = FIELD_DEFAULTS["beam_width"], max_nodes: int = FIELD_DEFAULTS["max_nodes"],
                 ngram_weight: float = FIELD_DEFAULTS["ngram_weight"], level_weights: Any = FIELD_DEFAULTS["level_weights"],
                 logit_weights: Any = FIELD_DEFAULTS["logit_weights"], eos_token_id: int | None = FIELD_DEFAULTS["eos_token_id"],
                 ngram_on_first_level: bool = FIELD_DEFAULTS["ngram_on_first_level"]) -> dict[str, Any]:
    """``prune``'s parameters converted as ``prune`` converts them
    (ValueError for a float beam width, say), unset ones (or None) at the
    engine's defaults; eos_token_id None means the trie's."""
    return _engine.prune_params(**prune_keywords(locals()))
