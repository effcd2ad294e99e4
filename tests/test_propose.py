"""Corpus proposals (NgramIndex.propose) against a brute-force enumeration of
docs/PROPOSALS.md's semantics, on small random corpora: the same tree, the
same node order, the same float32 scores, for every representation."""
from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from indexer.trie_assembly import levels_from_ngrams, plans_from_ngrams, write_trie
from ngram_service import NgramIndex
from ngram_service.proposals import DEFAULTS, LIMITS

F = np.float32


class Corpus:
    """Random documents over a Zipf-like vocabulary: some contexts have runs
    of continuations longer than the engine reads whole (16), most do not."""

    def __init__(self, seed: int, order: int, vocab: int = 160, docs: int = 60, length: int = 300) -> None:
        rng = np.random.default_rng(seed)
        weights = 1.0 / np.arange(1, vocab + 1) ** 1.1
        weights /= weights.sum()
        self.order, self.vocab = order, vocab
        self.docs = [list(rng.choice(vocab, size=rng.integers(2, length), p=weights)) for _ in range(docs)]
        # Repeated phrases, so that long suffixes recur.
        phrase = list(rng.choice(vocab, size=12, p=weights))
        for d in self.docs[::3]:
            at = int(rng.integers(0, len(d)))
            d[at:at] = phrase
        self.counts: Counter = Counter(
            tuple(int(t) for t in d[i:i + k]) for d in self.docs for k in range(1, order + 1)
            for i in range(len(d) - k + 1))
        self.after: dict[tuple, dict[int, int]] = {}
        for g, c in self.counts.items():
            if len(g) >= 2:
                self.after.setdefault(g[:-1], {})[g[-1]] = c

    def write(self, path: Path, version: int) -> Path:
        levels = []
        for k in range(1, self.order + 1):
            grams = sorted(g for g in self.counts if len(g) == k)
            levels.append((np.array(grams, dtype=np.int64).reshape(-1, k),
                           np.array([self.counts[g] for g in grams], dtype=np.uint64)))
        write_trie(path, order=self.order, vocab_size=self.vocab, eos_id=None, meta={"name": "propose-test"},
                   plans=plans_from_ngrams(levels), chunks=levels_from_ngrams(levels), format_version=version)
        return path


