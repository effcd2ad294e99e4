"""A verification forward's tree budget (SpeculativeGenerator tree_budget): B rows share it, each tree cut to
the engine's own best tree of the smaller size (proposers and pruners, in process and on a real host), and
greedy decoding stays the target's own whatever the budget."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import SAMPLE_TOKENIZER, require_module

torch = require_module("torch")
require_module("transformers")

from dart_client import DartGenerator, LocalPruner, RemotePruner
from dart_client.generate import TREE_BUDGET, ProposalGenerator
from dart_client.proposer import LocalProposer, LookupProposer, RemoteProposer
from dart_client.random_models import random_target
from ngram_service import NgramIndex
from tests.dart_testbed import (
    TrieHost,
    encode_prompts,
    fitted_drafter,
    one_torch_thread,  # noqa: F401  (autouse)
    references,
    write_count_trie,
)

MAX_NEW = 20
LONG = 30.0  # a deadline no loaded machine misses


@pytest.fixture(scope="module")
def target() -> Any:
    return random_target("tiny", family="llama", seed=3, eos_token_id=0, bos_token_id=0)


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    return encode_prompts()


@pytest.fixture(scope="module")
def refs(target: Any, prompts: list[list[int]]) -> list[list[int]]:
    return references(target, prompts, MAX_NEW)


@pytest.fixture(scope="module")
def trie(tmp_path_factory: pytest.TempPathFactory, prompts: list[list[int]], refs: list[list[int]]) -> Path:
    """The target's own continuations of every prompt: trees of many accepted nodes to cut."""
    docs = [p + r for p, r in zip(prompts, refs)]
    return write_count_trie(tmp_path_factory.mktemp("budget") / "own.ngt", docs, "tree-budget-test")


def test_each_row_gets_its_share_rounded_to_a_bucket(target: Any, trie: Path) -> None:
    gen = ProposalGenerator(target, LocalProposer(trie))  # max_nodes 64: 65 tokens with the root
    assert gen.tree_budget == TREE_BUDGET == 128
    # one tree: 65 tokens cut to the bucket of 64 (not padded to 96); B trees: their share's bucket
    assert [gen.tree_nodes(b) for b in (1, 2, 3, 4, 8, 16, 64, 65, 1000)] == [63, 63, 31, 31, 15, 7, 1, 1, 1]
    assert ProposalGenerator(target, LocalProposer(trie, max_nodes=30)).tree_nodes(4) is None  # 31 fit in 32
    assert ProposalGenerator(target, LocalProposer(trie, max_nodes=31)).tree_nodes(1) is None  # 32: a bucket
    assert ProposalGenerator(target, LocalProposer(trie, max_nodes=40)).tree_nodes(1) is None  # 41: padded to 48
    assert ProposalGenerator(target, LocalProposer(trie, max_nodes=200), tree_budget=512).tree_nodes(1) is None
    assert ProposalGenerator(target, LocalProposer(trie, max_nodes=200), tree_budget=512).tree_nodes(3) == 169
    # 41 tokens fit a share of 42, but padded to 48 three of them would pass 128: cut to 32
    assert ProposalGenerator(target, LocalProposer(trie, max_nodes=40)).tree_nodes(3) == 31
    assert ProposalGenerator(target, LocalProposer(trie), tree_budget=None).tree_nodes(16) is None
    assert ProposalGenerator(target, LocalProposer(trie), tree_budget=512).tree_nodes(16) == 31
    # a plain callable cannot be told: it keeps its own trees
    lookup = LookupProposer()
    assert ProposalGenerator(target, lambda tokens, device: lookup(tokens, device)).tree_nodes(16) is None
    with pytest.raises(ValueError, match="tree_budget must be >= 2"):
        ProposalGenerator(target, LocalProposer(trie), tree_budget=1)


def test_a_cut_tree_is_the_engines_tree_of_that_size(trie: Path, prompts: list[list[int]],
                                                     refs: list[list[int]]) -> None:
    idx = NgramIndex.open(trie)
    seqs = [p + r[:3] for p, r in zip(prompts, refs)]
    repeats = [p + p + p[:2] for p in prompts]  # prompt lookup's long matches
    for proposer, seqs in ((LocalProposer(trie), seqs), (LookupProposer(), repeats)):
        full = proposer.propose_batch(seqs)
        cut = proposer.propose_batch(seqs, max_nodes=5)
        assert max(full.n_nodes) > 6 and max(cut.n_nodes) == 6
        for t, s in zip(cut, seqs):
            if isinstance(proposer, LocalProposer):
                assert t.draft_tokens.tolist() == idx.propose(s, max_nodes=5).tokens.tolist()
        assert proposer.propose_batch(seqs, max_nodes=500).n_nodes == full.n_nodes  # more than its own: its own
    with pytest.raises(ValueError, match="max_nodes must be >= 0"):
        LookupProposer().propose_batch(seqs, max_nodes=-1)


