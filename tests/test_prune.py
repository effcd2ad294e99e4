"""DART tree pruning: golden trees, a pure-Python reference, ties, EOS, limits, errors."""
from __future__ import annotations

import ctypes
import ctypes.util
import math
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from conftest import GOLDEN

from indexer.trie_assembly import levels_from_ngrams, plans_from_ngrams, write_trie
from ngram_service import NgramIndex
from ngram_service.tree import LIMITS, DraftTree

F = np.float32
_libm = ctypes.CDLL(ctypes.util.find_library("m"))
_libm.logf.restype = ctypes.c_float
_libm.logf.argtypes = [ctypes.c_float]


def logf(x: np.float32) -> np.float32:
    """C's logf, as DART calls it (numpy's float32 log may differ in the last bit)."""
    return F(_libm.logf(float(x)))


# ---- a small trie of real text, its counts kept in Python ---------------------------

TEXT = """\
The trie stores every n-gram of the corpus with its count. A draft model proposes
the next tokens of a sentence, and the trie says how often each token followed
the same context in the corpus. The search keeps the best sequences of the draft
at every step, and the tree of the best sequences goes to the target model in one
pass.
The target model checks the tree and accepts the longest path that it would have
written itself. The longer the accepted path, the fewer passes of the target model
the answer needs, and the faster the answer comes.
A good draft and a good trie make long paths. The trie is built once from the
corpus and shared by every worker; the draft runs on the worker next to the target
model.
"""


def _docs() -> tuple[list[list[int]], int]:
    paras = [p for p in TEXT.split("\n\n") if p.strip()] + [s for s in TEXT.split(".") if s.strip()]
    words = [re.findall(r"\w+|[^\w\s]", p.lower()) for p in paras]
    vocab = sorted({w for d in words for w in d})
    ids = {w: i for i, w in enumerate(vocab)}
    eos = len(vocab)
    return [[ids[w] for w in d] + [eos] for d in words], eos


DOCS, EOS = _docs()
ORDER = 3
VOCAB = 2048  # more ids than the text uses: room for K = 1024 distinct candidates
COUNTS: Counter = Counter(tuple(d[i:i + k]) for d in DOCS for k in range(1, ORDER + 1) for i in range(len(d) - k + 1))


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> NgramIndex:
    levels = []
    for k in range(1, ORDER + 1):
        grams = sorted(g for g in COUNTS if len(g) == k)
        levels.append((np.array(grams, dtype=np.int64).reshape(-1, k),
                       np.array([COUNTS[g] for g in grams], dtype=np.uint64)))
    path = tmp_path_factory.mktemp("prune") / "small.ngt"
    write_trie(path, order=ORDER, vocab_size=VOCAB, eos_id=EOS, meta={"name": "prune-test"},
               plans=plans_from_ngrams(levels), chunks=levels_from_ngrams(levels))
    return NgramIndex.open(path, verify=True)


# ---- the reference: the semantics of docs/PRUNING.md, one float32 step at a time ----------

def q_ref(context: list[int], w: int) -> np.float32:
    """DART-compatible p(w | context) from the Python counts."""
    ctx = context[-(ORDER - 1):]
    for n in range(len(ctx), 0, -1):
        s = tuple(ctx[-n:])
        if COUNTS.get(s + (w,)):
            return F(F(COUNTS[s + (w,)]) * (F(1) / F(COUNTS[s])))
    return F(0)


