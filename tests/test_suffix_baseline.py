"""The suffix-tree baseline (ngram_eval.suffix_baseline): its suffix array's
counts against counting by brute force, its drafts against a literal
reading of SuffixDecoding's rules, and ngram-eval --proposals' rows."""
from __future__ import annotations

import gzip
import heapq
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import SAMPLE_CORPUS, SAMPLE_TOKENIZER
from ngram_eval.cli import main as eval_main
from ngram_eval.suffix_baseline import (ARCTIC_DEFAULTS, VLLM_DEFAULTS, CorpusSuffixes, Draft, SuffixSetting,
                                        accepted_draft_length, speculate, suffix_array)


class Naive:
    """Every substring of at most max_depth tokens of some sequences, counted by brute force."""

    def __init__(self, seqs: list[list[int]], max_depth: int) -> None:
        self.counts: Counter[tuple[int, ...]] = Counter()
        for s in seqs:
            for i in range(len(s)):
                for k in range(1, min(max_depth, len(s) - i) + 1):
                    self.counts[tuple(s[i:i + k])] += 1
        self.max_depth = max_depth

    def children(self, path: tuple[int, ...]) -> list[tuple[int, int]]:
        """(token, count) in decreasing count, ties by token."""
        if len(path) >= self.max_depth:
            return []
        kids = [(p[-1], c) for p, c in self.counts.items() if len(p) == len(path) + 1 and p[:-1] == path]
        return sorted(kids, key=lambda x: (-x[1], x[0]))


def naive_draft(tree: Naive, pattern: list[int], s: SuffixSetting) -> Draft:
    """SuffixDecoding's speculate, read literally over brute-force counts."""
    best = Draft()
    for m in range(1, len(pattern)):
        path = tuple(pattern[-m:])
        if tree.counts[path] == 0:
            break
        limit = max(0, min(s.max_spec_tokens, int(m * s.max_spec_factor + s.max_spec_offset + 1e-6)))
        d = Draft()
        if s.tree:
            heap = [(-c / tree.counts[path], i, path + (t,), -1) for i, (t, c) in enumerate(tree.children(path))
                    if c / tree.counts[path] >= s.min_token_prob]
            heapq.heapify(heap)
            order = len(heap)
            while heap and len(d.tokens) < limit:
                neg, _, p, parent = heapq.heappop(heap)
                d.tokens.append(p[-1]), d.parents.append(parent), d.probs.append(-neg)
                d.score += -neg
                for t, c in tree.children(p):
                    q = -neg * c / tree.counts[p]
                    if q >= s.min_token_prob:
                        heapq.heappush(heap, (-q, order, p + (t,), len(d.tokens) - 1))
                        order += 1
        else:
            prob, p = 1.0, path
            while len(d.tokens) < limit and tree.children(p):
                t, c = tree.children(p)[0]
                prob *= c / tree.counts[p]
                if prob < s.min_token_prob:
                    break
                d.tokens.append(t), d.parents.append(len(d.tokens) - 2), d.probs.append(prob)
                d.score += prob
                p = p + (t,)
        if d.score >= best.score:
            d.match_len = m
            best = d
    return best


def test_document_tree_worked_example() -> None:
    # "a b" occurred at 0 (then c, a) and ends the context: m = 2 gives c (1/2) then a (1/2 * 1/1)
    ctx = np.array([1, 2, 3, 1, 2])
    d = speculate(ctx, SuffixSetting("t", max_depth=8, max_spec_tokens=8))
    assert (d.tokens, d.parents, d.match_len, d.source) == ([3, 1], [-1, 0], 2, "document")
    assert d.probs == [0.5, 0.5] and d.score == 1.0
    # a factor of 0.5 lets a 2-token match draft one token
    d = speculate(ctx, SuffixSetting("t", max_depth=8, max_spec_tokens=8, max_spec_factor=0.5))
    assert d.tokens == [3]
    # the tree's depth bounds match + draft: with depth 3 the 2-token match drafts one token
    d = speculate(ctx, SuffixSetting("t", max_depth=3, max_spec_tokens=8))
    assert d.tokens == [3] and d.match_len == 2


