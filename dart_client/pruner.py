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

import collections
import logging
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, overload

import numpy as np
import torch

from ngram_service import NgramIndex, _engine
from ngram_service.fingerprint import tokenizer_json_fingerprint, trie_fingerprint
from ngram_service.tree import DEFAULTS

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

log = logging.getLogger(__name__)

#: DART's production search parameters (tree_search_config.py); the
#: pruning ones are the engine's defaults, defined there once.
DART_TOPK = 25
DART_BEAM_WIDTH: int = DEFAULTS["beam_width"]
DART_MAX_NODES: int = DEFAULTS["max_nodes"]
DART_NGRAM_WEIGHT: float = DEFAULTS["ngram_weight"]


@dataclass(frozen=True)
class DraftTree:
    """DART's draft tree, as ``tree_search`` returns it (no batch dimension),
    plus each node's parent. Unpacks like DART's four outputs::

        draft_tokens, retrieve_indices, tree_mask, tree_position_ids = tree
    """

    draft_tokens: torch.Tensor  # int64 [n]; node 0 is the root (the last context token)
    retrieve_indices: torch.Tensor  # int64 [leaves, max depth + 1], root to leaf, -1 padded
    tree_mask: torch.Tensor  # bool [n, n]: row i marks node i and its ancestors
    tree_position_ids: torch.Tensor  # int64 [n]: depth of each node (0 for the root)
    parents: torch.Tensor | None = None  # int64 [n], -1 for the root (None: read from tree_mask)

    def __post_init__(self) -> None:
        if self.parents is None:  # a tree made by hand: the deepest ancestor of each node
            m = self.tree_mask
            n = m.shape[0]
            anc = m & ~torch.eye(n, dtype=torch.bool, device=m.device)
            idx = torch.arange(n, device=m.device)
            par = torch.where(anc.any(1), (anc.to(torch.int64) * idx).argmax(1), torch.full_like(idx, -1))
            object.__setattr__(self, "parents", par)

    def __iter__(self) -> Iterator[torch.Tensor]:
        return iter((self.draft_tokens, self.retrieve_indices, self.tree_mask, self.tree_position_ids))

    @property
    def n_nodes(self) -> int:
        """Nodes, the root included."""
        return int(self.draft_tokens.shape[0])