def reference(prefix, levels_tok, levels_p, *, beam_width=20, max_nodes=60, ngram_weight=0.5, level_weights=None,
              logit_weights=None, eos_token_id=EOS, ngram_on_first_level=False):
    """[(path, score)] in the engine's node order (root excluded)."""
    depth = len(levels_tok)
    lw = [F((l + 1) ** -0.7) for l in range(depth)] if level_weights is None else [F(x) for x in level_weights]
    gw = [F(0.9 ** l) for l in range(depth)] if logit_weights is None else [F(x) for x in logit_weights]
    lam = F(ngram_weight)
    beam = [((), F(0), math.inf)]  # (path, score, rank)
    nodes = []  # (rank, depth, gen, path, score)
    for l in range(depth):
        ext = []
        for b, (seq, s, r) in enumerate(beam):
            ctx = list(prefix) + list(seq)
            k = len(levels_tok[l])
            for j, (t, p) in enumerate(zip(levels_tok[l], levels_p[l])):
                t = int(t)
                x = F(logf(F(F(p) + F(1e-10))) * gw[l])
                if l > 0 or ngram_on_first_level:  # DART computes it even when lambda = 0
                    x = F(x + F(logf(F(q_ref(ctx, t) + F(1e-10))) * lam))
                score = F(s + F(lw[l] * x))
                ext.append((seq + (t,), score, min(float(score), r), b * k + j))
        nodes += [(r, l + 1, gen, path, sc) for path, sc, r, gen in ext]
        ext.sort(key=lambda e: (e[0][-1] == eos_token_id, -e[1], e[3]))
        beam = [(p, s, r) for p, s, r, _ in ext[:beam_width]]
    nodes.sort(key=lambda n: (-n[0], n[1], n[2]))
    kept = sorted(nodes[:max_nodes], key=lambda n: (n[1], -n[0], n[2]))
    return [(n[3], n[4]) for n in kept]


def check_encoding(tree: DraftTree, prefix) -> None:
    """tokens/parents/depths are a tree in the documented order; mask and
    retrieve rows are its DART encoding."""
    n = len(tree.tokens)
    assert tree.tokens.dtype == np.int32 and tree.parents.dtype == np.int32 and tree.depths.dtype == np.int32
    assert tree.tokens[0] == prefix[-1] and tree.parents[0] == -1 and tree.depths[0] == 0
    assert tree.tree_position_ids is tree.depths
    for i in range(1, n):
        assert 0 <= tree.parents[i] < i and tree.depths[i] == tree.depths[tree.parents[i]] + 1
    assert np.all(np.diff(tree.depths) >= 0)
    paths = tree.paths()
    assert len(set(paths)) == n
    mask = np.zeros((n, n), dtype=bool)
    for i in range(n):
        j = i
        while j >= 0:
            mask[i, j] = True
            j = tree.parents[j]
    assert tree.tree_mask.dtype == np.bool_ and np.array_equal(tree.tree_mask, mask)
    has_child = np.zeros(n, dtype=bool)
    has_child[tree.parents[1:]] = True
    leaves = sorted(np.flatnonzero(~has_child).tolist(), key=lambda i: paths[i])
    ri = tree.retrieve_indices
    assert ri.dtype == np.int32 and ri.shape == (len(leaves), int(tree.depths.max()) + 1)
    for row, leaf in zip(ri, leaves):
        chain = []
        j = leaf
        while j >= 0:
            chain.append(j)
            j = tree.parents[j]
        chain.reverse()
        assert row.tolist() == chain + [-1] * (ri.shape[1] - len(chain))


def assert_same(tree: DraftTree, ref, prefix) -> None:
    check_encoding(tree, prefix)
    assert tree.paths()[1:] == [p for p, _ in ref]
    assert np.array_equal(tree.scores[1:], np.array([s for _, s in ref], dtype=F))


# ---- golden trees from DART itself ---------------------------------------------------

def golden_requests():
    g = np.load(GOLDEN / "tree_sample.npz")
    off = g["prompt_offsets"]
    reqs = [(g["prompt_flat"][off[i]:off[i + 1]], g["topk_tokens"][i], g["topk_probs"][i]) for i in range(len(off) - 1)]
    params = dict(beam_width=int(g["beam_width"]), max_nodes=int(g["remain_total"]),
                  ngram_weight=float(g["ngram_weight"]), level_weights=g["level_weights"],
                  logit_weights=g["logit_weights"], eos_token_id=int(g["eos_token"]))
    return g, reqs, params


