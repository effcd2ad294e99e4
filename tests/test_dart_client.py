"""dart_client: the drafter, the pruners and DART decoding on tiny random models.

The target is a random Qwen3 (8 layers, hidden 64) over the bundled sample
tokenizer's 4,096 ids, saved with save_pretrained and loaded back; the
drafter is a random DART checkpoint written in DART's format and loaded
back; the trie is the bundled sample corpus (N = 3). A random drafter
rarely guesses a random target's tokens, so its draft vocabulary (d2t) is
the 16 tokens the target produces most on the test prompts: trees then hold
accepted paths, which exercises acceptance and KV-cache compaction.

``-k lossless`` selects the tests that compare DART's output with the
target's greedy decoding by transformers' ``generate(do_sample=False)``
(Qwen3 and Llama targets).
"""
from __future__ import annotations

import collections
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import require_module

torch = require_module("torch")
require_module("transformers")
require_module("safetensors")

from click.testing import CliRunner

from dart_client import (
    DartDrafter,
    DartGenerator,
    DrafterCache,
    LocalPruner,
    RemotePruner,
)
from dart_client.pruner import TokenizerMismatchError, model_fingerprint
from dart_client.random_models import random_drafter, random_target
from indexer.cli import SAMPLE_DIR
from ngram_service import NgramIndex
from ngram_service.tree import NoTrie
from tests.dart_testbed import one_torch_thread  # noqa: F401  (autouse)
from tests.dart_testbed import TrieHost, free_port

SAMPLE_TOKENIZER = SAMPLE_DIR / "tokenizer.json"
needs_server = pytest.mark.needs_server  # the remote tests need a real trie host
MAX_NEW = 24
# The deadline of remote calls where a test asserts there was no fallback: a
# loaded 2-core machine can take a second for a call. Behaviour is asserted
# (remote or fallback, the same tokens), never speed; a host that is down
# answers at once (connection refused), so a long deadline costs nothing.
LONG = 30.0
PROMPTS = [
    "PEP 8 -- Style Guide for Python Code",
    "The Zen of Python, by Tim Peters",
    "Abstract: This PEP proposes a new syntax for",
    "def fibonacci(n):\n    ",
    "Rationale\n=========\n\nThe current implementation",
    "import sys\nimport os\n\n",
    "Backwards Compatibility",
    "This document has been placed in the public domain.",
    "Specification\n-------------\n\nThe following",
    "A function decorator is",
    "Reference Implementation",
    "Copyright",
]


# ---- fixtures ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(SAMPLE_TOKENIZER))
    return [tok.encode(p, add_special_tokens=False).ids for p in PROMPTS]


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("target")
    model = random_target("tiny", family="qwen3", seed=1, eos_token_id=0, bos_token_id=0)
    model.save_pretrained(d)
    return d


@pytest.fixture(scope="module")
def target(target_dir: Path) -> Any:
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(str(target_dir), attn_implementation="sdpa", dtype=torch.float32)
    assert type(m).__name__ == "Qwen3ForCausalLM" and m.config.num_hidden_layers == 8
    return m.eval()


def hf_greedy(model: Any, prompts: list[list[int]], max_new: int) -> list[list[int]]:
    """transformers' own greedy decoding, the independent reference of lossless decoding (up to and
    including the model's EOS, like DartGenerator)."""
    eos = model.config.eos_token_id
    out = []
    for p in prompts:
        ids = model.generate(torch.tensor([p]), max_new_tokens=max_new, do_sample=False, eos_token_id=eos,
                             pad_token_id=eos)[0, len(p):].tolist()
        out.append(ids[: ids.index(eos) + 1] if eos in ids else ids)
    return out


@pytest.fixture(scope="module")
def references(target: Any, prompts: list[list[int]]) -> list[list[int]]:
    """The target's greedy continuations by transformers' generate(do_sample=False)."""
    return hf_greedy(target, prompts, MAX_NEW)


@pytest.fixture(scope="module")
def drafter_dir(tmp_path_factory: pytest.TempPathFactory, target: Any, references: list[list[int]]) -> Path:
    counts = collections.Counter(t for r in references for t in r)
    ids = [t for t, _ in counts.most_common(16)]
    ids += [i for i in range(4096) if i not in set(ids)][: 16 - len(ids)]
    d = tmp_path_factory.mktemp("drafter")
    random_drafter(target, draft_length=3, draft_ids=ids, seed=2).save_pretrained(d)
    return d


