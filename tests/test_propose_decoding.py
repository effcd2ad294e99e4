"""Decoding with proposals (ProposalGenerator): no drafter model, the draft
trees proposed by a trie (in process, or on a real ngram-serve host) with
prompt lookup merged in, or by prompt lookup alone.

The target is a tiny random Llama over the bundled sample tokenizer's 4,096
ids. The trie (order 3) is written from the target's own greedy
continuations of half the prompts (their trees then hold long accepted
paths), misleading continuations of two others (their trees are rejected)
and nothing for the rest (prompt lookup and the trie's shorter contexts
only). Greedy decoding must give exactly the target's greedy decoding by
transformers' ``generate``, one prompt at a time and in ragged batches, with
the trie local, remote, the host killed mid-run, or no trie at all.
"""
from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import SAMPLE_TOKENIZER, require_module

torch = require_module("torch")
require_module("transformers")

from click.testing import CliRunner

from dart_client.generate import ProposalGenerator
from dart_client.proposer import LocalProposer, LookupProposer, RemoteProposer
from dart_client.pruner import TokenizerMismatchError
from dart_client.random_models import random_target
from ngram_service import NgramIndex
from ngram_service.proposals import DEFAULTS, propose_lookup
from tests.dart_testbed import (
    TrieHost,
    encode_prompts,
    free_port,
    one_torch_thread,  # noqa: F401  (autouse)
    write_count_trie,
)

needs_server = pytest.mark.needs_server  # skipped without the binary, a failure under CI (conftest)
MAX_NEW = 24
KNOWN = (0, 2, 4, 6)  # the trie holds the target's own continuation of these prompts
MISLEADING = (1, 3)  # and a wrong one of these
LONG = 30.0  # deadline where a test asserts there was no fallback (a loaded machine can be slow; a dead host is not)
TREE_FIELDS = ("tokens", "position_ids", "parents", "retrieve_indices", "tree_mask")


# ---- fixtures ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    p = encode_prompts()
    assert len({len(x) for x in p}) >= 5  # ragged
    return p


@pytest.fixture(scope="module")
def target() -> Any:
    return random_target("tiny", family="llama", seed=3, eos_token_id=0, bos_token_id=0)


@pytest.fixture(scope="module")
def refs(target: Any, prompts: list[list[int]]) -> list[list[int]]:
    """transformers' own greedy decoding, up to and including the EOS."""
    out = []
    for p in prompts:
        ids = target.generate(torch.tensor([p]), max_new_tokens=MAX_NEW, do_sample=False, eos_token_id=0,
                              pad_token_id=0)[0, len(p):].tolist()
        out.append(ids[: ids.index(0) + 1] if 0 in ids else ids)
    return out


@pytest.fixture(scope="module")
def trie(tmp_path_factory: pytest.TempPathFactory, prompts: list[list[int]], refs: list[list[int]]) -> Path:
    rng = np.random.default_rng(0)
    docs = [prompts[i] + refs[i] for i in KNOWN]
    docs += [prompts[i] + [int(t) for t in rng.integers(1, 4096, MAX_NEW)] for i in MISLEADING]
    return write_count_trie(tmp_path_factory.mktemp("proposals") / "known.ngt", docs, "propose-decoding-test")


@pytest.fixture(scope="module")
def host(trie: Path):
    h = TrieHost(trie)
    yield h
    h.kill()


def _lossless(gen: ProposalGenerator, prompts: list[list[int]], refs: list[list[int]], rows: list[int],
              **kw: Any) -> list[Any]:
    """Decodes prompts[rows] as one batch; each output must be the target's own."""
    out = gen.generate([prompts[i] for i in rows], MAX_NEW, **kw)
    assert isinstance(out, list) and len(out) == len(rows)
    for i, r in zip(rows, out):
        assert r.output_ids == refs[i], f"rows {rows}, prompt {i}: {r.output_ids} != target {refs[i]}"
        assert r.mode == "proposals" and all(s.drafter_s == 0 for s in r.steps)
    return out


