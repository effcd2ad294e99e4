"""Trie format version 2 (docs/FORMAT.md, "Version 2") against version 1: the same answers, in fewer bytes.

The golden answers of DART on the shared corpus (bit for bit) and its golden
trees, from a version-2 trie; order 4 (the rank chain three levels deep)
against version 1; the size target; and the writer's refusal of a trie that
is not suffix-closed.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import GOLDEN
from indexer.trie_assembly import convert_to_v2, levels_from_ngrams, plans_from_ngrams, write_trie
from ngram_service import NgramIndex


@pytest.fixture(scope="module")
def corpus_trie_v2(corpus_trie: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The golden answers' trie (shared corpus, N = 3) in format version 2."""
    out = tmp_path_factory.mktemp("corpus_v2") / "corpus3_v2.ngt"
    convert_to_v2(corpus_trie, out)
    return out


@pytest.mark.parametrize("mode", ["mmap", "ram"])
def test_golden_conditional_probs_bit_exact(corpus_trie_v2: Path, mode: str) -> None:
    g = np.load(GOLDEN / "prob_sample.npz")
    idx = NgramIndex.open(corpus_trie_v2, mode=mode, verify=True)
    probs, matched = idx.conditional_probs(g["contexts"], g["candidates"])
    assert np.array_equal(matched, g["matched"])
    assert np.array_equal(probs.view(np.uint32), g["probs"].view(np.uint32))
    # one query per call answers the same
    for i in range(0, 1000, 97):
        p1, m1 = idx.conditional_probs(g["contexts"][i:i + 1], g["candidates"][i:i + 1])
        assert np.array_equal(p1[0].view(np.uint32), g["probs"][i].view(np.uint32)) and np.array_equal(m1[0], g["matched"][i])


def test_golden_trees(corpus_trie_v2: Path) -> None:
    from test_prune import golden_requests

    g, reqs, params = golden_requests()
    idx = NgramIndex.open(corpus_trie_v2)
    trees = idx.prune_batch(reqs, threads=2, **params)
    for i, tree in enumerate(trees):
        gold = {tuple(int(x) for x in row if x >= 0) for row in g["node_paths"][i][1:]}
        assert set(tree.paths()[1:]) == gold and tree.n_nodes == len(gold), i
    one = idx.prune(*reqs[5], **params)
    assert np.array_equal(one.tokens, trees[5].tokens) and np.array_equal(one.parents, trees[5].parents)


def test_size_target_and_same_counts(corpus_trie: Path, corpus_trie_v2: Path) -> None:
    """At most 1.7 bytes per stored n-gram (issue 17), against 3.17 for version 1; the same n-grams."""
    a, b = NgramIndex.open(corpus_trie), NgramIndex.open(corpus_trie_v2)
    ia, ib = a.info(), b.info()
    assert ia["ngrams"] == ib["ngrams"] and ia["tokens"] == ib["tokens"] and ia["corpus"] == ib["corpus"]
    assert ib["format_version"] == 2 and ia["format_version"] == 1
    assert ib["file_bytes"] / ib["ngrams_total"] <= 1.7 < ia["file_bytes"] / ia["ngrams_total"]
    for ctx in ([], [13], [576, 279], [151643, 785]):
        ta, tb = a.topk(ctx, 30), b.topk(ctx, 30)
        assert (ta.matched, ta.tokens.tolist(), ta.counts.tolist()) == (tb.matched, tb.tokens.tolist(), tb.counts.tolist())


def test_unigram_counts_of_every_token(corpus_trie: Path, corpus_trie_v2: Path) -> None:
    """Level 1 of version 2 counts only the tokens that occur (docs/FORMAT.md, "Counts"): every token id,
    those that never occur included (count 0), has version 1's count."""
    a, b = NgramIndex.open(corpus_trie), NgramIndex.open(corpus_trie_v2)
    ca = [a.count([t]) for t in range(a.vocab_size)]
    cb = [b.count([t]) for t in range(b.vocab_size)]
    assert 0 < sum(c == 0 for c in ca) < len(ca)  # the vocabulary has tokens the corpus never uses
    assert ca == cb


def dense_run_parents(path: Path) -> list[int]:
    """The tokens whose level-2 runs the file stores as bitmaps (docs/FORMAT.md, "Dense runs"), from its bytes."""
    sec = next(s for s in NgramIndex.open(path).sections() if s["kind"] == "dense_runs")
    with open(path, "rb") as f:
        f.seek(sec["offset"])
        packed = int.from_bytes(f.read(sec["length"]), "little")
    w = sec["width"]
    return [(packed >> (j * w)) & ((1 << w) - 1) for j in range(sec["count"])]


def test_dense_runs_answer_as_version_1(corpus_trie: Path, corpus_trie_v2: Path) -> None:
    """Every bitmap run of the shared corpus trie lists its continuations, and finds them and no others after
    contexts ending in its token, exactly as version 1 does."""
    a, b = NgramIndex.open(corpus_trie), NgramIndex.open(corpus_trie_v2, mode="ram")
    parents = dense_run_parents(corpus_trie_v2)
    assert len(parents) >= 20
    rng = np.random.default_rng(3)
    ctx, cand = [], []
    before = a.topk([], 2000).tokens  # frequent tokens: contexts (t, p) that often exist
    for p in parents:
        ta, tb = a.topk([p], 100_000), b.topk([p], 100_000)
        assert len(ta.tokens) >= 1000 and ta.tokens.tolist() == tb.tokens.tolist()
        assert ta.counts.tolist() == tb.counts.tolist()
        for _ in range(8):
            ctx.append([int(rng.choice(before)), p])
            cand.append(np.concatenate([rng.choice(ta.tokens, 20), rng.integers(0, 151_669, 5)]))
    ctx, cand = np.array(ctx, np.int64), np.array(cand, np.int64)
    (pa, ma), (pb, mb) = a.conditional_probs(ctx, cand), b.conditional_probs(ctx, cand)
    assert np.array_equal(pa.view(np.uint32), pb.view(np.uint32)) and np.array_equal(ma, mb)
    assert {0, 1, 2} <= set(np.unique(ma).tolist())
    for i in range(0, len(ctx), 41):  # one query per call too
        p1, m1 = b.conditional_probs(ctx[i:i + 1], cand[i:i + 1])
        assert np.array_equal(p1[0].view(np.uint32), pa[i].view(np.uint32)) and np.array_equal(m1[0], ma[i])