@pytest.fixture(scope="module")
def drafter(drafter_dir: Path) -> DartDrafter:
    return DartDrafter.from_pretrained(drafter_dir)


@pytest.fixture(scope="module")
def fingerprint() -> str:
    return model_fingerprint(SAMPLE_TOKENIZER)


class _NoPruner:
    def __call__(self, *a: Any) -> Any:
        raise AssertionError("not used")


@pytest.fixture
def host(sample_trie: Path):
    h = TrieHost(sample_trie)
    yield h
    h.kill()


def _logits(d: int = 4, v: int = 64, seed: int = 0) -> Any:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(d, v, generator=g) * 3


def _assert_same_tree(a: Any, b: Any) -> None:
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and torch.equal(x, y)


# ---- the drafter ---------------------------------------------------------------------

def test_drafter_checkpoint_has_darts_keys_and_round_trips(drafter_dir: Path, drafter: DartDrafter, target: Any,
                                                           tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    keys = set(load_file(str(drafter_dir / "model.safetensors")))
    assert keys == {
        "fc.weight", "midlayer.mask_rep", "midlayer.self_attn.q_proj.weight", "midlayer.self_attn.k_proj.weight",
        "midlayer.self_attn.v_proj.weight", "midlayer.self_attn.o_proj.weight", "midlayer.mlp.gate_proj.weight",
        "midlayer.mlp.up_proj.weight", "midlayer.mlp.down_proj.weight", "midlayer.hidden_norm.weight",
        "midlayer.input_layernorm.weight", "midlayer.post_attention_layernorm.weight", "norm.weight",
        "lm_head.weight", "d2t", "t2d",
    }
    cfg = json.loads((drafter_dir / "config.json").read_text())
    assert cfg["draft_length"] == 3 and cfg["draft_vocab_size"] == 16 and cfg["vocab_size"] == 4096
    aux = torch.randn(1, 5, 3 * 64)
    emb = target.get_input_embeddings()(torch.tensor([[5, 6, 7, 8, 9]]))
    out = drafter.draft(aux, emb, None)
    assert out.shape == (4, 16)  # D = draft_length + 1 levels over the draft vocabulary

    # An embed_tokens.weight in the file (some checkpoints carry one) is ignored.
    state = load_file(str(drafter_dir / "model.safetensors"))
    state["embed_tokens.weight"] = torch.zeros(4096, 64)
    (tmp_path / "with_emb").mkdir()
    save_file(state, str(tmp_path / "with_emb" / "model.safetensors"))
    (tmp_path / "with_emb" / "config.json").write_text((drafter_dir / "config.json").read_text())
    again = DartDrafter.from_pretrained(tmp_path / "with_emb")
    assert torch.equal(again.draft(aux, emb, None), out)

    # A missing weight would stay random: refused.
    del state["midlayer.mask_rep"]
    save_file(state, str(tmp_path / "with_emb" / "model.safetensors"))
    with pytest.raises(ValueError, match="midlayer.mask_rep"):
        DartDrafter.from_pretrained(tmp_path / "with_emb")


def test_drafter_cache_equals_one_pass(drafter: DartDrafter) -> None:
    """Drafting 7 positions then 3 more through the cache gives what one pass
    over all 10 gives: mask positions are dropped from the cache."""
    torch.manual_seed(0)
    aux = torch.randn(1, 10, 3 * 64)
    emb = torch.randn(1, 10, 64)
    full = drafter.draft(aux, emb, None)
    cache = DrafterCache()
    drafter.draft(aux[:, :7], emb[:, :7], cache)
    assert cache.length == 7
    inc = drafter.draft(aux[:, 7:], emb[:, 7:], cache)
    assert cache.length == 10
    torch.testing.assert_close(inc, full, rtol=1e-5, atol=1e-5)


# ---- the pruners -----------------------------------------------------------------------

def test_local_pruner_is_topk_softmax_then_engine(sample_trie: Path) -> None:
    logits = _logits(4, 64)
    d2t = (torch.arange(64) * 7 + 11) - torch.arange(64)  # draft id i -> target id 7 i + 11
    tokens = [10, 20, 30, 40, 50]
    pr = LocalPruner(sample_trie, topk=25)
    tree = pr(logits, d2t, tokens)
    vals, idx = torch.topk(logits, 25, dim=-1)
    expect = NgramIndex.open(sample_trie).prune(np.array(tokens[-2:]), (idx * 7 + 11).numpy(),
                                                torch.softmax(vals, -1).numpy())
    assert tree.draft_tokens.dtype == torch.int64 and tree.retrieve_indices.dtype == torch.int64
    assert tree.tree_mask.dtype == torch.bool and tree.tree_position_ids.dtype == torch.int64
    assert tree.draft_tokens.tolist() == expect.tokens.tolist() and tree.draft_tokens[0] == 50
    assert tree.tree_position_ids.tolist() == expect.depths.tolist()
    assert torch.equal(tree.tree_mask, torch.from_numpy(expect.tree_mask))
    assert tree.retrieve_indices.tolist() == expect.retrieve_indices.tolist()
    assert tree.draft_tokens.shape == (61,) and tree.tree_mask.shape == (61, 61)
    assert pr.timing.search > 0 and pr.timing.transport == 0


def test_pruner_drops_ids_outside_the_tries_vocabulary(sample_trie: Path) -> None:
    logits = torch.full((2, 10), -5.0)
    logits[:, 0] = 5.0  # the best draft id maps to 5000, outside the 4,096-id trie
    d2t = torch.zeros(10, dtype=torch.int64)
    d2t[0] = 5000
    tree = LocalPruner(sample_trie, topk=10)(logits, d2t, [1, 2, 3])
    assert 5000 not in tree.draft_tokens.tolist() and tree.draft_tokens.shape[0] > 1
    # An unknown root: the n-gram-free search over a large enough vocabulary.
    tree = LocalPruner(sample_trie, topk=10)(logits, d2t, [1, 2, 4100])
    assert tree.draft_tokens[0] == 4100 and 5000 in tree.draft_tokens.tolist()


@needs_server
def test_remote_pruner_equals_local(host: TrieHost, sample_trie: Path, fingerprint: str) -> None:
    local = LocalPruner(sample_trie, tokenizer_fingerprint=fingerprint)
    with RemotePruner(host.target, tokenizer_fingerprint=fingerprint, deadline=LONG) as remote:
        for seed in range(5):
            logits = _logits(5, 300, seed)
            tokens = list(range(100 + seed, 120 + seed))
            _assert_same_tree(remote(logits, None, tokens), local(logits, None, tokens))
            assert remote.timing.remote and remote.timing.transport > 0
        assert remote.stats.remote_ok == 5 and remote.stats.fallbacks == 0
    # The fallback is the host's own search without the n-gram.
    with RemotePruner(host.target, tokenizer_fingerprint=fingerprint, deadline=LONG, ngram_weight=0.0) as remote:
        logits, tokens = _logits(6, 5000, 9), list(range(200, 230))
        from_host = remote(logits, None, tokens)
        host.kill()
        fallback = remote(logits, None, tokens)
        assert remote.stats.remote_ok == 1 and remote.stats.fallbacks == 1
        _assert_same_tree(fallback, from_host)


def test_remote_pruner_falls_back_without_the_ngram_and_backs_off(sample_trie: Path) -> None:
    port = free_port()  # nothing listens there
    pr = RemotePruner(f"127.0.0.1:{port}", deadline=0.05, connect_timeout=0.2, backoff_initial=30.0)
    assert not pr.remote_available and pr.stats.errors  # the failed first contact is counted
    no_ngram = LocalPruner(sample_trie, ngram_weight=0.0, eos_token_id=-1)
    logits = _logits(4, 64)
    tree = pr(logits, None, [3, 4, 5])
    _assert_same_tree(tree, no_ngram(logits, None, [3, 4, 5]))
    tree = pr(logits, None, [3, 4, 5])  # inside the back-off: no RPC at all
    assert pr.stats.fallbacks == 2 and pr.stats.skipped_backoff == 2 and pr.timing.transport == 0
    pr.close()


@needs_server
def test_remote_pruner_returns_to_the_host_after_the_backoff(sample_trie: Path, fingerprint: str) -> None:
    port = free_port()
    pr = RemotePruner(f"127.0.0.1:{port}", tokenizer_fingerprint=fingerprint, deadline=LONG, connect_timeout=0.2,
                      backoff_initial=0.2, backoff_max=0.5)
    logits = _logits(4, 64)
    pr(logits, None, [3, 4, 5])
    assert pr.stats.fallbacks == 1 and not pr.remote_available
    h = TrieHost(sample_trie, port=port)
    try:
        deadline = time.monotonic() + 15
        while pr.stats.remote_ok == 0 and time.monotonic() < deadline:
            pr(logits, None, [3, 4, 5])
            time.sleep(0.05)
        assert pr.stats.remote_ok >= 1 and pr.remote_available
        _assert_same_tree(pr(logits, None, [3, 4, 5]), LocalPruner(sample_trie)(logits, None, [3, 4, 5]))
    finally:
        h.kill()
        pr.close()


@needs_server
def test_tokenizer_fingerprint_is_checked(host: TrieHost, sample_trie: Path, fingerprint: str) -> None:
    wrong = "0" * 64
    with pytest.raises(TokenizerMismatchError):
        RemotePruner(host.target, tokenizer_fingerprint=wrong, deadline=LONG)
    with pytest.raises(TokenizerMismatchError):
        LocalPruner(sample_trie, tokenizer_fingerprint=wrong)
    RemotePruner(host.target, tokenizer=SAMPLE_TOKENIZER, deadline=LONG).close()  # the right one passes
    assert NgramIndex.open(sample_trie).info()["tokenizer"]["fingerprint"] == fingerprint


def test_no_trie_is_a_vocabulary_alone() -> None:
    no = NoTrie(151936)
    assert no.vocab_size == 151936 and no.order == 1
    with pytest.raises(ValueError, match="vocab_size = 0"):
        NoTrie(0)


# ---- decoding ------------------------------------------------------------------------------

def _check_lossless(gen: DartGenerator, prompts: list[list[int]], references: list[list[int]],
                    **kw: Any) -> list[Any]:
    results = []
    for p, ref in zip(prompts, references):
        r = gen.generate(p, MAX_NEW, **kw)
        assert r.output_ids == ref, f"prompt {p}: DART {r.output_ids} != target {ref}"
        results.append(r)
    return results


def test_baseline_equals_transformers_generate(target: Any, prompts: list[list[int]],
                                               references: list[list[int]]) -> None:
    """Our plain autoregressive loop (the baseline of the speed-ups) decodes as transformers does."""
    probe = DartGenerator(target, random_drafter(target, draft_vocab_size=8), _NoPruner())
    assert [probe.autoregressive(p, MAX_NEW).output_ids for p in prompts[:4]] == references[:4]


def test_local_lossless(target: Any, drafter: DartDrafter, sample_trie: Path, prompts: list[list[int]],
                        references: list[list[int]], fingerprint: str) -> None:
    # A wider tree than DART's default (60 nodes) holds deeper accepted paths.
    pruner = LocalPruner(sample_trie, tokenizer_fingerprint=fingerprint, max_nodes=120, beam_width=32)
    gen = DartGenerator(target, drafter, pruner)
    results = _check_lossless(gen, prompts, references)
    steps = sum(len(r.steps) for r in results)
    assert sum(r.steps[i].accepted for r in results for i in range(len(r.steps))) > 0
    assert sum(len(r.output_ids) for r in results) / steps > 1.2  # trees had accepted paths
    assert any(s.accepted >= 2 for r in results for s in r.steps)  # and some deeper than one node


@needs_server
def test_remote_lossless(target: Any, drafter: DartDrafter, host: TrieHost, prompts: list[list[int]],
                         references: list[list[int]], fingerprint: str) -> None:
    with RemotePruner(host.target, tokenizer_fingerprint=fingerprint, deadline=LONG) as pr:
        gen = DartGenerator(target, drafter, pr)
        results = _check_lossless(gen, prompts, references)
        assert all(s.remote for r in results for s in r.steps)
        assert pr.stats.fallbacks == 0 and pr.stats.remote_ok == sum(len(r.steps) for r in results)


@needs_server
def test_remote_killed_mid_generation_lossless(target: Any, drafter: DartDrafter, sample_trie: Path,
                                               prompts: list[list[int]], references: list[list[int]],
                                               fingerprint: str) -> None:
    h = TrieHost(sample_trie)
    try:
        with RemotePruner(h.target, tokenizer_fingerprint=fingerprint, deadline=LONG, backoff_initial=0.02,
                          backoff_max=0.1) as pr:
            gen = DartGenerator(target, drafter, pr)

            def kill_at_third_step(i: int, _res: Any) -> None:
                if i == 3:
                    h.kill()

            first = gen.generate(prompts[0], MAX_NEW, on_step=kill_at_third_step)
            assert first.output_ids == references[0]
            assert [s.remote for s in first.steps[:3]] == [True] * 3 and not any(s.remote for s in first.steps[3:])
            _check_lossless(gen, prompts[1:], references[1:])  # the host stays down
            assert pr.stats.fallbacks > 0 and pr.stats.errors
    finally:
        h.kill()


def test_llama_lossless(tmp_path: Path, prompts: list[list[int]]) -> None:
    from transformers import AutoModelForCausalLM

    random_target("tiny", family="llama", seed=3, eos_token_id=0, bos_token_id=0).save_pretrained(tmp_path / "t")
    target = AutoModelForCausalLM.from_pretrained(str(tmp_path / "t"), attn_implementation="sdpa").eval()
    assert type(target).__name__ == "LlamaForCausalLM"
    refs = hf_greedy(target, prompts[:3], MAX_NEW)
    ids = [t for t, _ in collections.Counter(t for r in refs for t in r).most_common(24)]
    d = random_drafter(target, draft_length=2, draft_ids=ids, seed=4)
    d.save_pretrained(tmp_path / "d")
    trie = NoTrie(4096)  # no n-gram here: the drafter alone
    gen = DartGenerator(target, DartDrafter.from_pretrained(tmp_path / "d"), LocalPruner(trie, ngram_weight=0.0))
    _check_lossless(gen, prompts[:3], refs)


def test_sampling_with_top_k_1_is_greedy_lossless(target: Any, drafter: DartDrafter, sample_trie: Path,
                                                  prompts: list[list[int]], references: list[list[int]]) -> None:
    """Tree speculative sampling of a one-point distribution must reproduce
    the greedy continuation."""
    gen = DartGenerator(target, drafter, LocalPruner(sample_trie))
    _check_lossless(gen, prompts[:4], references[:4], temperature=0.8, top_k=1, seed=0)


def test_tree_speculative_sampling_keeps_the_target_distribution() -> None:
    """The first committed token is distributed as the target's p at the
    root whatever the tree offers (nodes 1, 2 under the root, 3 under 1), and
    the second, after node 1's token, as the target's p at node 1. Token ids
    differ from node numbers, so a node read as a token is caught."""
    from dart_client import DraftTree
    from dart_client.sampling import accept_tree_sampling

    logits = torch.log(torch.tensor([[0.1, 0.4, 0.2, 0.3, 1e-9],     # at the root
                                     [0.45, 0.05, 0.15, 0.05, 0.3],  # after node 1 (token 3)
                                     [0.2] * 5,                      # after node 2 (token 1)
                                     [0.2] * 5]))                    # after node 3 (token 2)
    tree = DraftTree(torch.tensor([4, 3, 1, 2]), torch.tensor([[0, 1, 3], [0, 2, -1]]),
                     torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]], dtype=torch.bool),
                     torch.tensor([0, 1, 1, 2]))
    gen = torch.Generator().manual_seed(0)
    first: collections.Counter = collections.Counter()
    second: collections.Counter = collections.Counter()
    n = 6000
    for _ in range(n):
        _path, drafts, bonus = accept_tree_sampling(tree, logits, 1.0, 0, 1.0, gen)
        committed = drafts + [bonus]
        first[committed[0]] += 1
        if committed[0] == 3:
            second[committed[1]] += 1
    p = torch.softmax(logits[0], -1)
    for tok in range(5):
        assert abs(first[tok] / n - float(p[tok])) < 0.025, (tok, first)
    after = sum(second.values())
    assert after > 1500  # p(3) = 0.3 of 6,000
    q = torch.softmax(logits[1], -1)
    for tok in range(5):
        assert abs(second[tok] / after - float(q[tok])) < 0.04, (tok, second)


