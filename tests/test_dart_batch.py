"""Batches in dart_client: B lattices pruned in one call, B prompts decoded together.

Greedy batched decoding must give every sequence exactly the target's own
greedy continuation of its prompt alone, for B = 1..8 ragged prompts, with
the trie in process, on a host, and with the host killed mid-generation.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import require_module

torch = require_module("torch")
require_module("transformers")

from dart_client import DartDrafter, DartGenerator, DrafterCache, LocalPruner, RemotePruner
from ngram_service.proto.ngram.v1 import ngram_pb2 as pb
from ngram_service.tree import NoTrie
from dart_client.random_models import random_target
from tests.dart_testbed import one_torch_thread  # noqa: F401  (autouse)
from tests.dart_testbed import TrieHost, encode_prompts, fitted_drafter, free_port, references, same_tree

needs_server = pytest.mark.needs_server  # skipped without the binary, a failure under CI (conftest)
MAX_NEW = 20
# The deadline where a test asserts the host answered: a loaded 2-core machine (the suite runs on two workers)
# can take seconds for a call; a host that is down answers at once (connection refused), so it costs nothing.
LONG = 30.0


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    p = encode_prompts()
    assert len({len(x) for x in p}) >= 5 and max(map(len, p)) > 4 * min(map(len, p))  # ragged
    return p


@pytest.fixture(scope="module")
def target() -> Any:
    return random_target("tiny", family="qwen3", seed=1, eos_token_id=0, bos_token_id=0)


@pytest.fixture(scope="module")
def refs(target: Any, prompts: list[list[int]]) -> list[list[int]]:
    return references(target, prompts, MAX_NEW)


@pytest.fixture(scope="module")
def drafter(target: Any, refs: list[list[int]]) -> DartDrafter:
    return fitted_drafter(target, refs)


def _batches(n: int) -> list[list[int]]:
    """B = 1..8, each batch a different slice (rotated) of the prompts."""
    return [[(start + i) % n for i in range(b)] for start, b in zip(range(n), range(1, n + 1))]


def _check_batches(gen: DartGenerator, prompts: list[list[int]], refs: list[list[int]], **kw: Any) -> list[Any]:
    results = []
    for rows in _batches(len(prompts)):
        out = gen.generate([prompts[i] for i in rows], MAX_NEW, **kw)
        assert isinstance(out, list) and len(out) == len(rows)
        for i, r in zip(rows, out):
            assert r.output_ids == refs[i], f"B={len(rows)} prompt {i}: DART {r.output_ids} != target {refs[i]}"
            assert r.prompt_ids == prompts[i]
        results += out
    return results


# ---- the drafter ------------------------------------------------------------------------------

def test_batched_drafter_equals_one_row_at_a_time(drafter: DartDrafter) -> None:
    """Ragged rows (different cached lengths, different new positions) in
    one pass give each row's logits as if it ran alone."""
    torch.manual_seed(0)
    h = drafter.config.hidden_size
    firsts, seconds = [5, 2, 9], [3, 1, 2]
    aux = [torch.randn(1, a + b, 3 * h) for a, b in zip(firsts, seconds)]
    emb = [torch.randn(1, a + b, h) for a, b in zip(firsts, seconds)]
    alone = []
    for x, e, a in zip(aux, emb, firsts):
        c = DrafterCache()
        drafter.draft(x[:, :a], e[:, :a], c)
        alone.append(drafter.draft(x[:, a:], e[:, a:], c))

    def pad(parts: list[Any], width: int) -> Any:
        return torch.cat([torch.nn.functional.pad(p, (0, 0, 0, width - p.shape[1])) for p in parts])

    cache = DrafterCache()
    drafter.draft(pad([x[:, :a] for x, a in zip(aux, firsts)], 9), pad([e[:, :a] for e, a in zip(emb, firsts)], 9),
                  cache, firsts)
    assert cache.lengths == firsts
    out = drafter.draft(pad([x[:, a:] for x, a in zip(aux, firsts)], 3),
                        pad([e[:, a:] for e, a in zip(emb, firsts)], 3), cache, seconds)
    assert cache.lengths == [a + b for a, b in zip(firsts, seconds)]
    for i in range(3):
        torch.testing.assert_close(out[i], alone[i], rtol=1e-5, atol=1e-5)