@pytest.mark.parametrize("mode", ["mmap", "ram"])
def test_golden_trees(corpus_trie: Path, mode: str) -> None:
    if not (GOLDEN / "tree_sample.npz").is_file():
        pytest.skip("../shared/golden is not present")
    g, reqs, params = golden_requests()
    idx = NgramIndex.open(corpus_trie, mode=mode)
    trees = idx.prune_batch(reqs, threads=2, **params)
    same = 0
    for i, (tree, (prefix, _, _)) in enumerate(zip(trees, reqs)):
        check_encoding(tree, prefix)
        gold = {tuple(int(x) for x in row if x >= 0) for row in g["node_paths"][i][1:]}
        same += set(tree.paths()[1:]) == gold and tree.n_nodes == len(gold)
    assert same == len(reqs) == 200
    # One call at a time, and DART's defaults, give the same trees.
    for i in (0, 57, 199):
        one = idx.prune(*reqs[i], **params)
        assert np.array_equal(one.tokens, trees[i].tokens) and np.array_equal(one.parents, trees[i].parents)
        dflt = idx.prune(*reqs[i])
        assert np.array_equal(dflt.tokens, trees[i].tokens) and np.array_equal(dflt.scores, trees[i].scores)


def test_default_weights_are_darts() -> None:
    from ngram_service import _engine

    if (GOLDEN / "tree_sample.npz").is_file():
        g = np.load(GOLDEN / "tree_sample.npz")
        assert [_engine.default_level_weight(l) for l in range(8)] == g["level_weights"].tolist()
        assert [_engine.default_logit_weight(l) for l in range(8)] == g["logit_weights"].tolist()
    assert _engine.default_level_weight(63) == F(64 ** -0.7)
    assert _engine.default_logit_weight(63) == F(0.9 ** 63)


# ---- the reference on random lattices --------------------------------------------------

def random_lattice(rng: np.random.Generator, depth: int, ks: list[int], with_eos: bool):
    followers = sorted({g[-1] for g in COUNTS if len(g) >= 2})
    toks, probs = [], []
    for k in ks:
        pool = list(rng.permutation(followers)[:k]) + list(rng.integers(0, VOCAB, size=k))
        if with_eos and rng.random() < 0.5:
            pool.insert(int(rng.integers(0, 3)), EOS)
        level = list(dict.fromkeys(int(t) for t in pool))[:k]
        p = np.sort(rng.dirichlet(np.ones(k) * 0.5).astype(F))[::-1].copy()
        p[rng.random(k) < 0.1] = 0
        if rng.random() < 0.2:
            p[0] = 1.0
        toks.append(np.array(level, dtype=np.int64))
        probs.append(p)
    return toks, probs


@pytest.mark.parametrize("seed", range(40))
def test_matches_reference(small: NgramIndex, seed: int) -> None:
    rng = np.random.default_rng(seed)
    depth = int(rng.integers(1, 6))
    uniform = seed % 2 == 0
    ks = [int(rng.integers(2, 9))] * depth if uniform else [int(rng.integers(1, 9)) for _ in range(depth)]
    toks, probs = random_lattice(rng, depth, ks, with_eos=True)
    doc = DOCS[int(rng.integers(0, len(DOCS)))]
    prefix = doc[:int(rng.integers(1, len(doc)))]
    params = dict(beam_width=int(rng.integers(1, 7)), max_nodes=int(rng.integers(1, 40)),
                  ngram_weight=[0.5, 0.0, 1.5][seed % 3], ngram_on_first_level=bool(seed % 4 == 1))
    if seed % 5 == 2:
        params["level_weights"] = rng.random(depth).astype(F)
        params["logit_weights"] = rng.random(depth).astype(F)
    ref = reference(prefix, toks, probs, **params)
    lattice = (np.stack(toks), np.stack(probs)) if uniform else (toks, probs)
    tree = small.prune(prefix, *lattice, eos_token_id=EOS, **params)
    assert_same(tree, ref, prefix)
    if uniform:  # the same lattice as per-level arrays
        again = small.prune(prefix, list(toks), [p.tolist() for p in probs], eos_token_id=EOS, **params)
        assert np.array_equal(again.tokens, tree.tokens) and np.array_equal(again.parents, tree.parents)


