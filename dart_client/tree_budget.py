"""How many tokens a verification forward carries: the size buckets of its
fixed shapes, and the budget a batch's trees share (torch-free, so that
dart-generate's options can show the defaults without loading torch)."""
from __future__ import annotations

__all__ = ["TREE_BUCKETS", "TREE_BUDGET", "tree_nodes"]

#: Query lengths a fixed-shape forward is padded to (1: a one-token step).
#: A tree larger than the last runs at its own length.
TREE_BUCKETS = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128)

#: The default most tokens (tree nodes and their roots, all rows) of a verification forward. A forward's
#: cost stays near a one-token step's while the weights' reading dominates it, and grows with its tokens
#: once their compute does (about 200 tokens on an H200 in bfloat16, its FLOPs over its memory bandwidth):
#: a batch of 64-node trees at B = 16 is over 1,000 tokens. 128 leaves one tree its 64 nodes and cuts B
#: trees to 128 // B tokens (CHANGELOG.md, 2026-11-28).
TREE_BUDGET = 128


def tree_nodes(budget: int | None, rows: int, own: int | None) -> int | None:
    """The most nodes besides the root each of ``rows`` trees may have under
    ``budget`` tokens, when the source's own bound (``own`` nodes) does not
    fit: budget // rows tokens rounded down to a bucket, at least a root and
    one node. None: no cut (no budget, a source that cannot be told, or its
    trees fit)."""
    if budget is None or own is None:
        return None
    tokens = budget // rows
    if tokens > own:  # the root and the source's own nodes fit
        return None
    tokens = max((b for b in TREE_BUCKETS if b <= tokens), default=2)
    return max(1, tokens - 1)
