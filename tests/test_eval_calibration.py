"""ngram-eval --proposals' calibration: predicted path probability against
the share of nodes accepted, checked on a text whose true next-token
probabilities are known (a first-order Markov source)."""
from __future__ import annotations

import gzip
import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import SAMPLE_CORPUS, SAMPLE_TOKENIZER
from indexer.pipeline import BuildConfig, build
from ngram_eval.calibration import BIN_EDGES, Calibration, path_matches, pool_calibrations
from ngram_eval.cli import main as eval_main
from ngram_eval.proposal_replay import ProposeSetting, calibration_row, replay
from ngram_service import NgramIndex

EOS = 0
#: Tokens 1..8; each row's probabilities are one of two shapes, permuted per
#: row, so that path probabilities cover the bins from 0.001 to 1.
PEAKED = [0.86, 0.05, 0.03, 0.02, 0.015, 0.01, 0.01, 0.005]
SPREAD = [0.42, 0.2, 0.12, 0.09, 0.07, 0.05, 0.03, 0.02]


def transition_matrix() -> np.ndarray:
    rng = np.random.default_rng(7)
    p = np.zeros((9, 9))
    for i in range(1, 9):
        p[i, 1 + rng.permutation(8)] = PEAKED if i % 2 else SPREAD
    return p


def sample(p: np.ndarray, docs: int, length: int, seed: int) -> list[np.ndarray]:
    """``docs`` documents of ``length`` tokens from the chain, each followed by EOS."""
    rng = np.random.default_rng(seed)
    cdf = np.cumsum(p, axis=1)
    out = np.empty((docs, length), np.int64)
    out[:, 0] = rng.integers(1, 9, docs)
    for t in range(1, length):
        u = rng.random(docs)
        out[:, t] = np.minimum((cdf[out[:, t - 1]] < u[:, None]).sum(axis=1), 8)
    return [np.append(d, EOS) for d in out]