class DraftTrees(Sequence[DraftTree]):
    """The B draft trees of a batch, padded into batch tensors on one device
    (what a batched verification forward reads), and as a sequence of B
    DraftTree views of them::

        trees.tokens [B, N], trees.position_ids [B, N], trees.parents [B, N] (-1 padded),
        trees.retrieve_indices [B, L, W] (-1 padded), trees.tree_mask bool [B, N, N],
        trees.n_nodes int [B]; trees[i] -> DraftTree

    N, L and W are the batch's most nodes, most leaves and deepest path + 1;
    padding nodes have token 0, depth 0 and see only themselves.
    """

    def __init__(self, tokens: torch.Tensor, position_ids: torch.Tensor, parents: torch.Tensor,
                 retrieve_indices: torch.Tensor, tree_mask: torch.Tensor, sizes: np.ndarray) -> None:
        self.tokens = tokens
        self.position_ids = position_ids
        self.parents = parents
        self.retrieve_indices = retrieve_indices
        self.tree_mask = tree_mask
        self._sizes = sizes  # int64 [3, B] on the host: nodes, leaves, deepest path + 1
        self._views: list[DraftTree | None] = [None] * int(sizes.shape[1])

    @property
    def n_nodes(self) -> list[int]:
        """Nodes of each tree, the root included."""
        return self._sizes[0].tolist()

    def __len__(self) -> int:
        return len(self._views)

    @overload
    def __getitem__(self, i: int) -> DraftTree: ...
    @overload
    def __getitem__(self, i: slice) -> list[DraftTree]: ...
    def __getitem__(self, i: int | slice) -> DraftTree | list[DraftTree]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"tree {i} of a batch of {len(self)}")
        t = self._views[i]
        if t is None:
            n, leaves, width = (int(x) for x in self._sizes[:, i])
            t = self._views[i] = DraftTree(
                draft_tokens=self.tokens[i, :n], retrieve_indices=self.retrieve_indices[i, :leaves, :width],
                tree_mask=self.tree_mask[i, :n, :n], tree_position_ids=self.position_ids[i, :n],
                parents=self.parents[i, :n])
        return t

    @classmethod
    def unpack(cls, packed: tuple[Any, ...], device: torch.device, staged: torch.Tensor | None = None) -> DraftTrees:
        """The batch from ``_engine.TreeBatch.pack``'s result: tensors viewing
        its host array, or (``staged``: that array's used bytes copied to
        ``device``) views of the device's copy."""
        _, nbytes, sizes, nodes, ret, mask = packed
        if staged is None:  # numpy made the views: a tenth of torch's cost
            tok, pos, par = torch.from_numpy(nodes).unbind(0)
            return cls(tok, pos, par, torch.from_numpy(ret), torch.from_numpy(mask), sizes)
        b, n = nodes.shape[1:]
        words = 3 * b * n + ret.size
        tpp, r = staged[:8 * words].view(torch.int64).split_with_sizes([3 * b * n, ret.size])
        tok, pos, par = tpp.view(3, b, n).unbind(0)
        return cls(tok, pos, par, r.view(ret.shape), staged[8 * words:nbytes].view(torch.bool).view(b, n, n), sizes)

    @classmethod
    def stack(cls, trees: Sequence[DraftTree]) -> DraftTrees:
        """A batch of trees made one at a time (a pruner without prune_batch)."""
        if isinstance(trees, DraftTrees):
            return trees
        sizes = np.array([[t.n_nodes for t in trees], [t.retrieve_indices.shape[0] for t in trees],
                          [t.retrieve_indices.shape[1] for t in trees]], dtype=np.int64)
        b, (n, leaves, width) = len(trees), sizes.max(axis=1).tolist()
        dev = trees[0].draft_tokens.device
        tok = torch.zeros(b, n, dtype=torch.int64, device=dev)
        pos = torch.zeros(b, n, dtype=torch.int64, device=dev)
        par = torch.full((b, n), -1, dtype=torch.int64, device=dev)
        ret = torch.full((b, leaves, width), -1, dtype=torch.int64, device=dev)
        mask = torch.eye(n, dtype=torch.bool, device=dev).repeat(b, 1, 1)
        for i, t in enumerate(trees):
            k, (r, w) = t.n_nodes, t.retrieve_indices.shape
            tok[i, :k], pos[i, :k] = t.draft_tokens, t.tree_position_ids
            assert t.parents is not None
            par[i, :k], ret[i, :r, :w], mask[i, :k, :k] = t.parents, t.retrieve_indices, t.tree_mask
        return cls(tok, pos, par, ret, mask, sizes)


class TokenizerMismatchError(ValueError):
    """The trie was built with another tokenizer than the model's."""


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


@dataclass
class PrunerStats:
    calls: int = 0
    remote_ok: int = 0
    fallbacks: int = 0  # calls pruned locally without the n-gram
    errors: dict[str, int] = field(default_factory=dict)  # failed RPCs by gRPC status code
    skipped_backoff: int = 0  # fallbacks without an RPC (waiting out a back-off)
    last_error: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"calls": self.calls, "remote_ok": self.remote_ok, "fallbacks": self.fallbacks,
                "errors": dict(self.errors), "skipped_backoff": self.skipped_backoff, "last_error": self.last_error}


def model_fingerprint(tokenizer: Any) -> str:
    """The tokenizer fingerprint the trie header carries, for the model's
    tokenizer.json (the file, or a folder holding one). For a trie built
    from a tiktoken rank file, pass ``tokenizer_fingerprint=`` (``ngram-info``
    prints it)."""
    return tokenizer_json_fingerprint(tokenizer)


def _check_fingerprint(info: dict[str, Any], expected: str | None, where: str) -> None:
    if not expected:
        return
    have = trie_fingerprint(info)
    if not have:
        log.warning("%s: the trie records no tokenizer fingerprint; cannot check it against the model's", where)
        return
    if have != expected:
        raise TokenizerMismatchError(
            f"{where}: the trie was built with tokenizer {have[:16]}..., the model's is {expected[:16]}...: "
            "draft trees would be scored with the wrong n-grams")


