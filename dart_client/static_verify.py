"""The target's forward over a static KV cache: what ``kv_cache="static"``
runs (SpeculativeGenerator), for tree verification and the one-token
autoregressive baseline alike.

Everything a step needs lives in buffers allocated once per generator (and
grown, rarely, when a call needs more rows or positions): the KV cache
(``kv_cache.StaticKVCache``), the additive attention mask, and with fixed
shapes the input ids, positions and write positions. A forward

- writes its T entries in place behind the context (no concatenation),
- reads a mask filled in place: row b's query i sees the row's own context
  (cache positions < lens[b]) and, among the T new entries, those the
  tree's ancestor mask allows (a causal row of one for a one-token step),
- and the generator's acceptance then moves the accepted entries into
  place with one gather and one scatter for every layer together.

With ``fixed_shapes`` every forward has a shape from a small set: T padded
up to a bucket of ``TREE_BUCKETS`` (padding nodes sit at the row's length,
see only themselves and are never accepted) and the attention over the
whole capacity (masked past each row's entries). That is what a CUDA graph
needs: with ``cuda_graphs`` (CUDA only) each (rows, bucket) forward is
captured once and replayed, one launch per step instead of one per kernel.
Without CUDA graphs, fixed shapes run eagerly (the CPU tests check that
path's tokens against the dynamic cache's). A target whose captured
tensors it replaces between calls says so by changing ``graph_epoch``
(oracle.OracleTarget does); the graphs are then captured again.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import torch

from dart_client.kv_cache import CacheOverflowError, StaticKVCache
from dart_client.tree_budget import TREE_BUCKETS

__all__ = ["KV_CACHES", "TREE_BUCKETS", "StaticTarget"]

log = logging.getLogger(__name__)

#: The kinds of KV cache a generator keeps (SpeculativeGenerator's kv_cache).
KV_CACHES = ("dynamic", "static")

#: A capacity the generator sizes is a multiple of this: the mask's rows then start at aligned
#: addresses, which CUDA's attention kernels need to read the mask in place.
CAPACITY_STEP = 64

def bucket_of(n: int, buckets: tuple[int, ...] = TREE_BUCKETS) -> int:
    """The smallest bucket >= n (n itself past the last)."""
    for b in buckets:
        if b >= n:
            return b
    return n


class StaticTarget:
    """``forward`` (the generator's call of its target: ids, cache, positions,
    mask, keep, hidden) over a StaticKVCache of ``text_config``'s shape.

    capacity: the cache's positions; None: sized for each generate call
    (prompt + new tokens + the largest bucket) and grown when a forward
    needs more; an int: fixed, a forward past it raises CacheOverflowError.
    fixed_shapes: pad to buckets and attend over the whole capacity
    (default: what cuda_graphs needs). cuda_graphs: capture each bucket's
    forward once (CUDA devices only; ValueError elsewhere)."""

    def __init__(self, target: Any, forward: Callable[..., Any], text_config: Any, *, dtype: torch.dtype,
                 device: torch.device, cache_kw: str, capacity: int | None = None, cuda_graphs: bool = False,
                 fixed_shapes: bool | None = None, buckets: tuple[int, ...] = TREE_BUCKETS) -> None:
        if cuda_graphs and device.type != "cuda":
            raise ValueError(f"CUDA graphs need a CUDA device; the target is on {device} (leave cuda_graphs off "
                             "there: the static cache runs eagerly)")
        if fixed_shapes is False and cuda_graphs:
            raise ValueError("CUDA graphs need fixed shapes")
        if capacity is not None and capacity < 1:
            raise ValueError(f"kv capacity must be >= 1, got {capacity}")
        self.target = target
        self._forward = forward
        self.config = text_config
        self.dtype, self.device = dtype, device
        self.cache_kw = cache_kw
        self.fixed_capacity = capacity
        self.cuda_graphs = cuda_graphs
        self.fixed_shapes = cuda_graphs if fixed_shapes is None else fixed_shapes
        self.buckets = tuple(sorted(buckets))
        self.cache: StaticKVCache | None = None
        self._min = torch.finfo(dtype).min
        self._mask: torch.Tensor | None = None  # additive [max_batch, 1, last bucket, capacity]
        self._ids: torch.Tensor | None = None  # fixed shapes: [max_batch, last bucket]
        self._pos: torch.Tensor | None = None
        self._index: torch.Tensor | None = None  # [last bucket]: where the entries go
        self._arange: torch.Tensor | None = None  # [capacity]
        self._graphs: dict[tuple[int, int, bool], tuple[Any, torch.Tensor, tuple[torch.Tensor, ...] | None]] = {}
        self._pool: Any = None
        self._epoch = getattr(target, "graph_epoch", None)
        self.captures = 0  # graphs captured (tests, benchmarks)

    # -- buffers ---------------------------------------------------------------------------------

    def begin(self, batch: int, positions: int) -> StaticKVCache:
        """Before a generate call of ``batch`` rows that may write up to
        ``positions`` entries: the cache, emptied (allocated or grown here)."""
        need = _round_up(positions + self.buckets[-1])
        if self.fixed_capacity is not None:
            need = self.fixed_capacity
        if self.cache is None:
            self.cache = StaticKVCache.for_model(self.config, need, max_batch=batch, dtype=self.dtype,
                                                 device=self.device)
            self._buffers()
        elif need > self.cache.capacity or batch > self.cache.max_batch:
            self._grow(max(need, self.cache.capacity), batch)
        self.cache.reset(batch)
        return self.cache

    def _buffers(self) -> None:
        """(Re)allocates the mask and input buffers for the cache's size; the
        graphs, which read the old addresses, are dropped."""
        assert self.cache is not None
        b, c, t = self.cache.max_batch, self.cache.capacity, self.buckets[-1]
        self._mask = torch.full((b, 1, t, c), self._min, dtype=self.dtype, device=self.device)
        self._arange = torch.arange(c, device=self.device)
        if self.fixed_shapes:
            self._ids = torch.zeros(b, t, dtype=torch.long, device=self.device)
            self._pos = torch.zeros(b, t, dtype=torch.long, device=self.device)
            self._index = torch.zeros(t, dtype=torch.long, device=self.device)
        self._drop_graphs()

    def _drop_graphs(self) -> None:
        # The pool goes with its graphs: a later capture into a pool whose graphs
        # are gone but whose blocks are still referenced trips the allocator.
        self._graphs.clear()
        self._pool = None

    def _grow(self, capacity: int, batch: int) -> None:
        assert self.cache is not None
        if capacity > self.cache.capacity and self.fixed_capacity is not None:
            raise CacheOverflowError(f"the static KV cache holds {self.cache.capacity} positions; this forward needs "
                                     f"{capacity} (raise the capacity: kv_capacity=, --kv-capacity)")
        self.cache.grow(_round_up(capacity + capacity // 2) if capacity > self.cache.capacity else self.cache.capacity,
                        max(batch, self.cache.max_batch))
        self._buffers()

    # -- forwards -----------------------------------------------------------------------------

    def prefill(self, ids: torch.Tensor, lens: list[int], keep: Any, hidden: bool) -> Any:
        """The prompts (right-padded [B, width]) at positions 0 .., each row
        seeing its own tokens; eager, never captured (one per call)."""
        assert self.cache is not None
        b, width = ids.shape
        if width > self.cache.capacity:
            if self.fixed_capacity is not None:
                raise CacheOverflowError(f"the static KV cache holds {self.cache.capacity} positions; the prompt "
                                         f"has {width} (raise the capacity: kv_capacity=, --kv-capacity)")
            self._grow(width, b)
        ar = torch.arange(width, device=self.device)
        ln = torch.tensor(lens, device=self.device)
        allowed = (ar[None, None] <= ar[None, :, None]) & (ar[None, None] < ln[:, None, None])
        mask = torch.zeros(allowed.shape, dtype=self.dtype, device=self.device).masked_fill_(~allowed, self._min)
        self.cache.write_at(0)
        out = self._forward(ids, self.cache, position_ids=ar[None].expand(b, -1), mask=mask[:, None], keep=keep,
                            hidden=hidden)
        self.cache.length = width
        return out

    def forward(self, ids: torch.Tensor, position_ids: torch.Tensor, tree_mask: torch.Tensor, lens: torch.Tensor,
                start: int, hidden: bool) -> Any:
        """T new tokens per row (ids, position_ids [B, T]) written at cache
        positions start .. start + T - 1; row b sees its first lens[b]
        entries and, among the new ones, tree_mask[b] ([B, T, T] bool).
        Returns the forward's output (logits [B, T, V], hidden_states when
        ``hidden``); the cache then holds start + T positions."""
        assert self.cache is not None
        b, n = ids.shape
        if self.fixed_shapes and n <= self.buckets[-1]:
            out = self._fixed(ids, position_ids, tree_mask, lens, start, hidden)
        else:
            out = self._eager(ids, position_ids, tree_mask, lens, start, hidden)
        self.cache.length = start + n
        return out

    def _eager(self, ids: torch.Tensor, position_ids: torch.Tensor, tree_mask: torch.Tensor, lens: torch.Tensor,
               start: int, hidden: bool) -> Any:
        """Attention over [0, start + T): the cache's view, the mask buffer's."""
        assert self.cache is not None
        b, n = ids.shape
        end = start + n
        if end > self.cache.capacity and self.fixed_capacity is None:
            self._grow(end, b)
        mask = None
        if b > 1 or n > 1:  # one row, one token: every entry it attends to is its own (no mask)
            mask = self._fill_mask(b, n, end, lens, start, tree_mask)
        self.cache.write_at(start)
        return self._forward(ids, self.cache, position_ids=position_ids, mask=mask, hidden=hidden)

    def _fill_mask(self, b: int, n: int, kv: int, lens: torch.Tensor, start: int,
                   tree_mask: torch.Tensor) -> torch.Tensor:
        """The additive mask [b, 1, n, kv], filled in place (the buffer's
        view when it fits, else a new tensor)."""
        assert self._mask is not None and self._arange is not None
        if n <= self._mask.shape[2] and kv <= self._mask.shape[3] and b <= self._mask.shape[0]:
            m = self._mask[:b, :, :n, :kv]
        else:
            m = torch.empty(b, 1, n, kv, dtype=self.dtype, device=self.device)
        ctx = self._arange[:start][None] < lens[:, None]  # [b, start]
        m[:, 0, :, :start] = torch.where(ctx, 0.0, self._min)[:, None, :]
        m[:, 0, :, start:start + n] = torch.where(tree_mask, 0.0, self._min)
        if kv > start + n:
            m[:, 0, :, start + n:].fill_(self._min)
        return m

    def _fixed(self, ids: torch.Tensor, position_ids: torch.Tensor, tree_mask: torch.Tensor, lens: torch.Tensor,
               start: int, hidden: bool) -> Any:
        """Padded to a bucket, attention over the whole capacity; captured
        and replayed with cuda_graphs."""
        assert self.cache is not None
        b, n = ids.shape
        t = bucket_of(n, self.buckets)
        if start + t > self.cache.capacity or b > self.cache.max_batch:
            if start + t > self.cache.capacity and self.fixed_capacity is not None:
                raise CacheOverflowError(f"the static KV cache holds {self.cache.capacity} positions; this forward "
                                         f"needs {start + t} (a tree of {n} nodes padded to {t}; raise the capacity: "
                                         "kv_capacity=, --kv-capacity)")
            self._grow(start + t, b)
        assert self._ids is not None and self._pos is not None and self._index is not None
        c = self.cache.capacity
        ids_buf, pos_buf, index = self._ids[:b, :t], self._pos[:b, :t], self._index[:t]
        ids_buf.zero_()
        ids_buf[:, :n] = ids
        pos_buf.copy_(lens[:, None].expand(b, t))  # padding nodes: at the row's length
        pos_buf[:, :n] = position_ids
        torch.add(self._arange[:t], start, out=index)  # type: ignore[index]
        tm = tree_mask
        if t > n:  # padding nodes see only themselves; no real node sees them
            tm = torch.eye(t, dtype=torch.bool, device=self.device).repeat(b, 1, 1)
            tm[:, :n, :n] = tree_mask
        mask = self._fill_mask(b, t, c, lens, start, tm)
        self.cache.write_index(index)
        try:
            if self.cuda_graphs:
                return self._replay((b, t, hidden), ids_buf, pos_buf, mask, hidden, n)
            out = self._forward(ids_buf, self.cache, position_ids=pos_buf, mask=mask, hidden=hidden)
        finally:
            self.cache.write_at(start + t)
        return _cut(out, n, self.cache_kw)

    # -- CUDA graphs ------------------------------------------------------------------------------

    def _replay(self, key: tuple[int, int, bool], ids: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor,
                hidden: bool, n: int) -> Any:
        epoch = getattr(self.target, "graph_epoch", None)
        if epoch != self._epoch:  # the target replaced tensors the graphs read
            self._drop_graphs()
            self._epoch = epoch
        entry = self._graphs.get(key)
        assert self.cache is not None
        run = lambda: self._forward(ids, self.cache, position_ids=pos, mask=mask, hidden=hidden)  # noqa: E731
        if entry is None:
            try:
                entry = self._capture(run)
            except RuntimeError as e:
                self.cuda_graphs = False
                log.warning("CUDA graphs are off for this target (%s): its forwards run eagerly (fixed shapes)", e)
                return _cut(run(), n, self.cache_kw)
            self._graphs[key] = entry
        graph, logits, states = entry
        with torch.cuda.device(self.device):
            graph.replay()
        out = SimpleNamespace(logits=logits, hidden_states=states)
        setattr(out, self.cache_kw, self.cache)
        return _cut(out, n, self.cache_kw)

    def _capture(self, run: Callable[[], Any]) -> tuple[Any, torch.Tensor, tuple[torch.Tensor, ...] | None]:
        with torch.cuda.device(self.device):
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm-up off the capture, as torch.cuda.graph asks; its entries
                for _ in range(2):  # land where the replay writes them again
                    run()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._pool):
                out = run()
            self._pool = graph.pool()
        self.captures += 1
        states = tuple(out.hidden_states) if getattr(out, "hidden_states", None) is not None else None
        return graph, out.logits, states


def _round_up(n: int) -> int:
    return -(-n // CAPACITY_STEP) * CAPACITY_STEP


def _cut(out: Any, n: int, cache_kw: str) -> Any:
    """The first n query positions of a padded forward's output."""
    if out.logits.shape[1] == n:
        return out
    cut = SimpleNamespace(logits=out.logits[:, :n])
    states = getattr(out, "hidden_states", None)
    cut.hidden_states = tuple(h[:, :n] for h in states) if states is not None else None
    setattr(cut, cache_kw, getattr(out, cache_kw, None))
    return cut