def test_generation_stops_at_eos_and_max_new_tokens(target: Any, drafter: DartDrafter, sample_trie: Path,
                                                    prompts: list[list[int]], references: list[list[int]]) -> None:
    gen = DartGenerator(target, drafter, LocalPruner(sample_trie))
    r = gen.generate(prompts[0], 5)
    assert r.output_ids == references[0][:5]
    tok = references[0][3]
    gen = DartGenerator(target, drafter, LocalPruner(sample_trie), eos_token_id=tok)
    out = gen.generate(prompts[0], MAX_NEW).output_ids
    assert out == references[0][: references[0].index(tok) + 1]


def test_the_target_gets_the_cache_keyword_its_forward_takes(target: Any, drafter: DartDrafter, sample_trie: Path,
                                                             prompts: list[list[int]],
                                                             references: list[list[int]]) -> None:
    """Newer transformers name the KV cache ``cache`` and warn on every
    forward given the deprecated ``past_key_values`` (and on reading the
    output's ``past_key_values``); older versions take ``past_key_values``
    only. Decoding must use the one the installed version takes."""
    import logging
    import warnings

    logged: list[str] = []

    class _Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            logged.append(record.getMessage())

    handler = _Collect()
    hf_logger = logging.getLogger("transformers")
    hf_logger.addHandler(handler)
    # transformers' warning_once remembers messages for the whole process.
    getattr(getattr(logging.Logger, "warning_once", None), "cache_clear", lambda: None)()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            gen = DartGenerator(target, drafter, LocalPruner(sample_trie))
            assert gen.generate(prompts[0], 8).output_ids == references[0][:8]
            assert [r.output_ids for r in gen.generate(prompts[:2], 8)] == [r[:8] for r in references[:2]]
            assert gen.autoregressive(prompts[0], 8).output_ids == references[0][:8]
    finally:
        hf_logger.removeHandler(handler)
    messages = logged + [str(w.message) for w in caught]
    assert not [m for m in messages if "past_key_values" in m], messages


