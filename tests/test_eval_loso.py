"""ngram-eval --proposals --leave-one-source-out: on a corpus of three
sources cut from the bundled sample, each source is replayed on tries built
from the other two alone, the figures are the replay's own, kept tries are
reused only for the same inputs, and bad input gets a usage error."""
from __future__ import annotations

import gzip
import importlib.util
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from ngram_eval.cli import main
from ngram_eval.proposal_replay import ProposeSetting, replay
from ngram_eval.synthetic import load_documents
from ngram_service import NgramIndex

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "indexer" / "sample" / "corpus" / "peps-sample.jsonl.gz"
TOKENIZER = str(REPO / "indexer" / "sample" / "tokenizer.json")
SOURCES = ("alpha", "beta", "gamma")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample's documents dealt round-robin into three sources' shards."""
    root = tmp_path_factory.mktemp("loso") / "corpus"
    root.mkdir()
    lines = gzip.open(SAMPLE, "rt").read().splitlines()
    for i, src in enumerate(SOURCES):
        (root / f"{src}-0000.jsonl").write_text("\n".join(lines[i::3]) + "\n")
    return root


@pytest.fixture(scope="module")
def trie(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A trie of two of the sources, as a run with --work keeps it."""
    work = tmp_path_factory.mktemp("loso-trie")
    code, _, err = run("--proposals", "--leave-one-source-out", str(corpus), "-t", TOKENIZER, "--hold-out", "alpha",
                       "--test-tokens", "100", "--max-nodes", "4", "--sources", "both", "--work", str(work))
    assert code == 0, err
    return next(work.glob("without-alpha-o3-*.ngt"))


def run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.stdout, r.stderr