def reference(data: Corpus, context: list[int], **given) -> list[tuple[int, int, float]]:
    """[(token, parent, score)] in the engine's node order, root first: every
    continuation of every node scored from the raw counts, the tree chosen
    one node at a time as docs/PROPOSALS.md says."""
    p = {**DEFAULTS, **given}
    n = len(context)
    d, order_weight = F(p["discount"]), F(p["order_weight"])

    def most_frequent(counts: dict[int, int], width: int) -> list[tuple[int, int]]:
        return sorted(counts.items(), key=lambda wc: (-wc[1], wc[0]))[:width]

    def corpus_scores(seq: list[int], width: int) -> dict[int, np.float32]:
        """Interpolated absolute discounting, longest suffix first; a suffix
        of two or more tokens keeps order_weight of its share."""
        L = min(data.order - 1, len(seq))
        out: dict[int, np.float32] = {}
        weight = F(1)
        for ln in range(L, 0, -1):
            s = tuple(seq[-ln:])
            after = data.after.get(s)
            if not after:
                continue
            keep = order_weight if ln >= 2 else F(1)
            inv = F(1) / F(data.counts[s])
            for w, c in most_frequent(after, width):
                own = F(F(F(c) - d) * inv) if F(c) > d else F(0)
                out[w] = F(out.get(w, F(0)) + F(weight * F(keep * own)))
            weight = F(weight * F(F(1) - F(keep * F(F(1) - F(F(d * F(len(after))) * inv)))))
        return out

    # The document source: where the context's longest suffix match ends.
    root_occ: list[int] = []
    lens = []
    for i in range(n - 1):
        ln = 0
        while ln < LIMITS["max_match"] and ln <= i and context[i - ln] == context[n - 1 - ln]:
            ln += 1
        lens.append(ln)
    best = max(lens, default=0)
    if n >= 2 and best >= p["lookup_min_match"]:
        root_occ = [i for i in range(n - 1) if lens[i] == best][-LIMITS["max_occurrences"]:]

    def doc_scores(path: tuple[int, ...], width: int) -> dict[int, np.float32]:
        depth = len(path)
        occ = [i + depth for i in root_occ if i + depth <= n - 2 and tuple(context[i + 1:i + 1 + depth]) == path]
        if not occ:
            return {}
        decayed = F(1)
        for _ in range(best + depth):  # the match grows by one token a level
            decayed = F(decayed * F(p["lookup_decay"]))
        m = F(len(occ))
        evidence = F(F(F(p["lookup_weight"]) * F(m / F(m + F(p["lookup_prior"])))) * F(F(1) - decayed))
        inv = F(1) / m
        return {w: F(F(F(c) * inv) * evidence) for w, c in most_frequent(Counter(context[j + 1] for j in occ), width)}

    def combine(c: np.float32, dc: np.float32) -> np.float32:
        return min(F(1), F(F(1) - F(F(F(1) - c) * F(F(1) - dc))) if c > 0 and dc > 0 else max(c, dc))

    def children(path: tuple[int, ...]) -> list[tuple[int, np.float32]]:
        width = p["max_branch"] if path else p["root_branch"]
        corpus = corpus_scores(list(context) + list(path), width) if p["corpus"] else {}
        document = doc_scores(path, width) if p["lookup"] else {}
        scores = {w: combine(corpus.get(w, F(0)), document.get(w, F(0))) for w in corpus.keys() | document.keys()}
        ranked = sorted(scores.items(), key=lambda ws: (-ws[1], ws[0]))
        return [(w, s) for w, s in ranked if s > 0][:width]

    chosen = [(context[-1], -1, 0, F(1), ())]  # token, parent, depth, prob, path
    kids: dict[int, list] = {}
    while len(chosen) - 1 < p["max_nodes"]:
        taken = {c[4] for c in chosen}
        options = []
        for v, (_, _, depth, prob, path) in enumerate(chosen):
            if depth >= p["max_depth"]:
                continue
            if v not in kids:
                kids[v] = children(path)
            for w, s in kids[v]:
                child = F(prob * s)
                if child >= F(p["min_prob"]) and child > 0 and path + (w,) not in taken:
                    options.append((-child, depth + 1, v, w))
        if not options:
            break
        negp, depth, v, w = min(options)
        chosen.append((w, v, depth, F(-negp), chosen[v][4] + (w,)))
    order = sorted(range(len(chosen)), key=lambda i: (chosen[i][2], i))
    place = {old: new for new, old in enumerate(order)}
    return [(chosen[i][0], -1 if chosen[i][1] < 0 else place[chosen[i][1]], float(chosen[i][3])) for i in order]


def assert_same(tree, ref) -> None:
    got = list(zip(tree.tokens.tolist(), tree.parents.tolist(), tree.scores.tolist()))
    assert got == ref
    # The encoding: every node's mask row marks exactly its ancestors and itself.
    for i, par in enumerate(tree.parents.tolist()):
        want = {i}
        while par >= 0:
            want.add(par)
            par = tree.parents[par]
        assert set(np.flatnonzero(tree.tree_mask[i]).tolist()) == want
    assert tree.depths[0] == 0 and all(tree.depths[i] == tree.depths[tree.parents[i]] + 1
                                       for i in range(1, len(tree.tokens)))


REPRESENTATIONS = [(1, "mmap"), (1, "ram"), (2, "mmap")]


@pytest.fixture(scope="module", params=[2, 3, 5], ids=lambda o: f"order{o}")
def corpus(request: pytest.FixtureRequest) -> Corpus:
    return Corpus(seed=request.param * 7, order=request.param)


@pytest.fixture(scope="module")
def tries(corpus: Corpus, tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[int, str], NgramIndex]:
    root = tmp_path_factory.mktemp(f"propose{corpus.order}")
    files = {v: corpus.write(root / f"v{v}.ngt", v) for v in (1, 2)}
    return {(v, mode): NgramIndex.open(files[v], mode=mode, verify=True) for v, mode in REPRESENTATIONS}