# ---- shared machinery ----------------------------------------------------------

class _Rows(NamedTuple):
    """Rows of the batch searched with one set of parameters."""

    rows: np.ndarray | None  # int64 row indices; None: every row
    params: dict[str, Any]
    depth: int  # the depth the weights are cut to (0: no weights given)


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
        if topk < 1:
            raise ValueError(f"topk must be >= 1, got {topk}")
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.topk = int(topk)
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
        self._staging = _Staging()
        self._param_cache: dict[tuple[float, int, int], dict[str, Any]] = {}
        self._graphs = _LatticeGraphs() if cuda_graphs else None

    # -- subclasses --------------------------------------------------------------

    order: int = 1
    vocab_size: int = 0
    eos_token_id: int = -1

    def _search(self, contexts: list[Any], packed: np.ndarray, tm: PruneTiming) -> Any:
        """The batch's trees as an ``_engine.TreeBatch``."""
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
        if logits.ndim != 2:
            raise ValueError(f"logits must be [D, V_draft], got shape {tuple(logits.shape)}")
        return self.prune_batch(logits[None], d2t, [tokens])[0]

    def prune_batch(self, logits: torch.Tensor, d2t: torch.Tensor | None, tokens: Sequence[Any]) -> DraftTrees:
        """B sequences at once: logits [B, D, V_draft], tokens: B sequences
        (each as in ``__call__``). One device-to-host copy, one search call
        for the batch (the engine's, or one PruneTree RPC), one host-to-device
        copy; the B trees come back in order, as DraftTrees (a sequence of
        DraftTree, and the batch's padded tensors)."""
        if logits.ndim != 3:
            raise ValueError(f"logits must be [B, D, V_draft], got shape {tuple(logits.shape)}")
        if len(tokens) != logits.shape[0]:
            raise ValueError(f"{logits.shape[0]} lattices but {len(tokens)} token sequences")
        tm = PruneTiming()
        self.timing = tm
        self.stats.calls += len(tokens)
        t0 = time.perf_counter()
        packed = self._lattices(logits, d2t)
        contexts = [_host_ids(t) for t in tokens]
        t1 = time.perf_counter()
        tm.topk = t1 - t0
        trees = self._search(contexts, packed, tm)
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
                packed = self._graphs.run(self._pack, logits, d2t_dev, k, self.temperature)
            else:
                packed = self._pack(logits, d2t_dev, k, self.temperature)
            return self._staging.to_host(packed)

    @staticmethod
    def _pack(logits: torch.Tensor, d2t: torch.Tensor | None, k: int, temperature: float) -> torch.Tensor:
        vals, idx = torch.topk(logits, k, dim=-1)
        vals = vals.float()
        probs = torch.softmax(vals / temperature if temperature != 1.0 else vals, dim=-1)
        if d2t is not None:
            idx = idx + d2t[idx]
        return torch.cat((idx.to(torch.int32), probs.view(torch.int32)), dim=-1)

    def _eos(self, trie_eos: int | None, vocab: int) -> int:
        e = self._eos_param if self._eos_param is not None else trie_eos
        if e is None or e < 0 or e >= vocab:
            return -1
        return int(e)

    def _params_for(self, ngram_weight: float, eos: int, depth: int = 0) -> dict[str, Any]:
        """The search parameters (weights cut to ``depth`` when nonzero), made once per combination."""
        key = (ngram_weight, eos, depth)
        p = self._param_cache.get(key)
        if p is None:
            p = dict(self.params, ngram_weight=ngram_weight, eos_token_id=eos)
            for name in ("level_weights", "logit_weights"):
                if depth and p[name] is not None:
                    p[name] = p[name][:depth]
            p = self._param_cache[key] = p
        return p

    def _plan(self, lat: Any, ngram_weight: float, eos: int, among: np.ndarray | None = None
              ) -> tuple[list[_Rows], np.ndarray | None]:
        """The searches of a batch's lattices (``among``: those rows only):
        groups of rows with their parameters, one unless level or logit
        weights are given and the depths differ (weights are cut to each
        lattice's depth), and the rows the trie cannot serve (None: none)."""
        weighted = self.params["level_weights"] is not None or self.params["logit_weights"] is not None
        if among is None and not weighted and lat.served == lat.batch:  # the common case, without numpy
            return [_Rows(None, self._params_for(ngram_weight, eos), 0)], None
        depths = lat.depths
        sel = np.arange(lat.batch) if among is None else among
        ok = depths[sel] > 0
        rows, unserved = sel[ok], (None if ok.all() else sel[~ok])
        if not rows.size:
            return [], unserved
        if not weighted:
            return [_Rows(rows, self._params_for(ngram_weight, eos), 0)], unserved
        return [_Rows(rows[depths[rows] == d], self._params_for(ngram_weight, eos, int(d)), int(d))
                for d in np.unique(depths[rows])], unserved

    def _no_ngram(self, contexts: list[Any], packed: np.ndarray, trees: Any, rows: np.ndarray, eos: int) -> None:
        """Rows no trie of the configured vocabulary can serve (an unknown
        root): the n-gram-free search with no trie, over every id of those
        lattices."""
        order = self._context_order()
        wide = _engine.PackedLattices(contexts, packed, order, 1 << 62)
        need = int(max(wide.max_ids[rows].max(), self.vocab_size - 1)) + 1
        lat = _engine.PackedLattices(contexts, packed, order, need)
        groups, unserved = self._plan(lat, 0.0, eos if eos < need else -1, among=rows)
        if unserved is not None:
            raise ValueError(f"tokens[{int(unserved[0])}]: the root (the last token) is not a token id")
        no_trie = _engine.NoTrie(need)
        for g in groups:
            lat.prune(no_trie, trees, g.rows, **g.params)