def _same_trees(a: Any, b: Any) -> None:
    for f in TREE_FIELDS:
        assert torch.equal(getattr(a, f), getattr(b, f)), f


# ---- the proposers ----------------------------------------------------------------

def test_proposer_trees_are_the_engines(trie: Path, prompts: list[list[int]], refs: list[list[int]]) -> None:
    """Each tree of a padded batch is the engine's for its sequence; an id the
    trie does not know cuts the context after it, and an unknown root leaves
    the tree to prompt lookup over the whole sequence."""
    idx = NgramIndex.open(trie)
    pr = LocalProposer(trie, tokenizer=SAMPLE_TOKENIZER, max_nodes=24)
    seqs = [prompts[i] + refs[i][:5] for i in range(5)] + [[7]]
    trees = pr.propose_batch(seqs)
    assert trees.tokens.shape[0] == 6 and len(set(trees.n_nodes)) > 1  # ragged, padded
    assert max(trees.n_nodes) > 8
    for t, s in zip(trees, seqs):
        e = idx.propose(s, max_nodes=24)
        assert t.draft_tokens.tolist() == e.tokens.tolist() and t.parents.tolist() == e.parents.tolist()
        assert t.tree_position_ids.tolist() == e.depths.tolist()
        assert torch.equal(t.tree_mask, torch.from_numpy(e.tree_mask))
        assert torch.equal(t.retrieve_indices, torch.from_numpy(e.retrieve_indices).long())
    assert pr.stats.calls == 6 and pr.timing.source == "trie" and not pr.timing.remote
    # ids the trie does not know (a model's vocabulary may be larger than its tokenizer's)
    s = seqs[0]
    mid = pr(s[:3] + [5000] + s[3:])
    want = idx.propose(s[3:], max_nodes=24)
    assert mid.draft_tokens.tolist() == want.tokens.tolist()
    rep = [5, 9, 4100, 5, 9, 4100]
    root = pr(rep)
    assert root.draft_tokens.tolist() == propose_lookup(rep, 4101, max_nodes=24).tokens.tolist()
    assert root.draft_tokens.tolist()[:2] == [4100, 5]  # the lookup found the repeat
    assert pr.stats.fallbacks == 1 and pr.stats.errors == {"OUT_OF_VOCAB": 1}


def test_lookup_proposer_and_bad_parameters(prompts: list[list[int]]) -> None:
    s = prompts[0] + prompts[0][:3]
    tree = LookupProposer(max_nodes=10)(s)
    assert tree.draft_tokens.tolist() == propose_lookup(s, 4096, max_nodes=10).tokens.tolist()
    assert tree.n_nodes > 1 and tree.draft_tokens[1] == prompts[0][3]
    with pytest.raises(ValueError, match="max_nodes"):
        LookupProposer(max_nodes=-1)
    with pytest.raises(TypeError, match="beam_width"):
        LookupProposer(beam_width=3)
    with pytest.raises(ValueError, match="empty"):
        LookupProposer().propose_batch([[1, 2], []])


def test_tokenizer_fingerprint_is_checked(trie: Path) -> None:
    with pytest.raises(TokenizerMismatchError):
        LocalProposer(trie, tokenizer_fingerprint="0" * 64)
    LocalProposer(trie, tokenizer=SAMPLE_TOKENIZER)


def test_the_tries_ids_must_fit_the_target(target: Any) -> None:
    with pytest.raises(ValueError, match="target's vocabulary 4096"):
        ProposalGenerator(target, types.SimpleNamespace(vocab_size=5000))


@needs_server
def test_remote_proposer_equals_local(host: TrieHost, trie: Path, prompts: list[list[int]]) -> None:
    with RemoteProposer(host.target, tokenizer=SAMPLE_TOKENIZER, deadline=LONG, max_nodes=32, max_depth=6) as pr:
        seqs = [p + p[:4] for p in prompts[:5]]
        got = pr.propose_batch(seqs)
        _same_trees(got, LocalProposer(trie, max_nodes=32, max_depth=6).propose_batch(seqs))
        assert pr.timing.remote and pr.timing.source == "host" and pr.stats.remote_ok == 5
    with pytest.raises(TokenizerMismatchError):
        RemoteProposer(host.target, tokenizer_fingerprint="0" * 64, deadline=LONG)


