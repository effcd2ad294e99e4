"""Draft trees without a drafter model: corpus proposals for the GPU worker.

``LocalProposer(trie)`` proposes in process (``NgramIndex.propose_batch``);
``RemoteProposer(targets)`` asks a trie host (the ``ProposeTree`` RPC,
``NgramClient.propose_batch``) and, when the host is slow or down, proposes
by prompt lookup alone (``ngram_service.proposals.propose_lookup``: the
sequence's own earlier occurrences, no trie), with RemotePruner's back-off;
``LookupProposer()`` is prompt lookup alone, for a worker with no trie at
all. Each is called with the sequences so far, for one sequence or a batch::

    tree = proposer(tokens, device)                       # a DraftTree
    trees = proposer.propose_batch([tokens, ...], device)  # DraftTrees

The trees are the engine's (cpp/engine/propose.h, docs/PROPOSALS.md): node 0
is the root (the sequence's last token), the likeliest continuations of the
trie's stored contexts and of the sequence's own occurrences below it. They
come back as the pruners' trees do (``dart_client.draft_trees``): one array
in the engine's packed layout, one host-to-device copy, ``DraftTrees`` of
the padded batch tensors.

Parameters: the engine's (``ngram_service.proposals.DEFAULTS``: max_nodes,
max_depth, max_branch, min_prob, corpus, lookup, lookup_weight,
lookup_min_match, discount, lookup_decay, lookup_prior, order_weight,
root_branch), each named in every
constructor with the engine's default (None: the default), checked at
construction. ``max_context``: the sequence's
last tokens a search sees (None: the engine's limit); the corpus source
reads only the last order - 1 of them, prompt lookup all of them, and a
RemoteProposer sends them with every call (8 bytes a token).
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dart_client.draft_trees import DraftTree, DraftTrees, TreeStaging, tree_batch
from dart_client.host_link import HostLink, PrunerStats, check_fingerprint, model_fingerprint
from ngram_service import NgramIndex, _engine, proposals
from ngram_service.arg_checks import whole_number
from ngram_service.proposals import DEFAULTS

__all__ = ["LocalProposer", "LookupProposer", "ProposeTiming", "RemoteProposer"]

#: The engine's longest context (cpp/engine/propose.h, ProposeLimits::kMaxContext).
MAX_CONTEXT: int = proposals.LIMITS["max_context"]

#: The largest token id prompt lookup takes (its vocabulary is at most 2**31 ids).
MAX_TOKEN_ID = (1 << 31) - 1


@dataclass
class ProposeTiming:
    """Seconds spent in the last call, by part."""

    search: float = 0.0  # proposing here: the engine's search in process, or prompt lookup
    transport: float = 0.0  # the RPC round trip, the host's search included (RemoteProposer)
    tensors: float = 0.0  # the trees packed and on the device
    remote: bool = False  # the trees came from the host
    source: str = ""  # what proposed them: "trie" (in process), "host", "lookup" (prompt lookup alone)

    @property
    def propose(self) -> float:
        """Client-side work: everything but the RPC."""
        return self.search + self.tensors


def _check_params(params: dict[str, Any]) -> dict[str, Any]:
    """``params`` (every parameter, None: its default) with the engine's
    defaults for None, checked by the engine (ValueError naming the field)."""
    proposals.propose_params(**params)
    return {k: DEFAULTS[k] if v is None else v for k, v in params.items()}


def _lookup(context: np.ndarray, vocab: int, params: dict[str, Any]) -> Any:
    """Prompt lookup alone: propose's tree from the context's own earlier
    occurrences (no trie); ids beyond ``vocab`` widen it (they come from the
    context, and the vocabulary only bounds them)."""
    top = int(context.max()) + 1
    return proposals.propose_lookup(context, max(vocab, top), **params)


class _ProposerBase:
    """The calls, the trees back as tensors; subclasses propose."""

    def __init__(self, *, max_context: int | None = None, max_nodes: int = DEFAULTS["max_nodes"],
                 max_depth: int = DEFAULTS["max_depth"], max_branch: int = DEFAULTS["max_branch"],
                 min_prob: float = DEFAULTS["min_prob"], corpus: bool = DEFAULTS["corpus"],
                 lookup: bool = DEFAULTS["lookup"], lookup_weight: float = DEFAULTS["lookup_weight"],
                 lookup_min_match: int = DEFAULTS["lookup_min_match"], discount: float = DEFAULTS["discount"],
                 lookup_decay: float = DEFAULTS["lookup_decay"], lookup_prior: float = DEFAULTS["lookup_prior"],
                 order_weight: float = DEFAULTS["order_weight"], root_branch: int = DEFAULTS["root_branch"]) -> None:
        if max_context is not None and not 1 <= whole_number(max_context, "max_context") <= MAX_CONTEXT:
            raise ValueError(f"max_context must be in 1..{MAX_CONTEXT}, got {max_context}")
        self.max_context = int(max_context or MAX_CONTEXT)
        self.params = _check_params(proposals.propose_keywords(locals()))
        self.stats = PrunerStats()
        self.timing = ProposeTiming()
        self._staging = TreeStaging()

    #: The ids the trie knows (0: no trie, or not known yet).
    vocab_size: int = 0

    def _propose(self, contexts: list[np.ndarray], tm: ProposeTiming, params: dict[str, Any]) -> list[Any]:
        """The engine's trees (``ngram_service.tree.DraftTree``), one per context, proposed with ``params``."""
        raise NotImplementedError

    def __call__(self, tokens: Any, device: Any = "cpu") -> DraftTree:
        """tokens: the sequence so far (list, array or tensor; its last token
        is the root). Returns the DraftTree on ``device``."""
        return self.propose_batch([tokens], device)[0]

    def propose_batch(self, tokens: Sequence[Any], device: Any = "cpu", *, max_nodes: int | None = None
                      ) -> DraftTrees:
        """B sequences at once: one search call for the batch (the engine's,
        or one ProposeTree RPC), one host-to-device copy; the B trees in
        order, as DraftTrees on ``device``. max_nodes: at most this many
        nodes a tree for this call, if fewer than the proposer's own
        (a generator's tree budget shared by a batch)."""
        if not len(tokens):
            raise ValueError("no sequences")
        params = self.params
        if max_nodes is not None and whole_number(max_nodes, "max_nodes") < params["max_nodes"]:
            if max_nodes < 0:
                raise ValueError(f"max_nodes must be >= 0, got {max_nodes}")
            params = dict(params, max_nodes=int(max_nodes))
        tm = ProposeTiming()
        self.timing = tm
        self.stats.calls += len(tokens)
        contexts = [self._context(t, i) for i, t in enumerate(tokens)]
        trees = self._propose(contexts, tm, params)
        t0 = time.perf_counter()
        out = self._staging.trees(tree_batch(trees), torch.device(device))
        tm.tensors = time.perf_counter() - t0
        return out

    def _context(self, tokens: Any, i: int) -> np.ndarray:
        """One sequence's last max_context ids (any shape, flattened), converted
        as the engine converts ids: floats, strings and ids past int64 are a
        ValueError naming tokens[i] (1.7 was cut to 1)."""
        if isinstance(tokens, torch.Tensor):
            tokens = tokens.reshape(-1)[-self.max_context:].cpu().numpy()
        try:
            flat = np.asarray(tokens).reshape(-1)
        except ValueError:  # ragged
            raise ValueError(f"tokens[{i}] is not a sequence of token ids") from None
        ids = _engine.token_ids(flat[-self.max_context:] if flat.dtype != object else tokens, f"tokens[{i}]", 1)
        if ids.size == 0:
            raise ValueError(f"tokens[{i}] is empty: a tree needs its root")
        if ids.size > self.max_context:
            ids = ids[-self.max_context:]
        if ids.min() < 0:
            raise ValueError(f"tokens[{i}]: a negative token id")
        if ids.max() > MAX_TOKEN_ID:
            raise ValueError(f"tokens[{i}]: token id {ids.max()} is past the engine's ids (0..{MAX_TOKEN_ID})")
        return ids

    def _fitted(self, contexts: list[np.ndarray]) -> tuple[list[np.ndarray], list[int]]:
        """The contexts as the trie can take them (cut after their last id
        the trie does not know), and the rows whose root the trie does not
        know (proposed by prompt lookup alone)."""
        fitted, lookup_rows = [], []
        v = self.vocab_size
        for i, c in enumerate(contexts):
            if v and int(c.max()) >= v:  # the engine's fit (cpp/engine/lattice_batch.h)
                start = _engine.fit_context(c, v)
                if start == c.size:
                    lookup_rows.append(i)
                else:
                    c = c[start:]
            fitted.append(c)
        return fitted, lookup_rows

    def _lookup_rows(self, contexts: list[np.ndarray], rows: list[int], trees: list[Any],
                     params: dict[str, Any]) -> None:
        """Rows whose root the trie does not know: prompt lookup alone, counted as fallbacks."""
        for i in rows:
            trees[i] = _lookup(contexts[i], self.vocab_size, params)
        if rows:
            self.stats.errors["OUT_OF_VOCAB"] = self.stats.errors.get("OUT_OF_VOCAB", 0) + len(rows)
            self.stats.last_error = "the root token is outside the trie's vocabulary"
            self.stats.fallbacks += len(rows)