def wide_lattice(rng: np.random.Generator, depth: int, k: int):
    """Candidates mostly from the corpus (so that many have n-gram matches)
    and probabilities from a few values (so that scores tie across entries)."""
    followers = sorted({g[-1] for g in COUNTS if len(g) >= 2})
    toks, probs = [], []
    for _ in range(depth):
        level = [int(t) for t in rng.permutation(followers)[:k - 1]] + [EOS]
        level = list(dict.fromkeys(level + [int(t) for t in rng.integers(0, VOCAB, size=k)]))[:k]
        rng.shuffle(level)
        toks.append(np.array(level, dtype=np.int64))
        probs.append(rng.choice(np.array([1.0, 0.5, 0.25, 0.125, 0.0], dtype=F), size=k, p=[.1, .3, .3, .2, .1]))
    return toks, probs


@pytest.mark.parametrize("block", range(4))
def test_wide_beams_match_reference(small: NgramIndex, block: int) -> None:
    """Beams wide enough for many distinct contexts per level (more than the
    engine's first round of lookups), on random lattices with ties, EOS,
    lambda 0, 0.5 and 1, tiny beams and max_nodes below beam_width: every
    tree equals the reference, scores and order included."""
    rng = np.random.default_rng(1000 + block)
    for case in range(40):
        depth = int(rng.integers(2, 6))
        k = int(rng.integers(2, 14))
        toks, probs = wide_lattice(rng, depth, k)
        doc = DOCS[int(rng.integers(0, len(DOCS)))]
        prefix = doc[:int(rng.integers(1, len(doc)))]
        beam_width = int(rng.choice([1, 2, 9, 16, 30]))
        max_nodes = int(rng.choice([1, 5, beam_width, 3 * beam_width, 200]))
        params = dict(beam_width=beam_width, max_nodes=max_nodes, ngram_weight=float(rng.choice([0.5, 0.0, 1.0])),
                      ngram_on_first_level=bool(case % 3 == 0))
        if case % 4 == 1:
            params["level_weights"] = rng.choice(np.array([0.0, 0.5, 1.0], dtype=F), size=depth)
        ref = reference(prefix, toks, probs, **params)
        tree = small.prune(prefix, np.stack(toks), np.stack(probs), eos_token_id=EOS, **params)
        assert_same(tree, ref, prefix)


def test_short_prefix_uses_what_there_is(small: NgramIndex) -> None:
    """P = 1 < N - 1: level 0's context is the one prefix token, level 1's that
    token and the candidate."""
    rng = np.random.default_rng(7)
    toks, probs = random_lattice(rng, 4, [6] * 4, with_eos=False)
    for prefix in ([DOCS[0][0]], [DOCS[1][3]], [VOCAB - 1]):
        for first in (False, True):
            ref = reference(prefix, toks, probs, beam_width=5, max_nodes=30, ngram_on_first_level=first)
            tree = small.prune(prefix, np.stack(toks), np.stack(probs), beam_width=5, max_nodes=30,
                               ngram_on_first_level=first)
            assert_same(tree, ref, prefix)


# ---- ties and the parent-closure rule ---------------------------------------------------