def zipf_levels(order: int, vocab: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    counts: list[dict[tuple[int, ...], int]] = [{} for _ in range(order)]
    for _ in range(300):
        doc = np.minimum(rng.zipf(1.4, rng.integers(5, 80)), vocab - 2).tolist() + [vocab - 1]
        for k in range(1, order + 1):
            for i in range(len(doc) - k + 1):
                key = tuple(doc[i:i + k])
                counts[k - 1][key] = counts[k - 1].get(key, 0) + 1
    return [(np.array(sorted(c), dtype=np.int64).reshape(-1, k), np.array([c[g] for g in sorted(c)], dtype=np.uint64))
            for k, c in enumerate(counts, start=1)]


def test_order_5_answers_equal_version_1(tmp_path: Path) -> None:
    """Contexts of up to four tokens: the rank chain four levels deep, every query as version 1 answers it."""
    order, vocab = 5, 200
    levels = zipf_levels(order, vocab, 7)
    paths = []
    for version in (1, 2):
        path = tmp_path / f"z{version}.ngt"
        write_trie(path, order=order, vocab_size=vocab, eos_id=vocab - 1, meta={"name": "z"},
                   plans=plans_from_ngrams(levels), chunks=levels_from_ngrams(levels), format_version=version)
        paths.append(path)
    a, b = NgramIndex.open(paths[0]), NgramIndex.open(paths[1], verify=True)
    rng = np.random.default_rng(1)
    grams5 = levels[4][0]
    ctx = np.concatenate([grams5[rng.integers(0, len(grams5), 400), :4], rng.integers(0, vocab, (100, 4))])
    cand = np.concatenate([grams5[rng.integers(0, len(grams5), (500, 10)), 4], rng.integers(0, vocab, (500, 6))], axis=1)
    (pa, ma), (pb, mb) = a.conditional_probs(ctx, cand), b.conditional_probs(ctx, cand)
    assert np.array_equal(pa.view(np.uint32), pb.view(np.uint32)) and np.array_equal(ma, mb)
    assert {1, 2, 3, 4} <= set(np.unique(ma).tolist())  # every suffix length answers somewhere
    for g, c in zip(grams5[::37].tolist(), levels[4][1][::37].tolist()):
        for k in range(1, 6):
            assert a.count(g[:k]) == b.count(g[:k])
        assert b.count(g) == c
    for row in ctx[:60].tolist():
        for k in (0, 1, 2, 3, 4):
            ta, tb = a.topk(row[4 - k:], 12), b.topk(row[4 - k:], 12)
            assert (ta.matched, ta.tokens.tolist(), ta.counts.tolist()) == (tb.matched, tb.tokens.tolist(), tb.counts.tolist())
    toks = np.stack([rng.choice(vocab - 1, 6, replace=False) for _ in range(4)])
    probs = np.sort(rng.random((4, 6)).astype(np.float32), axis=1)[:, ::-1]
    ta, tb = a.prune(ctx[0], toks, probs, eos_token_id=vocab - 1), b.prune(ctx[0], toks, probs, eos_token_id=vocab - 1)
    assert np.array_equal(ta.tokens, tb.tokens) and np.array_equal(ta.scores, tb.scores)


def test_refuses_a_trie_that_is_not_suffix_closed(tmp_path: Path) -> None:
    """(1, 2, 3) stored without (2, 3): version 2 cannot rank 3 after (1, 2); version 1 can store it."""
    levels = [(np.array([[1], [2], [3], [4]]), np.array([1, 1, 1, 1], np.uint64)),
              (np.array([[1, 2], [2, 4]]), np.array([1, 1], np.uint64)),
              (np.array([[1, 2, 3]]), np.array([1], np.uint64))]
    kw = dict(order=3, vocab_size=5, eos_id=None, meta={"name": "x"}, plans=plans_from_ngrams(levels))
    write_trie(tmp_path / "v1.ngt", chunks=levels_from_ngrams(levels), format_version=1, **kw)
    with pytest.raises(ValueError, match="level 3 entry 0: its suffix .* is not stored"):
        write_trie(tmp_path / "v2.ngt", chunks=levels_from_ngrams(levels), format_version=2, **kw)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v1.ngt"]  # nothing left behind


def test_cli_format_option(tmp_path: Path) -> None:
    out = tmp_path / "s.ngt"
    r = subprocess.run([sys.executable, "-m", "indexer.cli", "--out", str(out), "--format", "2", "-q"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert NgramIndex.open(out, verify=True).info()["format_version"] == 2
    r = subprocess.run([sys.executable, "-m", "indexer.cli", "--out", str(out), "--format", "3", "-q"],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "--format" in r.stderr