def test_dead_host_proposes_by_lookup_alone(prompts: list[list[int]]) -> None:
    """No host ever answered: every call is prompt lookup alone, the whole
    batch, and the back-off skips the RPC."""
    pr = RemoteProposer(f"127.0.0.1:{free_port()}", deadline=0.05, connect_timeout=0.2, backoff_initial=30.0)
    seqs = [p + p[:4] for p in prompts[:4]]
    trees = pr.propose_batch(seqs)
    _same_trees(trees, LookupProposer().propose_batch(seqs))
    assert pr.stats.fallbacks == 4 and pr.stats.skipped_backoff == 4 and pr.stats.errors
    assert not pr.timing.remote and pr.timing.source == "lookup" and not pr.remote_available
    pr.close()


# ---- decoding ------------------------------------------------------------------------

def test_local_trie_lossless(target: Any, trie: Path, prompts: list[list[int]], refs: list[list[int]]) -> None:
    gen = ProposalGenerator(target, LocalProposer(trie))
    results = [gen.generate(p, MAX_NEW) for p in prompts]
    assert [r.output_ids for r in results] == refs
    steps = [s for r in results for s in r.steps]
    assert all(s.source == "trie" and not s.remote and s.batch_size == 1 for s in steps)
    # the trie's trees held the known continuations: long accepted paths ...
    known = [results[i] for i in KNOWN]
    assert sum(len(r.output_ids) for r in known) / sum(len(r.steps) for r in known) > 3
    assert max(s.accepted for s in steps) >= 5
    # ... and the misleading ones were verified and rejected
    assert any(s.accepted == 0 and s.tree_nodes > 1 for i in MISLEADING for s in results[i].steps)
    assert results[0].summary()["tree_sources"] == {"trie": len(results[0].steps)}


def test_batches_of_ragged_prompts_lossless(target: Any, trie: Path, prompts: list[list[int]],
                                            refs: list[list[int]]) -> None:
    gen = ProposalGenerator(target, LocalProposer(trie))
    out = _lossless(gen, prompts, refs, list(range(8)))
    assert {s.batch_size for r in out for s in r.steps} >= {8}
    assert max(s.accepted for r in out for s in r.steps) >= 5
    _lossless(gen, prompts, refs, [7, 0, 7])
    _lossless(gen, prompts, refs, [5, 2])
    # sequences that finish at different steps leave the batch, the others go on
    tok = refs[0][4]
    early = ProposalGenerator(target, LocalProposer(trie), eos_token_id=tok)
    res = early.generate(prompts, MAX_NEW)
    want = [r[: r.index(tok) + 1] if tok in r else r for r in refs]
    assert [r.output_ids for r in res] == want and len({len(w) for w in want}) > 1
    last = max(res, key=lambda r: len(r.steps))
    assert last.steps[-1].batch_size < last.steps[0].batch_size  # the others had left


def test_no_trie_lookup_alone_lossless(target: Any, prompts: list[list[int]], refs: list[list[int]]) -> None:
    gen = ProposalGenerator(target, LookupProposer())
    out = _lossless(gen, prompts, refs, list(range(8)))
    steps = [s for r in out for s in r.steps]
    assert all(s.source == "lookup" and not s.remote for s in steps)
    assert any(s.accepted >= 1 for s in steps)  # the target repeats itself: lookup finds it
    assert gen.generate(prompts[4], MAX_NEW).output_ids == refs[4]
    # any callable (tokens, device) -> DraftTree, called once per sequence
    lookup = LookupProposer()
    plain = ProposalGenerator(target, lambda tokens, device: lookup(tokens, device))
    out = plain.generate([prompts[4], prompts[1]], MAX_NEW)
    assert [r.output_ids for r in out] == [refs[4], refs[1]] and lookup.stats.calls > 0


