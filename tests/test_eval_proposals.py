"""ngram-eval --proposals: teacher-forced replay of held-out text through
the tries' own proposals, and its prompt-lookup baselines."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import SAMPLE_CORPUS, SAMPLE_TOKENIZER
from ngram_eval.cli import main as eval_main
from ngram_eval.proposal_replay import accepted_length, lookup_chain, replay, replay_lookup_chain
from ngram_service import NgramIndex


def test_accepted_length_walks_the_tree() -> None:
    # root 0; children 1 (tok 5), 2 (tok 6); 3 (tok 7) under 1; 4 (tok 8) under 3
    tokens, parents, depths = [9, 5, 6, 7, 8], [-1, 0, 0, 1, 3], [0, 1, 1, 2, 3]
    doc = [9, 5, 7, 8, 1]
    assert accepted_length(tokens, parents, depths, doc, 1) == 3
    assert accepted_length(tokens, parents, depths, [9, 5, 7, 2], 1) == 2
    assert accepted_length(tokens, parents, depths, [9, 6, 7], 1) == 1  # 7 is not under 6
    assert accepted_length(tokens, parents, depths, [9, 4], 1) == 0
    assert accepted_length(tokens, parents, depths, [9, 5], 1) == 1  # the document ends


def test_lookup_chain_takes_the_latest_longest_match() -> None:
    doc = np.array([1, 2, 3, 4, 9, 2, 3, 5, 6, 1, 2, 3])
    # "1 2 3" (3 tokens) matched at 0..2 only: what followed it there
    assert lookup_chain(doc, len(doc), 4, 1, 32).tolist() == [4, 9, 2, 3]
    # with matches of at most 2 tokens, "2 3" is matched most recently at 5..6
    assert lookup_chain(doc, len(doc), 3, 1, 2).tolist() == [5, 6, 1]
    assert lookup_chain(doc, len(doc), 3, 4, 32).tolist() == []  # no match of 4 tokens
    # the chain stops where the context ends
    assert lookup_chain(np.array([7, 7, 7]), 3, 5, 1, 32).tolist() == [7]


def test_replay_counts_every_token_once(sample_trie: Path) -> None:
    index = NgramIndex.open(sample_trie)
    docs = [np.array([3, 4, 5, 3, 4, 5, 3, 4, 5, 3, 4, 5]), np.array([7, 8])]
    r = replay(index, docs, {"corpus": False, "max_nodes": 8})
    assert r.tokens == sum(len(d) - 1 for d in docs)
    assert sum(r.accepted) == r.steps
    # the repeats are proposed from the document itself: after "3 4 5" is seen once, steps take several tokens
    assert r.tokens_per_step > 1.5
    chain = replay_lookup_chain(docs, 8, 1, 32)
    assert chain.tokens == r.tokens and chain.tokens_per_step > 1.5


def test_cli_proposals_table_and_json(sample_trie: Path, tmp_path: Path) -> None:
    text = tmp_path / "few.jsonl"
    with gzip.open(SAMPLE_CORPUS / "peps-sample.jsonl.gz", "rt") as f:  # four of the trie's own documents
        text.write_text("".join(next(f) for _ in range(4)))
    args = [str(sample_trie), "--proposals", "--text", str(text), "--tokenizer", str(SAMPLE_TOKENIZER),
            "--max-nodes", "4,16", "--sources", "both,lookup", "--quiet"]
    r = CliRunner().invoke(eval_main, [*args, "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    r = CliRunner().invoke(eval_main, args)
    assert r.exit_code == 0, r.output
    assert doc["mode"] == "proposals" and set(doc["lookup_alone"]) == {"4", "16"}
    rows = doc["tries"][0]["rows"]
    assert [(x["max_nodes"], x["sources"]) for x in rows] == [(4, "both"), (4, "lookup"), (16, "both"), (16, "lookup")]
    # the document alone through the trie's replay is the lookup baseline itself
    assert rows[1]["tokens_per_step"] == doc["lookup_alone"]["4"]["tokens_per_step"]
    # the trie was built from this text: its proposals beat the document alone
    assert rows[2]["tokens_per_step"] > rows[3]["tokens_per_step"] > 1.0
    assert set(doc["lookup_chain"]["by_min_n"]) == {"1", "2", "3"}
    vllm = doc["lookup_chain"]["vllm_default"]
    assert (vllm["min_n"], vllm["max_n"]) == (5, 5) and vllm["tokens"] == rows[0]["tokens"]
    assert vllm["tokens_per_step"] >= 1.0 and vllm["steps"] > 0
    assert "vs chain" in r.output and "vLLM's defaults" in r.output and "(document alone, a tree)" in r.output


@pytest.mark.parametrize("args, message", [
    (["--proposals"], "--proposals needs --text"),
    (["--proposals", "--text", str(SAMPLE_CORPUS), "--tokenizer", str(SAMPLE_TOKENIZER), "--sources", "both,x"],
     "'x': sources are both, corpus, lookup"),
    # options of the other evaluation are refused by name, not ignored
    (["--proposals", "--text", str(SAMPLE_CORPUS), "--tokenizer", str(SAMPLE_TOKENIZER), "--ngram-weight", "0.3"],
     "Error: --ngram-weight: only without --proposals (DART pruning)"),
    (["--proposals", "--text", str(SAMPLE_CORPUS), "--tokenizer", str(SAMPLE_TOKENIZER), "-j", "2", "--beam-width",
      "4"], "Error: --beam-width, --threads: only without --proposals (DART pruning)"),
    (["--proposals", "--text", str(SAMPLE_CORPUS), "--tokenizer", str(SAMPLE_TOKENIZER), "--steps", "10"],
     "Error: --steps: only without --proposals (synthetic lattices)"),
    (["--text", str(SAMPLE_CORPUS), "--tokenizer", str(SAMPLE_TOKENIZER), "--discount", "0.2"],
     "Error: --discount: only with --proposals"),
    # ranges are the parser's, naming the flag: nothing is built first
    (["--text", str(SAMPLE_CORPUS), "--tokenizer", str(SAMPLE_TOKENIZER), "--max-nodes", "60,99999"],
     "Invalid value for '--max-nodes': 99999 is not in the range 0<=x<=4096."),
    (["--proposals", "--text", str(SAMPLE_CORPUS), "--tokenizer", str(SAMPLE_TOKENIZER), "--discount", "0.5,2"],
     "Invalid value for '--discount': 2.0 is not in the range 0.0<=x<=1.0."),
    (["--text", str(SAMPLE_CORPUS), "--tokenizer", str(SAMPLE_TOKENIZER), "--ngram-weight", "nan"],
     "Invalid value for '--ngram-weight': 'nan' is not a finite number."),
])
def test_cli_proposals_usage(sample_trie: Path, args: list[str], message: str) -> None:
    r = CliRunner().invoke(eval_main, [str(sample_trie), *args])
    assert r.exit_code == 2 and message in r.output