# ---- no trie ---------------------------------------------------------------------

class LookupProposer(_ProposerBase):
    """Prompt lookup alone: each tree from the sequence's own earlier
    occurrences (``ngram_service.proposals.propose_lookup``), no trie. The
    keywords as the engine's (corpus is ignored), plus max_context."""

    def _propose(self, contexts: list[np.ndarray], tm: ProposeTiming, params: dict[str, Any]) -> list[Any]:
        t0 = time.perf_counter()
        trees = [_lookup(c, 1, params) for c in contexts]
        tm.search = time.perf_counter() - t0
        tm.source = "lookup"
        return trees


# ---- in process ----------------------------------------------------------------

class LocalProposer(_ProposerBase):
    """Proposes with a trie in this process (``NgramIndex.propose_batch``).

    trie: a trie file path or an open NgramIndex. tokenizer /
    tokenizer_fingerprint: the model's tokenizer (spec) or its fingerprint;
    checked once against the trie's header (TokenizerMismatchError).
    threads: the engine's threads for a batch (None: all cores). Other
    keywords: propose's parameters, and max_context.
    """

    def __init__(self, trie: str | Path | NgramIndex, *, tokenizer: Any = None,
                 tokenizer_fingerprint: str | None = None, threads: int | None = None, max_context: int | None = None,
                 max_nodes: int = DEFAULTS["max_nodes"], max_depth: int = DEFAULTS["max_depth"],
                 max_branch: int = DEFAULTS["max_branch"], min_prob: float = DEFAULTS["min_prob"],
                 corpus: bool = DEFAULTS["corpus"], lookup: bool = DEFAULTS["lookup"],
                 lookup_weight: float = DEFAULTS["lookup_weight"], lookup_min_match: int = DEFAULTS["lookup_min_match"],
                 discount: float = DEFAULTS["discount"], lookup_decay: float = DEFAULTS["lookup_decay"],
                 lookup_prior: float = DEFAULTS["lookup_prior"], order_weight: float = DEFAULTS["order_weight"],
                 root_branch: int = DEFAULTS["root_branch"]) -> None:
        super().__init__(max_context=max_context, **proposals.propose_keywords(locals()))
        self.index = trie if isinstance(trie, NgramIndex) else NgramIndex.open(trie)
        self.info = self.index.info()
        fp = tokenizer_fingerprint or (model_fingerprint(tokenizer) if tokenizer is not None else None)
        check_fingerprint(self.info, fp, str(self.info.get("path", trie)))
        self.vocab_size = self.index.vocab_size
        self.order = self.index.order
        self.threads = threads

    def _propose(self, contexts: list[np.ndarray], tm: ProposeTiming, params: dict[str, Any]) -> list[Any]:
        t0 = time.perf_counter()
        fitted, lookup_rows = self._fitted(contexts)
        served = [i for i in range(len(fitted)) if i not in set(lookup_rows)] if lookup_rows else None
        trees: list[Any] = [None] * len(fitted)
        if served is None:
            if len(fitted) == 1:
                trees = [self.index.propose(fitted[0], **params)]
            else:
                trees = self.index.propose_batch(fitted, threads=self.threads, **params)
        elif served:
            for i, t in zip(served, self.index.propose_batch([fitted[i] for i in served], threads=self.threads,
                                                             **params)):
                trees[i] = t
        self._lookup_rows(contexts, lookup_rows, trees, params)
        tm.search = time.perf_counter() - t0
        tm.source = "trie"
        return trees


