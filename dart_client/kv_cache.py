"""The target's KV cache: the surgery a speculative step does on it.

A transformers ``DynamicCache`` (its ``layers``, transformers >= 4.56, or
the older ``key_cache`` / ``value_cache`` lists), tensors [B, H, T, d]: cut
to a length, the accepted tree nodes moved behind each row's context, rows
dropped.
"""
from __future__ import annotations

from typing import Any

import torch

__all__ = ["cache_length", "compact", "select_rows", "truncate"]


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
    for holder, key, t in _kv_tensors(cache):
        _set_kv(holder, key, t.index_select(0, rows))




def cache_length(cache: Any) -> int:
    """Positions the cache holds."""
    return int(_kv_tensors(cache)[0][2].shape[2])