PARAMS = [
    {},
    {"max_nodes": 16, "max_depth": 3},
    {"max_nodes": 200, "max_depth": 12, "max_branch": 3, "min_prob": 0.0},
    {"discount": 1.0, "max_branch": 32, "max_nodes": 120},
    {"discount": 0.0, "lookup_decay": 1.0},
    {"discount": 0.3, "lookup_decay": 0.0, "lookup_prior": 0.0, "max_depth": 16},
    {"order_weight": 1.0, "root_branch": 16},
    {"order_weight": 0.0, "discount": 0.0},
    {"order_weight": 0.3, "root_branch": 2, "max_branch": 5},
    {"lookup": False},
    {"corpus": False, "lookup_min_match": 1},
    {"lookup_weight": 0.3, "lookup_min_match": 3, "min_prob": 0.01},
    {"max_nodes": 0},
    {"max_depth": 0},
]


def contexts(corpus: Corpus, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(6):
        d = corpus.docs[int(rng.integers(len(corpus.docs)))]
        end = int(rng.integers(1, len(d) + 1))
        out.append([int(t) for t in d[max(0, end - int(rng.integers(1, 120))):end]])
    out.append([int(rng.integers(corpus.vocab))])  # one token: no lookup, short suffixes only
    out.append([int(t) for t in rng.integers(0, corpus.vocab, size=40)])  # mostly unseen suffixes
    return out


@pytest.mark.parametrize("params", PARAMS, ids=lambda p: ",".join(f"{k}={v}" for k, v in p.items()) or "defaults")
def test_matches_brute_force(corpus: Corpus, tries: dict, params: dict) -> None:
    for ctx in contexts(corpus, seed=len(params)):
        ref = reference(corpus, ctx, **params)
        for key, index in tries.items():
            tree = index.propose(np.array(ctx), **params)
            try:
                assert_same(tree, ref)
            except AssertionError:
                raise AssertionError(f"{key}, context {ctx}: {tree.tokens.tolist()} != {[r[0] for r in ref]}")


def test_trees_are_the_same_warm_and_cold(corpus: Corpus, tries: dict, tmp_path: Path) -> None:
    """The long runs' lists are kept once read: a fresh open answers alike."""
    ctxs = contexts(corpus, seed=99)
    warm = tries[(1, "mmap")]
    for ctx in ctxs:
        warm.propose(ctx)
    fresh = NgramIndex.open(corpus.write(tmp_path / "fresh.ngt", 1))
    for ctx in ctxs:
        a, b = warm.propose(ctx), fresh.propose(ctx)
        assert a.tokens.tolist() == b.tokens.tolist() and a.scores.tolist() == b.scores.tolist()


def test_batch_equals_one_at_a_time(corpus: Corpus, tries: dict) -> None:
    index = tries[(1, "ram")]
    ctxs = contexts(corpus, seed=5) * 3
    for threads in (None, 1, 2):
        batch = index.propose_batch(ctxs, threads=threads, max_nodes=32)
        for ctx, tree in zip(ctxs, batch):
            one = index.propose(ctx, max_nodes=32)
            assert tree.tokens.tolist() == one.tokens.tolist() and tree.parents.tolist() == one.parents.tolist()


def test_threads_filling_a_fresh_trie_answer_as_one(corpus: Corpus, tmp_path: Path) -> None:
    """A fresh open's first batch on 4 threads fills the runs' bounds and
    lists concurrently; a second fresh open, one context at a time, agrees."""
    path = corpus.write(tmp_path / "fresh.ngt", 1)
    ctxs = contexts(corpus, seed=17) * 4
    batch = NgramIndex.open(path, mode="ram").propose_batch(ctxs, threads=4)
    single = NgramIndex.open(path, mode="ram")
    for ctx, tree in zip(ctxs, batch):
        one = single.propose(ctx)
        assert tree.tokens.tolist() == one.tokens.tolist() and tree.scores.tolist() == one.scores.tolist()


@pytest.mark.parametrize("budget, mode", [
    ("NGRAM_RUN_BOUNDS_BYTES", "ram"), ("NGRAM_RUN_TOPS_BYTES", "ram"), ("NGRAM_RUN_TOPS_BYTES", "mmap")])
def test_past_the_budgets_everything_is_computed_each_time(
    corpus: Corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, budget: str, mode: str
) -> None:
    """A trie opened with no room for kept run bounds (every level past
    RunBounds' budget) computes each bound when needed; with no room for
    kept lists of long runs (RunTopCache's), it reads each long run when
    needed and its children find their entries in that list at once, the
    path of a corpus-scale trie whose lists fill the budget. Either way:
    the brute force's trees."""
    assert max(len(after) for after in corpus.after.values()) >= 16  # long runs exist (RunTopCache::kMinRun)
    monkeypatch.setenv(budget, "0")
    index = NgramIndex.open(corpus.write(tmp_path / "t.ngt", 1), mode=mode)
    for params in PARAMS:
        for ctx in contexts(corpus, seed=len(params)):
            assert_same(index.propose(np.array(ctx), **params), reference(corpus, ctx, **params))


@pytest.mark.parametrize("budget", ["NGRAM_RUN_BOUNDS_BYTES", "NGRAM_RUN_TOPS_BYTES"])
def test_a_budget_that_is_not_a_number_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, budget: str
) -> None:
    """A budget the environment sets to anything but a byte count raises,
    naming the variable, rather than keeping nothing."""
    path = Corpus(seed=1, order=3, vocab=20, docs=3, length=10).write(tmp_path / "t.ngt", 1)
    monkeypatch.setenv(budget, "64MB")
    with pytest.raises(ValueError, match=f"{budget} = '64MB': must be a number of bytes"):
        NgramIndex.open(path).propose([1, 2, 3])