# ---- over gRPC -----------------------------------------------------------------

class RemoteProposer(HostLink, _ProposerBase):
    """Proposes on a trie host (``ngram-serve``: the ProposeTree RPC), with
    prompt lookup alone as the fallback.

    targets: "host:port" or several (balanced by ngram_service.NgramClient).
    deadline: seconds per call (default 5 ms; the call carries the contexts:
    raise it for long sequences or large batches). On a timeout or any RPC
    error the call proposes here by prompt lookup alone (the whole batch:
    the fallback is per call), counts the event in ``stats`` and leaves the
    host alone for a back-off (backoff_initial, doubling up to backoff_max
    seconds; reset by a success) before trying it again, as RemotePruner
    does. transport, index, client_options, the tokenizer fingerprint check:
    as RemotePruner's (HostLink.KEYWORDS; an unknown keyword is a
    TypeError naming it). Other keywords: propose's parameters, and
    max_context.
    """

    without_host = "proposing by prompt lookup alone"

    def __init__(self, targets: str | Sequence[str], *, max_context: int | None = None,
                 max_nodes: int = DEFAULTS["max_nodes"], max_depth: int = DEFAULTS["max_depth"],
                 max_branch: int = DEFAULTS["max_branch"], min_prob: float = DEFAULTS["min_prob"],
                 corpus: bool = DEFAULTS["corpus"], lookup: bool = DEFAULTS["lookup"],
                 lookup_weight: float = DEFAULTS["lookup_weight"], lookup_min_match: int = DEFAULTS["lookup_min_match"],
                 discount: float = DEFAULTS["discount"], lookup_decay: float = DEFAULTS["lookup_decay"],
                 lookup_prior: float = DEFAULTS["lookup_prior"], order_weight: float = DEFAULTS["order_weight"],
                 root_branch: int = DEFAULTS["root_branch"], **host_keywords: Any) -> None:
        host = HostLink.take_keywords(host_keywords)
        if host_keywords:
            raise TypeError(f"RemoteProposer() got an unexpected keyword argument {next(iter(host_keywords))!r}")
        super().__init__(max_context=max_context, **proposals.propose_keywords(locals()))
        self.order = 0
        self._connect(targets, **host)

    def _host_info(self, info: dict[str, Any]) -> None:
        self.order = int(info["order"])
        self.vocab_size = int(info["vocab_size"])

    def _propose(self, contexts: list[np.ndarray], tm: ProposeTiming, params: dict[str, Any]) -> list[Any]:
        trees = self._through_host(len(contexts), lambda: self._remote(contexts, tm, params),
                                   lambda: self._fallback(contexts, params), tm)
        tm.source = "host" if tm.remote else "lookup"
        return trees

    def _remote(self, contexts: list[np.ndarray], tm: ProposeTiming, params: dict[str, Any]) -> list[Any]:
        """One ProposeTree RPC for every context whose root the host knows;
        the others by prompt lookup here."""
        fitted, lookup_rows = self._fitted(contexts)
        if not lookup_rows:
            trees = self.client.propose_batch(fitted, timeout=self.deadline, **params)
            self.stats.remote_ok += len(trees)
            return trees
        served = [i for i in range(len(fitted)) if i not in set(lookup_rows)]
        trees: list[Any] = [None] * len(fitted)
        if served:
            for i, t in zip(served, self.client.propose_batch([fitted[i] for i in served], timeout=self.deadline,
                                                              **params)):
                trees[i] = t
            self.stats.remote_ok += len(served)
        t0 = time.perf_counter()
        self._lookup_rows(contexts, lookup_rows, trees, params)
        tm.search += time.perf_counter() - t0
        return trees

    def _fallback(self, contexts: list[np.ndarray], params: dict[str, Any]) -> list[Any]:
        return [_lookup(c, self.vocab_size, params) for c in contexts]