def test_each_source_is_replayed_on_tries_of_the_others(corpus: Path, tmp_path: Path) -> None:
    work = tmp_path / "work"
    code, out, err = run("--proposals", "--leave-one-source-out", str(corpus), "-t", TOKENIZER, "--order", "2,3",
                         "--max-nodes", "16", "--sources", "both", "--test-tokens", "1500", "--work", str(work),
                         "--json")
    assert code == 0, err
    result = json.loads(out)
    assert list(result["sources"]) == list(SOURCES) and result["orders"] == [2, 3]
    for src, res in result["sources"].items():
        assert [t["order"] for t in res["tries"]] == [2, 3]
        assert res["build_seconds"]["2"] is not None  # built, not found
        test_texts = {json.loads(x)["text"] for x in next(work.glob(f"test-{src}-*.jsonl")).read_text().splitlines()}
        own = {json.loads(x)["text"] for x in (corpus / f"{src}-0000.jsonl").read_text().splitlines()}
        assert test_texts <= own
        for t in res["tries"]:
            idx = NgramIndex.open(t["path"])
            shards = {s["path"] for s in idx.info()["corpus"]["shards"]}
            assert shards == {f"{s}-0000.jsonl" for s in SOURCES if s != src}
            # The figure is the replay's own on the source's documents, cut as the option says.
            docs = [d[:2048] for d in load_documents([str(next(work.glob(f"test-{src}-*.jsonl")))], TOKENIZER)[0]]
            taken = []
            for d in docs:
                if sum(len(x) for x in taken) >= 1500:
                    break
                taken.append(d)
            want = replay(idx, taken, ProposeSetting(16, "both").params()).as_dict()["tokens_per_step"]
            assert t["rows"][0]["tokens_per_step"] == pytest.approx(want, abs=0)
        assert result["table"]["o3 both, 16"]["by_source"][src] == res["tries"][1]["rows"][0]["tokens_per_step"]
    means = result["table"]["o3 both, 16"]
    assert means["mean"] == pytest.approx(sum(means["by_source"].values()) / 3)
    # The sources as one: the mean figure, every source's judged nodes.
    row = result["combined"]["tries"][1]["rows"][0]
    assert row["tokens_per_step"] == means["mean"]
    assert row["calibration"]["nodes"] == sum(r["tries"][1]["rows"][0]["calibration"]["nodes"]
                                              for r in result["sources"].values()) > 0

    # A second run reuses the tries; a shard that changed is built again.
    code, _, err = run("--proposals", "--leave-one-source-out", str(corpus), "-t", TOKENIZER, "--max-nodes", "16",
                       "--sources", "both", "--test-tokens", "1500", "--work", str(work), "--hold-out", "beta")
    assert code == 0, err
    assert "kept from an earlier run" in err and "building" not in err
    shard = corpus / "alpha-0000.jsonl"
    os.utime(shard, ns=(shard.stat().st_atime_ns, shard.stat().st_mtime_ns + 10**9))
    code, out, err = run("--proposals", "--leave-one-source-out", str(corpus), "-t", TOKENIZER, "--max-nodes", "16",
                         "--sources", "both", "--test-tokens", "1500", "--work", str(work), "--hold-out", "beta")
    assert code == 0, err
    assert "building without-beta-o3-" in err
    assert out.splitlines()[1].split()[:2] == ["held-out", "source"] and out.splitlines()[2].startswith("beta")
    assert "Calibration, every source's nodes pooled" in out and "order 3 (16 nodes)" in out
    if importlib.util.find_spec("matplotlib") is None:
        pytest.skip("matplotlib is not installed: --plot not checked")
    png = tmp_path / "loso.png"
    code, _, err = run("--proposals", "--leave-one-source-out", str(corpus), "-t", TOKENIZER, "--max-nodes", "16",
                       "--test-tokens", "1500", "--work", str(work), "--plot", str(png), "-q")
    assert code == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("args, message", [
    (["--proposals", "--leave-one-source-out", "{one}", "-t", TOKENIZER],
     "leave one source out needs shards of at least two sources (named SOURCE-NNNN.*), found peps"),
    (["--proposals", "--leave-one-source-out", "{corpus}", "-t", TOKENIZER, "--hold-out", "delta"],
     "delta: not a source of {corpus} (its sources: alpha, beta, gamma)"),
    (["--proposals", "--leave-one-source-out", "{corpus}"],
     "--leave-one-source-out needs --tokenizer (the tries are built with it)"),
    (["--leave-one-source-out", "{corpus}", "-t", TOKENIZER],
     "--leave-one-source-out: only with --proposals"),
    (["{trie}", "--proposals", "--leave-one-source-out", "{corpus}", "-t", TOKENIZER],
     "--leave-one-source-out builds its tries and chooses its documents: give no TRIE, --text or --lattices"),
    (["{trie}", "--proposals", "--text", str(SAMPLE), "-t", TOKENIZER, "--order", "5"],
     "--order: only with --leave-one-source-out"),
    (["--proposals", "--leave-one-source-out", "{corpus}", "-t", TOKENIZER, "--order", "3,1"],
     "Invalid value for '--order': 1: each must be in 2..16"),
    (["--proposals", "--text", str(SAMPLE), "-t", TOKENIZER], "Missing argument 'TRIE...'."),
    (["--proposals", "--leave-one-source-out", "{corpus}", "-t", "{one}/none.json"],
     "Invalid value for --tokenizer: {one}/none.json: no such tokenizer file or folder"),
    (["--proposals", "--leave-one-source-out", "{corpus}", "-t", TOKENIZER, "--work", "{trie}/w"],
     "{trie}/w: Not a directory"),
    (["--proposals", "--leave-one-source-out", "{corpus}", "-t", TOKENIZER, "--beam-width", "4"],
     "--beam-width: only without --proposals (DART pruning)"),
    (["--proposals", "--leave-one-source-out", "{empty}", "-t", TOKENIZER],
     "no text to replay in {empty}/alpha-0000.jsonl (field 'text')"),
], ids=["one-source", "unknown-source", "no-tokenizer", "no-proposals", "trie-too", "order-alone", "order-range",
        "no-trie", "bad-tokenizer", "work-not-a-folder", "dart-option", "empty-source"])
def test_bad_input_is_a_usage_error(corpus: Path, trie: Path, tmp_path: Path, args: list[str], message: str) -> None:
    one = tmp_path / "one"
    one.mkdir()
    (one / "peps-0000.jsonl.gz").write_bytes(SAMPLE.read_bytes())
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "alpha-0000.jsonl").write_text('{"text": ""}\n')
    (empty / "beta-0000.jsonl").write_text((corpus / "beta-0000.jsonl").read_text())
    fill = {"one": str(one), "corpus": str(corpus), "trie": str(trie), "empty": str(empty)}
    code, _, err = run(*[a.format(**fill) for a in args])
    assert code != 0
    assert message.format(**fill) in " ".join(err.split())