@pytest.mark.needs_server
def test_the_host_cuts_its_trees_alike(trie: Path, prompts: list[list[int]], refs: list[list[int]],
                                       target: Any) -> None:
    seqs = [p + r[:3] for p, r in zip(prompts, refs)]
    host = TrieHost(trie)
    try:
        with RemoteProposer(host.target, tokenizer=SAMPLE_TOKENIZER, deadline=LONG) as remote:
            got = remote.propose_batch(seqs, max_nodes=7)
            assert remote.timing.remote and max(got.n_nodes) == 8
            want = LocalProposer(trie).propose_batch(seqs, max_nodes=7)
            assert [t.draft_tokens.tolist() for t in got] == [t.draft_tokens.tolist() for t in want]
        drafter = fitted_drafter(target, refs)
        logits = torch.randn(len(seqs), 4, drafter.config.draft_vocab_size, generator=torch.Generator().manual_seed(0))
        with RemotePruner(host.target, tokenizer=SAMPLE_TOKENIZER, deadline=LONG) as remote:
            local = LocalPruner(trie, tokenizer=SAMPLE_TOKENIZER)
            for cap in (3, 9):
                got = remote.prune_batch(logits, drafter.d2t, seqs, max_nodes=cap)
                want = LocalPruner(trie, max_nodes=cap).prune_batch(logits, drafter.d2t, seqs)
                assert remote.timing.remote and max(got.n_nodes) == cap + 1
                assert [t.draft_tokens.tolist() for t in got] == [t.draft_tokens.tolist() for t in want]
                assert [t.draft_tokens.tolist() for t in local.prune_batch(logits, drafter.d2t, seqs, max_nodes=cap)
                        ] == [t.draft_tokens.tolist() for t in want]
    finally:
        host.kill()


@pytest.mark.parametrize("kv_cache", ["static", "dynamic"])
def test_a_batch_within_its_budget_decodes_the_targets_tokens(target: Any, trie: Path, prompts: list[list[int]],
                                                              refs: list[list[int]], kv_cache: str) -> None:
    """Every step's trees fit the budget at that step's batch size (rows leave as they finish, and the
    others' trees grow back); the tokens are the target's own, as without a budget."""
    tok = refs[0][6]  # an EOS some rows meet early: the batch shrinks
    for budget in (16, 64, None):
        gen = ProposalGenerator(target, LocalProposer(trie), eos_token_id=tok, kv_cache=kv_cache, tree_budget=budget)
        out = gen.generate(prompts, MAX_NEW)
        want = [r[: r.index(tok) + 1] if tok in r else r for r in refs]
        assert [r.output_ids for r in out] == want
        steps = [s for r in out for s in r.steps]
        for s in steps:
            cap = gen.tree_nodes(s.batch_size)
            assert s.tree_nodes <= (65 if cap is None else cap + 1), (budget, s)
        if budget is not None:
            assert len({s.batch_size for s in steps}) > 1  # rows left, the others' share grew
            widest = max(s.batch_size for s in steps)
            assert max(s.tree_nodes for s in steps if s.batch_size == widest) <= budget // widest
        else:
            assert max(s.tree_nodes for s in steps) > 16  # uncut


def test_dart_batch_within_its_budget(target: Any, trie: Path, prompts: list[list[int]],
                                      refs: list[list[int]]) -> None:
    drafter = fitted_drafter(target, refs)
    gen = DartGenerator(target, drafter, LocalPruner(trie, tokenizer=SAMPLE_TOKENIZER), tree_budget=32)
    assert gen.tree_nodes(1) == 31 and gen.tree_nodes(8) == 3  # DART's 60 nodes cut to 32 and 4 tokens
    out = gen.generate(prompts, MAX_NEW)
    assert [r.output_ids for r in out] == refs
    steps = [s for r in out for s in r.steps]
    assert all(s.tree_nodes <= gen.tree_nodes(s.batch_size) + 1 for s in steps)
    assert max(s.tree_nodes for s in steps if s.batch_size == len(prompts)) == 4  # the drafter fills its share
