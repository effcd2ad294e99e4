"""The target's KV cache: the surgery a speculative step does on it.

Two kinds, the same four operations (cut to a length, the accepted tree
nodes moved behind each row's context, rows dropped, the length):

- a transformers ``DynamicCache`` (its ``layers``, transformers >= 4.56, or
  the older ``key_cache`` / ``value_cache`` lists), tensors [B, H, T, d]
  that every forward grows by concatenation;
- ``StaticKVCache``: one tensor preallocated for every layer's keys and
  values at a fixed capacity; a forward writes its T new entries in place
  at a given position, compaction is one gather and one scatter for all
  layers together, and nothing is allocated per step.
"""
from __future__ import annotations

from typing import Any

import torch

__all__ = ["CacheOverflowError", "StaticKVCache", "cache_length", "compact", "select_rows", "truncate"]


def _kv_tensors(cache: Any) -> list[tuple[Any, str, Any]]:
    """(holder, attribute or index, tensor [B, H, T, d]) for every key and value tensor."""
    layers = getattr(cache, "layers", None)
    if layers is not None:  # transformers >= 4.56: DynamicCache.layers[i].keys / .values
        out = []
        for layer in layers:
            if type(layer).__name__ != "DynamicLayer":
                raise NotImplementedError(f"KV-cache compaction of {type(layer).__name__} layers "
                                          "(sliding-window or other non-full attention layers)")
            out += [(layer, "keys", layer.keys), (layer, "values", layer.values)]
        return out
    return [(lst, i, t) for lst in (cache.key_cache, cache.value_cache) for i, t in enumerate(lst)]


def _set_kv(holder: Any, key: Any, t: torch.Tensor) -> None:
    if isinstance(key, str):
        setattr(holder, key, t)
    else:
        holder[key] = t


def truncate(cache: Any, length: int) -> None:
    if isinstance(cache, StaticKVCache):
        cache.truncate(length)
        return
    for holder, key, t in _kv_tensors(cache):
        if t.shape[2] > length:
            _set_kv(holder, key, t[:, :, :length])
    if hasattr(cache, "_seen_tokens"):
        cache._seen_tokens = length


def compact(cache: Any, start: int, lengths: torch.Tensor, paths: torch.Tensor, keep: int,
                   new_length: int, in_place: bool) -> None:
    """After a verification forward that appended n nodes at cache position
    ``start``: row b keeps its first lengths[b] entries followed by the
    nodes paths[b, :keep] (entries past a row's accepted nodes are scratch),
    and the cache is cut to new_length positions. in_place: the kept nodes
    are already where they belong (one row, accepted path 0, 1, 2, ...)."""
    if isinstance(cache, StaticKVCache):
        cache.compact(start, lengths, paths, keep, new_length, in_place)
        return
    if not in_place:
        b = paths.shape[0]
        src = start + paths[:, :keep].clamp(min=0)
        dst = lengths[:, None] + torch.arange(keep, device=paths.device)[None]
        for _holder, _key, t in _kv_tensors(cache):
            h, d = t.shape[1], t.shape[3]
            g = t.gather(2, src[:, None, :, None].expand(b, h, keep, d))
            t.scatter_(2, dst[:, None, :, None].expand(b, h, keep, d), g)
    truncate(cache, new_length)


def select_rows(cache: Any, rows: torch.Tensor) -> None:
    if isinstance(cache, StaticKVCache):
        cache.select_rows(rows)
        return
    for holder, key, t in _kv_tensors(cache):
        _set_kv(holder, key, t.index_select(0, rows))




def cache_length(cache: Any) -> int:
    """Positions the cache holds."""
    if isinstance(cache, StaticKVCache):
        return cache.length
    return int(_kv_tensors(cache)[0][2].shape[2])


class CacheOverflowError(ValueError):
    """A forward would write past a StaticKVCache's capacity."""


try:  # a transformers Cache, so that models which check the cache's type take it
    from transformers.cache_utils import Cache as _CacheBase
except ImportError:  # pragma: no cover - transformers is the dart extra's
    _CacheBase = object  # type: ignore[assignment,misc]


