"""ngram-eval: lattice logs, replay exactness against DART's trees, synthetic lattices, the command."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from click.testing import CliRunner

from conftest import GOLDEN, SAMPLE_CORPUS, SAMPLE_TOKENIZER
from dart_client.lattice_log import LATTICE_SCHEMA, LatticeFormatError, LatticeSet, LatticeWriter, read_lattices
from ngram_eval.cli import main as eval_main
from ngram_eval.replay import (PruneSetting, accepted_length, accepted_lengths, hit_rates, prune_lattices,
                               replay)
from ngram_eval.report import evaluate, format_table
from ngram_eval.synthetic import LogitModel, load_documents, synthetic_lattices
from ngram_service import NgramIndex


# ---- DART's reference trees ------------------------------------------------------------

def golden_lattices() -> tuple[dict, LatticeSet]:
    if not (GOLDEN / "tree_sample.npz").is_file():
        pytest.skip("../shared/golden is not present")
    g = dict(np.load(GOLDEN / "tree_sample.npz"))
    off = g["prompt_offsets"]
    n = len(off) - 1
    prefixes = [g["prompt_flat"][off[i]:off[i + 1]].astype(np.int64) for i in range(n)]
    # A placeholder continuation; the tests below set their own.
    lat = LatticeSet(prefixes, [g["topk_tokens"][i].astype(np.int64) for i in range(n)],
                     [g["topk_probs"][i] for i in range(n)], [np.zeros(1, np.int64)] * n,
                     np.arange(n), np.zeros(n, np.int64), source="tree_sample.npz")
    return g, lat


def dart_accepted(g: dict, i: int, cont: list[int]) -> int:
    """DART's evaluate_posterior on its own tree (draft_tokens, retrieve_indices):
    per leaf row, the run of candidates equal to the target's tokens, the
    best row, plus the bonus token (cut to the continuation's length)."""
    toks, ri = g["draft_tokens"][i], g["retrieve_indices"][i][:g["n_leaves"][i], :g["retrieve_width"][i]]
    best = 0
    for row in ri:
        acc = 0
        for j in range(1, len(row)):
            if row[j] < 0 or acc >= len(cont) or toks[row[j]] != cont[j - 1]:
                break
            acc += 1
        best = max(best, acc)
    return min(best + 1, len(cont))


def continuations_for(g: dict, i: int, rng: np.random.Generator) -> list[list[int]]:
    """Continuations that stop at every depth of DART's tree and beyond it:
    each of its node paths followed by a lattice token, and random walks
    through the lattice."""
    out = []
    paths = [[int(x) for x in row if x >= 0] for row in g["node_paths"][i][1:]]
    lat = g["topk_tokens"][i]
    for p in paths:
        nxt = int(lat[len(p) % lat.shape[0], int(rng.integers(0, lat.shape[1]))])
        out.append(p + [nxt, 7, 8, 9][: 9 - len(p)])
    out.append([151935, 3, 4])  # not a token of the lattice: the bonus alone
    for _ in range(10):
        out.append([int(lat[d, int(rng.integers(0, 3))]) for d in range(lat.shape[0])] + [11])
    return out


def test_replayed_trees_equal_prune_and_dart(corpus_trie: Path) -> None:
    g, lat = golden_lattices()
    idx = NgramIndex.open(corpus_trie)
    trees, seconds = prune_lattices(idx, lat, PruneSetting(int(g["beam_width"]), int(g["remain_total"]),
                                                           float(g["ngram_weight"])), threads=2)
    assert seconds > 0 and len(trees) == 200
    for i in range(200):
        one = idx.prune(lat.prefixes[i], lat.topk_tokens[i], lat.topk_probs[i], beam_width=20, max_nodes=60,
                        ngram_weight=0.5, level_weights=g["level_weights"], logit_weights=g["logit_weights"],
                        eos_token_id=int(g["eos_token"]))
        for f in ("tokens", "parents", "depths", "scores", "retrieve_indices"):
            assert np.array_equal(getattr(trees[i], f), getattr(one, f)), (i, f)
        gold = {tuple(int(x) for x in row if x >= 0) for row in g["node_paths"][i][1:]}
        assert set(trees[i].paths()[1:]) == gold


def test_accepted_length_agrees_with_darts_trees(corpus_trie: Path) -> None:
    g, lat = golden_lattices()
    idx = NgramIndex.open(corpus_trie)
    trees, _ = prune_lattices(idx, lat)
    rng = np.random.default_rng(0)
    all_trees, all_conts, expected = [], [], []
    for i in range(0, 200, 4):
        for cont in continuations_for(g, i, rng):
            want = dart_accepted(g, i, cont)
            assert accepted_length(trees[i], cont) == want, (i, cont)
            all_trees.append(trees[i])
            all_conts.append(np.asarray(cont, np.int64))
            expected.append(want)
    assert np.array_equal(accepted_lengths(all_trees, all_conts), expected)
    # Every depth occurs: the check covers short and full acceptance.
    deepest = max(int(trees[i].depths.max()) for i in range(0, 200, 4))
    assert deepest >= 5 and set(expected) == set(range(1, deepest + 2))


def test_replay_counts_the_continuation(corpus_trie: Path) -> None:
    g, lat = golden_lattices()
    idx = NgramIndex.open(corpus_trie)
    trees, _ = prune_lattices(idx, lat)
    # Each tree's deepest path as the continuation, plus one token: accepted = depth + 1.
    conts = []
    for t in trees:
        deepest = max(t.paths(), key=len)
        conts.append(np.asarray(list(deepest) + [5], np.int64))
    lat.continuations = conts
    r = replay(idx, lat)
    assert np.array_equal(r.accepted, [len(c) for c in conts])
    # Cut to one token, a step accepts only that token (the bonus).
    lat.continuations = [c[:1] for c in conts]
    assert replay(idx, lat).accepted.tolist() == [1] * 200


# ---- accepted length, hit rates, id fitting --------------------------------------------

@pytest.fixture(scope="module")
def sample_index(sample_trie: Path) -> NgramIndex:
    return NgramIndex.open(sample_trie)


@pytest.fixture(scope="module")
def sample_docs() -> list[np.ndarray]:
    docs, nbytes = load_documents([str(SAMPLE_CORPUS)], str(SAMPLE_TOKENIZER))
    assert len(docs) == 50 and nbytes > 100_000
    return docs


def test_accepted_lengths_match_the_walk(sample_index: NgramIndex, sample_docs: list[np.ndarray]) -> None:
    lat = synthetic_lattices(sample_docs, LogitModel(depth=5, topk=6), steps=300, seed=3)
    trees, _ = prune_lattices(sample_index, lat, PruneSetting(4, 20, 0.5))
    fast = accepted_lengths(trees, lat.continuations)
    assert fast.tolist() == [accepted_length(t, c) for t, c in zip(trees, lat.continuations)]
    assert len(set(fast.tolist())) >= 3


def test_hit_rates_are_counts(sample_index: NgramIndex, sample_docs: list[np.ndarray]) -> None:
    lat = synthetic_lattices(sample_docs, LogitModel(depth=3, topk=4), steps=50, seed=1)
    got = hit_rates(sample_index, lat)
    hits = {2: 0, 3: 0}
    total = 0
    for pre, cont in zip(lat.prefixes, lat.continuations):
        seq = list(pre) + list(cont)
        for d in range(3):
            end = len(pre) + d
            total += 1
            for k in (2, 3):
                if end >= k - 1 and sample_index.count(seq[end - k + 1:end + 1]) > 0:
                    hits[k] += 1
    # Training text: every bigram and trigram occurs (a k-gram with fewer context tokens never counts).
    assert got == {k: hits[k] / total for k in (2, 3)}


def test_unknown_ids_are_fitted_like_the_pruner(sample_index: NgramIndex) -> None:
    v = sample_index.vocab_size
    toks = np.array([[10, v + 5, 11], [v + 1, 12, 13]], np.int64)
    probs = np.array([[0.5, 0.3, 0.2], [0.6, 0.3, 0.1]], np.float32)
    lat = LatticeSet([np.array([5, v + 2, 7])], [toks], [probs], [np.array([11, 13, 1])], np.zeros(1),
                     np.zeros(1), source="t")
    (tree,), _ = prune_lattices(sample_index, lat)
    ref = sample_index.prune(np.array([7]), [np.array([10, 11]), np.array([12, 13])],
                             [np.array([0.5, 0.2], np.float32), np.array([0.3, 0.1], np.float32)])
    assert np.array_equal(tree.tokens, ref.tokens) and np.array_equal(tree.parents, ref.parents)
    # An unknown root: pruned without the n-gram (the drafter's order), as the pruner's fallback does.
    lat.prefixes = [np.array([v + 9])]
    (tree,), _ = prune_lattices(sample_index, lat)
    assert tree.tokens[0] == v + 9 and tree.n_nodes == 3 + 3 * 3
    assert tree.tokens[1:4].tolist() == [10, v + 5, 11]  # the drafter's order: no n-gram term


def test_bad_lattice_names_its_row(sample_index: NgramIndex) -> None:
    good = (np.array([3, 4], np.int64), np.array([[10, 11]], np.int64), np.array([[0.6, 0.4]], np.float32))
    bad = (np.array([3, 4], np.int64), np.array([[10, 10]], np.int64), np.array([[0.6, 0.4]], np.float32))
    rows = [good] * 5 + [bad]
    lat = LatticeSet([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows],
                     [np.array([10])] * 6, np.zeros(6), np.zeros(6), source="x.parquet")
    with pytest.raises(ValueError, match=r"x\.parquet: lattice 5: .*twice|x\.parquet: lattice 5: .*duplicate"):
        replay(sample_index, lat)


# ---- synthetic lattices ----------------------------------------------------------------

def test_synthetic_model_extremes(sample_index: NgramIndex, sample_docs: list[np.ndarray]) -> None:
    sure = LogitModel(depth=4, topk=5, hit=1.0, decay=1.0, true_bonus=50.0, noise=0.0)
    lat = synthetic_lattices(sample_docs, sure, steps=200, seed=0)
    assert len(lat) == 200 and all(t.shape == (4, 5) for t in lat.topk_tokens)
    assert all(np.array_equal(t[:, 0], c[:4]) for t, c in zip(lat.topk_tokens, lat.continuations))
    assert all(np.all(np.diff(p, axis=1) <= 0) for p in lat.topk_probs)
    # The drafter alone (lambda 0) finds every true token: D + 1 per step.
    assert replay(sample_index, lat, PruneSetting(5, 20, 0.0)).accepted.tolist() == [5] * 200
    # Never a true candidate: only the bonus token.
    blind = LogitModel(depth=4, topk=5, hit=0.0)
    lat = synthetic_lattices(sample_docs, blind, steps=200, seed=0)
    assert replay(sample_index, lat).accepted.tolist() == [1] * 200
    # Same seed, same lattices; another seed, others.
    a = synthetic_lattices(sample_docs, LogitModel(depth=3, topk=4), steps=50, seed=7)
    b = synthetic_lattices(sample_docs, LogitModel(depth=3, topk=4), steps=50, seed=7)
    c = synthetic_lattices(sample_docs, LogitModel(depth=3, topk=4), steps=50, seed=8)
    assert all(np.array_equal(x, y) for x, y in zip(a.topk_tokens, b.topk_tokens))
    assert not all(np.array_equal(x, y) for x, y in zip(a.topk_tokens, c.topk_tokens))


def test_synthetic_rejects_short_text() -> None:
    with pytest.raises(ValueError, match="no document has more than 9 tokens"):
        synthetic_lattices([np.arange(5)], LogitModel(), steps=10)


# ---- the lattice log -------------------------------------------------------------------

def write_log(path: Path, seqs: list[list[int]], depth: int = 3, k: int = 4) -> None:
    """Each sequence: a prompt of 2 tokens, then steps committing 1 or 2 tokens."""
    rng = np.random.default_rng(0)
    with LatticeWriter(path, tail=4) as w:
        for sid, seq in enumerate(seqs):
            pos, step = 2, 0
            while pos < len(seq):
                n = 1 + (step % 2)
                toks = np.stack([rng.permutation(50)[:k] for _ in range(depth)])
                w.write_step(sid, step, seq[:pos], toks, np.full((depth, k), 1.0 / k, np.float32),
                             seq[pos:pos + n])
                pos += n
                step += 1


def test_lattice_log_round_trip(tmp_path: Path) -> None:
    f = tmp_path / "log.parquet"
    seqs = [list(range(100, 112)), list(range(200, 205))]
    write_log(f, seqs)
    assert pq.read_schema(f).equals(LATTICE_SCHEMA)
    lat = read_lattices(f)
    assert len(lat) == 7 + 2 and lat.depth == 3
    for pre, cont, sid in zip(lat.prefixes, lat.continuations, lat.sequence_ids):
        seq = seqs[int(sid)]
        pos = seq.index(int(pre[-1])) + 1
        assert pre.tolist() == seq[max(0, pos - 4):pos]  # the tail of 4 tokens
        assert cont.tolist() == seq[pos:pos + 4]  # the rest of the sequence, cut at depth + 1


def test_lattice_log_levels_of_different_widths(tmp_path: Path) -> None:
    f = tmp_path / "ragged.parquet"
    with LatticeWriter(f) as w:
        w.write_step(3, 0, [1, 2], [[5, 6, 7], [8]], [[0.5, 0.3, 0.2], [1.0]], [5, 8])
        w.write_step(3, 1, [1, 2, 5, 8], np.array([[9, 10]]), np.array([[0.9, 0.1]]), [4])
    lat = read_lattices(f)
    assert [x.tolist() for x in lat.topk_tokens[0]] == [[5, 6, 7], [8]]
    assert lat.topk_probs[0][1].dtype == np.float32 and lat.topk_tokens[1].shape == (1, 2)
    assert [c.tolist() for c in lat.continuations] == [[5, 8, 4], [4]]


def test_lattice_writer_is_atomic(tmp_path: Path) -> None:
    f = tmp_path / "log.parquet"
    w = LatticeWriter(f)
    w.write_step(0, 0, [1, 2], [[3, 4]], [[0.5, 0.5]], [3])
    assert not f.exists()
    w.abort()
    assert not f.exists() and not list(tmp_path.iterdir())
    with pytest.raises(RuntimeError):
        with LatticeWriter(f) as w:
            w.write_step(0, 0, [1, 2], [[3, 4]], [[0.5, 0.5]], [3])
            raise RuntimeError("crash")
    assert not list(tmp_path.iterdir())
    with pytest.raises(ValueError, match="empty prefix or committed"):
        LatticeWriter(f).write_step(0, 0, [1], [[3, 4]], [[0.5, 0.5]], [])


def _rewrite(src: Path, dst: Path, fn) -> Path:
    pq.write_table(fn(pq.read_table(src)), dst)
    return dst


def test_lattice_log_bad_input(tmp_path: Path) -> None:
    f = tmp_path / "log.parquet"
    write_log(f, [list(range(100, 110))])
    t = pq.read_table(f)
    bad = _rewrite(f, tmp_path / "a.parquet", lambda t: t.drop(["committed"]))
    with pytest.raises(LatticeFormatError, match=r"a\.parquet: missing column committed"):
        read_lattices(bad)
    bad = _rewrite(f, tmp_path / "b.parquet",
                   lambda t: t.set_column(t.schema.get_field_index("topk_probs"), "topk_probs",
                                          pa.array([["x"]] * len(t))))
    with pytest.raises(LatticeFormatError, match="column topk_probs is list<.*string>, expected"):
        read_lattices(bad)
    steps = t.column("step").to_pylist()
    steps[3] = 7
    bad = _rewrite(f, tmp_path / "c.parquet",
                   lambda t: t.set_column(1, "step", pa.array(steps, pa.int32())))
    with pytest.raises(LatticeFormatError, match="sequence 0 step 4 does not follow step 2"):
        read_lattices(bad)
    probs = t.column("topk_probs").to_pylist()
    probs[2][1] = probs[2][1][:-1]
    bad = _rewrite(f, tmp_path / "d.parquet",
                   lambda t: t.set_column(4, "topk_probs", pa.array(probs, pa.list_(pa.list_(pa.float32())))))
    with pytest.raises(LatticeFormatError, match=r"row 2: level 1: 4 top-k tokens, 3 probabilities"):
        read_lattices(bad)
    probs = t.column("topk_probs").to_pylist()
    probs[4][2][0] = 1.5
    bad = _rewrite(f, tmp_path / "p.parquet",
                   lambda t: t.set_column(4, "topk_probs", pa.array(probs, pa.list_(pa.list_(pa.float32())))))
    with pytest.raises(LatticeFormatError, match=r"row 4: level 2: probability 1.5 outside \[0, 1\]"):
        read_lattices(bad)
    done = t.column("committed").to_pylist()
    done[1] = []
    bad = _rewrite(f, tmp_path / "q.parquet", lambda t: t.set_column(5, "committed", pa.array(done, pa.list_(pa.int32()))))
    with pytest.raises(LatticeFormatError, match="row 1: committed is empty"):
        read_lattices(bad)
    with LatticeWriter(tmp_path / "empty.parquet"):
        pass
    assert len(read_lattices(tmp_path / "empty.parquet")) == 0
    (tmp_path / "e.parquet").write_bytes(b"not parquet")
    with pytest.raises(LatticeFormatError, match="e.parquet: not a readable Parquet file"):
        read_lattices(tmp_path / "e.parquet")


# ---- the command -----------------------------------------------------------------------

def run(args: list[str], code: int = 0):
    r = CliRunner().invoke(eval_main, [str(a) for a in args])
    assert r.exit_code == code, r.output + (repr(r.exception) if r.exception else "")
    return r


@pytest.fixture(scope="module")
def bigram_trie(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled sample corpus, N = 2."""
    from indexer.pipeline import BuildConfig, build

    out = tmp_path_factory.mktemp("bigram") / "sample2.ngt"
    build(BuildConfig(inputs=[str(SAMPLE_CORPUS)], out=str(out), tokenizer=str(SAMPLE_TOKENIZER), order=2,
                      workers=1), progress=lambda _m: None)
    return out


SMALL = ["--steps", 150, "--depth", 4, "--lattice-topk", 6]  # synthetic lattices small enough for a test


def test_cli_text_json_and_plot(sample_trie: Path, bigram_trie: Path, tmp_path: Path) -> None:
    png = tmp_path / "r.png"
    args = [sample_trie, bigram_trie, "--text", SAMPLE_CORPUS, "--tokenizer", SAMPLE_TOKENIZER, *SMALL,
            "--ngram-weight", "0.5,0", "--max-nodes", "10,30", "--quiet"]
    r = run(args)
    assert "150 lattices, depth 4" in r.stdout and "best:" in r.stdout
    r = run([*args, "--json"])
    doc = json.loads(r.stdout)  # the JSON instead of the table
    assert doc["lattices"]["mode"] == "synthetic" and doc["lattices"]["steps"] == 150
    assert doc["lattices"]["texts"] == [str(SAMPLE_CORPUS)]
    assert len(doc["settings"]) == 4 and len(doc["tries"]) == 2
    t = doc["tries"][0]
    assert t["path"] == str(sample_trie) and t["order"] == 3 and t["min_count"] == 1
    assert set(t["hit_rate"]) == {"2", "3"}
    assert len(t["accepted_length_histogram"]) == 6 and abs(sum(t["accepted_length_histogram"]) - 1) < 1e-9
    assert t["best"] == max(t["grid"], key=lambda g: g["mean_accepted_length"])
    # The n-gram helps on its own training text.
    by = {(g["setting"]["max_nodes"], g["setting"]["ngram_weight"]): g["mean_accepted_length"] for g in t["grid"]}
    assert by[(30, 0.5)] > by[(30, 0.0)]
    # Paired comparison with the first trie: the difference of the means, a tighter interval.
    t2 = doc["tries"][1]
    assert t["vs_first"] == {"mean": 0.0, "ci95": 0.0} and t2["order"] == 2
    assert t2["vs_first"]["mean"] == pytest.approx(t2["mean_accepted_length"] - t["mean_accepted_length"])
    assert 0 < t2["vs_first"]["ci95"] < t2["ci95"]
    # The plot needs the optional matplotlib; without it, a clear error.
    args = [sample_trie, "--text", SAMPLE_CORPUS, "--tokenizer", SAMPLE_TOKENIZER, "--steps", 50, "--depth", 3,
            "--lattice-topk", 4, "--plot", png, "--quiet"]
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "plots need matplotlib" in run(args, 1).output
    else:
        run(args)
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _table_cell(output: str, row_start: str, column: str) -> str:
    """The cell of ``column`` in the table row that starts with ``row_start``."""
    lines = output.splitlines()
    header = next(line for line in lines if line.startswith("trie "))
    row = next(line for line in lines if line.startswith(row_start))
    return row.split()[header.split().index(column)]


def test_cli_headline_is_darts_default_setting(sample_trie: Path, bigram_trie: Path, tmp_path: Path) -> None:
    """The README's grid starts with lambda 0 (no n-gram): the headline is still DART's default setting."""
    args = [sample_trie, bigram_trie, "--text", SAMPLE_CORPUS, "--tokenizer", SAMPLE_TOKENIZER, *SMALL,
            "--ngram-weight", "0,0.5,1", "--max-nodes", "30,60", "--quiet"]
    doc = json.loads(run([*args, "--json"]).stdout)
    r = run(args)
    default = PruneSetting().as_dict()
    assert doc["settings"][0]["ngram_weight"] == 0 and default in doc["settings"]
    first, second = doc["tries"]
    for t in (first, second):
        at_default = next(g for g in t["grid"] if g["setting"] == default)
        # Not the grid's first setting, the tree without the n-gram.
        assert t["mean_accepted_length"] == at_default["mean_accepted_length"] > t["grid"][0]["mean_accepted_length"]
        assert t["ci95"] == at_default["ci95"] and t["prune_us_per_tree"] == at_default["prune_us_per_tree"]
        assert t["setting"] == default and t["headline"] == "default"
    # Without the n-gram both tries give the same trees; vs first compares the headlines.
    assert first["grid"][0]["mean_accepted_length"] == second["grid"][0]["mean_accepted_length"]
    assert second["vs_first"]["mean"] == pytest.approx(second["mean_accepted_length"] - first["mean_accepted_length"])
    # The table says which setting the headline is and marks its row.
    assert "headline (the rows marked default, and vs first): DART's default setting, beam 20, nodes 60, " \
           "lambda 0.5" in r.output
    marked = [re.search(r" 20 +(\d+) +([\d.]+) +(\d\.\d{3}) ", line).groups() for line in r.output.splitlines()
              if re.search(r" default +[+-]\d", line)]
    assert marked == [("60", "0.5", f"{t['mean_accepted_length']:.3f}") for t in (first, second)]


def test_cli_headline_without_default_is_the_best(sample_trie: Path, bigram_trie: Path, tmp_path: Path) -> None:
    args = [sample_trie, bigram_trie, "--text", SAMPLE_CORPUS, "--tokenizer", SAMPLE_TOKENIZER, *SMALL,
            "--ngram-weight", "0,1", "--max-nodes", "10,20", "--quiet"]
    doc = json.loads(run([*args, "--json"]).stdout)
    r = run(args)
    assert PruneSetting().as_dict() not in doc["settings"]
    first, second = doc["tries"]
    for t in (first, second):
        best = max(g["mean_accepted_length"] for g in t["grid"])
        assert t["mean_accepted_length"] == best > t["grid"][0]["mean_accepted_length"]
        assert t["setting"] == t["best"]["setting"] and t["headline"] == "best"
    assert second["vs_first"]["mean"] == pytest.approx(second["mean_accepted_length"] - first["mean_accepted_length"])
    assert "each trie's best setting of the grid (DART's default, beam 20, nodes 60, lambda 0.5, is not in " \
           "the grid)" in r.output


def test_table_has_a_dash_for_orders_above_a_trie_s(sample_trie: Path, bigram_trie: Path,
                                                     sample_docs: list[np.ndarray]) -> None:
    lat = synthetic_lattices(sample_docs, LogitModel(depth=3, topk=4), steps=40, seed=2)
    result = evaluate([str(sample_trie), str(bigram_trie)], lat, [PruneSetting()])
    table = format_table(result)
    assert _table_cell(table, bigram_trie.name, "hit3") == "-" and "nan" not in table
    assert _table_cell(table, sample_trie.name, "hit3") == f"{result['tries'][0]['hit_rate']['3']:.3f}"


def test_cli_plot_names_every_text(sample_trie: Path, tmp_path: Path) -> None:
    from ngram_eval.plot import source_label

    more = tmp_path / "more.jsonl"
    more.write_text("".join(json.dumps({"text": f"Document {i}: " + "the trie drafts tokens. " * 20}) + "\n"
                            for i in range(5)))
    r = run([sample_trie, "--text", SAMPLE_CORPUS / "peps-sample.jsonl.gz", "--text", more, "--tokenizer",
             SAMPLE_TOKENIZER, *SMALL, "--json", "--quiet"])
    lat = json.loads(r.stdout)["lattices"]
    assert lat["texts"] == [str(SAMPLE_CORPUS / "peps-sample.jsonl.gz"), str(more)]
    assert source_label(lat) == "peps-sample.jsonl.gz, more.jsonl"  # the plot's title: every file
    many = {"source": "x", "texts": [f"held/gsm8k-{i:04d}.jsonl.zst" for i in range(6)]}
    assert source_label(many) == "gsm8k-0000.jsonl.zst and 5 more"
    assert source_label({"source": "/logs/run.parquet", "mode": "logged"}) == "run.parquet"


def test_cli_plot_without_matplotlib_fails_before_any_work(sample_trie: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    with LatticeWriter(tmp_path / "empty.parquet"):
        pass
    r = run([sample_trie, "--lattices", tmp_path / "empty.parquet", "--plot", tmp_path / "r.png"], 1)
    assert "--plot: plots need matplotlib, which is not installed: pip install matplotlib" in r.output
    assert ".[plot]" not in r.output and "no lattices to replay" not in r.output
    r = run([sample_trie, "--text", SAMPLE_CORPUS, "--tokenizer", SAMPLE_TOKENIZER, *SMALL, "--json",
             "--plot", tmp_path / "r.png"], 1)
    assert "pip install matplotlib" in r.output and "synthetic lattices" not in r.output and r.stdout == ""


def test_cli_text_files_given_as_tries(sample_trie: Path, tmp_path: Path) -> None:
    """`--text a b` makes b a TRIE: one clean message, and how to repeat --text."""
    a, b = SAMPLE_CORPUS / "peps-sample.jsonl.gz", tmp_path / "more.jsonl.zst"
    b.write_bytes(zstandard.ZstdCompressor().compress(b"".join(b'{"text": "held-out document %d"}\n' % i
                                                                for i in range(100))))
    r = run([sample_trie, "--text", a, b, "--tokenizer", SAMPLE_TOKENIZER], 2)
    assert f"{b}: not a trie file (bad magic)" in r.output
    assert r.output.count("not a trie file") == 1 and r.output.count(f"{b}:") == 1
    assert f"--text takes one file or folder, so repeat it per input (--text {a} --text {b})" in r.output
    folder = tmp_path / "held"
    folder.mkdir()
    r = run([sample_trie, "--text", SAMPLE_CORPUS, folder, "--tokenizer", SAMPLE_TOKENIZER], 2)
    assert f"{folder}: a folder, not a trie file. It looks like held-out text" in r.output
    assert f"(--text {SAMPLE_CORPUS} --text {folder})" in r.output
    with LatticeWriter(tmp_path / "empty.parquet"):
        pass
    r = run([a, "--lattices", tmp_path / "empty.parquet"], 2)
    assert f"It looks like held-out text: give it with --text (--text {a})" in r.output
    # A file that is not named like text: no hint.
    not_trie = tmp_path / "x.ngt"
    not_trie.write_bytes(b"\0" * 100)
    r = run([not_trie, "--lattices", tmp_path / "empty.parquet"], 2)
    assert f"{not_trie}: not a trie file (bad magic)" in r.output and "held-out text" not in r.output
    assert r.output.count("not a trie file") == 1


def test_cli_lattices(sample_trie: Path, tmp_path: Path) -> None:
    f = tmp_path / "log.parquet"
    write_log(f, [list(range(100, 120)), list(range(300, 310))])
    doc = json.loads(run([sample_trie, "--lattices", f, "--json", "--quiet"]).stdout)
    assert doc["lattices"] == {"source": str(f), "steps": 12 + 6, "depth": 3, "mode": "logged"}
    assert 1.0 <= doc["tries"][0]["mean_accepted_length"] <= 4.0


def test_cli_errors(sample_trie: Path, corpus_trie: Path, tmp_path: Path) -> None:
    f = tmp_path / "log.parquet"
    write_log(f, [list(range(100, 110))])
    with LatticeWriter(tmp_path / "empty.parquet"):
        pass
    r = run([sample_trie], 2)
    assert "give exactly one of --lattices FILE or --text FILE" in r.output
    r = run([sample_trie, "--lattices", f, "--text", SAMPLE_CORPUS], 2)
    assert "exactly one" in r.output
    r = run([sample_trie, "--text", SAMPLE_CORPUS], 2)
    assert "--text needs --tokenizer" in r.output
    not_trie = tmp_path / "x.ngt"
    not_trie.write_bytes(b"\0" * 100)
    r = run([not_trie, "--lattices", f], 2)
    assert "x.ngt: not a trie file" in r.output
    r = run([corpus_trie, "--text", SAMPLE_CORPUS, "--tokenizer", SAMPLE_TOKENIZER], 2)
    assert "corpus3.ngt: built with tokenizer" in r.output
    bad = _rewrite(f, tmp_path / "nocol.parquet", lambda t: t.drop(["prefix_tail"]))
    r = run([sample_trie, "--lattices", bad], 1)
    assert "nocol.parquet: missing column prefix_tail" in r.output
    r = run([sample_trie, "--lattices", tmp_path / "empty.parquet"], 1)
    assert "empty.parquet: no lattices to replay" in r.output
    r = run([sample_trie, "--lattices", f, "--beam-width", "0"], 2)
    assert "Invalid value for '--beam-width': 0 is not in the range 1<=x<=1024" in r.output
    r = run([sample_trie, "--lattices", f, "--max-nodes", "a,b"], 2)
    assert "Invalid value for '--max-nodes': 'a' is not a valid integer" in r.output


# ---- dart-generate --log-lattices: logged runs replay to the run's own accepted lengths ------

PROMPTS = ["The following PEP describes", "def main():\n    return"]


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory: pytest.TempPathFactory):
    """A random tiny Qwen3 target and a DART drafter over the tokens it emits most (so that drafts are
    sometimes accepted), both saved as folders."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import collections

    from tokenizers import Tokenizer

    from dart_client.generate import DartGenerator
    from dart_client.random_models import random_drafter, random_target

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: more threads only add contention on a shared 2-core machine
    tok = Tokenizer.from_file(str(SAMPLE_TOKENIZER))
    prompts = [tok.encode(p, add_special_tokens=False).ids for p in PROMPTS]
    target = random_target("tiny", family="qwen3", seed=1, eos_token_id=0, bos_token_id=0)
    probe = DartGenerator(target, random_drafter(target, draft_vocab_size=8), lambda *a: None)
    counts = collections.Counter(t for p in prompts for t in probe.autoregressive(p, 24).output_ids)
    ids = [t for t, _ in counts.most_common(16)]
    ids += [i for i in range(4096) if i not in set(ids)][: 16 - len(ids)]
    drafter = random_drafter(target, draft_length=3, draft_ids=ids, seed=2)
    d = tmp_path_factory.mktemp("tiny")
    target.save_pretrained(d / "target")
    drafter.save_pretrained(d / "drafter")
    yield target, drafter, prompts, d
    torch.set_num_threads(threads)


def test_generator_log_replays_to_the_runs_accepted_lengths(tiny_models, sample_trie: Path, tmp_path: Path) -> None:
    from dart_client.generate import DartGenerator
    from dart_client.pruner import LocalPruner

    target, drafter, prompts, _ = tiny_models
    gen = DartGenerator(target, drafter, LocalPruner(sample_trie, beam_width=6, max_nodes=12))
    f = tmp_path / "run.parquet"
    accepted = []
    with LatticeWriter(f, topk=25) as log:
        for p in prompts:
            res = gen.generate(p, 24, lattice_log=log)
            accepted += [s.accepted + 1 for s in res.steps]
    lat = read_lattices(f)
    assert len(lat) == len(accepted) and sorted(set(lat.sequence_ids.tolist())) == [0, 1]
    assert lat.depth == 4 and all(t.shape == (4, 16) for t in lat.topk_tokens)  # 16 draft ids
    r = replay(NgramIndex.open(sample_trie), lat, PruneSetting(6, 12, 0.5))
    assert r.accepted.tolist() == accepted
    assert max(accepted) > 1  # some drafts were accepted: the check is not only about bonus tokens


def test_dart_generate_log_lattices_cli(tiny_models, sample_trie: Path, tmp_path: Path) -> None:
    from dart_client.cli import main as generate_main

    _, _, _, d = tiny_models
    f = tmp_path / "cli.parquet"
    r = CliRunner().invoke(generate_main, [str(d / "target"), str(d / "drafter"), "--trie", str(sample_trie),
                                           "--tokenizer", str(SAMPLE_TOKENIZER), "--max-new-tokens", "20", "-p",
                                           PROMPTS[0], "--json", "--log-lattices", str(f)])
    assert r.exit_code == 0, r.output
    tau = json.loads(r.stdout)["mean_accepted_length"]
    doc = json.loads(run([sample_trie, "--lattices", f, "--json", "--quiet"]).stdout)
    assert doc["tries"][0]["mean_accepted_length"] == pytest.approx(tau, abs=1e-12)
