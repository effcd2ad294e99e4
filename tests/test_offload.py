"""The GPU worker's offload (issue 27): the packed lattices and the C++ wire
codec against protobuf's own, and every pruner path (in process, grpcio,
the native grpc++ client) against the engine's prune_batch of the lattices
as dart_client fits them: batches of 1 to 64, ragged contexts, unknown ids,
a host killed mid-run, TLS. The ``cuda`` tests run where torch sees a GPU
(``python -m pytest -m cuda tests/test_offload.py`` on the GPU machine)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import require_module

torch = require_module("torch")

from dart_client.pruner import DraftTrees, LocalPruner, RemotePruner  # noqa: E402
from dart_testbed import TrieHost, free_port  # noqa: E402
from ngram_service import NgramIndex, _engine  # noqa: E402
from ngram_service.client import NgramClient  # noqa: E402
from ngram_service.proto.ngram.v1 import ngram_pb2 as pb  # noqa: E402

needs_server = pytest.mark.needs_server
# The deadline where a test asserts the host answered: a loaded 2-core machine (the suite runs on two workers)
# can take seconds for a call; a host that is down answers at once (connection refused), so it costs nothing.
LONG = 30.0


def native_available() -> None:
    """The native client is part of the README's install (grpc++ from infra/install-system-deps.sh)."""
    require_module("ngram_service.native_client")


# ---- a reference: dart_client's fit and search as plain Python over the engine ------------

def reference_fit(context: list[int], ids: np.ndarray, probs: np.ndarray, order: int, vocab: int
                  ) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray]] | None:
    """The documented fit (docs/DART_CLIENT.md): the context's last order - 1
    ids cut after the last unknown one; unknown candidates dropped, levels
    after the first emptied one too; None for an unknown root."""
    tail = np.asarray(context[-max(1, order - 1):], dtype=np.int64)
    known = (tail >= 0) & (tail < vocab)
    if not known[-1]:
        return None
    bad = np.flatnonzero(~known)
    if bad.size:
        tail = tail[bad[-1] + 1:]
    toks, prs = [], []
    for level_ids, level_probs in zip(ids, probs):
        ok = (level_ids >= 0) & (level_ids < vocab)
        if not ok.any():
            break
        toks.append(level_ids[ok].astype(np.int64))
        prs.append(level_probs[ok])
    return (tail, toks, prs) if toks else None


def device_lattices(logits: torch.Tensor, d2t: torch.Tensor | None, k: int) -> tuple[np.ndarray, np.ndarray]:
    vals, idx = torch.topk(logits.float(), k, dim=-1)
    probs = torch.softmax(vals, dim=-1)
    if d2t is not None:
        idx = idx + d2t[idx]
    return idx.numpy(), probs.numpy()


def assert_tree_equals(got: Any, want: Any) -> None:
    assert got.draft_tokens.tolist() == want.tokens.tolist()
    assert got.parents.tolist() == want.parents.tolist()
    assert got.tree_position_ids.tolist() == want.depths.tolist()
    assert torch.equal(got.tree_mask.cpu(), torch.from_numpy(np.asarray(want.tree_mask)))
    assert got.retrieve_indices.tolist() == want.retrieve_indices.tolist()