@needs_server
def test_remote_host_lossless(target: Any, host: TrieHost, prompts: list[list[int]], refs: list[list[int]]) -> None:
    with RemoteProposer(host.target, tokenizer=SAMPLE_TOKENIZER, deadline=LONG) as pr:
        gen = ProposalGenerator(target, pr)
        out = _lossless(gen, prompts, refs, list(range(8)))
        assert out[0].pruner["remote_ok"] == pr.stats.remote_ok > 0  # the trees, counted
        assert gen.generate(prompts[2], MAX_NEW).output_ids == refs[2]
        steps = [s for r in out for s in r.steps]
        assert all(s.remote and s.source == "host" for s in steps) and pr.stats.fallbacks == 0
        assert max(s.accepted for s in steps) >= 5


@needs_server
def test_host_killed_mid_run_falls_back_to_lookup_lossless(target: Any, trie: Path, prompts: list[list[int]],
                                                           refs: list[list[int]]) -> None:
    h = TrieHost(trie)
    try:
        # a long deadline: a loaded machine must not look like a dead host (a killed one fails at once)
        with RemoteProposer(h.target, deadline=30.0, backoff_initial=0.02, backoff_max=0.1) as pr:
            gen = ProposalGenerator(target, pr)

            def kill_after_first_step(i: int, _res: Any) -> None:
                if i == 1:
                    h.kill()

            out = gen.generate(prompts, MAX_NEW, on_step=kill_after_first_step)
            assert [r.output_ids for r in out] == refs
            for r in out:
                assert r.steps[0].source == "host" and r.steps[0].remote
                assert all(not s.remote and s.source == "lookup" for s in r.steps[1:])
            assert any(len(r.steps) > 1 for r in out)  # some row went on past the kill
            assert pr.stats.fallbacks > 0 and pr.stats.errors
            _lossless(gen, prompts, refs, [6, 1, 3])  # the host stays down
    finally:
        h.kill()


def test_tree_speculative_sampling(target: Any, trie: Path, prompts: list[list[int]],
                                   refs: list[list[int]]) -> None:
    """With top_k = 1 the target's distribution is a point: sampling must be
    the greedy decoding. At temperature 1 it samples: valid tokens, the same
    for the same seed, each step committing its accepted tokens + 1."""
    gen = ProposalGenerator(target, LocalProposer(trie))
    out = gen.generate(prompts[:5], MAX_NEW, temperature=0.7, top_k=1, seed=0)
    assert [r.output_ids for r in out] == refs[:5]
    assert max(s.accepted for r in out for s in r.steps) >= 5
    a = gen.generate(prompts, MAX_NEW, temperature=1.0, seed=11)
    b = gen.generate(prompts, MAX_NEW, temperature=1.0, seed=11)
    assert [r.output_ids for r in a] == [r.output_ids for r in b]
    assert [r.output_ids for r in a] != refs
    for r in a:
        assert 1 <= len(r.output_ids) <= MAX_NEW and all(0 <= t < 4096 for t in r.output_ids)
        assert len(r.output_ids) <= 1 + sum(s.accepted + 1 for s in r.steps)
        assert 0 not in r.output_ids[:-1]  # stopped at the EOS
    one = gen.generate(prompts[3], MAX_NEW, temperature=1.0, top_p=0.9, seed=5, sampling_order="transformers")
    assert 1 <= len(one.output_ids) <= MAX_NEW


def test_a_lattice_log_needs_a_drafter(target: Any, prompts: list[list[int]], tmp_path: Path) -> None:
    from dart_client.lattice_log import LatticeWriter

    with LatticeWriter(tmp_path / "x.parquet", topk=4) as log, pytest.raises(ValueError, match="drafter's lattices"):
        ProposalGenerator(target, LookupProposer()).generate(prompts[0], 4, lattice_log=log)