def test_prompt_lookup_alone_follows_the_context(tmp_path: Path) -> None:
    """corpus=False: only the context's own earlier occurrences propose."""
    c = Corpus(seed=1, order=3, vocab=20, docs=3, length=10)
    index = NgramIndex.open(c.write(tmp_path / "t.ngt", 1))
    ctx = [1, 2, 3, 4, 5, 6, 9, 9, 1, 2, 3]
    raw = {"lookup_prior": 0.0, "lookup_decay": 0.0}  # the shares alone, as prompt lookup counts them
    tree = index.propose(ctx, corpus=False, max_nodes=10, **raw)
    # "1 2 3" occurred before, followed by 4 5 6 9 9 1 2 3: one chain, each step certain.
    assert tree.tokens.tolist() == [3, 4, 5, 6, 9, 9, 1, 2, 3]  # to the context's end
    assert tree.parents.tolist() == [-1, 0, 1, 2, 3, 4, 5, 6, 7]
    assert tree.scores.tolist() == [1.0] * 9
    # By default a step weighs its evidence: one occurrence n / (n + 1) = 1/2,
    # a match of m tokens 1 - 0.5^m; the match grows a token each step.
    tree = index.propose(ctx, corpus=False, max_nodes=3)
    want = [F(1)]
    for m in (3, 4, 5):
        want.append(F(want[-1] * F(F(0.5) * F(1 - 0.5 ** m))))
    assert tree.tokens.tolist() == [3, 4, 5, 6] and tree.scores.tolist() == [float(w) for w in want]
    # Two earlier matches that differ split the probability.
    tree = index.propose([7, 1, 8, 7, 1, 9, 7, 1], corpus=False, max_nodes=2, max_depth=1, lookup_min_match=2,
                         **raw)
    assert tree.tokens.tolist() == [1, 8, 9] and tree.scores.tolist() == [1.0, 0.5, 0.5]
    # A match shorter than lookup_min_match proposes nothing.
    assert index.propose([5, 1, 6, 1], corpus=False, lookup_min_match=2).tokens.tolist() == [1]
    assert index.propose([5, 1, 6, 1], corpus=False, lookup_min_match=1, max_depth=1).tokens.tolist() == [1, 6]


