"""Draft-tree pruning for the GPU worker: the drafter's logits in, DART's tree out.

``LocalPruner(trie)`` runs the engine in process; ``RemotePruner(targets)``
asks a trie host (``ngram-serve``) over gRPC and, when the host is slow or
down, prunes locally without the n-gram. Both are called like DART's
``tree_search``, for one sequence, or for a batch::

    tree = pruner(logits, d2t, tokens)   # logits [D, V_draft] on the device
    tree.draft_tokens, tree.retrieve_indices, tree.tree_mask, tree.tree_position_ids, tree.parents
    trees = pruner.prune_batch(logits, d2t, [tokens, ...])   # logits [B, D, V_draft]

Per call: top-k of each position's logits on the device, the draft ids mapped
to target ids with ``d2t`` (target = draft + d2t[draft]), a softmax over the k
logits of each position (DART's probabilities), one device-to-host copy of
the k tokens and probabilities per level for the whole batch; the search
(one engine ``prune_batch``, or one PruneTree RPC) sees the last N-1 tokens
of each context (N: the trie's order; the last token is the tree's root).
The trees come back in one host-to-device copy, as tensors on the logits'
device, in the shapes of DART's ``tree_search``: draft_tokens int64 [n],
retrieve_indices int64 [leaves, depth + 1] (-1 padded), tree_mask bool
[n, n] (row i: node i and its ancestors), tree_position_ids int64 [n] (node
depths), plus parents int64 [n] (-1 for the root). DART's generation loop
adds the batch dimensions ([1, n], [1, 1, n, n], [1, n]) itself.

The fallback search (RemotePruner, host unreachable: the whole call's
lattices) is the engine's own search with ngram_weight 0 and no trie
(``_engine.NoTrie``, a vocabulary and nothing stored): each tree is exactly
the one the host would return with ngram_weight 0.
"""
from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from dart_client.device_lattices import LatticeGraphs, LatticeStaging, host_ids, pack_lattices
from dart_client.draft_trees import DraftTree, DraftTrees, TreeStaging
from dart_client.host_link import HostLink, PrunerStats, TokenizerMismatchError, check_fingerprint, model_fingerprint
from ngram_service import NgramIndex, _engine
from ngram_service.arg_checks import is_real, whole_number
from ngram_service.params import LATTICE_TOPK, PRUNE_PARAMS
from ngram_service.tree import DEFAULTS, prune_params

__all__ = [
    "DraftTree",
    "DraftTrees",
    "LocalPruner",
    "PruneTiming",
    "PrunerStats",
    "RemotePruner",
    "TokenizerMismatchError",
    "model_fingerprint",
]

#: DART's production search parameters (tree_search_config.py); the
#: pruning ones are the engine's defaults, defined there once.
DART_TOPK = 25
DART_BEAM_WIDTH: int = DEFAULTS["beam_width"]
DART_MAX_NODES: int = DEFAULTS["max_nodes"]
DART_NGRAM_WEIGHT: float = DEFAULTS["ngram_weight"]


def _check_params(params: dict[str, Any]) -> None:
    """The search parameters converted as the engine converts them
    (ValueError naming the field for a float beam width, a switch that is
    not True or False) and held to its table's ranges (PRUNE_PARAMS), at
    construction: the engine would refuse them at every call, and a remote
    pruner fall back at every call. An eos_token_id outside the trie's
    vocabulary is left to ``_eos`` (no EOS rule)."""
    given = prune_params(**params)
    for p in PRUNE_PARAMS:
        if p.type is bool or params[p.name] is None:
            continue
        values = given[p.name] if p.type is list else [given[p.name]]
        for i, v in enumerate(values):
            if not (v >= p.low and (p.high is None or v <= p.high)):
                where = f"{p.name}[{i}]" if p.type is list else p.name
                raise ValueError(f"{where} = {v}: must be {'in ' if p.type is not int else ''}{p.describe_range()}")


@dataclass
class PruneTiming:
    """Seconds spent in the last call, by part."""

    topk: float = 0.0  # top-k, softmax and d2t on the device, the copy to the host
    search: float = 0.0  # the local engine's search (LocalPruner, or RemotePruner's fallback)
    transport: float = 0.0  # the RPC round trip, remote search included (RemotePruner): encode + call + decode
    encode: float = 0.0  # the request's bytes from the lattices (part of transport)
    call: float = 0.0  # the RPC itself, bytes to bytes (part of transport)
    decode: float = 0.0  # the response's bytes into trees (part of transport)
    tensors: float = 0.0  # the trees' tensors on the device
    remote: bool = False  # the trees came from the host
    source: str = ""  # what built the trees: "trie" (in process), "host", "drafter" (the fallback: no n-gram)

    @property
    def prune(self) -> float:
        """Client-side pruning work: everything but the RPC."""
        return self.topk + self.search + self.tensors