class _LatticeGraphs:
    """_pack's kernels captured as a CUDA graph per input (shape, dtype,
    device, d2t map, k, temperature) and replayed: one launch where eager
    PyTorch launches each kernel from Python. The logits are copied into the
    graph's own input first. The most recent kMaxGraphs inputs are kept. A
    capture that fails (an old driver, a capture already under way) turns
    the graphs off for this pruner, with a warning: the eager kernels give
    the same lattices."""

    kMaxGraphs = 8

    def __init__(self) -> None:
        self._graphs: collections.OrderedDict[tuple[Any, ...], tuple[Any, torch.Tensor, torch.Tensor]] = \
            collections.OrderedDict()
        self.enabled = True

    def run(self, pack: Callable[..., torch.Tensor], logits: torch.Tensor, d2t: torch.Tensor | None, k: int,
            temperature: float) -> torch.Tensor:
        if not self.enabled:
            return pack(logits, d2t, k, temperature)
        key = (tuple(logits.shape), logits.dtype, logits.device, None if d2t is None else d2t.data_ptr(), k,
               temperature)
        entry = self._graphs.get(key)
        if entry is None:
            try:
                entry = self._capture(pack, logits, d2t, k, temperature)
            except RuntimeError as e:
                self.enabled = False
                log.warning("CUDA graphs are off for this pruner (%s): launching the top-k kernels one by one", e)
                return pack(logits, d2t, k, temperature)
            self._graphs[key] = entry
            if len(self._graphs) > self.kMaxGraphs:
                self._graphs.popitem(last=False)
        else:
            self._graphs.move_to_end(key)
        graph, static_in, static_out = entry
        static_in.copy_(logits)
        with torch.cuda.device(logits.device):
            graph.replay()
        return static_out

    @staticmethod
    def _capture(pack: Callable[..., torch.Tensor], logits: torch.Tensor, d2t: torch.Tensor | None, k: int,
                 temperature: float) -> tuple[Any, torch.Tensor, torch.Tensor]:
        with torch.cuda.device(logits.device):  # the capture is on the current device: make it the logits'
            static_in = logits.clone(memory_format=torch.contiguous_format)
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm-up off the capture, as torch.cuda.graph asks
                pack(static_in, d2t, k, temperature)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                static_out = pack(static_in, d2t, k, temperature)
        return graph, static_in, static_out