@pytest.mark.parametrize("call, message", [
    (lambda t: t.propose([]), "context: empty"),
    (lambda t: t.propose([1, 2, 999]), "context[2] = 999 is not a token id: must be in [0, 160)"),
    (lambda t: t.propose([1, -1]), "context[1] = -1 is not a token id"),
    (lambda t: t.propose([[1, 2]]), "context must be 1-D [N], got shape (1, 2)"),
    (lambda t: t.propose([1.5]), "context: token ids must be integers"),
    (lambda t: t.propose([1], max_nodes=4097), "max_nodes = 4097: must be in 0..4096"),
    (lambda t: t.propose([1], max_depth=65), "max_depth = 65: must be in 0..64"),
    (lambda t: t.propose([1], max_branch=0), "max_branch = 0: must be in 1..32"),
    (lambda t: t.propose([1], lookup_min_match=33), "lookup_min_match = 33: must be in 1..32"),
    (lambda t: t.propose([1], min_prob=float("nan")), "min_prob = nan: must be in [0, 1]"),
    (lambda t: t.propose([1], discount=1.5), "discount = 1.5: must be in [0, 1]"),
    (lambda t: t.propose([1], lookup_prior=-1.0), "lookup_prior = -1: must be in [0, 1]"),
    (lambda t: t.propose([1], order_weight=1.5), "order_weight = 1.5: must be in [0, 1]"),
    (lambda t: t.propose([1], root_branch=33), "root_branch = 33: must be in 1..32"),
    (lambda t: t.propose([1], lookup_weight=-0.1), "lookup_weight = -0.1: must be in [0, 1]"),
    (lambda t: t.propose([1], max_nodes=True), "max_nodes must be an integer, got True"),
    (lambda t: t.propose([1], lookup=1), "lookup must be True or False, got 1"),
    (lambda t: t.propose_batch([[1], [], [2]]), "contexts[1]: context: empty"),
    (lambda t: t.propose_batch([[1], [[2]]]), "contexts[1]: context must be 1-D"),
])
def test_bad_input_is_named(tries: dict, call, message: str) -> None:
    with pytest.raises(ValueError) as e:
        call(tries[(1, "mmap")])
    assert message in str(e.value)


def test_unknown_keyword_is_a_type_error(tries: dict) -> None:
    with pytest.raises(TypeError, match=r"propose\(\) got an unexpected keyword argument 'nodes'"):
        tries[(1, "mmap")].propose([1], nodes=3)


def test_limits_and_defaults_are_the_engines() -> None:
    assert LIMITS["max_nodes"] == 4096 and LIMITS["max_depth"] == 64 and LIMITS["max_branch"] == 32
    assert DEFAULTS == {"max_nodes": 64, "max_depth": 16, "max_branch": 16, "min_prob": 1e-4, "corpus": True,
                        "lookup": True, "lookup_weight": 1.0, "lookup_min_match": 1, "discount": 0.75,
                        "lookup_decay": 0.5, "lookup_prior": 1.0, "order_weight": 0.6, "root_branch": 32}
    assert list(itertools.islice(DEFAULTS, 1)) == ["max_nodes"]


def test_lookup_without_a_trie_is_the_document_source(corpus: Corpus, tries: dict) -> None:
    """propose_lookup (no trie: a client whose host is down) proposes what
    propose does with the corpus source off."""
    from ngram_service.proposals import propose_lookup

    index = tries[(1, "mmap")]
    for ctx in contexts(corpus, seed=3):
        for params in ({}, {"lookup_min_match": 1, "max_nodes": 8}):
            a = propose_lookup(ctx, corpus.vocab, **params)
            b = index.propose(ctx, corpus=False, **params)
            assert a.tokens.tolist() == b.tokens.tolist() and a.scores.tolist() == b.scores.tolist()
            assert a.tokens.tolist() == [r[0] for r in reference(corpus, ctx, corpus=False, **params)]
    with pytest.raises(ValueError, match=r"context\[1\] = 160 is not a token id: must be in \[0, 160\)"):
        propose_lookup([1, 160], corpus.vocab)
    with pytest.raises(ValueError, match="vocab_size = 0: must be in 1..2147483648"):
        propose_lookup([1], 0)