def test_all_scores_tied_keeps_shallow_nodes_first(small: NgramIndex) -> None:
    """Every p = 1 and lambda = 0: every node scores 0. The kept set is the
    first max_nodes in (depth, generation) order, closed under parents."""
    toks = np.array([[5, 6, 7], [8, 9, 10], [11, 12, 13]])
    probs = np.ones((3, 3), dtype=F)
    for max_nodes in range(1, 3 + 9 + 27):
        tree = small.prune([1, 2], toks, probs, beam_width=3, max_nodes=max_nodes, ngram_weight=0.0)
        check_encoding(tree, [1, 2])
        assert np.all(tree.scores == 0)
        assert tree.n_nodes == min(max_nodes, 3 + 9 + 9)  # beam 3: 3 entries x 3 at level 2
        depths = tree.depths[1:].tolist()
        assert depths == sorted(depths)
        # within depth 1 in candidate order, deeper nodes follow their beam entries' order
        assert tree.paths()[1:4][:max_nodes] == [(5,), (6,), (7,)][:max_nodes]
        if max_nodes >= 6:
            assert tree.paths()[4:7] == [(5, 8), (5, 9), (5, 10)]


def test_ties_between_parent_and_child_never_cut_the_parent(small: NgramIndex) -> None:
    """A child that scores exactly its parent's score (p = 1, q = 1 or lambda
    = 0) must not be kept without it: with max_nodes = 1 the parent wins."""
    toks = np.array([[20], [21], [22]])
    probs = np.ones((3, 1), dtype=F)
    for max_nodes in (1, 2, 3):
        tree = small.prune([3], toks, probs, beam_width=1, max_nodes=max_nodes, ngram_weight=0.0)
        check_encoding(tree, [3])
        assert tree.paths()[1:] == [(20,), (20, 21), (20, 21, 22)][:max_nodes]
    # Mixed: a low-probability sibling ties with a deep p = 1 chain.
    toks = np.array([[20, 30], [21, 31], [22, 32]])
    probs = np.array([[1.0, 0.5], [1.0, 0.0], [1.0, 0.0]], dtype=F)
    ref = reference([3], list(toks), list(probs), beam_width=2, max_nodes=4, ngram_weight=0.0)
    tree = small.prune([3], toks, probs, beam_width=2, max_nodes=4, ngram_weight=0.0)
    assert_same(tree, ref, [3])
    assert tree.paths()[1:] == [(20,), (30,), (20, 21), (20, 21, 22)]


def test_scores_equal_reference_even_when_absorbed(small: NgramIndex) -> None:
    """Large weights: a later level's term vanishes in float32 next to the
    running score; parents still come first."""
    toks = np.array([[20, 30], [21, 31], [22, 32]])
    probs = np.array([[1e-6, 1e-7], [0.5, 0.4], [0.9, 0.1]], dtype=F)
    lw = np.array([1e6, 1e-6, 1e-6], dtype=F)
    ref = reference([3], list(toks), list(probs), beam_width=2, max_nodes=5, level_weights=lw)
    tree = small.prune([3], toks, probs, beam_width=2, max_nodes=5, level_weights=lw, eos_token_id=EOS)
    assert_same(tree, ref, [3])


# ---- EOS ---------------------------------------------------------------------------------

def test_eos_ranks_last_in_the_beam_but_is_kept_by_score(small: NgramIndex) -> None:
    toks = np.array([[EOS, 40], [41, 42]])
    probs = np.array([[0.9, 0.1], [0.6, 0.4]], dtype=F)
    tree = small.prune([1], toks, probs, beam_width=1, max_nodes=10, ngram_weight=0.0)
    # beam 1: the non-EOS 40 is expanded although EOS scores higher; EOS is still a node
    assert tree.paths()[1:] == [(EOS,), (40,), (40, 41), (40, 42)]
    # no EOS rule: EOS is the beam's best and gets the children
    tree = small.prune([1], toks, probs, beam_width=1, max_nodes=10, ngram_weight=0.0, eos_token_id=-1)
    assert tree.paths()[1:] == [(EOS,), (40,), (EOS, 41), (EOS, 42)]
    # default: the trie's EOS
    assert small.eos_id == EOS
    tree = small.prune([1], toks, probs, beam_width=1, max_nodes=10, ngram_weight=0.0)
    assert tree.paths()[3] == (40, 41)