class _Staging:
    """Reusable host buffers between the device and the search: the lattices'
    (pinned, filled by one asynchronous copy) and the trees' (pinned, sent by
    one asynchronous copy, reused once that copy is done). On the CPU the
    lattices are read where the kernels wrote them and every call's trees get
    their own buffer (the tensors handed out view it)."""

    def __init__(self) -> None:
        self._lattice_host: torch.Tensor | None = None
        self._tree_host: torch.Tensor | None = None
        self._tree_copied: Any = None  # the event after the last copy out of _tree_host
        self._cpu_trees: np.ndarray | None = None

    @staticmethod
    def _pinned(have: torch.Tensor | None, n: int, dtype: torch.dtype) -> torch.Tensor:
        if have is not None and have.numel() >= n:
            return have
        return torch.empty(max(n, 2 * (0 if have is None else have.numel())), dtype=dtype, pin_memory=True)

    def to_host(self, packed: torch.Tensor) -> np.ndarray:
        if packed.device.type == "cpu":
            return packed.numpy()
        n = packed.numel()
        self._lattice_host = host = self._pinned(self._lattice_host, n, torch.int32)
        view = host[:n].view(packed.shape)
        view.copy_(packed, non_blocking=True)
        torch.cuda.current_stream(packed.device).synchronize()
        return view.numpy()

    def trees(self, trees: Any, device: torch.device) -> DraftTrees:
        if device.type == "cpu":
            # The last call's array is written again once no tensor views it
            # (a view holds a reference to it): a fresh one each call costs
            # its page faults.
            if self._cpu_trees is not None and sys.getrefcount(self._cpu_trees) > 2:  # the attribute, the argument
                self._cpu_trees = None
            packed = trees.pack(self._cpu_trees)
            self._cpu_trees = packed[0]
            return DraftTrees.unpack(packed, device)
        if self._tree_copied is not None:
            self._tree_copied.synchronize()
        host = self._tree_host
        packed = trees.pack(None if host is None else host.numpy())
        if host is None or packed[0].ctypes.data != host.data_ptr():  # grown: pin the new size
            self._tree_host = host = torch.empty(packed[0].size, dtype=torch.uint8, pin_memory=True)
            packed = trees.pack(host.numpy())
        staged = host[:packed[1]].to(device, non_blocking=True)
        self._tree_copied = torch.cuda.Event()
        self._tree_copied.record(torch.cuda.current_stream(device))
        return DraftTrees.unpack(packed, device, staged)


def _host_ids(tokens: Any) -> Any:
    """A context as the engine reads it: lists and arrays as they are, a
    tensor as its last MAX_ORDER ids on the host (a search reads no more)."""
    if isinstance(tokens, torch.Tensor):
        return tokens.reshape(-1)[-_engine.MAX_ORDER:].cpu().numpy()
    return tokens


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
        _check_fingerprint(self.info, fp, str(self.info.get("path", trie)))
        self.order = self.index.order
        self.vocab_size = self.index.vocab_size
        self.eos_token_id = self._eos(self.index.eos_id, self.vocab_size)

    def _search(self, contexts: list[Any], packed: np.ndarray, tm: PruneTiming) -> Any:
        t0 = time.perf_counter()
        lat = _engine.PackedLattices(contexts, packed, self.order, self.vocab_size)
        trees = _engine.TreeBatch(lat.batch)
        groups, unserved = self._plan(lat, self.params["ngram_weight"], self.eos_token_id)
        for g in groups:
            lat.prune(self._trie, trees, g.rows, **g.params)
        if unserved is not None:
            self._no_ngram(contexts, packed, trees, unserved, self.eos_token_id)
        tm.search = time.perf_counter() - t0
        tm.source = "trie"
        return trees


# ---- over gRPC -----------------------------------------------------------------

