"""Sampling and acceptance semantics of the speculative generators: the
target's logits to probabilities (temperature, top-p, top-k, in DART's
order or transformers'), a token per row (greedy or sampled), greedy
acceptance of a batch of draft trees, and tree speculative sampling over a
draft tree, which commits every token distributed exactly as the target
samples it."""
from __future__ import annotations

from typing import Any

import torch

from dart_client.draft_trees import DraftTree, DraftTrees

__all__ = ["SAMPLING_ORDERS", "accept_greedy_batch", "accept_tree_sampling", "pick_tokens", "process_logits"]

#: process_logits' orders of the steps: DART's, or transformers' generate.
SAMPLING_ORDERS = ("dart", "transformers")


def process_logits(logits: torch.Tensor, temperature: float, top_k: int, top_p: float,
                   order: str = "dart") -> torch.Tensor:
    """Probabilities [..., V] after temperature, then top-p and top-k.

    order "dart" (the default): temperature, top-p, top-k, as DART's
    ``prepare_logits_processor``; "transformers": temperature, top-k, top-p,
    as ``transformers``' ``generate``. Top-k keeps the tokens whose logit
    reaches the k-th largest (ties kept); top-p drops the least likely tokens
    while the mass they add up to stays within 1 - top_p (at least one token
    stays)."""
    if order not in SAMPLING_ORDERS:
        raise ValueError(f"sampling order must be one of {SAMPLING_ORDERS}, got {order!r}")
    x = logits.float()
    if temperature != 1.0:
        x = x / temperature
    steps = (_top_p, _top_k) if order == "dart" else (_top_k, _top_p)
    for f in steps:
        x = f(x, top_k, top_p)
    return torch.softmax(x, dim=-1)



def _top_k(x: torch.Tensor, top_k: int, _top_p: float) -> torch.Tensor:
    if not top_k or top_k >= x.shape[-1]:
        return x
    kth = torch.topk(x, top_k, dim=-1).values[..., -1:]
    return x.masked_fill(x < kth, float("-inf"))


def _top_p(x: torch.Tensor, _top_k: int, top_p: float) -> torch.Tensor:
    if not 0.0 < top_p < 1.0:
        return x
    ascending, order = torch.sort(x, dim=-1)
    mass_up_to = torch.softmax(ascending, dim=-1).cumsum(-1)
    drop = mass_up_to <= 1 - top_p
    drop[..., -1] = False
    return x.masked_fill(drop.scatter(-1, order, drop), float("-inf"))


def accept_tree_sampling(tree: DraftTree, logits: torch.Tensor, temperature: float, top_k: int, top_p: float,
                         gen: torch.Generator | None, order: str = "dart") -> tuple[torch.Tensor, list[int], int]:
    """Tree speculative sampling with deterministic drafts: at each node,
    try its children in order; a child x is accepted with probability
    p(x) under the current distribution, else p(x) is zeroed and p
    renormalized; when no child is accepted the bonus token is drawn from
    what remains (at a leaf: from the target's distribution). Every
    committed token is distributed exactly as the target samples it."""
    n = tree.n_nodes
    toks = tree.draft_tokens.tolist()
    assert tree.parents is not None
    par = tree.parents.tolist()
    children: list[list[int]] = [[] for _ in range(n)]
    for i in range(1, n):
        children[par[i]].append(i)
    cur, path, drafts = 0, [0], []
    while True:
        p = process_logits(logits[cur], temperature, top_k, top_p, order)
        nxt = -1
        for c in children[cur]:
            x = toks[c]
            r = float(torch.rand((), generator=gen, device=p.device))
            px = float(p[x])
            if px > 0 and r < px:
                nxt = c
                break
            p[x] = 0.0
            s = p.sum()
            if float(s) <= 0:
                break
            p = p / s
        if nxt < 0:
            bonus = int(torch.multinomial(p, 1, generator=gen))
            break
        cur = nxt
        path.append(nxt)
        drafts.append(toks[nxt])
    return torch.tensor(path, dtype=torch.long, device=logits.device), drafts, bonus


def pick_tokens(logits: torch.Tensor, pick: dict[str, Any]) -> list[int]:
    """One token per row of logits [B, V]."""
    if not pick["sampling"]:
        return [int(t) for t in logits.argmax(-1).tolist()]
    p = process_logits(logits, pick["temperature"], pick["top_k"], pick["top_p"], pick["order"])
    return [int(t) for t in torch.multinomial(p, 1, generator=pick["gen"])[:, 0].tolist()]


def accept_greedy_batch(trees: DraftTrees, logits: torch.Tensor) -> tuple[torch.Tensor, list[tuple[list[int], int]]]:
    """For each row, the longest root-to-leaf prefix on which every token
    is the target's argmax after its parent (DART's evaluate_posterior;
    ties: the first such leaf). Returns the node indices of each row's
    best path [B, W] (-1 padded; the accepted ones are its first a + 1)
    and each row's (accepted draft tokens, bonus token); one device sync."""
    b = len(trees)
    dev = logits.device
    ri, toks = trees.retrieve_indices.to(dev), trees.tokens.to(dev)
    _, leaves, w = ri.shape
    pred = logits.argmax(-1)  # [B, n]: the target's choice after each node
    safe = ri.clamp(min=0)
    cand = torch.where(ri >= 0, toks.gather(1, safe.view(b, -1)).view(b, leaves, w), torch.full_like(ri, -1))
    after = pred.gather(1, safe.view(b, -1)).view(b, leaves, w)
    if w > 1:
        acc = torch.cumprod((cand[..., 1:] == after[..., :-1]).to(torch.int32), dim=2).sum(dim=2)
    else:
        acc = torch.zeros(b, leaves, dtype=torch.int64, device=dev)
    best = torch.argmax(acc, dim=1)
    rows = torch.arange(b, device=dev)
    packed = torch.cat((acc[rows, best].view(b, 1).to(torch.int64), cand[rows, best], after[rows, best]), dim=1)
    commits = []
    for row in packed.tolist():  # one sync
        a = int(row[0])
        commits.append((row[2:2 + a], int(row[1 + w + a])))
    return ri[rows, best], commits