def test_eos_entries_are_expanded_when_in_the_beam(small: NgramIndex) -> None:
    """As DART: an entry ending in EOS that makes the beam (too few others)
    still gets children."""
    toks = np.array([[EOS, 40], [41, 42]])
    probs = np.array([[0.9, 0.1], [0.6, 0.4]], dtype=F)
    tree = small.prune([1], toks, probs, beam_width=2, max_nodes=10, ngram_weight=0.5)
    ref = reference([1], list(toks), list(probs), beam_width=2, max_nodes=10)
    assert_same(tree, ref, [1])
    assert (EOS, 41) in tree.paths()


# ---- limits and edge sizes -----------------------------------------------------------------

def test_limits_are_documented_values() -> None:
    assert LIMITS == {"max_depth": 64, "max_candidates": 1024, "max_beam_width": 1024, "max_nodes": 4096,
                      "max_weight": 1e6}


def test_at_the_limits(small: NgramIndex) -> None:
    rng = np.random.default_rng(3)
    # D = 64
    toks = rng.integers(0, 60, size=(64, 2))
    toks[:, 1] = toks[:, 0] + 1
    probs = np.full((64, 2), 0.5, dtype=F)
    tree = small.prune([1], toks, probs, beam_width=2, max_nodes=4096)
    check_encoding(tree, [1])
    assert tree.n_nodes == 2 + 63 * 4 and int(tree.depths.max()) == 64
    # K = 1024, beam 1024, max_nodes 4096: a million extensions at level 1
    toks = np.stack([rng.permutation(VOCAB)[:1024] for _ in range(2)])
    probs = np.sort(rng.random((2, 1024)).astype(F), axis=1)[:, ::-1].copy()
    tree = small.prune([1, 2], toks, probs, beam_width=1024, max_nodes=4096)
    check_encoding(tree, [1, 2])
    assert tree.n_nodes == 4096 and int(tree.depths.max()) == 2
    # the best nodes of level 1 are those of its best candidate, in rank order
    ref = reference([1, 2], list(toks[:1]), list(probs[:1]), beam_width=1024, max_nodes=4096)
    assert tree.paths()[1] == ref[0][0] and tree.scores[1] == ref[0][1]
    # max_nodes = 0: the root alone, which is its own leaf
    tree = small.prune([7], toks, probs, max_nodes=0)
    assert tree.tokens.tolist() == [7] and tree.retrieve_indices.tolist() == [[0]]
    assert tree.tree_mask.tolist() == [[True]]


def _lattice(d=2, k=3):
    return np.arange(1, d * k + 1).reshape(d, k), np.full((d, k), 0.25, dtype=F)