class _HostLink:
    """A trie host reached through ``NgramClient``, one attempt per call, with
    the fallback rule RemotePruner and RemoteProposer share: on a timeout or
    any RPC error the call is answered here without the host (the owner's
    fallback), the event is counted in ``stats`` and the host is left alone
    for a back-off (backoff_initial, doubling up to backoff_max seconds;
    reset by a success) before it is tried again. A tokenizer fingerprint
    mismatch raises TokenizerMismatchError at construction (the host
    answered then), or, found later, turns the host off for good
    (``stats.last_error`` says why).

    The owner sets ``stats`` (PrunerStats) before ``_connect`` and may
    override ``_host_info`` (called with the host's info at each contact)."""

    #: What a call does without the host, for the log lines.
    without_host = "pruning locally without the n-gram"
    stats: PrunerStats

    def _connect(self, targets: str | Sequence[str], *, deadline: float, fingerprint: str | None, index: str,
                 connect_timeout: float, backoff_initial: float, backoff_max: float, transport: str,
                 client_options: dict[str, Any] | None) -> None:
        from ngram_service.client import NgramClient

        self.deadline = float(deadline)
        self.connect_timeout = float(connect_timeout)
        self.backoff_initial = float(backoff_initial)
        self.backoff_max = float(backoff_max)
        self.fingerprint = fingerprint
        # One attempt: the local fallback is the retry.
        opts = {"retry_attempts": 1, "transport": transport, **(client_options or {})}
        channel_opts = list(opts.pop("options", ()))
        # Reconnect soon after the host comes back (gRPC's default waits 1 s, then up to 120 s).
        channel_opts += [("grpc.initial_reconnect_backoff_ms", 100), ("grpc.min_reconnect_backoff_ms", 100),
                         ("grpc.max_reconnect_backoff_ms", int(max(1.0, backoff_max) * 1000))]
        self.client = NgramClient(targets, index=index, tokenizer_fingerprint=fingerprint, timeout=self.deadline,
                                  with_scores=False, options=channel_opts, **opts)
        self.info: dict[str, Any] | None = None
        self._backoff = 0.0
        self._retry_at = 0.0
        self._disabled = ""
        try:
            self._contact(self.connect_timeout)
        except TokenizerMismatchError:
            self.client.close()
            raise
        except Exception as e:  # noqa: BLE001 (host down at start: decode without it for now)
            self._failed(e)

    @property
    def transport(self) -> str:
        """The tree call's transport: "native" or "python"."""
        return self.client.transport

    @property
    def remote_available(self) -> bool:
        return self.info is not None and not self._disabled

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _host_info(self, info: dict[str, Any]) -> None:
        """What the owner reads from the host's info (order, vocabulary, EOS)."""

    def _contact(self, timeout: float) -> None:
        info = self.client.info(timeout=timeout)
        _check_fingerprint(info, self.fingerprint, f"trie host {self.client.targets}")
        self.info = info
        self._host_info(info)

    def _failed(self, e: BaseException) -> None:
        code = _status_name(e)
        self.stats.errors[code] = self.stats.errors.get(code, 0) + 1
        self.stats.last_error = f"{code}: {_details(e)}"
        was_up = self._backoff == 0
        self._backoff = self.backoff_initial if was_up else min(self.backoff_max, 2 * self._backoff)
        self._retry_at = time.monotonic() + self._backoff
        # One warning per outage; the retries that fail again are debug lines.
        (log.warning if was_up else log.debug)(
            "trie host %s: %s; %s, retrying in %.3f s",
            self.client.targets, self.stats.last_error, self.without_host, self._backoff)

    def _through_host(self, n: int, remote: Callable[[], Any], fallback: Callable[[], Any], tm: Any) -> Any:
        """remote() (the host's answer to a call of n trees) unless the host
        is off or backing off, else, or when it fails, fallback(). Sets
        tm.transport (the round trip: the time in remote() less tm.search),
        tm.remote, and adds the fallback's time to tm.search."""
        if not self._disabled and time.monotonic() >= self._retry_at:
            t0 = time.perf_counter()
            try:
                if self.info is None:  # first contact after a failed start: order, vocab, fingerprint
                    self._contact(max(self.deadline, 0.02))
                trees = remote()
                tm.transport = time.perf_counter() - t0 - tm.search
                tm.remote = True
                if self._backoff:
                    log.warning("trie host %s: back (after %s)", self.client.targets, self.stats.last_error)
                self._backoff = 0.0
                return trees
            except TokenizerMismatchError as e:
                self._disabled = str(e)
                self.stats.last_error = self._disabled
                log.error("%s; the host is off for this client", e)
            except Exception as e:  # noqa: BLE001 (any failure: fall back, never stop decoding)
                self._failed(e)
            tm.transport = time.perf_counter() - t0 - tm.search
        else:
            self.stats.skipped_backoff += n
        self.stats.fallbacks += n
        t1 = time.perf_counter()
        trees = fallback()
        tm.search += time.perf_counter() - t1
        return trees


