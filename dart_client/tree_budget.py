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
#: a batch of 64-node trees at B = 16 is over 1,000 tokens. 128 leaves one tree its size and cuts B trees
#: to 128 // B tokens (CHANGELOG.md, 2026-11-28).
TREE_BUDGET = 128


def tree_nodes(budget: int | None, rows: int, own: int | None) -> int | None:
    """The most nodes besides the root each of ``rows`` trees may have under
    ``budget`` tokens, the source's own bound being ``own`` nodes.

    A tree's tokens (its nodes and root) are padded up to a bucket under CUDA
    graphs; the sizes below are the same with every cache, so that caches
    decode alike. The source's own size is kept when its padded size fits
    the share (budget // rows tokens), unless it lies just past a bucket and
    cutting to that bucket drops fewer nodes than padding adds (64 nodes: 65
    tokens, cut to 64 rather than padded to 96; DART's 60: 61 tokens, padded
    to 64). Otherwise a tree is cut to the largest bucket within the share
    (past the last bucket, the share itself), at least a root and one node.
    None: no cut (no budget, a source that cannot be told, or its own size
    kept)."""
    if budget is None or own is None:
        return None
    share = budget // rows
    tokens = own + 1
    lower = max((b for b in TREE_BUCKETS if b <= tokens), default=1)
    upper = min((b for b in TREE_BUCKETS if b >= tokens), default=tokens)  # past the last: its own length
    if upper <= share:
        return None if tokens - lower >= upper - tokens else max(1, lower - 1)
    fit = share if share > TREE_BUCKETS[-1] else max((b for b in TREE_BUCKETS if b <= share), default=2)
    return max(1, fit - 1)