# ---- the command line ------------------------------------------------------------------------

def test_cli_generates_and_reports(target_dir: Path, drafter_dir: Path, sample_trie: Path) -> None:
    from dart_client.cli import main

    runner = CliRunner()
    args = [str(target_dir), str(drafter_dir), "--tokenizer", str(SAMPLE_TOKENIZER), "--max-new-tokens", "12", "-p",
            PROMPTS[0]]
    res = runner.invoke(main, [*args, "--trie", str(sample_trie), "--json", "--compare"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["new_tokens"] == 12 and out["identical_to_target"] is True and out["text"]
    assert set(out["per_step"]) >= {"target_s", "drafter_s", "prune_s", "transport_s", "prune_transport_share"}
    # A dead host: decoding goes on without it.
    res = runner.invoke(main, [*args, "--target", f"127.0.0.1:{free_port()}", "--deadline-ms", "20"])
    assert res.exit_code == 0, res.output
    assert "mean accepted length" in res.output and "fallbacks" in res.output
    assert "trees from the host   0/" in res.stderr
    res = runner.invoke(main, [*args])
    assert res.exit_code != 0 and "exactly one of --trie" in res.output


def test_cli_takes_a_bare_tokenizer_folder(target_dir: Path, drafter_dir: Path, sample_trie: Path) -> None:
    """A folder holding only tokenizer.json (indexer/sample/) encodes as that file does: transformers
    4.x guessed a model type from such a folder's name ("sam") and raised KeyError: 'SamConfig'."""
    from dart_client.cli import main

    outs = []
    for tok in (SAMPLE_TOKENIZER, SAMPLE_TOKENIZER.parent):
        res = CliRunner().invoke(main, [str(target_dir), str(drafter_dir), "--tokenizer", str(tok),
                                        "--max-new-tokens", "6", "-p", PROMPTS[0], "--trie", str(sample_trie),
                                        "--json"])
        assert res.exit_code == 0, res.output
        outs.append(json.loads(res.stdout))
    assert outs[0]["prompt_tokens"] == outs[1]["prompt_tokens"] and outs[0]["text"] == outs[1]["text"]


def test_cli_prints_host_statistics_only_with_a_host(target_dir: Path, drafter_dir: Path, sample_trie: Path) -> None:
    from dart_client.cli import main

    res = CliRunner().invoke(main, [str(target_dir), str(drafter_dir), "--tokenizer", str(SAMPLE_TOKENIZER),
                                    "--max-new-tokens", "6", "-p", PROMPTS[0], "--trie", str(sample_trie)])
    assert res.exit_code == 0, res.output
    assert "mean accepted length" in res.stderr
    assert "trees from the host" not in res.stderr and "fallbacks" not in res.stderr


def test_cli_says_the_model_folder_has_no_tokenizer(target_dir: Path, drafter_dir: Path, sample_trie: Path) -> None:
    from dart_client.cli import main

    assert not list(target_dir.glob("tokenizer*"))
    args = [str(target_dir), str(drafter_dir), "--trie", str(sample_trie), "--max-new-tokens", "4", "-p", PROMPTS[0]]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 2, res.output
    assert f"the model folder {target_dir} has no tokenizer" in res.output and "pass --tokenizer" in res.output
    res = CliRunner().invoke(main, [*args, "--tokenizer", str(target_dir)])
    assert res.exit_code == 2 and f"{target_dir}: the folder has no tokenizer" in res.output, res.output


def test_cli_random_models_decode_with_the_sample_tokenizer_and_trie(sample_trie: Path) -> None:
    from dart_client.cli import main

    runner = CliRunner()
    res = runner.invoke(main, ["--random-models", "--trie", str(sample_trie), "--max-new-tokens", "8", "-p", PROMPTS[3],
                               "--json", "--compare"])
    assert res.exit_code == 0, res.output
    assert "not checked" not in res.stderr  # the sample tokenizer is fingerprinted against the sample trie
    out = json.loads(res.stdout)
    assert out["model"] == "random (tiny)" and out["hosts"] == []
    assert 1 <= out["new_tokens"] <= 8 and out["identical_to_target"] is True and out["text"]
    assert out["eos"]["stop"] == [0]  # the sample tokenizer's <|endoftext|>
    res = runner.invoke(main, ["--random-models", "-p", PROMPTS[3]])
    assert res.exit_code == 2 and "ngram-build --out sample.ngt" in res.output, res.output
    res = runner.invoke(main, ["--random-models", "--trie", str(sample_trie), "--tokenizer", str(SAMPLE_TOKENIZER),
                               "-p", PROMPTS[3]])
    assert res.exit_code == 2 and "drop --tokenizer" in res.output, res.output
    res = runner.invoke(main, ["--trie", str(sample_trie), "-p", PROMPTS[3]])
    assert res.exit_code == 2 and "give MODEL and DRAFTER folders (or --random-models" in res.output, res.output


# ---- the Qwen3 vocabulary, the DART sample trie -------------------------------------------------

from conftest import SHARED  # noqa: E402
QWEN_TOKENIZER = SHARED / "data" / "qwen3-tokenizer.json"
DART_SAMPLE = SHARED / "golden" / "dart-sample.trie"


@needs_server
def test_qwen3_vocabulary_with_the_dart_sample_trie_remote_lossless(tmp_path: Path) -> None:
    """A random Qwen3 with Qwen3's 151,936 ids (the tokenizer has 151,669: the
    drafter may propose ids the trie does not know), the DART sample trie
    (gsm8k) converted with the Qwen3 tokenizer, through a real host."""
    if not (QWEN_TOKENIZER.is_file() and DART_SAMPLE.is_file()):
        pytest.skip("../shared (Qwen3 tokenizer, DART sample trie) is not present")
    from tokenizers import Tokenizer

    trie = tmp_path / "dart-sample.ngt"
    subprocess.run([sys.executable, "-m", "indexer.cli", "--from-dart-trie",
                    str(DART_SAMPLE), "--out", str(trie), "--tokenizer", str(QWEN_TOKENIZER), "--eos", "151643",
                    "-q"], check=True)
    tok = Tokenizer.from_file(str(QWEN_TOKENIZER))
    texts = ["Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May.",
             "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting.",
             "Betty is saving money for a new wallet which costs $100."]
    prompts = [tok.encode(t, add_special_tokens=False).ids for t in texts]
    target = random_target("tiny", seed=5, vocab_size=151936, tie_word_embeddings=True, eos_token_id=151645)
    refs = hf_greedy(target, prompts, 12)
    ids = [t for t, _ in collections.Counter(t for r in refs for t in r).most_common(15)]
    ids += [151900]  # a model id beyond the tokenizer's (and the trie's) vocabulary
    ids += [i for i in range(1000, 2000) if i not in set(ids)][: 24 - len(ids)]
    drafter = random_drafter(target, draft_length=7, draft_ids=ids, seed=6)
    h = TrieHost(trie)
    try:
        with RemotePruner(h.target, tokenizer=QWEN_TOKENIZER, deadline=LONG, max_nodes=24) as pr:
            gen = DartGenerator(target, drafter, pr)
            for p, ref in zip(prompts, refs):
                r = gen.generate(p, 12)
                assert r.output_ids == ref
                assert all(s.remote for s in r.steps)
            assert pr.stats.fallbacks == 0 and pr.info["vocab_size"] == 151669
    finally:
        h.kill()
