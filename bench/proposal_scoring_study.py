"""Proposal scoring variants, teacher forced on held-out text: a Python
model of the engine's proposal search (cpp/engine/proposal_search.h) in
which the continuation scores can be changed, used to choose the engine's
scoring by measurement before it was written in C++ (issue 42; the table
is in CHANGELOG.md, 2026-11-28).

    python bench/proposal_scoring_study.py TRIE HELDOUT.jsonl TOKENIZER \
        --variants '[{"corpus": "max"}, {"corpus": "abs", "d": 0.75, "doc": "disc", "mix": "noisy"}]'

HELDOUT.jsonl: bench/heldout_split.py's held-out documents (--docs-per-source
of each source, the first --max-positions tokens of each). A variant is a
dict: "corpus" is "max" (the engine's scoring before 2026-11-28: each
stored suffix's ratio times backoff ** (L - l), the best over lengths;
"beta" shrinks a ratio by count / (count + beta)), "wb" (Witten-Bell
interpolation), "abs" (interpolated absolute discounting, "d": the
engine's scoring now, but that here each suffix gives its 64 most
frequent continuations, the engine its max_branch) or "mkn" (modified
Kneser-Ney discounts "ds" for counts 1, 2, 3+, raw counts at every order);
"doc" is "max" (the former: the share of the matches followed by w, times
lookup_weight) or "disc" (that share times n / (n + alpha) x (1 - gamma **
m): n matches of length m; the engine's now); "mix" is "max" (the former)
or "noisy" (1 - (1 - p_corpus)(1 - p_doc); the engine's now); and the
engine's max_nodes, max_depth, max_branch, min_prob, lookup, min_match.
With {"corpus": "max"} the replay equalled the former engine's (ngram-eval
--proposals) to the last digit on the same documents. Slow (Python): a
dozen documents take tens of seconds a variant. Prints tokens per step for
each variant.
"""
from __future__ import annotations

import argparse
import heapq
import json
import sys
import time
from collections import defaultdict
from typing import Any

import numpy as np

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
from ngram_service import NgramIndex  # noqa: E402


class Corpus:
    def __init__(self, idx: NgramIndex) -> None:
        self.idx = idx
        self.order = idx.order
        self._cache: dict[tuple[int, ...], tuple[dict[int, int], int, int]] = {}

    def run(self, s: tuple[int, ...]) -> tuple:
        """(continuation counts of the top 64, count(s) as sum of continuations, distinct continuations)."""
        r = self._cache.get(s)
        if r is None:
            t = self.idx.topk(list(s), 4096)
            if t.matched != len(s) or len(t.tokens) == 0:
                r = ({}, 0, 0, 0, 0, 0)
            else:
                total = int(round(float(t.counts[0]) / float(t.probs[0])))
                top = {int(w): int(c) for w, c in zip(t.tokens[:64], t.counts[:64])}
                cs = t.counts.astype(np.int64)
                r = (top, total, len(t.tokens), int((cs == 1).sum()), int((cs == 2).sum()), int((cs >= 3).sum()))
            self._cache[s] = r
        return r


def root_doc(ctx: list[int], min_match: int = 1) -> tuple[list[int], int]:
    """The ends i (<= n-2) of the longest suffix match, most recent 256, and its length."""
    n = len(ctx)
    if n < 2:
        return [], 0
    last = ctx[-1]
    best, ends = 0, []
    for i in range(n - 1):
        if ctx[i] != last:
            continue
        l = 1
        while l < 32 and l <= i and ctx[i - l] == ctx[n - 1 - l]:
            l += 1
        if l > best:
            best, ends = l, [i]
        elif l == best:
            ends.append(i)
    if best < min_match:
        return [], 0
    return ends[-256:], best


def child_doc(ctx: list[int], parent: tuple[list[int], int], w: int) -> tuple[list[int], int]:
    ends, m = parent
    n = len(ctx)
    out = [e + 1 for e in ends if e + 1 < n - 1 and ctx[e + 1] == w]
    return out, (m + 1 if out else 0)


def doc_counts(ctx: list[int], state: tuple[list[int], int]) -> tuple[dict[int, int], int, int]:
    ends, m = state
    out: dict[int, int] = defaultdict(int)
    for e in ends:
        out[ctx[e + 1]] += 1
    return dict(out), len(ends), m