@pytest.fixture(scope="module")
def markov_trie(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An order-2 trie of 240,000 tokens of the chain (30,000 per context)."""
    folder = tmp_path_factory.mktemp("markov")
    np.save(folder / "train.npy", np.concatenate(sample(transition_matrix(), 120, 2000, seed=1)).astype(np.uint32))
    out = folder / "markov.ngt"
    build(BuildConfig(inputs=[str(folder / "train.npy")], out=str(out), tokenizer=None, vocab_size=16, eos=EOS,
                      order=2, workers=1), progress=lambda _m: None)
    return out


def test_path_matches_and_accepted_length() -> None:
    # root 9; 1 (tok 5) and 2 (tok 6) under it; 3 (tok 7) under 1; 4 (tok 8) under 3
    tokens, parents, depths = [9, 5, 6, 7, 8], [-1, 0, 0, 1, 3], [0, 1, 1, 2, 3]
    ok, judged = path_matches(tokens, parents, depths, [9, 5, 7, 2], 1)
    assert ok == [True, True, False, True, False] and judged == 4
    ok, judged = path_matches(tokens, parents, depths, [9, 5], 1)
    assert ok == [True, True, False, False, False] and judged == 2  # the document ends after one token
    cal = Calibration()
    scores = np.array([1, 0.6, 0.3, 0.45, 0.0005], np.float32)
    assert cal.add_tree(tokens, parents, depths, scores, [9, 5, 7, 2], 1) == 2
    d = cal.as_dict()
    assert d["nodes"] == 4 and d["accepted"] == 2
    by_bin = {(b["lo"], b["hi"]): (b["nodes"], b["accepted_share"]) for b in d["bins"] if b["nodes"]}
    assert by_bin == {(0.0, 0.001): (1, 0.0), (0.3, 0.4): (1, 0.0), (0.4, 0.5): (1, 1.0), (0.6, 0.7): (1, 1.0)}
    assert d["expected_accepted"] == pytest.approx(0.6 + 0.3 + 0.45 + 0.0005)
    assert [(x["depth"], x["nodes"], x["accepted"]) for x in d["by_depth"]] == [(1, 2, 1), (2, 1, 1), (3, 1, 0)]
    assert d["by_depth"][0]["expected_accepted"] == pytest.approx(0.9)
    cal.add(np.array([1.0]), np.array([1.0]))  # a path probability of exactly 1: the last bin
    assert cal.as_dict()["bins"][-1]["nodes"] == 1 and BIN_EDGES[-1] == 1.0


def test_scores_estimate_the_sources_probabilities(markov_trie: Path) -> None:
    """The premise of the calibration test: the trie's level-1 scores are
    the chain's transition probabilities (30,000 samples per context)."""
    p = transition_matrix()
    index = NgramIndex.open(markov_trie)
    for last in range(1, 9):
        tree = index.propose(np.array([3, last]), max_nodes=8, max_depth=1, lookup=False)
        for tok, score in zip(tree.tokens[1:].tolist(), tree.scores[1:].tolist()):
            assert score == pytest.approx(p[last, tok], abs=0.012)


def test_reported_calibration_matches_the_true_probabilities(markov_trie: Path) -> None:
    index = NgramIndex.open(markov_trie)
    docs = sample(transition_matrix(), 30, 600, seed=2)  # fresh text, not the trie's
    cal = Calibration()
    rep = replay(index, docs, ProposeSetting(64, "corpus").params(), calibration=cal)
    d = cal.as_dict()
    assert rep.steps > 0 and d["nodes"] > 20 * rep.steps  # judged nodes of 64-node trees
    checked = 0
    for b in d["bins"]:
        n = b["nodes"]
        if n < 300:
            continue
        p = b["mean_predicted"]
        assert b["lo"] <= p <= b["hi"]
        # nodes of one tree are correlated: a wider margin than the binomial's
        tol = 0.025 + 4 * math.sqrt(p * (1 - p) / n)
        assert abs(b["accepted_share"] - p) <= tol, b
        checked += 1
    assert checked >= 6  # bins from about 0.003 to 0.9 are populated
    assert d["calibration_error"] < 0.02
    for x in d["by_depth"]:  # calibrated at every depth: a deep path's product of probabilities holds too
        if x["accepted"] >= 300:
            assert x["expected_accepted"] / x["accepted"] == pytest.approx(1, abs=0.08), x
    # the accepted nodes are what the replay accepted: every step's path is among them
    assert d["accepted"] >= sum(k * c for k, c in enumerate(rep.accepted))


def test_pooled_reports_are_one_report_of_all_nodes() -> None:
    rng = np.random.default_rng(3)
    parts = []
    whole = Calibration()
    for _ in range(3):
        scores = rng.random(500) ** 3
        accepted = (rng.random(500) < scores).astype(np.float64)
        depths = rng.integers(1, 9, 500)
        one = Calibration()
        one.add(scores, accepted, depths)
        whole.add(scores, accepted, depths)
        parts.append(one.as_dict())
    got, want = pool_calibrations(parts), whole.as_dict()
    assert got["nodes"] == want["nodes"] == 1500 and got["accepted"] == want["accepted"]
    assert got["expected_accepted"] == pytest.approx(want["expected_accepted"], rel=1e-12)
    assert got["calibration_error"] == pytest.approx(want["calibration_error"], rel=1e-9)
    assert got["by_depth"] == pytest.approx(want["by_depth"])
    for g, w in zip(got["bins"], want["bins"]):
        assert g["nodes"] == w["nodes"] and g["mean_predicted"] == pytest.approx(w["mean_predicted"])


def test_calibration_row_prefers_the_default_proposals() -> None:
    grid = [ProposeSetting(16, "both"), ProposeSetting(16, "corpus"), ProposeSetting(64, "both"),
            ProposeSetting(64, "corpus"), ProposeSetting(64, "both", 0.2)]
    assert calibration_row(grid) == 2
    assert calibration_row([ProposeSetting(16, "corpus"), ProposeSetting(32, "both")]) == 1
    assert calibration_row([ProposeSetting(16, "corpus")]) == 0


def test_cli_reports_calibration_and_plots_it(sample_trie: Path, tmp_path: Path) -> None:
    text = tmp_path / "few.jsonl"
    with gzip.open(SAMPLE_CORPUS / "peps-sample.jsonl.gz", "rt") as f:
        text.write_text("".join(next(f) for _ in range(3)))
    args = [str(sample_trie), str(sample_trie), "--proposals", "--text", str(text), "--tokenizer",
            str(SAMPLE_TOKENIZER), "--max-nodes", "8,16", "--sources", "corpus,both", "--quiet"]
    r = CliRunner().invoke(eval_main, [*args, "--json"])
    assert r.exit_code == 0, r.output
    t = json.loads(r.stdout)["tries"][0]
    assert t["calibration_row"] == 3  # both sources, the largest budget
    cal = t["rows"][3]["calibration"]
    assert cal["nodes"] == sum(b["nodes"] for b in cal["bins"]) > 0
    assert [b["lo"] for b in cal["bins"]] == list(BIN_EDGES[:-1])
    r = CliRunner().invoke(eval_main, args)
    assert r.exit_code == 0, r.output
    assert "Calibration" in r.output and "sample.ngt (16 nodes)" in r.output
    if importlib.util.find_spec("matplotlib") is None:
        pytest.skip("matplotlib is not installed: --plot not checked")
    png = tmp_path / "p.png"
    r = CliRunner().invoke(eval_main, [*args, "--plot", str(png)])
    assert r.exit_code == 0, r.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