# ---- shared machinery ----------------------------------------------------------

class _Rows(NamedTuple):
    """Rows of the batch searched with one set of parameters."""

    rows: np.ndarray | None  # int64 row indices; None: every row
    params: dict[str, Any]


class _PrunerBase:
    """Top-k on the device, the search (subclasses), the trees back as tensors."""

    def __init__(
        self,
        *,
        topk: int = DART_TOPK,
        beam_width: int = DART_BEAM_WIDTH,
        max_nodes: int = DART_MAX_NODES,
        ngram_weight: float = DART_NGRAM_WEIGHT,
        level_weights: Sequence[float] | None = None,
        logit_weights: Sequence[float] | None = None,
        eos_token_id: int | None = None,
        ngram_on_first_level: bool = False,
        temperature: float = 1.0,
        cuda_graphs: bool = True,
    ) -> None:
        topk = whole_number(topk, "topk")
        if not LATTICE_TOPK.low <= topk <= LATTICE_TOPK.high:
            raise ValueError(f"topk = {topk}: must be {LATTICE_TOPK.describe_range()}")
        if not is_real(temperature) or not 0 < temperature < math.inf:
            raise ValueError(f"temperature must be > 0 and finite, got {temperature!r}")
        _check_params({"beam_width": beam_width, "max_nodes": max_nodes, "ngram_weight": ngram_weight,
                       "level_weights": level_weights, "logit_weights": logit_weights, "eos_token_id": eos_token_id,
                       "ngram_on_first_level": ngram_on_first_level})
        self.topk = topk
        self.temperature = float(temperature)
        self.params: dict[str, Any] = {
            "beam_width": int(beam_width),
            "max_nodes": int(max_nodes),
            "ngram_weight": float(ngram_weight),
            "level_weights": None if level_weights is None else list(map(float, level_weights)),
            "logit_weights": None if logit_weights is None else list(map(float, logit_weights)),
            "ngram_on_first_level": bool(ngram_on_first_level),
        }
        self._eos_param = eos_token_id
        self.stats = PrunerStats()
        self.timing = PruneTiming()
        self._d2t_cache: tuple[Any, torch.Tensor] | None = None
        self._lattice_staging = LatticeStaging()
        self._staging = TreeStaging()
        self._param_cache: dict[tuple[float, int, int, int | None], dict[str, Any]] = {}
        self._graphs = LatticeGraphs() if cuda_graphs else None

    # -- subclasses --------------------------------------------------------------

    order: int = 1
    vocab_size: int = 0
    eos_token_id: int = -1

    def _search(self, contexts: list[Any], packed: np.ndarray, tm: PruneTiming, max_nodes: int | None) -> Any:
        """The batch's trees as an ``_engine.TreeBatch`` (max_nodes: this call's cap, None: the pruner's own)."""
        raise NotImplementedError

    def _context_order(self) -> int:
        """The order whose context (its last order - 1 tokens) a search reads."""
        return self.order

    # -- the calls -----------------------------------------------------------------

    def __call__(self, logits: torch.Tensor, d2t: torch.Tensor | None, tokens: Any) -> DraftTree:
        """logits [D, V_draft] (any device); d2t int [V_draft] or None (draft
        ids are target ids); tokens: the sequence so far (list, array or
        tensor; its last token is the root). Returns the DraftTree on
        logits.device."""
        if not isinstance(logits, torch.Tensor):
            raise TypeError(f"logits must be a torch.Tensor [D, V_draft], got {type(logits).__name__}")
        if logits.ndim != 2:
            raise ValueError(f"logits must be [D, V_draft], got shape {tuple(logits.shape)}")
        return self.prune_batch(logits[None], d2t, [tokens])[0]

    def prune_batch(self, logits: torch.Tensor, d2t: torch.Tensor | None, tokens: Sequence[Any], *,
                    max_nodes: int | None = None) -> DraftTrees:
        """B sequences at once: logits [B, D, V_draft], tokens: B sequences
        (each as in ``__call__``). One device-to-host copy, one search call
        for the batch (the engine's, or one PruneTree RPC), one host-to-device
        copy; the B trees come back in order, as DraftTrees (a sequence of
        DraftTree, and the batch's padded tensors). max_nodes: at most this
        many nodes a tree for this call, if fewer than the pruner's own (a
        generator's tree budget shared by a batch)."""
        if max_nodes is not None:
            max_nodes = whole_number(max_nodes, "max_nodes")
            if max_nodes < 0:
                raise ValueError(f"max_nodes must be >= 0, got {max_nodes}")
            max_nodes = max_nodes if max_nodes < self.params["max_nodes"] else None
        if not isinstance(logits, torch.Tensor):
            raise TypeError(f"logits must be a torch.Tensor [B, D, V_draft], got {type(logits).__name__}")
        if logits.ndim != 3 or not (logits.shape[1] and logits.shape[2]):
            raise ValueError(f"logits must be [B, D, V_draft] with D >= 1 levels and V_draft >= 1 ids, "
                             f"got shape {tuple(logits.shape)}")
        if d2t is not None and not isinstance(d2t, torch.Tensor):
            raise TypeError(f"d2t must be a torch.Tensor [V_draft] (or None), got {type(d2t).__name__}")
        if d2t is not None and (d2t.ndim != 1 or d2t.shape[0] < logits.shape[2]):
            raise ValueError(f"d2t must be [V_draft] = [{logits.shape[2]}], got shape {tuple(d2t.shape)}")
        if len(tokens) != logits.shape[0]:
            raise ValueError(f"{logits.shape[0]} lattices but {len(tokens)} token sequences")
        tm = PruneTiming()
        self.timing = tm
        self.stats.calls += len(tokens)
        t0 = time.perf_counter()
        packed = self._lattices(logits, d2t)
        contexts = [host_ids(t) for t in tokens]
        t1 = time.perf_counter()
        tm.topk = t1 - t0
        trees = self._search(contexts, packed, tm, max_nodes)
        t2 = time.perf_counter()
        out = self._staging.trees(trees, logits.device)
        tm.tensors = time.perf_counter() - t2
        return out

    def _d2t(self, d2t: torch.Tensor, device: torch.device) -> torch.Tensor:
        c = self._d2t_cache
        if c is not None and c[0] is d2t and c[1].device == device:
            return c[1]
        m = d2t.to(device=device, dtype=torch.int64)
        self._d2t_cache = (d2t, m)
        return m

    def _lattices(self, logits: torch.Tensor, d2t: torch.Tensor | None) -> np.ndarray:
        """The batch's lattices on the host as int32 [B, D, 2K]: per level the
        K target ids, then the bits of their float32 probabilities. A fixed
        sequence of kernels (top-k, softmax, the d2t map, the packing), on a
        GPU replayed as one CUDA graph per shape, one copy into a reusable
        pinned buffer, one wait."""
        k = min(self.topk, logits.shape[-1])
        d2t_dev = None if d2t is None else self._d2t(d2t, logits.device)
        with torch.no_grad():
            if self._graphs is not None and logits.device.type == "cuda":
                packed = self._graphs.run(pack_lattices, logits, d2t_dev, k, self.temperature)
            else:
                packed = pack_lattices(logits, d2t_dev, k, self.temperature)
            return self._lattice_staging.to_host(packed)

    def _eos(self, trie_eos: int | None, vocab: int) -> int:
        e = self._eos_param if self._eos_param is not None else trie_eos
        if e is None or e < 0 or e >= vocab:
            return -1
        return int(e)

    def _params_for(self, ngram_weight: float, eos: int, depth: int = 0, max_nodes: int | None = None
                    ) -> dict[str, Any]:
        """The search parameters (weights cut to ``depth`` when nonzero; max_nodes
        when given), made once per combination."""
        key = (ngram_weight, eos, depth, max_nodes)
        p = self._param_cache.get(key)
        if p is None:
            p = dict(self.params, ngram_weight=ngram_weight, eos_token_id=eos)
            if max_nodes is not None:
                p["max_nodes"] = max_nodes
            for name in ("level_weights", "logit_weights"):
                if depth and p[name] is not None:
                    p[name] = p[name][:depth]
            p = self._param_cache[key] = p
        return p

    def _plan(self, lat: Any, ngram_weight: float, eos: int, max_nodes: int | None, among: np.ndarray | None = None
              ) -> tuple[list[_Rows], np.ndarray | None]:
        """The searches of a batch's lattices (``among``: those rows only):
        groups of rows with their parameters, one unless level or logit
        weights are given and the depths differ (weights are cut to each
        lattice's depth), and the rows the trie cannot serve (None: none)."""
        weighted = self.params["level_weights"] is not None or self.params["logit_weights"] is not None
        if among is None and not weighted and lat.served == lat.batch:  # the common case, without numpy
            return [_Rows(None, self._params_for(ngram_weight, eos, 0, max_nodes))], None
        depths = lat.depths
        sel = np.arange(lat.batch) if among is None else among
        ok = depths[sel] > 0
        rows, unserved = sel[ok], (None if ok.all() else sel[~ok])
        if not rows.size:
            return [], unserved
        if not weighted:
            return [_Rows(rows, self._params_for(ngram_weight, eos, 0, max_nodes))], unserved
        return [_Rows(rows[depths[rows] == d], self._params_for(ngram_weight, eos, int(d), max_nodes))
                for d in np.unique(depths[rows])], unserved

    def _no_ngram(self, contexts: list[Any], packed: np.ndarray, trees: Any, rows: np.ndarray, eos: int,
                  max_nodes: int | None) -> None:
        """Rows no trie of the configured vocabulary can serve (an unknown
        root): the n-gram-free search with no trie, over every id of those
        lattices."""
        order = self._context_order()
        wide = _engine.LatticeBatch(contexts, packed, order, 1 << 62)
        need = int(max(wide.max_ids[rows].max(), self.vocab_size - 1)) + 1
        lat = _engine.LatticeBatch(contexts, packed, order, need)
        groups, unserved = self._plan(lat, 0.0, eos if eos < need else -1, max_nodes, among=rows)
        if unserved is not None:
            raise ValueError(f"tokens[{int(unserved[0])}]: the root (the last token) is not a token id")
        no_trie = _engine.NoTrie(need)
        for g in groups:
            lat.prune(no_trie, trees, g.rows, **g.params)