def batch_case(b: int, seed: int, vocab: int, draft_vocab: int = 600, depth: int = 5
               ) -> tuple[torch.Tensor, torch.Tensor, list[list[int]]]:
    """Logits [b, depth, draft_vocab] with a d2t map sending some draft ids
    past the trie's vocabulary; ragged contexts (1 to 12 ids), some holding
    unknown ids, and one (when b > 2) whose root is unknown."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(b, depth, draft_vocab, generator=g) * 3
    targets = torch.randperm(vocab + 200, generator=g)[:draft_vocab]  # some land outside [0, vocab)
    d2t = targets - torch.arange(draft_vocab)
    rng = np.random.default_rng(seed)
    contexts = []
    for i in range(b):
        ctx = rng.integers(0, vocab, size=int(rng.integers(1, 13))).tolist()
        if i % 3 == 1 and len(ctx) > 1:
            ctx[0] = vocab + 7  # an unknown id inside the context
        contexts.append(ctx)
    if b > 2:
        contexts[2][-1] = vocab + 3  # an unknown root
    return logits, d2t, contexts


def expected_trees(idx: NgramIndex, logits: torch.Tensor, d2t: torch.Tensor, contexts: list[list[int]], k: int,
                   **params: Any) -> list[Any]:
    """Each lattice's tree, as the pruners promise it: the engine's search of
    the fitted lattice; an unknown root: the n-gram-free search with no
    trie over every id of the lattice."""
    from ngram_service.tree import NoTrie, prune_batch

    ids, probs = device_lattices(logits, d2t, k)
    out = []
    for i, ctx in enumerate(contexts):
        fitted = reference_fit(ctx, ids[i], probs[i], idx.order, idx.vocab_size)
        if fitted is not None:
            out.append(idx.prune_batch([fitted], eos_token_id=idx.eos_id if idx.eos_id is not None else -1,
                                       **params)[0])
            continue
        need = max(int(ids[i].max()), max(ctx[-max(1, idx.order - 1):]), idx.vocab_size - 1) + 1
        fitted = reference_fit(ctx, ids[i], probs[i], idx.order, need)
        eos = idx.eos_id if idx.eos_id is not None and idx.eos_id < need else -1
        out.append(prune_batch(NoTrie(need), [fitted], eos_token_id=eos, **dict(params, ngram_weight=0.0))[0])
    return out


# ---- the codec against protobuf -----------------------------------------------------------

def test_request_bytes_are_the_protobuf_request() -> None:
    logits, d2t, contexts = batch_case(6, 1, vocab=500)
    ids, probs = device_lattices(logits, d2t, 7)
    packed = np.concatenate((ids.astype(np.int32), probs.view(np.int32)), axis=-1)
    lat = _engine.LatticeBatch(contexts, packed, 3, 500)
    head = pb.PruneTreeRequest(index="corpus", tokenizer_fingerprint="abc", with_scores=True,
                               params=pb.PruneParams(beam_width=7, ngram_weight=0.25))
    served = [i for i in range(6) if reference_fit(contexts[i], ids[i], probs[i], 3, 500) is not None]
    assert len(served) < 6  # an unknown root
    req = pb.PruneTreeRequest.FromString(lat.request(head.SerializeToString(), np.array(served)))
    assert req.index == "corpus" and req.tokenizer_fingerprint == "abc" and req.params.beam_width == 7
    assert lat.depths.tolist() == [len(reference_fit(contexts[i], ids[i], probs[i], 3, 500)[1])
                                   if i in served else 0 for i in range(6)]
    with pytest.raises(ValueError, match="lattice 2 has no level the trie serves"):
        lat.request(b"")
    req = pb.PruneTreeRequest.FromString(lat.request(head.SerializeToString(), np.array(served)))
    assert len(req.inputs) == len(served)
    for got, i in zip(req.inputs, served):
        prefix, toks, prs = reference_fit(contexts[i], ids[i], probs[i], 3, 500)
        assert list(got.prefix) == prefix.tolist()
        assert list(got.level_sizes) == [len(t) for t in toks]
        assert list(got.tokens) == np.concatenate(toks).tolist()
        assert np.array_equal(np.array(got.probs, dtype=np.float32), np.concatenate(prs))


def test_lattice_batch_prune_defaults_are_the_engine_table_s(sample_trie: Path) -> None:
    """LatticeBatch.prune with its parameters left out, or given as None, prunes with the engine's
    defaults: the trees NgramIndex.prune_batch gives the same fitted lattices."""
    idx = NgramIndex.open(sample_trie)
    logits, d2t, contexts = batch_case(4, 3, vocab=idx.vocab_size)
    ids, probs = device_lattices(logits, d2t, 9)
    packed = np.concatenate((ids.astype(np.int32), probs.view(np.int32)), axis=-1)
    served = np.flatnonzero(_engine.LatticeBatch(contexts, packed, idx.order, idx.vocab_size).depths > 0)
    lat = _engine.LatticeBatch([contexts[i] for i in served], np.ascontiguousarray(packed[served]), idx.order,
                               idx.vocab_size)
    want = idx.prune_batch([reference_fit(contexts[i], ids[i], probs[i], idx.order, idx.vocab_size)
                            for i in served])
    for params in ({}, dict.fromkeys(row["name"] for row in _engine.PRUNE_FIELDS)):
        trees = _engine.TreeBatch(lat.batch)
        lat.prune(idx.engine, trees, **params)
        for g, w in zip(DraftTrees.unpack(trees.pack(), torch.device("cpu")), want):
            assert_tree_equals(g, w)


def test_packed_lattices_refuse_what_they_cannot_read() -> None:
    good = np.zeros((2, 3, 8), dtype=np.int32)
    with pytest.raises(ValueError, match="int32 array"):
        _engine.LatticeBatch([[1], [2]], good.astype(np.int64), 3, 100)
    with pytest.raises(ValueError, match="2 lattices but 1 token sequences"):
        _engine.LatticeBatch([[1]], good, 3, 100)
    with pytest.raises(ValueError, match=r"tokens\[1\]: empty"):
        _engine.LatticeBatch([[1], []], good, 3, 100)
    with pytest.raises(ValueError, match=r"tokens\[0\]: token ids must be integers"):
        _engine.LatticeBatch([[1.5], [2]], good, 3, 100)
    lat = _engine.LatticeBatch([np.array([1, 2]), [3]], good, 3, 100)
    with pytest.raises(ValueError, match=r"rows\[0\] = 5 outside the batch of 2"):
        lat.request(b"", np.array([5]))


def test_response_decoding_is_the_engines_encoding(sample_trie: Path) -> None:
    idx = NgramIndex.open(sample_trie)
    logits, d2t, contexts = batch_case(5, 2, vocab=idx.vocab_size)
    trees = expected_trees(idx, logits, d2t, contexts, 25)
    resp = pb.PruneTreeResponse(trees=[pb.PrunedTreeNodes(tokens=t.tokens.tolist(), parents=t.parents.tolist())
                                       for t in trees])
    batch = _engine.TreeBatch(5)
    batch.decode(resp.SerializeToString())
    got = DraftTrees.unpack(batch.pack(), torch.device("cpu"))
    assert len(got) == 5 and got.n_nodes == [len(t.tokens) for t in trees]
    for g, want in zip(got, trees):
        assert_tree_equals(g, want)
    # rows: the trees land where they are told, the others are still missing
    part = _engine.TreeBatch(5)
    part.decode(pb.PruneTreeResponse(trees=resp.trees[:2]).SerializeToString(), np.array([3, 1]))
    with pytest.raises(ValueError, match="tree 0 of the batch was never filled"):
        part.pack()


def test_malformed_responses_are_refused_with_where() -> None:
    ok = pb.PruneTreeResponse(trees=[pb.PrunedTreeNodes(tokens=[5, 6, 7], parents=[-1, 0, 0])]).SerializeToString()
    with pytest.raises(ValueError, match=r"PruneTreeResponse(\.trees)?: .* at byte \d+"):
        _engine.TreeBatch(1).decode(ok[:-3])
    with pytest.raises(ValueError, match="1 trees for 2 lattices"):
        _engine.TreeBatch(2).decode(ok)
    with pytest.raises(ValueError, match="more trees than the 0 lattices"):
        _engine.TreeBatch(0).decode(ok)
    bad = pb.PruneTreeResponse(trees=[pb.PrunedTreeNodes(tokens=[5, 6], parents=[-1, 1])]).SerializeToString()
    with pytest.raises(ValueError, match=r"PruneTreeResponse.trees\[0\]"):
        _engine.TreeBatch(1).decode(bad)
    short = pb.PruneTreeResponse(trees=[pb.PrunedTreeNodes(tokens=[5, 6], parents=[-1])]).SerializeToString()
    with pytest.raises(ValueError, match="2 tokens, 1 parents"):
        _engine.TreeBatch(1).decode(short)


# ---- the pruners against the engine -------------------------------------------------------

@pytest.mark.parametrize("b", [1, 3, 16, 64])
def test_local_pruner_equals_the_engine(sample_trie: Path, b: int) -> None:
    idx = NgramIndex.open(sample_trie)
    pr = LocalPruner(idx, topk=9, max_nodes=30)
    logits, d2t, contexts = batch_case(b, b, vocab=idx.vocab_size)
    trees = pr.prune_batch(logits, d2t, contexts)
    want = expected_trees(idx, logits, d2t, contexts, 9, max_nodes=30)
    assert isinstance(trees, DraftTrees) and len(trees) == b
    for got, w in zip(trees, want):
        assert_tree_equals(got, w)
    # the batch tensors: padded as documented
    n = trees.tokens.shape[1]
    assert n == max(len(w.tokens) for w in want)
    for i, w in enumerate(want):
        k = len(w.tokens)
        assert trees.parents[i, k:].eq(-1).all() and trees.tokens[i, k:].eq(0).all()
        assert torch.equal(trees.tree_mask[i, k:, k:], torch.eye(n - k, dtype=torch.bool))
        assert not trees.tree_mask[i, k:, :k].any()


def test_level_weights_with_ragged_depths(sample_trie: Path) -> None:
    """Weights given and depths that differ after the fit: one search per depth, each with its weights cut."""
    idx = NgramIndex.open(sample_trie)
    logits, d2t, contexts = batch_case(8, 5, vocab=idx.vocab_size, draft_vocab=40, depth=4)
    d2t[:30] = idx.vocab_size + 100  # draft ids 0..29 map to unknown ids (distinct: d2t is an offset)
    d2t[30:] = torch.arange(30, 40) * 7 % idx.vocab_size - torch.arange(30, 40)
    for i in range(8):  # row i's levels from 1 + i % 3 on draft only unknown ids: depths 1, 2, 3
        logits[i, 1 + i % 3:, 30:] = -100.0
    lw, gw = [1.0, 0.5, 0.25, 0.125], [0.9, 0.8, 0.7, 0.6]
    pr = LocalPruner(idx, topk=12, level_weights=lw, logit_weights=gw)
    ids, probs = device_lattices(logits, d2t, 12)
    depths = {len(f[1]) for i in range(8) if (f := reference_fit(contexts[i], ids[i], probs[i], 3,
                                                                 idx.vocab_size)) is not None}
    assert len(depths) > 1  # the case this test is about
    for got, i in zip(pr.prune_batch(logits, d2t, contexts), range(8)):
        f = reference_fit(contexts[i], ids[i], probs[i], 3, idx.vocab_size)
        if f is None:
            continue
        d = len(f[1])
        want = idx.prune_batch([f], level_weights=lw[:d], logit_weights=gw[:d],
                               eos_token_id=idx.eos_id if idx.eos_id is not None else -1)[0]
        assert_tree_equals(got, want)


@needs_server
@pytest.mark.parametrize("transport", ["python", "native"])
def test_remote_pruner_equals_the_engine(sample_trie: Path, transport: str) -> None:
    if transport == "native":
        native_available()
    idx = NgramIndex.open(sample_trie)
    h = TrieHost(sample_trie)
    try:
        # A back-off long enough that the call after the kill is inside it however slow the machine.
        with RemotePruner(h.target, deadline=LONG, transport=transport, topk=9, max_nodes=30,
                          backoff_initial=30.0) as pr:
            assert pr.transport == transport
            for b in (1, 3, 16, 64):
                logits, d2t, contexts = batch_case(b, 10 + b, vocab=idx.vocab_size)
                trees = pr.prune_batch(logits, d2t, contexts)
                assert pr.timing.remote and pr.timing.call > 0 and pr.timing.transport >= pr.timing.call
                for got, w in zip(trees, expected_trees(idx, logits, d2t, contexts, 9, max_nodes=30)):
                    assert_tree_equals(got, w)
            # the unknown roots (one per batch of 3 or more) were pruned here, counted as such
            assert pr.stats.errors == {"OUT_OF_VOCAB": 3} and pr.stats.fallbacks == 3
            assert pr.stats.remote_ok == 1 + 3 + 16 + 64 - 3
            # killed mid-run: the next call falls back for the whole batch, then backs off
            logits, d2t, contexts = batch_case(4, 99, vocab=idx.vocab_size)
            h.kill()
            trees = pr.prune_batch(logits, d2t, contexts)
            assert not pr.timing.remote and pr.stats.fallbacks == 3 + 4
            assert set(pr.stats.errors) - {"OUT_OF_VOCAB"} <= {"UNAVAILABLE", "DEADLINE_EXCEEDED"}
            no_ngram = expected_trees(idx, logits, d2t, contexts, 9, max_nodes=30, ngram_weight=0.0)
            for got, w in zip(trees, no_ngram):
                assert_tree_equals(got, w)
            pr.prune_batch(logits, d2t, contexts)
            assert pr.stats.skipped_backoff == 4
    finally:
        h.kill()


def test_native_client_status_codes(sample_trie: Path) -> None:
    """The native call's failures are grpc.RpcErrors with grpcio's codes."""
    native_available()
    import grpc

    port = free_port()
    with NgramClient(f"127.0.0.1:{port}", transport="native", retry_attempts=1) as c:
        assert c.transport == "native"
        with pytest.raises(grpc.RpcError) as e:
            c.prune_tree_bytes(b"", timeout=0.5)
        assert e.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    with pytest.raises(ValueError, match="transport must be"):
        NgramClient("127.0.0.1:1", transport="fast")


@needs_server
def test_native_client_bad_request_is_invalid_argument(sample_trie: Path) -> None:
    native_available()
    import grpc

    h = TrieHost(sample_trie)
    try:
        with NgramClient(h.target, transport="native", retry_attempts=1) as c:
            req = pb.PruneTreeRequest(inputs=[pb.PruneInput(prefix=[1], level_sizes=[1], tokens=[10**9],
                                                            probs=[0.5])]).SerializeToString()
            with pytest.raises(grpc.RpcError) as e:
                c.prune_tree_bytes(req, timeout=LONG)
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "1000000000" in e.value.details()
    finally:
        h.kill()


@needs_server
def test_native_transport_over_mutual_tls(sample_trie: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    native_available()
    from test_server import ServerProcess
    from test_server_tls import pki as make_pki

    pki = make_pki.__wrapped__(tmp_path_factory)
    idx = NgramIndex.open(sample_trie)
    logits, d2t, contexts = batch_case(3, 4, vocab=idx.vocab_size)
    want = expected_trees(idx, logits, d2t, contexts, 9)
    with ServerProcess([sample_trie], "--tls-cert", str(pki["server_crt"]), "--tls-key", str(pki["server_key"]),
                       "--tls-client-ca", str(pki["ca"])) as s:
        tls = dict(root_certificates=pki["ca"], certificate_chain=pki["client_crt"], private_key=pki["client_key"],
                   server_name="localhost")
        with RemotePruner(s.target, deadline=LONG, transport="native", topk=9, client_options=tls) as pr:
            for got, w in zip(pr.prune_batch(logits, d2t, contexts), want):
                assert_tree_equals(got, w)
            assert pr.stats.remote_ok == 2
        no_cert = dict(root_certificates=pki["ca"], server_name="localhost")
        with RemotePruner(s.target, deadline=1.0, connect_timeout=1.0, transport="native", topk=9,
                          client_options=no_cert) as pr:
            pr.prune_batch(logits, d2t, contexts)
            assert pr.stats.remote_ok == 0 and pr.stats.fallbacks == 3


def test_draft_trees_stack_equals_the_packed_batch(sample_trie: Path) -> None:
    pr = LocalPruner(sample_trie, topk=6, max_nodes=12)
    logits, d2t, contexts = batch_case(5, 3, vocab=NgramIndex.open(sample_trie).vocab_size)
    trees = pr.prune_batch(logits, d2t, contexts)
    stacked = DraftTrees.stack([trees[i] for i in range(5)])
    for name in ("tokens", "position_ids", "parents", "retrieve_indices", "tree_mask"):
        assert torch.equal(getattr(stacked, name), getattr(trees, name)), name
    assert trees[-1] is trees[4] and len(trees[1:3]) == 2
    with pytest.raises(IndexError):
        trees[5]
    # the host buffer is reused only once no tensor views it
    held = trees.tokens.clone()
    again = pr.prune_batch(logits, d2t, contexts)
    assert torch.equal(trees.tokens, held) and again.tokens.data_ptr() != trees.tokens.data_ptr()


def test_draft_trees_stack_keeps_a_tree_s_own_leaf_order() -> None:
    """A tree made elsewhere (DART's tree_search orders its leaves otherwise than the engine) keeps its
    retrieve rows' order through stack, which the engine packs; rows that are not its paths are refused."""
    from dart_client import DraftTree

    mask = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]], dtype=torch.bool)
    made = DraftTree(torch.tensor([4, 3, 1, 2]), torch.tensor([[0, 1, 3], [0, 2, -1]]), mask, torch.tensor([0, 1, 1, 2]))
    small = DraftTree(torch.tensor([7, 8]), torch.tensor([[0, 1]]), torch.tensor([[1, 0], [1, 1]], dtype=torch.bool),
                      torch.tensor([0, 1]))
    got = DraftTrees.stack([made, small])
    assert got.retrieve_indices.tolist() == [[[0, 1, 3], [0, 2, -1]], [[0, 1, -1], [-1, -1, -1]]]
    assert got.parents.tolist() == [[-1, 0, 0, 1], [-1, 0, -1, -1]] and got.n_nodes == [4, 2]
    for g, want in zip(got, (made, small)):
        for name in ("draft_tokens", "retrieve_indices", "tree_mask", "tree_position_ids", "parents"):
            assert torch.equal(getattr(g, name), getattr(want, name)), name
    wrong = DraftTree(made.draft_tokens, torch.tensor([[0, 1, 3]]), mask, made.tree_position_ids)
    with pytest.raises(ValueError, match="retrieve_indices: shape"):
        DraftTrees.stack([wrong])
    wrong = DraftTree(made.draft_tokens, torch.tensor([[0, 1, 3], [0, 1, 3]]), mask, made.tree_position_ids)
    with pytest.raises(ValueError, match="not the tree's root-to-leaf paths"):
        DraftTrees.stack([wrong])