@pytest.mark.parametrize("kwargs, message", [
    (dict(prefix=[]), r"prefix is empty"),
    (dict(prefix=[[1, 2]]), r"prefix must be 1-D"),
    (dict(prefix=[1.5]), r"prefix: token ids must be integers"),
    (dict(prefix=[1, VOCAB]), r"prefix\[1\] = 2048 is not a token id"),
    (dict(prefix=[-1]), r"prefix\[0\] = -1"),
    (dict(topk_tokens=np.zeros((0, 3), dtype=np.int64), topk_probs=np.zeros((0, 3), dtype=F)), r"0 levels \(D\)"),
    (dict(topk_tokens=[], topk_probs=[]), r"0 levels \(D\)"),
    (dict(topk_tokens=np.arange(65 * 2).reshape(65, 2), topk_probs=np.full((65, 2), 0.1, F)), r"65 levels"),
    (dict(topk_tokens=np.zeros((2, 0), dtype=np.int64), topk_probs=np.zeros((2, 0), F)), r"0 candidates \(K\)"),
    (dict(topk_tokens=np.arange(2 * 1025).reshape(2, 1025) % VOCAB, topk_probs=np.full((2, 1025), 1e-4, F)),
     r"1025 candidates"),
    (dict(topk_probs=np.full((2, 4), 0.1, F)), r"topk_probs has shape \(2, 4\), topk_tokens \(2, 3\)"),
    (dict(topk_probs=np.full((3, 3), 0.1, F)), r"must match"),
    (dict(topk_tokens=np.arange(6)), r"topk_tokens must be 2-D"),
    (dict(topk_tokens=np.zeros((2, 3, 1), dtype=np.int64)), r"2-D"),
    (dict(topk_tokens=[[1, 2], [3]], topk_probs=[[0.5, 0.5]]), r"topk_probs has 1 levels, topk_tokens 2"),
    (dict(topk_tokens=[[1, 2], [3]], topk_probs=[[0.5, 0.5], [0.5, 0.5]]), r"level 1: .*must match"),
    (dict(topk_tokens=np.array([[1.0, 2.0, 3.0]] * 2)), r"topk_tokens: token ids must be integers"),
    (dict(topk_tokens=np.array([[1, 2, VOCAB]] * 2)), r"topk_tokens\[0\]\[2\] = 2048 is not a token id"),
    (dict(topk_tokens=np.array([[1, 2, 3], [4, -5, 6]])), r"topk_tokens\[1\]\[1\] = -5"),
    (dict(topk_tokens=np.array([[1, 2, 3], [4, 4, 6]])), r"topk_tokens\[1\] lists token 4 twice"),
    (dict(topk_probs=np.array([[0.5, np.nan, 0.1]] * 2, F)), r"topk_probs\[0\]\[1\] = nan: must be a probability"),
    (dict(topk_probs=np.array([[0.5, 0.1, 0.1], [0.5, 0.1, -0.1]], F)), r"topk_probs\[1\]\[2\] = -0.1"),
    (dict(topk_probs=np.array([[0.5, 1.5, 0.1]] * 2, F)), r"topk_probs\[0\]\[1\] = 1.5"),
    (dict(topk_probs=np.array([[0.5, np.inf, 0.1]] * 2, F)), r"topk_probs\[0\]\[1\] = inf"),
    # float64 beyond float32's range: named as given, not as the inf a cast would make.
    (dict(topk_probs=np.array([[0.5, 1e300, 0.1]] * 2)), r"topk_probs\[0\]\[1\] = 1e\+300: beyond float32's range"),
    (dict(topk_tokens=[[1, 2], [3]], topk_probs=[[0.5, 0.5], [-1e40]]), r"topk_probs\[1\]\[0\] = -1e\+40: beyond"),
    (dict(level_weights=[1.0, 1e39]), r"level_weights\[1\] = 1e\+39: beyond float32's range"),
    (dict(beam_width=0), r"beam_width = 0: must be 1..1024"),
    (dict(beam_width=1025), r"beam_width = 1025"),
    (dict(beam_width=2.5), r"beam_width must be an integer"),
    (dict(max_nodes=-1), r"max_nodes = -1: must be 0..4096"),
    (dict(max_nodes=4097), r"max_nodes = 4097"),
    (dict(ngram_weight=float("nan")), r"ngram_weight = nan"),
    (dict(ngram_weight=-0.5), r"ngram_weight = -0.5"),
    (dict(ngram_weight=1e7), r"ngram_weight = 10000000"),
    (dict(level_weights=[1.0]), r"level_weights has 1 entries: need one per level \(D = 2\)"),
    (dict(logit_weights=[1.0, float("inf")]), r"logit_weights\[1\] = inf"),
    (dict(level_weights=[[1.0, 1.0]]), r"level_weights must be 1-D"),
    (dict(eos_token_id=VOCAB), r"eos_token_id = 2048: must be -1 \(none\) or in \[0, 2048\)"),
    (dict(eos_token_id=-2), r"eos_token_id = -2"),
])
def test_invalid_input_raises_value_error(small: NgramIndex, kwargs, message) -> None:
    toks, probs = _lattice()
    args = dict(prefix=[1, 2], topk_tokens=toks, topk_probs=probs)
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        small.prune(args.pop("prefix"), args.pop("topk_tokens"), args.pop("topk_probs"), **args)


