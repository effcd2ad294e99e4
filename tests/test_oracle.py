"""The oracle target (dart_client/oracle.py): a real-shaped model whose
answers follow a reference text. Under greedy decoding it reproduces the
text in every mode, and a speculative step accepts exactly what the
teacher-forced replay of the same position accepts (ngram_eval)."""
from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import SAMPLE_CORPUS, SAMPLE_TOKENIZER, require_module

torch = require_module("torch")
require_module("transformers")

from dart_client.generate import ProposalGenerator  # noqa: E402
from dart_client.oracle import OracleTarget  # noqa: E402
from dart_client.proposer import LocalProposer, LookupProposer  # noqa: E402
from dart_client.random_models import random_sample_target  # noqa: E402
from ngram_eval.proposal_replay import accepted_length  # noqa: E402
from ngram_service import NgramIndex  # noqa: E402

PROMPT, NEW = 40, 120


@pytest.fixture(scope="module")
def references() -> list[list[int]]:
    """Three documents of the sample corpus, tokenized: real text, which the
    sample trie was built from (so that proposals accept a lot)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(SAMPLE_TOKENIZER))
    path = next(SAMPLE_CORPUS.glob("*.jsonl.gz"))
    with gzip.open(path, "rt") as f:
        texts = [json.loads(line)["text"] for line in f]
    return [tok.encode(t).ids[:PROMPT + NEW + 20] for t in texts[-3:]]


@pytest.fixture(scope="module")
def oracle(references: list[list[int]]) -> OracleTarget:
    return OracleTarget(random_sample_target(), references)


def test_every_mode_reproduces_the_reference(oracle: OracleTarget, sample_trie: Path,
                                             references: list[list[int]]) -> None:
    """Greedy decoding follows the text: the target alone, proposals from a
    trie, prompt lookup alone; one prompt, and three ragged prompts decoded
    together (rows finish at different steps and are dropped)."""
    gen = ProposalGenerator(oracle, LocalProposer(sample_trie), eos_token_id=[])
    r = references[1]
    assert gen.autoregressive(r[:PROMPT], max_new_tokens=30, stop_at_eos=False).output_ids == r[PROMPT:PROMPT + 30]
    one = gen.generate(r[:PROMPT], max_new_tokens=NEW, stop_at_eos=False)
    assert one.output_ids == r[PROMPT:PROMPT + NEW]
    assert one.mean_accepted_length > 1.5  # the trie knows this text: the oracle lets it show
    starts = [PROMPT, PROMPT + 9, PROMPT + 3]
    batch = gen.generate([ref[:s] for ref, s in zip(references, starts)], max_new_tokens=NEW, stop_at_eos=False)
    assert [b.output_ids for b in batch] == [ref[s:s + NEW] for ref, s in zip(references, starts)]
    lookup = ProposalGenerator(oracle, LookupProposer(), eos_token_id=[])
    assert lookup.generate(r[:PROMPT], max_new_tokens=60, stop_at_eos=False).output_ids == r[PROMPT:PROMPT + 60]


def test_accepted_lengths_equal_the_teacher_forced_replay(oracle: OracleTarget, sample_trie: Path,
                                                          references: list[list[int]]) -> None:
    """Each step accepts what ngram-eval's replay accepts at the same
    position, with the same proposals."""
    index = NgramIndex.open(sample_trie)
    proposer = LocalProposer(index)
    gen = ProposalGenerator(oracle, proposer, eos_token_id=[])
    cap = gen.tree_nodes(1)  # one row's trees under the generator's tree budget
    params = proposer.params if cap is None else dict(proposer.params, max_nodes=cap)
    for ref in references:
        res = gen.generate(ref[:PROMPT], max_new_tokens=NEW, stop_at_eos=False)
        doc = np.asarray(ref)
        at = PROMPT + 1  # the prefill committed the first new token
        want = []
        while at < PROMPT + NEW:
            tree = index.propose(doc[:at], **params)
            acc = accepted_length(tree.tokens.tolist(), tree.parents.tolist(), tree.depths.tolist(), ref, at)
            want.append(acc)
            at += acc + 1
        got = [s.accepted for s in res.steps]
        assert got == want[:len(got)] and len(got) == len(want), (got, want)


def test_prompts_are_matched_to_their_references(oracle: OracleTarget, references: list[list[int]]) -> None:
    gen = ProposalGenerator(oracle, LookupProposer(), eos_token_id=[])
    with pytest.raises(ValueError, match="not a prefix of any reference"):
        gen.generate([4000 + i for i in range(20)], max_new_tokens=4, stop_at_eos=False)
    # bind() names a prompt's reference where its tokens cannot tell
    other = list(references[0][:PROMPT]) + list(references[2][PROMPT:])
    twin = OracleTarget(oracle.model, [references[0], other])
    gen = ProposalGenerator(twin, LookupProposer(), eos_token_id=[])
    with pytest.raises(ValueError, match="several references"):
        gen.generate(references[0][:PROMPT], max_new_tokens=4, stop_at_eos=False)
    twin.bind([references[0], other], rows=[1])
    out = gen.generate(references[0][:PROMPT], max_new_tokens=20, stop_at_eos=False).output_ids
    assert out == other[PROMPT:PROMPT + 20]


def test_the_real_forward_still_runs(references: list[list[int]]) -> None:
    """The compute is the model's: the wrapped model's forward runs once per
    call, on the same inputs."""
    model = random_sample_target()
    calls: list[Any] = []
    model.register_forward_hook(lambda _m, _a, kw, _out: calls.append(kw.get("input_ids")), with_kwargs=True)
    oracle = OracleTarget(model, references)
    gen = ProposalGenerator(oracle, LookupProposer(), eos_token_id=[])
    res = gen.generate(references[0][:PROMPT], max_new_tokens=20, stop_at_eos=False)
    assert len(calls) == 1 + len(res.steps)


def test_dart_with_a_stated_drafter_follows_the_text(oracle: OracleTarget, sample_trie: Path,
                                                     references: list[list[int]]) -> None:
    """DART decoding with an OracleDrafter (ngram_eval.synthetic's model of a
    drafter over the same text) and the oracle target: the text reproduced,
    drafts accepted as the model says (a drafter that knows the truth often
    accepts more than one token a step), the same steps every run."""
    from dart_client import DartGenerator, LocalPruner
    from dart_client.oracle import OracleDrafter
    from dart_client.random_models import random_drafter
    from ngram_eval.synthetic import LogitModel, TextLattices

    levels = 4
    drafter = random_drafter(oracle, draft_length=levels - 1, draft_vocab_size=4096)
    lattices = TextLattices([np.asarray(r) for r in references], LogitModel(depth=levels, topk=8), seed=1)
    gen = DartGenerator(oracle, OracleDrafter(drafter, references, lattices), LocalPruner(sample_trie),
                        eos_token_id=[])
    runs = [gen.generate(references[2][:PROMPT], max_new_tokens=NEW, stop_at_eos=False) for _ in range(2)]
    assert runs[0].output_ids == references[2][PROMPT:PROMPT + NEW]
    assert runs[0].mean_accepted_length > 1.5, runs[0].mean_accepted_length
    assert [s.accepted for s in runs[0].steps] == [s.accepted for s in runs[1].steps]
    no_truth = TextLattices([np.asarray(r) for r in references], LogitModel(depth=levels, topk=8, hit=0.0), seed=1)
    blind = DartGenerator(oracle, OracleDrafter(drafter, references, no_truth), LocalPruner(sample_trie),
                          eos_token_id=[])
    res = blind.generate(references[2][:PROMPT], max_new_tokens=40, stop_at_eos=False)
    assert res.output_ids == references[2][PROMPT:PROMPT + 40]
    assert res.mean_accepted_length < runs[0].mean_accepted_length