# ---- in process ----------------------------------------------------------------

class LocalPruner(_PrunerBase):
    """Prunes with a trie in this process (``NgramIndex``).

    trie: a trie file path, an open NgramIndex, or ``_engine.NoTrie(vocab_size)``
    (no trie: the drafter alone, as with ngram_weight 0). tokenizer /
    tokenizer_fingerprint: the model's tokenizer (spec) or its fingerprint;
    checked once against the trie's header (TokenizerMismatchError).
    Other keywords: the search parameters of ``NgramIndex.prune`` plus topk
    (candidates per level, DART: 25), temperature (of the softmax over the k
    logits, DART: 1) and cuda_graphs (default True: on a GPU the top-k
    kernels are replayed as one CUDA graph per lattice shape; False launches
    them one by one).
    """

    def __init__(self, trie: str | Path | NgramIndex, *, tokenizer: Any = None,
                 tokenizer_fingerprint: str | None = None, **params: Any) -> None:
        super().__init__(**params)
        if isinstance(trie, _engine.NoTrie):
            self.index: NgramIndex | None = None
            self._trie: Any = trie
            self.info: dict[str, Any] = {}
            self.order = trie.order
            self.vocab_size = trie.vocab_size
            self.eos_token_id = self._eos(None, self.vocab_size)
            return
        self.index = trie if isinstance(trie, NgramIndex) else NgramIndex.open(trie)
        self._trie = self.index.engine
        self.info = self.index.info()
        fp = tokenizer_fingerprint or (model_fingerprint(tokenizer) if tokenizer is not None else None)
        check_fingerprint(self.info, fp, str(self.info.get("path", trie)))
        self.order = self.index.order
        self.vocab_size = self.index.vocab_size
        self.eos_token_id = self._eos(self.index.eos_id, self.vocab_size)

    def _search(self, contexts: list[Any], packed: np.ndarray, tm: PruneTiming, max_nodes: int | None) -> Any:
        t0 = time.perf_counter()
        lat = _engine.LatticeBatch(contexts, packed, self.order, self.vocab_size)
        trees = _engine.TreeBatch(lat.batch)
        groups, unserved = self._plan(lat, self.params["ngram_weight"], self.eos_token_id, max_nodes)
        for g in groups:
            lat.prune(self._trie, trees, g.rows, **g.params)
        if unserved is not None:
            self._no_ngram(contexts, packed, trees, unserved, self.eos_token_id, max_nodes)
        tm.search = time.perf_counter() - t0
        tm.source = "trie"
        return trees