# ---- on a GPU -----------------------------------------------------------------------------

@pytest.mark.cuda
@pytest.mark.parametrize("b", [1, 16])
def test_offload_on_the_device_equals_the_cpu(sample_trie: Path, b: int) -> None:
    idx = NgramIndex.open(sample_trie)
    pr = LocalPruner(idx, topk=9)
    logits, d2t, contexts = batch_case(b, 7, vocab=idx.vocab_size)
    on_cpu = pr.prune_batch(logits, d2t, contexts)
    dev = torch.device("cuda")
    on_gpu = pr.prune_batch(logits.to(dev), d2t.to(dev), contexts)
    assert on_gpu.tokens.device.type == "cuda"
    for name in ("tokens", "position_ids", "parents", "retrieve_indices", "tree_mask"):
        assert torch.equal(getattr(on_gpu, name).cpu(), getattr(on_cpu, name)), name


@pytest.mark.cuda
def test_cuda_graphs_give_the_eager_trees(sample_trie: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The top-k kernels replayed as CUDA graphs: the same trees as launched
    one by one, over more shapes than the graphs kept (so some are captured
    again), bfloat16 logits, with and without d2t, a temperature; replays
    read each call's own logits."""
    idx = NgramIndex.open(sample_trie)
    dev = torch.device("cuda")
    for temperature in (1.0, 0.7):
        graphed = LocalPruner(idx, topk=9, temperature=temperature)
        eager = LocalPruner(idx, topk=9, temperature=temperature, cuda_graphs=False)
        for round_ in range(2):
            for b in (1, 2, 3, 5, 8, 13, 16, 21, 32, 64):
                logits, d2t, contexts = batch_case(b, 100 * round_ + b, vocab=idx.vocab_size)
                logits = logits.to(dev, torch.bfloat16)
                for m in (d2t.to(dev), None):
                    a = graphed.prune_batch(logits, m, contexts)
                    e = eager.prune_batch(logits, m, contexts)
                    for name in ("tokens", "position_ids", "parents", "retrieve_indices", "tree_mask"):
                        assert torch.equal(getattr(a, name), getattr(e, name)), (b, name)
    assert "CUDA graphs are off" not in caplog.text  # no capture failed: the graphs ran


@pytest.mark.cuda
def test_greedy_decoding_on_the_device_is_lossless(sample_trie: Path) -> None:
    """float32 on the GPU: DART decoding (batched, trees from the offload) equals the target alone."""
    from dart_client import DartGenerator
    from dart_client.random_models import random_target
    from dart_testbed import encode_prompts, fitted_drafter, references

    target = random_target("tiny", family="qwen3", seed=1, eos_token_id=0, bos_token_id=0, device="cuda")
    prompts = encode_prompts()[:6]
    refs = references(target, prompts, 24)
    gen = DartGenerator(target, fitted_drafter(target, refs), LocalPruner(sample_trie, max_nodes=120))
    out = gen.generate(prompts, 24)
    assert [r.output_ids for r in out] == refs
    assert any(s.accepted >= 2 for r in out for s in r.steps)