# ---- batches ---------------------------------------------------------------------------------

def test_batch_equals_single_calls(small: NgramIndex) -> None:
    rng = np.random.default_rng(11)
    reqs = []
    for i in range(30):
        toks, probs = random_lattice(rng, 4, [5] * 4 if i % 3 else [3, 6, 2, 5], with_eos=True)
        lattice = (np.stack(toks), np.stack(probs)) if i % 3 else (toks, probs)
        prefix = DOCS[i % len(DOCS)][:1 + i % 5]
        reqs.append((prefix, *lattice) if i % 2 else dict(prefix=prefix, topk_tokens=lattice[0], topk_probs=lattice[1]))
    for threads in (None, 1, 2, 7):
        trees = small.prune_batch(reqs, threads=threads, beam_width=4, max_nodes=25)
        assert len(trees) == len(reqs)
        for r, tree in zip(reqs, trees):
            r = (r["prefix"], r["topk_tokens"], r["topk_probs"]) if isinstance(r, dict) else r
            one = small.prune(*r, beam_width=4, max_nodes=25)
            assert np.array_equal(one.tokens, tree.tokens) and np.array_equal(one.parents, tree.parents)
            assert np.array_equal(one.scores, tree.scores) and np.array_equal(one.tree_mask, tree.tree_mask)
            assert np.array_equal(one.retrieve_indices, tree.retrieve_indices)
    assert small.prune_batch([]) == []


def test_batch_errors_name_the_request(small: NgramIndex) -> None:
    toks, probs = _lattice()
    bad = probs.copy()
    bad[1, 1] = 2.0
    good = ([1, 2], toks, probs)
    with pytest.raises(ValueError, match=r"requests\[2\]: topk_probs\[1\]\[1\] = 2"):
        small.prune_batch([good, good, ([1], toks, bad), ([1], toks, bad)], threads=2)
    with pytest.raises(ValueError, match=r"requests\[1\]: prefix is empty"):
        small.prune_batch([good, ([], toks, probs)])
    with pytest.raises(ValueError, match=r"requests\[0\]: unknown keys \['beam_width'\]"):
        small.prune_batch([dict(prefix=[1], topk_tokens=toks, topk_probs=probs, beam_width=3)])
    with pytest.raises(ValueError, match=r"requests\[0\]: missing key 'topk_probs'"):
        small.prune_batch([dict(prefix=[1], topk_tokens=toks)])
    with pytest.raises(ValueError, match=r"requests\[0\] must be a dict or"):
        small.prune_batch([([1], toks)])
    with pytest.raises(ValueError, match=r"threads must be"):
        small.prune_batch([good], threads=-1)
    with pytest.raises(ValueError, match=r"beam_width = 0"):
        small.prune_batch([good], beam_width=0)


def test_the_draft_tree_has_one_name() -> None:
    """prune, propose and the wire decoder return one type, DraftTree; PrunedTree, its old name, still
    names it with a DeprecationWarning."""
    import ngram_service.tree as tree_module
    from ngram_service import _engine

    assert DraftTree is _engine.DraftTree and not hasattr(_engine, "PrunedTree")
    with pytest.warns(DeprecationWarning, match="PrunedTree is deprecated: use ngram_service.tree.DraftTree"):
        assert tree_module.PrunedTree is DraftTree
    t = _engine.encode_tree([5, 6, 7], [-1, 0, 1])
    assert type(t) is DraftTree and repr(t) == "DraftTree(nodes=2, depth=2, leaves=1)"
    assert type(_engine.propose_lookup([1, 2, 1], 3)) is DraftTree