class _LayerView:
    """Layer l's keys and values over the active rows, at full capacity
    [b, H, C, d] (what ``cache.layers[l].keys`` reads, e.g. OracleTarget's
    fingerprints of the first positions)."""

    def __init__(self, cache: StaticKVCache, layer: int) -> None:
        self._cache, self._layer = cache, layer

    @property
    def keys(self) -> torch.Tensor:
        return self._cache.kv[self._layer, 0, :self._cache.batch]

    @property
    def values(self) -> torch.Tensor:
        return self._cache.kv[self._layer, 1, :self._cache.batch]


class StaticKVCache(_CacheBase):  # type: ignore[misc,valid-type]
    """Every layer's keys and values in one preallocated tensor
    ``kv`` [layers, 2, max_batch, kv_heads, capacity, head_dim]; the first
    ``batch`` rows are the sequences being decoded, ``length`` the positions
    held (the longest row's; shorter rows' entries past their own length
    are masked out by the generator and overwritten).

    Where a forward writes its T entries is set before it
    (``write_at``): a position (the entries go to [position, position + T)
    and the attention reads [0, position + T)), or a device tensor of T
    positions (``write_index``: the attention reads the whole capacity, so
    every shape is fixed, as a CUDA graph needs). A forward past the
    capacity raises CacheOverflowError; ``grow`` moves the entries to a
    larger tensor (a new address: captured graphs must be captured again).
    """

    def __init__(self, num_layers: int, kv_heads: int, head_dim: int, capacity: int, *, max_batch: int = 1,
                 dtype: torch.dtype = torch.float32, device: Any = "cpu") -> None:
        if capacity < 1 or max_batch < 1:
            raise ValueError(f"capacity and max_batch must be >= 1, got {capacity} and {max_batch}")
        layers = [_LayerView(self, i) for i in range(num_layers)]
        if _CacheBase is not object:
            try:
                super().__init__(layers=layers)
            except TypeError:  # a transformers Cache whose constructor takes no layers
                super().__init__()
        self.layers = layers
        self.kv = torch.zeros(num_layers, 2, max_batch, kv_heads, capacity, head_dim, dtype=dtype, device=device)
        self.batch = max_batch
        self.length = 0
        self._at = 0
        self._index: torch.Tensor | None = None
        self._views()

    def _views(self) -> None:
        """Each layer's keys and values over the active rows, made once per
        change of rows or tensor rather than indexed in every update (a
        forward's Python time is part of its cost)."""
        self._k = [self.kv[i, 0, :self.batch] for i in range(self.kv.shape[0])]
        self._v = [self.kv[i, 1, :self.batch] for i in range(self.kv.shape[0])]

    @classmethod
    def for_model(cls, config: Any, capacity: int, *, max_batch: int = 1, dtype: torch.dtype = torch.float32,
                  device: Any = "cpu") -> StaticKVCache:
        """Sized from a transformers text config (layers, KV heads, head size)."""
        heads = int(config.num_attention_heads)
        head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
        kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
        return cls(int(config.num_hidden_layers), kv_heads, head_dim, capacity, max_batch=max_batch, dtype=dtype,
                   device=device)

    # -- shape -------------------------------------------------------------------------------

    @property
    def capacity(self) -> int:
        return int(self.kv.shape[4])

    @property
    def max_batch(self) -> int:
        return int(self.kv.shape[2])

    def reset(self, batch: int) -> None:
        """Empty, with ``batch`` active rows (at most max_batch)."""
        if batch > self.max_batch:
            raise ValueError(f"{batch} rows, the cache holds {self.max_batch}")
        self.batch, self.length, self._index = batch, 0, None
        self._views()

    def grow(self, capacity: int, max_batch: int | None = None) -> None:
        """A larger tensor holding the same entries (a new address)."""
        max_batch = max(max_batch or 0, self.max_batch)
        if capacity <= self.capacity and max_batch <= self.max_batch:
            return
        n, _, _, h, c, d = self.kv.shape
        kv = self.kv.new_zeros(n, 2, max_batch, h, max(capacity, c), d)
        kv[:, :, :self.kv.shape[2], :, :c] = self.kv
        self.kv = kv
        self._views()

    # -- what a forward does ---------------------------------------------------------------------

    def write_at(self, position: int) -> None:
        """The next forward writes at [position, position + T) and attends to [0, position + T)."""
        self._at, self._index = position, None

    def write_index(self, positions: torch.Tensor) -> None:
        """The next forward writes its T entries at ``positions`` (a device
        tensor, read when the forward runs) and attends to the whole capacity."""
        self._index = positions

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        t = key_states.shape[2]
        k, v = self._k[layer_idx], self._v[layer_idx]
        if key_states.shape[0] != k.shape[0]:
            raise ValueError(f"a forward of {key_states.shape[0]} rows; the cache has {k.shape[0]} (reset it)")
        if self._index is not None:
            k.index_copy_(2, self._index, key_states)
            v.index_copy_(2, self._index, value_states)
            return k, v
        end = self._at + t
        if end > k.shape[2]:
            raise CacheOverflowError(f"the static KV cache holds {k.shape[2]} positions; this forward needs "
                                     f"{end} (raise the capacity: kv_capacity=, --kv-capacity)")
        k.narrow(2, self._at, t).copy_(key_states)
        v.narrow(2, self._at, t).copy_(value_states)
        if layer_idx == 0:
            self.length = max(self.length, end)
        return k.narrow(2, 0, end), v.narrow(2, 0, end)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.length

    def get_max_length(self) -> int:
        return self.capacity

    def get_mask_sizes(self, query_length: int | torch.Tensor, layer_idx: int = 0) -> tuple[int, int]:
        # transformers from 4.56 passed the query's cache positions (a tensor); later versions pass its length
        q = int(query_length.shape[0]) if isinstance(query_length, torch.Tensor) else int(query_length)
        if self._index is not None:
            return self.capacity, 0
        return self._at + q, 0

    # Not "compileable" for transformers: a compileable cache gets a built mask even for a one-token
    # forward, where sdpa needs none (every entry the view holds is attended to).
    is_compileable = False

    # -- the surgery of a speculative step -------------------------------------------------------

    def truncate(self, length: int) -> None:
        """Entries past ``length`` become scratch (nothing moves)."""
        self.length = min(self.length, length)

    def compact(self, start: int, lengths: torch.Tensor, paths: torch.Tensor, keep: int, new_length: int,
                in_place: bool) -> None:
        """As kv_cache.compact: row r's nodes paths[r, :keep] (written at
        start + node) move to lengths[r] + 0 .. keep-1, for every layer's
        keys and values at once (one gather, one scatter)."""
        if not in_place:
            n, two, mb, h, c, d = self.kv.shape
            b = paths.shape[0]
            dev = self.kv.device
            ar = torch.arange(keep, device=dev)
            src = start + paths[:, :keep].clamp(min=0)  # [b, keep]
            dst = lengths[:, None] + ar[None]
            # row (layer, k/v, r, head) of the flat [n*2*mb*h*c, d] view starts at ((lk * mb + r) * h + head) * c
            base = ((torch.arange(n * two, device=dev)[:, None, None] * mb
                     + torch.arange(b, device=dev)[None, :, None]) * h
                    + torch.arange(h, device=dev)[None, None, :]) * c  # [n*2, b, h]
            flat = self.kv.view(-1, d)
            src_i = (base[..., None] + src[None, :, None, :]).reshape(-1)
            dst_i = (base[..., None] + dst[None, :, None, :]).reshape(-1)
            flat.index_copy_(0, dst_i, flat.index_select(0, src_i))
        self.length = new_length

    def select_rows(self, rows: torch.Tensor) -> None:
        """Only ``rows`` (indices into the active rows) stay, as rows 0 .. len(rows)-1."""
        n = int(rows.numel())
        end = self.length
        self.kv[:, :, :n, :, :end] = self.kv[:, :, rows, :, :end]
        self.batch = n
        self._views()