# ---- over gRPC -----------------------------------------------------------------

class RemotePruner(HostLink, _PrunerBase):
    """Prunes on a trie host (``ngram-serve``), with a local fallback.

    targets: "host:port" or several (balanced by ngram_service.NgramClient).
    deadline: seconds per call (default 5 ms). On a timeout or any RPC
    error the call prunes locally without the n-gram (the same search with
    ngram_weight 0), counts the event in ``stats`` and leaves the host alone
    for a back-off (backoff_initial, doubling up to backoff_max seconds;
    reset by a success) before trying it again. Decoding never waits on a
    dead host longer than one deadline per back-off.

    transport: how the PruneTree call crosses to the host: "auto" (the
    native grpc++ client where this install has it, else grpcio), "native"
    or "python" (``NgramClient``'s transport, docs/DART_CLIENT.md).

    The host's tokenizer fingerprint is checked once against the model's
    (tokenizer spec or tokenizer_fingerprint): at construction when the host
    answers, else on the first contact. A mismatch raises
    TokenizerMismatchError at construction; found later it switches the
    pruner to the fallback for good (``stats.last_error`` says why). The
    fingerprint also travels with every request (the host refuses a
    mismatch with FAILED_PRECONDITION).

    Other keywords: as LocalPruner's (the search parameters, topk,
    temperature, cuda_graphs). The host's keywords and their defaults are
    HostLink.KEYWORDS.
    """

    def __init__(self, targets: str | Sequence[str], **kwargs: Any) -> None:
        host = HostLink.take_keywords(kwargs)
        super().__init__(**kwargs)
        self._connect(targets, **host)

    def _context_order(self) -> int:
        # Before the first contact the order is unknown: keep enough context for any host.
        return self.order if self.info is not None else _engine.MAX_ORDER

    def _host_info(self, info: dict[str, Any]) -> None:
        self.order = int(info["order"])
        self.vocab_size = int(info["vocab_size"])
        self.eos_token_id = self._eos(info.get("eos_id"), self.vocab_size)

    def _search(self, contexts: list[Any], packed: np.ndarray, tm: PruneTiming, max_nodes: int | None) -> Any:
        trees = self._through_host(len(contexts), lambda: self._remote(contexts, packed, tm, max_nodes),
                                   lambda: self._fallback(contexts, packed, max_nodes), tm)
        tm.source = "host" if tm.remote else "drafter"
        return trees

    def _remote(self, contexts: list[Any], packed: np.ndarray, tm: PruneTiming, max_nodes: int | None) -> Any:
        """One PruneTree RPC for every lattice the host can serve (one per
        distinct depth when level weights are given); a lattice whose root
        the host does not know is pruned here without the n-gram."""
        t0 = time.perf_counter()
        lat = _engine.LatticeBatch(contexts, packed, self.order, self.vocab_size)
        trees = _engine.TreeBatch(lat.batch)
        groups, unserved = self._plan(lat, self.params["ngram_weight"], self.eos_token_id, max_nodes)
        for g in groups:
            # The engine's codec writes the head each call: beside the RPC, a cache of heads saves nothing.
            req = lat.request(self.client.prune_tree_head(g.params), g.rows)
            t1 = time.perf_counter()
            resp = self.client.prune_tree_bytes(req, timeout=self.deadline)
            t2 = time.perf_counter()
            trees.decode(resp, g.rows)
            t3 = time.perf_counter()
            tm.encode += t1 - t0
            tm.call += t2 - t1
            tm.decode += t3 - t2
            t0 = t3
            self.stats.remote_ok += lat.batch if g.rows is None else int(g.rows.size)
        if unserved is not None:
            self.stats.errors["OUT_OF_VOCAB"] = self.stats.errors.get("OUT_OF_VOCAB", 0) + unserved.size
            self.stats.last_error = "the root token is outside the host's vocabulary"
            self.stats.fallbacks += unserved.size
            t4 = time.perf_counter()
            self._no_ngram(contexts, packed, trees, unserved, self.eos_token_id, max_nodes)
            tm.search += time.perf_counter() - t4
        return trees

    def _fallback(self, contexts: list[Any], packed: np.ndarray, max_nodes: int | None) -> Any:
        """The host's request without the n-gram (the tree it would return
        with ngram_weight 0); before any contact, the n-gram-free search over
        every id of the request."""
        n = len(contexts)
        trees = _engine.TreeBatch(n)
        if self.info is None:
            self._no_ngram(contexts, packed, trees, np.arange(n), self._eos(None, 1 << 31), max_nodes)
            return trees
        lat = _engine.LatticeBatch(contexts, packed, self.order, self.vocab_size)
        groups, unserved = self._plan(lat, 0.0, self.eos_token_id, max_nodes)
        no_trie = _engine.NoTrie(self.vocab_size)
        for g in groups:
            lat.prune(no_trie, trees, g.rows, **g.params)
        if unserved is not None:
            self._no_ngram(contexts, packed, trees, unserved, self.eos_token_id, max_nodes)
        return trees