@pytest.mark.cuda
def test_decoding_with_proposals_on_the_device_is_lossless(target: Any, trie: Path,
                                                            prompts: list[list[int]]) -> None:
    """float32 on the GPU: the trees staged to the device (pinned buffer, one
    copy), batched greedy decoding equal to the target alone there."""
    import copy

    on_gpu = copy.deepcopy(target).to("cuda")
    gen = ProposalGenerator(on_gpu, LocalProposer(trie))
    want = [gen.autoregressive(p, MAX_NEW).output_ids for p in prompts]
    out = gen.generate(prompts, MAX_NEW)
    assert [r.output_ids for r in out] == want
    assert max(s.accepted for r in out for s in r.steps) >= 5
    assert gen.proposer.propose_batch(prompts[:3], "cuda").tokens.device.type == "cuda"


# ---- dart-generate --drafter none ------------------------------------------------------

def test_cli_drafter_none(trie: Path, target: Any, tmp_path: Path) -> None:
    from dart_client.cli import main

    runner = CliRunner()
    prompt = "def fibonacci(n):\n    "
    base = ["--random-models", "--drafter", "none", "--max-new-tokens", "10", "-p", prompt]
    res = runner.invoke(main, [*base, "--trie", str(trie), "--json", "--compare", "--max-nodes", "16",
                               "--max-depth", "4", "--no-lookup"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["mode"] == "proposals" and out["drafter"] == "none" and out["identical_to_target"] is True
    assert out["proposals"] == {**DEFAULTS, "max_nodes": 16, "max_depth": 4, "lookup": False}
    assert out["tree_sources"] == {"trie": out["steps"]} and out["eos"] == {"stop": [0], "search": None}
    assert "not checked" not in res.stderr  # the trie records the sample tokenizer's fingerprint
    # no trie: prompt lookup alone; text and figures
    res = runner.invoke(main, [*base, "--compare"])
    assert res.exit_code == 0, res.output
    assert "proposing" in res.stderr and "drafter forward" not in res.stderr
    assert "prompt lookup alone" in res.stderr and "identical output: True" in res.stderr
    # a dead host: prompt lookup alone, counted
    res = runner.invoke(main, [*base, "--target", f"127.0.0.1:{free_port()}", "--deadline-ms", "20"])
    assert res.exit_code == 0, res.output
    assert "trees from the host   0/" in res.stderr and "fallbacks (prompt lookup)" in res.stderr
    # a model folder, with --model
    target.save_pretrained(tmp_path / "target")
    res = runner.invoke(main, ["--model", str(tmp_path / "target"), "--drafter", "none", "--tokenizer",
                               str(SAMPLE_TOKENIZER), "--trie", str(trie), "--max-new-tokens", "8", "-p", prompt,
                               "--json", "--compare"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["identical_to_target"] is True
    # options of the other mode are refused, by name
    res = runner.invoke(main, [*base, "--lattice-topk", "5", "--beam-width", "4"])
    assert res.exit_code == 2 and "--lattice-topk, --beam-width: only with a DART drafter" in res.output, res.output
    res = runner.invoke(main, [*base, "--trie", str(trie), "--deadline-ms", "20"])
    assert res.exit_code == 2 and "--deadline-ms: only with --target (a trie host)" in res.output, res.output
    res = runner.invoke(main, ["--random-models", "--trie", str(trie), "--max-depth", "3", "-p", prompt])
    assert res.exit_code == 2 and "--max-depth: only with --drafter none" in res.output, res.output
    res = runner.invoke(main, ["--drafter", "none", "--trie", str(trie), "-p", prompt])
    assert res.exit_code == 2 and "give the MODEL folder" in res.output, res.output
    res = runner.invoke(main, [*base, "--lookup-min-match", "99"])
    assert res.exit_code == 2, res.output
    assert "Invalid value for '--lookup-min-match': 99 is not in the range 1<=x<=32." in res.output