class RemotePruner(_HostLink, _PrunerBase):
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
    temperature, cuda_graphs).
    """

    def __init__(
        self,
        targets: str | Sequence[str],
        *,
        deadline: float = 0.005,
        tokenizer: Any = None,
        tokenizer_fingerprint: str | None = None,
        index: str = "",
        connect_timeout: float = 2.0,
        backoff_initial: float = 0.05,
        backoff_max: float = 5.0,
        transport: str = "auto",
        client_options: dict[str, Any] | None = None,
        **params: Any,
    ) -> None:
        super().__init__(**params)
        self._heads: dict[tuple[int, int], bytes] = {}  # PruneTreeRequest heads by (weights' depth, EOS id)
        fp = tokenizer_fingerprint or (model_fingerprint(tokenizer) if tokenizer is not None else None)
        self._connect(targets, deadline=deadline, fingerprint=fp, index=index, connect_timeout=connect_timeout,
                      backoff_initial=backoff_initial, backoff_max=backoff_max, transport=transport,
                      client_options=client_options)

    def _context_order(self) -> int:
        # Before the first contact the order is unknown: keep enough context for any host.
        return self.order if self.info is not None else _engine.MAX_ORDER

    def _host_info(self, info: dict[str, Any]) -> None:
        self.order = int(info["order"])
        self.vocab_size = int(info["vocab_size"])
        self.eos_token_id = self._eos(info.get("eos_id"), self.vocab_size)

    def _search(self, contexts: list[Any], packed: np.ndarray, tm: PruneTiming) -> Any:
        trees = self._through_host(len(contexts), lambda: self._remote(contexts, packed, tm),
                                   lambda: self._fallback(contexts, packed), tm)
        tm.source = "host" if tm.remote else "drafter"
        return trees

    def _remote(self, contexts: list[Any], packed: np.ndarray, tm: PruneTiming) -> Any:
        """One PruneTree RPC for every lattice the host can serve (one per
        distinct depth when level weights are given); a lattice whose root
        the host does not know is pruned here without the n-gram."""
        t0 = time.perf_counter()
        lat = _engine.PackedLattices(contexts, packed, self.order, self.vocab_size)
        trees = _engine.TreeBatch(lat.batch)
        groups, unserved = self._plan(lat, self.params["ngram_weight"], self.eos_token_id)
        for g in groups:
            head = self._heads.get((g.depth, self.eos_token_id))
            if head is None:
                head = self._heads[(g.depth, self.eos_token_id)] = self.client.prune_tree_head(g.params)
            req = lat.request(head, g.rows)
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
            self._no_ngram(contexts, packed, trees, unserved, self.eos_token_id)
            tm.search += time.perf_counter() - t4
        return trees

    def _fallback(self, contexts: list[Any], packed: np.ndarray) -> Any:
        """The host's request without the n-gram (the tree it would return
        with ngram_weight 0); before any contact, the n-gram-free search over
        every id of the request."""
        n = len(contexts)
        trees = _engine.TreeBatch(n)
        if self.info is None:
            self._no_ngram(contexts, packed, trees, np.arange(n), self._eos(None, 1 << 31))
            return trees
        lat = _engine.PackedLattices(contexts, packed, self.order, self.vocab_size)
        groups, unserved = self._plan(lat, 0.0, self.eos_token_id)
        no_trie = _engine.NoTrie(self.vocab_size)
        for g in groups:
            lat.prune(no_trie, trees, g.rows, **g.params)
        if unserved is not None:
            self._no_ngram(contexts, packed, trees, unserved, self.eos_token_id)
        return trees


def _status_name(e: BaseException) -> str:
    code = getattr(e, "code", None)
    if callable(code):
        try:
            c = code()
            return getattr(c, "name", str(c))
        except Exception:  # noqa: BLE001
            pass
    return type(e).__name__


def _details(e: BaseException) -> str:
    d = getattr(e, "details", None)
    if callable(d):
        try:
            return str(d())
        except Exception:  # noqa: BLE001
            pass
    return str(e)