@pytest.mark.parametrize("cache_min", [4, 256], ids=["runs", "rows"])
def test_suffix_array_ranges_count_occurrences(cache_min: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(CorpusSuffixes, "CACHE_MIN", cache_min)
    rng = np.random.default_rng(1)
    docs = [rng.integers(0, 4, rng.integers(1, 40)).tolist() for _ in range(30)]
    naive = Naive(docs, 6)
    corpus = CorpusSuffixes.build([np.array(d) for d in docs], 6)
    for path, count in list(naive.counts.items())[:400]:
        node = None
        for m, node in corpus.matches(np.array([9, *path])):  # m = 1 .. len(path)
            assert corpus.count(node) == naive.counts[path[len(path) - m:]]
        assert node is not None and corpus.count(node) == count
        assert [(t, c) for t, c, _ in corpus.children(node)] == naive.children(path)
    assert list(corpus.matches(np.array([0, 7]))) == []  # a token the corpus does not hold


def test_suffix_array_is_sorted_to_its_depth() -> None:
    rng = np.random.default_rng(2)
    tokens = np.concatenate([rng.integers(0, 3, 500).astype(np.int32), np.full(9, -1, np.int32)])
    sa = suffix_array(tokens, 8)
    padded = np.concatenate([tokens, np.full(8, -1, np.int32)])  # past the end reads as a separator
    keys = [tuple(padded[i:i + 8].tolist()) for i in sa.tolist()]
    assert keys == sorted(keys) and sorted(sa.tolist()) == list(range(len(tokens)))


@pytest.mark.parametrize("cache_min", [4, 256], ids=["runs", "rows"])
@pytest.mark.parametrize("tree", [False, True])
def test_drafts_follow_suffix_decodings_rules(tree: bool, cache_min: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # cache_min: ranges narrowed token by token through their (cached) runs, or all at once over their rows
    monkeypatch.setattr(CorpusSuffixes, "CACHE_MIN", cache_min)
    rng = np.random.default_rng(3)
    # a few templates with noise: long and short matches, branching continuations
    base = [rng.integers(0, 6, 25).tolist() for _ in range(3)]
    docs = [[t if rng.random() > 0.15 else int(rng.integers(0, 6)) for t in base[i % 3]] * 2 for i in range(12)]
    corpus = CorpusSuffixes.build([np.array(d) for d in docs[:8]], 12)
    for s in [SuffixSetting("a", 12, 12, tree=tree), SuffixSetting("b", 8, 5, 2.0, 0.0, tree=tree),
              SuffixSetting("c", 12, 16, 0.5, 0.3, 1.0, tree=tree)]:
        global_naive = Naive(docs[:8], s.max_depth)  # one suffix array (depth 12) serves every depth
        matchers = {(s.name, id(doc)): corpus.matcher(doc) for doc in docs[8:]}
        for doc in docs[8:]:
            for at in range(2, len(doc), 3):
                ctx = doc[:at]
                pattern = ctx[-s.max_depth:]
                want = naive_draft(Naive([ctx], s.max_depth), pattern, s)
                g = naive_draft(global_naive, pattern, s)
                if g.score > want.score:
                    want = g
                got = speculate(np.array(ctx), s, corpus)
                assert (got.tokens, got.parents, got.match_len) == (want.tokens, want.parents, want.match_len), \
                    (s, at)
                assert got.probs == pytest.approx(want.probs)
                # the same along the document, the corpus' matches kept from step to step
                kept = speculate(np.array(ctx), s, corpus, matchers[s.name, id(doc)])
                assert (kept.tokens, kept.parents, kept.match_len, kept.probs) == \
                    (got.tokens, got.parents, got.match_len, got.probs)


def test_accepted_draft_length() -> None:
    d = Draft(tokens=[5, 6, 7, 8], parents=[-1, -1, 0, 2])  # 5 -> 7 -> 8, and 6
    assert accepted_draft_length(d, [0, 5, 7, 8], 1) == 3
    assert accepted_draft_length(d, [0, 6, 7], 1) == 1  # 7 is under 5, not 6
    assert accepted_draft_length(d, [0, 5, 7], 1) == 2  # the document ends
    assert accepted_draft_length(Draft(), [0, 1], 1) == 0


def test_published_defaults() -> None:
    assert (VLLM_DEFAULTS.max_depth, VLLM_DEFAULTS.max_spec_tokens, VLLM_DEFAULTS.max_spec_factor,
            VLLM_DEFAULTS.min_token_prob, VLLM_DEFAULTS.tree) == (24, 24, 1.0, 0.1, False)
    assert (ARCTIC_DEFAULTS.max_depth, ARCTIC_DEFAULTS.max_spec_tokens, ARCTIC_DEFAULTS.max_spec_factor,
            ARCTIC_DEFAULTS.min_token_prob, ARCTIC_DEFAULTS.max_spec_offset) == (64, 32, 1.0, 0.1, 0.0)


def test_cli_reports_the_suffix_baseline(sample_trie: Path, tmp_path: Path) -> None:
    text = tmp_path / "few.jsonl"
    with gzip.open(SAMPLE_CORPUS / "peps-sample.jsonl.gz", "rt") as f:  # three short ones of the corpus' documents
        text.write_text("".join([next(f) for _ in range(4)][1:]))
    args = [str(sample_trie), "--proposals", "--text", str(text), "--tokenizer", str(SAMPLE_TOKENIZER),
            "--max-nodes", "16", "--sources", "both", "--suffix-corpus", str(SAMPLE_CORPUS), "--quiet"]
    r = CliRunner().invoke(eval_main, [*args, "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    rows = doc["suffix_baseline"]["rows"]
    assert [(x["setting"]["name"], x["setting"]["tree"]) for x in rows] == \
        [("vLLM", False), ("vLLM", True), ("Arctic", False), ("Arctic", True)]
    assert doc["suffix_baseline"]["corpus"]["tokens"] > 0
    tokens = doc["tries"][0]["rows"][0]["tokens"]
    for x in rows:
        assert x["tokens"] == tokens and x["steps"] > 0
        # the corpus holds these documents: its tree drafts long exact matches
        assert x["tokens_per_step"] > 2.0
    r = CliRunner().invoke(eval_main, args)
    assert r.exit_code == 0, r.output
    assert "SuffixDecoding" in r.output and "vLLM" in r.output and "Arctic" in r.output
