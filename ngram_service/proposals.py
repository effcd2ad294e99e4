"""Corpus proposals: a draft tree from the trie and the context alone.

The search runs in the C++ engine (``cpp/engine/propose.h``), which also
checks every request and owns the defaults; docs/PROPOSALS.md specifies the
semantics: how the trie's suffix lengths and the context's own earlier
occurrences are combined, the best-first order and its ties, the limits.

    tree = propose(trie, context)                    # one sequence
    trees = propose_batch(trie, [ctx_a, ctx_b])      # all cores

``trie`` is the engine's ``_engine.Trie`` (``NgramIndex.propose`` passes its own).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ngram_service import _engine
from ngram_service.tree import DraftTree

__all__ = ["DEFAULTS", "LIMITS", "propose", "propose_batch", "propose_keywords", "propose_lookup", "propose_params"]

#: The engine's bounds on a request (cpp/engine/propose_params.h, ProposeLimits).
LIMITS = {name: getattr(_engine.ProposeLimits, name) for name in
          ("max_nodes", "max_depth", "max_branch", "max_context", "max_match", "max_occurrences")}

#: Every parameter's default, from the engine's table (cpp/engine/propose_params.h, kProposeFields, in its
#: order): the signatures of propose's wrappers read it.
DEFAULTS: dict[str, Any] = {row["name"]: row["default"] for row in _engine.PROPOSE_FIELDS}


def propose_keywords(values: Mapping[str, Any]) -> dict[str, Any]:
    """propose's parameters (kProposeFields' names, in order) picked from
    ``values``, a signature's locals: how the wrappers, whose signatures
    name each parameter, pass them on."""
    return {name: values[name] for name in DEFAULTS}


def propose(trie: _engine.Trie, context: Any, *, max_nodes: int = DEFAULTS["max_nodes"],
            max_depth: int = DEFAULTS["max_depth"], max_branch: int = DEFAULTS["max_branch"],
            min_prob: float = DEFAULTS["min_prob"], corpus: bool = DEFAULTS["corpus"],
            lookup: bool = DEFAULTS["lookup"], lookup_weight: float = DEFAULTS["lookup_weight"],
            lookup_min_match: int = DEFAULTS["lookup_min_match"], discount: float = DEFAULTS["discount"],
            lookup_decay: float = DEFAULTS["lookup_decay"], lookup_prior: float = DEFAULTS["lookup_prior"],
            order_weight: float = DEFAULTS["order_weight"], root_branch: int = DEFAULTS["root_branch"],
            timeout: float | None = None) -> DraftTree:
    """A draft tree of the likeliest continuations of ``context``.

    context: int [N] (N >= 1), the whole sequence so far; its last token is
    the root. max_nodes: nodes kept, root excluded; max_depth; max_branch:
    continuations considered at every node but the root (and read of each
    corpus suffix's run); root_branch: the same at the root; min_prob: the
    path-probability floor; corpus / lookup: the trie's and the context's own continuations
    (either may be turned off); lookup_weight; lookup_min_match: the
    shortest suffix matched in the context; discount: taken from each
    corpus count for the next shorter suffix; lookup_decay: a match of m
    tokens weighs 1 - lookup_decay^m; lookup_prior: n occurrences weigh
    n / (n + lookup_prior); order_weight: the share of its probabilities a
    corpus suffix of two or more tokens keeps (the rest goes to the next
    shorter suffix). Any of these given as None is its default (the
    engine's table, kProposeFields: DEFAULTS). timeout: seconds (None: no
    limit), after which the engine stops soon (it checks every few dozen
    nodes) and raises TimeoutError, no tree returned.

    The tree's scores are path probabilities (1 for the root). Raises
    ValueError naming the field for malformed input (an empty context, ids
    outside the vocabulary, a parameter outside its range, a timeout that is
    not > 0 and finite) and TypeError for an unknown keyword.
    """
    return _engine.propose(trie, context, **propose_keywords(locals()), timeout=timeout)


def propose_batch(trie: _engine.Trie, contexts: Iterable[Any], *, threads: int | None = None,
                  timeout: float | None = None, max_nodes: int = DEFAULTS["max_nodes"],
                  max_depth: int = DEFAULTS["max_depth"], max_branch: int = DEFAULTS["max_branch"],
                  min_prob: float = DEFAULTS["min_prob"], corpus: bool = DEFAULTS["corpus"],
                  lookup: bool = DEFAULTS["lookup"], lookup_weight: float = DEFAULTS["lookup_weight"],
                  lookup_min_match: int = DEFAULTS["lookup_min_match"], discount: float = DEFAULTS["discount"],
                  lookup_decay: float = DEFAULTS["lookup_decay"], lookup_prior: float = DEFAULTS["lookup_prior"],
                  order_weight: float = DEFAULTS["order_weight"],
                  root_branch: int = DEFAULTS["root_branch"]) -> list[DraftTree]:
    """propose for many contexts on ``threads`` threads (None: all cores),
    the GIL released; one set of parameters (as in ``propose``) for all. An
    invalid context raises ValueError prefixed ``contexts[i]:``. timeout:
    seconds for the whole batch (None: no limit); once it passes every
    thread stops and the call raises TimeoutError, returning none of the
    trees."""
    return _engine.propose_batch(trie, contexts, threads=threads, timeout=timeout, **propose_keywords(locals()))


#: ``propose_lookup(context, vocab_size, *, max_nodes=64, ..., timeout=None)``: prompt lookup alone, with no
#: trie: ``propose``'s tree from the context's own earlier occurrences (ids in [0, vocab_size)), the same
#: parameters (``corpus`` is ignored) and ``timeout``. What a client proposes while its trie host is out of
#: reach. The engine's function, its signature the engine table's.
propose_lookup = _engine.propose_lookup

#: ``propose_params(*, max_nodes=64, ...)``: ``propose``'s parameters converted and checked as ``propose``
#: converts and checks them (ValueError naming the field), unset ones (or None) at the engine's defaults;
#: floats as the float32 the engine reads. The engine's function, its signature the engine table's.
propose_params = _engine.propose_params