# ---- the pruners ------------------------------------------------------------------------------

def _lattice_batch(b: int, d: int = 4, v: int = 300, seed: int = 0) -> tuple[Any, list[list[int]]]:
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(b, d, v, generator=g) * 3
    tokens = [list(range(10 + i, 20 + 3 * i)) for i in range(b)]
    return logits, tokens


def test_local_prune_batch_equals_one_call_per_lattice(sample_trie: Path) -> None:
    pr = LocalPruner(sample_trie)
    logits, tokens = _lattice_batch(6)
    trees = pr.prune_batch(logits, None, tokens)
    assert pr.stats.calls == 6
    for i in range(6):
        assert same_tree(trees[i], pr(logits[i], None, tokens[i]))
        # parents come from the engine and agree with the mask
        t = trees[i]
        assert t.parents[0] == -1 and all(bool(t.tree_mask[j, t.parents[j]]) for j in range(1, t.n_nodes))


@needs_server
def test_remote_prune_batch_is_one_rpc_and_equals_local(sample_trie: Path) -> None:
    h = TrieHost(sample_trie)
    try:
        local = LocalPruner(sample_trie)
        with RemotePruner(h.target, deadline=LONG) as pr:
            calls = []
            inner = pr.client.prune_tree_bytes

            def counting(req: bytes, **kw: Any) -> Any:
                calls.append(len(pb.PruneTreeRequest.FromString(req).inputs))
                return inner(req, **kw)

            pr.client.prune_tree_bytes = counting  # observes the RPCs, changes nothing
            logits, tokens = _lattice_batch(8, seed=1)
            trees = pr.prune_batch(logits, None, tokens)
            assert calls == [8] and pr.stats.remote_ok == 8 and pr.timing.remote
            for t, want in zip(trees, local.prune_batch(logits, None, tokens)):
                assert same_tree(t, want)
            # the fallback is per batch: host gone, the whole batch pruned without the n-gram
            h.kill()
            fb = pr.prune_batch(logits, None, tokens)
            assert pr.stats.fallbacks == 8 and len(calls) == 2 and not pr.timing.remote
            want = LocalPruner(sample_trie, ngram_weight=0.0).prune_batch(logits, None, tokens)
            for t, w in zip(fb, want):
                assert same_tree(t, w)
    finally:
        h.kill()


def test_dead_host_prune_batch_falls_back_for_the_whole_batch(sample_trie: Path) -> None:
    pr = RemotePruner(f"127.0.0.1:{free_port()}", deadline=0.05, connect_timeout=0.2, backoff_initial=30.0)
    logits, tokens = _lattice_batch(5, v=64)
    trees = pr.prune_batch(logits, None, tokens)
    want = LocalPruner(sample_trie, ngram_weight=0.0, eos_token_id=-1).prune_batch(logits, None, tokens)
    assert all(same_tree(a, b) for a, b in zip(trees, want))
    assert pr.stats.fallbacks == 5 and pr.stats.skipped_backoff == 5
    pr.close()


# ---- batched decoding ---------------------------------------------------------------------------

def test_batched_local_lossless_b1_to_b8(target: Any, drafter: DartDrafter, sample_trie: Path,
                                         prompts: list[list[int]], refs: list[list[int]]) -> None:
    gen = DartGenerator(target, drafter, LocalPruner(sample_trie, max_nodes=120, beam_width=32))
    results = _check_batches(gen, prompts, refs)
    assert any(s.accepted >= 2 for r in results for s in r.steps)  # trees held accepted paths
    assert {s.batch_size for r in results for s in r.steps} >= {1, 8}
    # one prompt as before: one result, not a list
    one = gen.generate(prompts[3], MAX_NEW)
    assert one.output_ids == refs[3]
    assert gen.generate(torch.tensor([prompts[3], prompts[3]]), MAX_NEW)[1].output_ids == refs[3]


