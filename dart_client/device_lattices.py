"""The drafter's lattices on the GPU worker: top-k of each position's
logits, the draft ids mapped to target ids, a softmax over the k (DART's
probabilities), packed as int32 [B, D, 2K] (per level the K ids, then the
bits of their float32 probabilities) by a fixed sequence of kernels, on a
GPU replayed as one CUDA graph per shape (LatticeGraphs), then one copy into
a reusable pinned host buffer (LatticeStaging).
"""
from __future__ import annotations

import collections
import logging
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ngram_service import _engine

__all__ = ["LatticeGraphs", "LatticeStaging", "host_ids", "pack_lattices"]

log = logging.getLogger(__name__)


def pack_lattices(logits: torch.Tensor, d2t: torch.Tensor | None, k: int, temperature: float) -> torch.Tensor:
    """logits [B, D, V_draft] -> int32 [B, D, 2K]: each level's top-k target
    ids (draft + d2t[draft]), then their softmax probabilities' float32 bits."""
    vals, idx = torch.topk(logits, k, dim=-1)
    vals = vals.float()
    probs = torch.softmax(vals / temperature if temperature != 1.0 else vals, dim=-1)
    if d2t is not None:
        idx = idx + d2t[idx]
    return torch.cat((idx.to(torch.int32), probs.view(torch.int32)), dim=-1)


class LatticeGraphs:
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


class LatticeStaging:
    """The lattices' reusable host buffer (pinned, filled by one asynchronous
    copy); on the CPU the lattices are read where the kernels wrote them."""

    def __init__(self) -> None:
        self._lattice_host: torch.Tensor | None = None

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


def host_ids(tokens: Any) -> Any:
    """A context as the engine reads it: lists and arrays as they are, a
    tensor as its last MAX_ORDER ids on the host (a search reads no more)."""
    if isinstance(tokens, torch.Tensor):
        return tokens.reshape(-1)[-_engine.MAX_ORDER:].cpu().numpy()
    return tokens