def continuations(corpus: Corpus, seq: list[int], variant: dict[str, Any], doc_state: Any) -> list[tuple[float, int]]:
    L = min(corpus.order - 1, len(seq))
    scores: dict[int, float] = {}
    kind = variant["corpus"]
    if kind == "max":  # today's: max over lengths of backoff^(L-l) * ratio
        b = variant.get("backoff", 0.4)
        for l in range(L, 0, -1):
            top, total, *_ = corpus.run(tuple(seq[-l:]))
            if not total:
                continue
            w8 = b ** (L - l)
            shrink = total / (total + variant.get("beta", 0.0))
            for w, c in top.items():
                v = w8 * c / total * shrink
                if v > scores.get(w, 0.0):
                    scores[w] = v
    elif kind in ("wb", "abs", "mkn"):  # interpolation, lowest order first
        p: dict[int, float] = {}
        for l in range(1, L + 1):
            top, total, distinct, n1, n2, n3 = corpus.run(tuple(seq[-l:]))
            if not total:
                continue
            if kind == "mkn":
                d1, d2, d3 = variant.get("ds", (0.6, 1.0, 1.3))
                rest = (d1 * n1 + d2 * n2 + d3 * n3) / total
                new = {w: rest * v for w, v in p.items()}
                for w, c in top.items():
                    dc = d1 if c == 1 else d2 if c == 2 else d3
                    new[w] = new.get(w, 0.0) + max(c - dc, 0.0) / total
            elif kind == "wb":
                lam = total / (total + variant.get("wb_k", 1.0) * distinct)
                new = {w: (1 - lam) * v for w, v in p.items()}
                for w, c in top.items():
                    new[w] = new.get(w, 0.0) + lam * c / total
            else:
                d = variant.get("d", 0.75)
                rest = d * distinct / total
                new = {w: rest * v for w, v in p.items()}
                for w, c in top.items():
                    new[w] = new.get(w, 0.0) + max(c - d, 0.0) / total
            p = new
        scores = p
    dcounts, n, m = doc_state
    if n:
        kind = variant.get("doc", "max")
        for w, c in dcounts.items():
            if kind == "max":
                v = variant.get("lookup_weight", 1.0) * c / n
            else:  # discounted by evidence: occurrences and match length
                conf = (n / (n + variant.get("alpha", 1.0))) * (1 - variant.get("gamma", 0.5) ** m)
                v = conf * c / n
            if variant.get("mix", "max") == "max":
                if v > scores.get(w, 0.0):
                    scores[w] = v
            else:  # noisy-or
                scores[w] = 1 - (1 - scores.get(w, 0.0)) * (1 - v)
    best = sorted(((v, w) for w, v in scores.items()), key=lambda x: (-x[0], x[1]))
    return best[: variant.get("max_branch", 8)]


def propose(corpus: Corpus, ctx: list[int], variant: dict[str, Any]) -> list[tuple[int, int, int]]:
    """Best-first tree: [(token, parent, depth)], node 0 the root."""
    max_nodes, max_depth, min_prob = variant.get("max_nodes", 64), variant.get("max_depth", 8), variant.get("min_prob", 1e-4)
    use_doc = variant.get("lookup", True)
    nodes = [(ctx[-1], -1, 0)]
    seqs = [list(ctx)]
    states = [root_doc(ctx, variant.get("min_match", 1)) if use_doc else ([], 0)]
    heap: list[tuple[float, int, int, int, int]] = []
    counter = 0

    def expand(v: int, prob: float) -> None:
        nonlocal counter
        if nodes[v][2] >= max_depth:
            return
        for s, w in continuations(corpus, seqs[v], variant, doc_counts(ctx, states[v])):
            cp = prob * s
            if cp < min_prob or cp <= 0:
                break
            counter += 1
            heapq.heappush(heap, (-cp, nodes[v][2] + 1, counter, v, w))

    expand(0, 1.0)
    while heap and len(nodes) - 1 < max_nodes:
        negp, depth, _, parent, w = heapq.heappop(heap)
        nodes.append((w, parent, depth))
        seqs.append(seqs[parent] + [w])
        states.append(child_doc(ctx, states[parent], w))
        expand(len(nodes) - 1, -negp)
    return nodes


def accepted(nodes: list[tuple[int, int, int]], doc: list[int], at: int) -> int:
    ok = [True] + [False] * (len(nodes) - 1)
    best = 0
    for i in range(1, len(nodes)):
        t, p, d = nodes[i]
        if ok[p] and at + d - 1 < len(doc) and t == doc[at + d - 1]:
            ok[i] = True
            best = max(best, d)
    return best


def replay(corpus: Corpus, docs: list[list[int]], variant: dict[str, Any], max_positions: int) -> float:
    steps = tokens = 0
    for doc in docs:
        at = 1
        while at < len(doc) and at < max_positions:
            tree = propose(corpus, doc[:at], variant)
            acc = accepted(tree, doc, at)
            step = min(acc + 1, len(doc) - at)
            steps += 1
            tokens += step
            at += step
    return tokens / steps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trie")
    ap.add_argument("heldout")
    ap.add_argument("tokenizer")
    ap.add_argument("--docs-per-source", type=int, default=2)
    ap.add_argument("--max-positions", type=int, default=1500)
    ap.add_argument("--variants", required=True, help="JSON list of variant dicts")
    args = ap.parse_args()
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(args.tokenizer)
    by_source: dict[str, list[list[int]]] = defaultdict(list)
    for line in open(args.heldout):
        d = json.loads(line)
        src = d.get("source") or d.get("id", "x").split("/")[0]
        if len(by_source[src]) < args.docs_per_source:
            by_source[src].append(tok.encode(d["text"]).ids)
    docs = [d for v in by_source.values() for d in v]
    corpus = Corpus(NgramIndex.open(args.trie))
    print(f"{len(docs)} docs from {len(by_source)} sources, {sum(min(len(d), args.max_positions) for d in docs)} tokens", flush=True)
    for v in json.loads(args.variants):
        t0 = time.time()
        tps = replay(corpus, docs, v, args.max_positions)
        print(f"{tps:.4f}  {json.dumps(v)}  ({time.time() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