def test_batched_sequences_finish_at_different_steps(target: Any, drafter: DartDrafter, sample_trie: Path,
                                                     prompts: list[list[int]], refs: list[list[int]]) -> None:
    """An EOS that some continuations reach early: those sequences leave the
    batch, the others go on, and every output is cut where it should be."""
    tok = refs[0][4]
    gen = DartGenerator(target, drafter, LocalPruner(sample_trie), eos_token_id=tok)
    out = gen.generate(prompts, MAX_NEW)
    want = [r[: r.index(tok) + 1] if tok in r else r for r in refs]
    assert [r.output_ids for r in out] == want
    assert len({len(w) for w in want}) > 1
    steps = [len(r.steps) for r in out]
    assert max(steps) > min(steps)
    assert out[0].steps[-1].batch_size <= out[0].steps[0].batch_size


def test_batched_sampling_with_top_k_1_is_greedy(target: Any, drafter: DartDrafter, sample_trie: Path,
                                                 prompts: list[list[int]], refs: list[list[int]]) -> None:
    gen = DartGenerator(target, drafter, LocalPruner(sample_trie))
    out = gen.generate(prompts[:5], MAX_NEW, temperature=0.7, top_k=1, seed=0)
    assert [r.output_ids for r in out] == refs[:5]


@needs_server
def test_batched_remote_lossless_b1_to_b8(target: Any, drafter: DartDrafter, sample_trie: Path,
                                          prompts: list[list[int]], refs: list[list[int]]) -> None:
    h = TrieHost(sample_trie)
    try:
        with RemotePruner(h.target, deadline=LONG) as pr:
            gen = DartGenerator(target, drafter, pr)
            results = _check_batches(gen, prompts, refs)
            assert all(s.remote for r in results for s in r.steps) and pr.stats.fallbacks == 0
    finally:
        h.kill()


@needs_server
def test_batched_host_killed_mid_generation_lossless(target: Any, drafter: DartDrafter, sample_trie: Path,
                                                     prompts: list[list[int]], refs: list[list[int]]) -> None:
    h = TrieHost(sample_trie)
    try:
        with RemotePruner(h.target, deadline=LONG, backoff_initial=0.02, backoff_max=0.1) as pr:
            gen = DartGenerator(target, drafter, pr)

            def kill_at_second_step(i: int, _res: Any) -> None:
                if i == 2:
                    h.kill()

            first = gen.generate(prompts, MAX_NEW, on_step=kill_at_second_step)
            assert [r.output_ids for r in first] == refs
            assert [s.remote for s in first[0].steps[:2]] == [True, True]
            assert not any(s.remote for s in first[0].steps[2:])
            _check_batches(gen, prompts, refs)  # the host stays down
            assert pr.stats.fallbacks > 0 and pr.stats.errors
    finally:
        h.kill()


def test_no_ngram_pruner_batched_lossless(target: Any, drafter: DartDrafter, prompts: list[list[int]],
                                          refs: list[list[int]]) -> None:
    """Any batch composition, the drafter alone (an empty trie)."""
    gen = DartGenerator(target, drafter, LocalPruner(NoTrie(4096), ngram_weight=0.0))
    out = gen.generate([prompts[7], prompts[0], prompts[7]], MAX_NEW)
    assert [r.output_ids for r in out] == [refs[7], refs[0], refs[7]]


def test_bad_prompts_are_refused(target: Any, drafter: DartDrafter, sample_trie: Path) -> None:
    gen = DartGenerator(target, drafter, LocalPruner(sample_trie))
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        gen.generate([[1, 2], []], 4)
    with pytest.raises(ValueError, match="input_ids is empty"):
        gen.generate([], 4)
    assert np.asarray(gen.generate(np.array([5, 6, 7]), 3).output_ids).shape == (3,)
