"""The draft tree on the GPU worker: one tree (DraftTree: the engine's
``ngram_service.tree.DraftTree`` as tensors on a device, in the shapes of
DART's ``tree_search``), a batch of them (DraftTrees: the padded tensors a
batched verification forward reads), and the staging that brings the
engine's trees there (TreeStaging: one array in the engine's packed layout,
cpp/engine/draft_tree.h, one host-to-device copy).
"""
from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

import numpy as np
import torch

from ngram_service import _engine

__all__ = ["DraftTree", "DraftTrees", "TreeStaging", "tree_batch"]


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
        ``device``) views of the device's copy, at the byte offsets of the
        engine's layout (cpp/engine/draft_tree.h, TreeBatchLayout), which
        pack returns last."""
        _, nbytes, sizes, nodes, ret, mask, at = packed
        if staged is None:  # numpy made the views: a tenth of torch's cost
            tok, pos, par = torch.from_numpy(nodes).unbind(0)
            return cls(tok, pos, par, torch.from_numpy(ret), torch.from_numpy(mask), sizes)
        b, n = nodes.shape[1:]
        tpp = staged[at["tokens"]:at["retrieve"]].view(torch.int64).view(3, b, n)
        tok, pos, par = tpp.unbind(0)
        r = staged[at["retrieve"]:at["mask"]].view(torch.int64).view(ret.shape)
        return cls(tok, pos, par, r, staged[at["mask"]:nbytes].view(torch.bool).view(b, n, n), sizes)

    @classmethod
    def stack(cls, trees: Sequence[DraftTree]) -> DraftTrees:
        """A batch of trees made one at a time (a pruner or proposer called
        once per sequence), on the first tree's device: the engine packs
        them in its one layout and ``unpack`` reads them, as every batch is
        read. A tree is its tokens and parents (its mask and depths follow
        from them) and keeps its own leaf order (``retrieve_indices``);
        ValueError when those rows are not its root-to-leaf paths."""
        if isinstance(trees, DraftTrees):
            return trees
        host = []
        for t in trees:
            assert t.parents is not None  # __post_init__ reads them from the mask when not given
            host.append(_engine.encode_tree(t.draft_tokens.cpu().numpy(), t.parents.cpu().numpy(), None,
                                            t.retrieve_indices.cpu().numpy()))
        device = trees[0].draft_tokens.device
        packed = tree_batch(host).pack()
        if device.type == "cpu":
            return cls.unpack(packed, device)
        return cls.unpack(packed, device, torch.from_numpy(packed[0][:packed[1]]).to(device))


class TreeStaging:
    """The trees' reusable host buffer between the search and the device
    (pinned, sent by one asynchronous copy, reused once that copy is done).
    On the CPU every call's trees get their own buffer (the tensors handed
    out view it)."""

    def __init__(self) -> None:
        self._tree_host: torch.Tensor | None = None
        self._tree_copied: Any = None  # the event after the last copy out of _tree_host
        self._cpu_trees: np.ndarray | None = None

    def trees(self, trees: Any, device: torch.device) -> DraftTrees:
        """An ``_engine.TreeBatch``'s trees as DraftTrees on ``device``."""
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


def tree_batch(trees: Sequence[Any]) -> Any:
    """Engine trees (``ngram_service.tree.DraftTree``, one per sequence) as an ``_engine.TreeBatch``,
    for TreeStaging."""
    return _engine.TreeBatch.of(list(trees))
