"""The native gRPC trie host (ngram-serve-native) through the Python client.

Real server processes on ephemeral ports of 127.0.0.1; skipped when the
native binary was not built (grpc++/protobuf missing at build time), and
failed for it under CI=true.
"""
from __future__ import annotations

import collections
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import grpc

from ngram_service import NgramIndex  # noqa: E402
from ngram_service.client import NgramClient  # noqa: E402
from ngram_service.proto.ngram.v1 import ngram_pb2 as pb  # noqa: E402
from ngram_service.proto.ngram.v1 import ngram_pb2_grpc as pb_grpc  # noqa: E402
from conftest import server_binary  # noqa: E402

from conftest import GOLDEN  # noqa: E402
BINARY = server_binary()
pytestmark = pytest.mark.needs_server
TREE_FIELDS = ("tokens", "parents", "depths", "scores", "tree_mask", "retrieve_indices")


class ServerProcess:
    """One ngram-serve-native process on 127.0.0.1, any free port."""

    def __init__(self, files: list[Path | str], *args: str, startup_timeout: float = 20.0) -> None:
        cmd = [str(BINARY), *map(str, files), "--host", "127.0.0.1", "--port", "0", *args]
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        self.events: list[dict[str, Any]] = []
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.monotonic() + startup_timeout
        while True:
            try:
                ev = self._lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                self.kill()
                raise RuntimeError(f"server did not start: {self.events}") from None
            if ev is None:
                raise RuntimeError(f"server exited: {self.events}")
            if ev.get("event") == "listening":
                self.port = ev["port"]
                self.listening = ev
                break

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            try:
                ev = json.loads(line)
            except ValueError:
                ev = {"event": "raw", "line": line}
            self.events.append(ev)
            self._lines.put(ev)
        self._lines.put(None)

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def client(self, **kwargs: Any) -> NgramClient:
        return NgramClient(self.target, **kwargs)

    def stub(self) -> pb_grpc.NgramServiceStub:
        opts = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)]
        return pb_grpc.NgramServiceStub(grpc.insecure_channel(self.target, options=opts))

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def wait_event(self, name: str, timeout: float = 10.0, after: int = 0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for ev in self.events[after:]:
                if ev.get("event") == name:
                    return ev
            time.sleep(0.01)
        raise AssertionError(f"no {name} event: {self.events}")

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.stop(timeout=10)
        finally:
            self.kill()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def dart_trie(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """DART's sample trie converted: Qwen3 ids, order 3 (for pruning and the golden queries)."""
    src = GOLDEN / "dart-sample.trie"
    if not src.is_file():
        pytest.skip("../shared/golden is not present")
    from indexer.dart_convert import convert_dart_trie

    out = tmp_path_factory.mktemp("dart") / "dart.ngt"
    convert_dart_trie(src, out, vocab_size=151669, eos=151643)
    return out


@pytest.fixture(scope="session")
def tree_inputs() -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    if not (GOLDEN / "tree_sample.npz").is_file():
        pytest.skip("../shared/golden is not present")
    z = np.load(GOLDEN / "tree_sample.npz")
    off = z["prompt_offsets"]
    return [(z["prompt_flat"][off[i]:off[i + 1]], z["topk_tokens"][i], z["topk_probs"][i]) for i in range(len(off) - 1)]


@pytest.fixture(scope="module")
def server(dart_trie: Path, sample_trie: Path):
    with ServerProcess([dart_trie, sample_trie], "--name", "dart", "--name", "sample") as s:
        yield s


def assert_trees_equal(a: Any, b: Any) -> None:
    for f in TREE_FIELDS:
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f)


# ---- answers ---------------------------------------------------------------------

def test_info_equals_engine(server: ServerProcess, dart_trie: Path, sample_trie: Path) -> None:
    with server.client() as c:
        assert c.info() == NgramIndex.open(dart_trie).info()
    with server.client(index="sample") as c:
        assert c.info() == NgramIndex.open(sample_trie).info()
    resp = server.stub().GetInfo(pb.GetInfoRequest(index="sample"), timeout=5)
    meta = json.loads(resp.meta_json)
    assert resp.index == "sample" and list(resp.indexes) == ["dart", "sample"]
    assert meta["tokenizer"]["fingerprint"] != "" and {"corpus", "build"} <= set(meta)


def test_conditional_probs_equal_engine_and_golden(server: ServerProcess, dart_trie: Path) -> None:
    z = np.load(GOLDEN / "dart-sample-queries.npz")
    idx = NgramIndex.open(dart_trie)
    with server.client() as c:
        p, m = c.conditional_probs(z["contexts"], z["candidates"])
        assert p.dtype == np.float32 and m.dtype == np.int32 and p.shape == z["candidates"].shape
        p2, m2 = idx.conditional_probs(z["contexts"], z["candidates"])
        np.testing.assert_array_equal(p, p2)
        np.testing.assert_array_equal(m, m2)
        np.testing.assert_array_equal(p, z["probs"])
        np.testing.assert_array_equal(m, z["matched"])
        e = c.conditional_probs(np.zeros((0, 2), np.int64), np.zeros((0, 3), np.int64))
        assert e[0].shape == (0, 3)


def test_topk_equals_engine(server: ServerProcess, dart_trie: Path) -> None:
    idx = NgramIndex.open(dart_trie)
    z = np.load(GOLDEN / "dart-sample-queries.npz")
    with server.client() as c:
        for ctx in [z["contexts"][0], z["contexts"][7], [151643], [], [5, 6, 7, 8]]:
            for k in (0, 1, 10, 300):
                a, b = c.topk(ctx, k), idx.topk(ctx, k)
                assert a.matched == b.matched
                for x, y in zip(a[:3], b[:3]):
                    assert x.dtype == y.dtype
                    np.testing.assert_array_equal(x, y)


def test_prune_equals_engine(server: ServerProcess, dart_trie: Path, tree_inputs: list) -> None:
    idx = NgramIndex.open(dart_trie)
    with server.client() as c:
        for r in tree_inputs[:10]:
            assert_trees_equal(c.prune(*r), idx.prune(*r))
        params = dict(beam_width=8, max_nodes=30, ngram_weight=0.3, ngram_on_first_level=True, eos_token_id=-1)
        assert_trees_equal(c.prune(*tree_inputs[3], **params), idx.prune(*tree_inputs[3], **params))
        batch = tree_inputs[:40]
        for got, want in zip(c.prune_batch(batch), idx.prune_batch(batch)):
            assert_trees_equal(got, want)
        dicts = [dict(prefix=p, topk_tokens=t, topk_probs=q) for p, t, q in tree_inputs[40:45]]
        for got, want in zip(c.prune_batch(dicts), idx.prune_batch(dicts)):
            assert_trees_equal(got, want)
        # ragged levels (K differs per level)
        p, t, q = tree_inputs[5]
        rt, rq = [t[0][:5], t[1][:9], t[2]], [q[0][:5], q[1][:9], q[2]]
        assert_trees_equal(c.prune(p, rt, rq), idx.prune(p, rt, rq))


def test_golden_trees(corpus_trie: Path, tree_inputs: list) -> None:
    """DART's own trees (tree_sample.npz, made on the corpus trie): the host serving that trie returns the
    same node paths for every golden lattice, with DART's parameters; and the tree encoding the client
    derives (mask, depths, retrieve rows) is consistent."""
    g = np.load(GOLDEN / "tree_sample.npz")
    params = dict(beam_width=int(g["beam_width"]), max_nodes=int(g["remain_total"]),
                  ngram_weight=float(g["ngram_weight"]), level_weights=g["level_weights"].tolist(),
                  logit_weights=g["logit_weights"].tolist(), eos_token_id=int(g["eos_token"]))
    with ServerProcess([corpus_trie]) as s, s.client() as c:
        trees = c.prune_batch(tree_inputs, **params)
        assert len(trees) == len(g["node_paths"]) == 200
        for i, t in enumerate(trees):
            gold = {tuple(int(x) for x in row if x >= 0) for row in g["node_paths"][i][1:]}
            assert set(t.paths()[1:]) == gold and len(t.tokens) == len(gold) + 1, f"tree {i}"
        for t in trees[:20]:
            n = len(t.tokens)
            assert t.parents[0] == -1 and all(t.parents[1:] < np.arange(1, n))
            for i in range(n):
                anc = {i}
                j = i
                while t.parents[j] >= 0:
                    j = t.parents[j]
                    anc.add(j)
                assert set(np.flatnonzero(t.tree_mask[i])) == anc
            leaves = {int(r[r >= 0][-1]) for r in t.retrieve_indices}
            assert leaves == set(range(n)) - set(t.parents[1:].tolist())


# ---- health and reflection ----------------------------------------------------------

def test_health_and_reflection(server: ServerProcess) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    ch = grpc.insecure_channel(server.target)
    health = health_pb2_grpc.HealthStub(ch)
    for svc in ("", "ngram.v1.NgramService"):
        assert health.Check(health_pb2.HealthCheckRequest(service=svc), timeout=5).status == \
            health_pb2.HealthCheckResponse.SERVING
    refl = reflection_pb2_grpc.ServerReflectionStub(ch)
    resp = next(refl.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
                                          timeout=5))
    names = {s.name for s in resp.list_services_response.service}
    assert {"ngram.v1.NgramService", "grpc.health.v1.Health"} <= names
    assert "ngram.v1.NgramAdmin" not in names  # only with --admin
    ch.close()


# ---- validation -----------------------------------------------------------------------

LIMITS = ["--max-batch", "4", "--max-context", "8", "--max-candidates", "6", "--max-topk", "5",
          "--max-levels", "3", "--max-beam", "4", "--max-nodes", "10", "--max-message-bytes", "65536"]


@pytest.fixture(scope="module")
def small(dart_trie: Path, sample_trie: Path):
    with ServerProcess([dart_trie, sample_trie], "--name", "dart", "--name", "sample", *LIMITS) as s:
        yield s


def _lattice(levels: int = 2, k: int = 3, **kw: Any) -> pb.PruneInput:
    toks = [10 + i for i in range(levels * k)]
    return pb.PruneInput(prefix=kw.get("prefix", [1, 2]), level_sizes=kw.get("level_sizes", [k] * levels),
                         tokens=kw.get("tokens", toks), probs=kw.get("probs", [0.5] * len(toks)))


def _prune(*inputs: pb.PruneInput, **params: Any) -> pb.PruneTreeRequest:
    params = {"beam_width": 2, "max_nodes": 5, **params}
    return pb.PruneTreeRequest(inputs=list(inputs), params=pb.PruneParams(**params))


CP = pb.ConditionalProbsRequest
CASES = [
    ("ConditionalProbs", CP(context_len=2, num_candidates=1, contexts=[1, 10**7], candidates=[3]), "contexts[1]"),
    ("ConditionalProbs", CP(context_len=2, num_candidates=1, contexts=[1, 2], candidates=[-4]), "candidates[0]"),
    ("ConditionalProbs", CP(context_len=0, num_candidates=1, contexts=[], candidates=[]), "context_len"),
    ("ConditionalProbs", CP(context_len=2, num_candidates=1, contexts=[1, 2, 3], candidates=[3]), "contexts"),
    ("ConditionalProbs", CP(context_len=1, num_candidates=2, contexts=[1], candidates=[3]), "candidates"),
    ("ConditionalProbs", CP(context_len=1, num_candidates=1, contexts=[1] * 5, candidates=[3] * 5), "--max-batch"),
    ("ConditionalProbs", CP(context_len=9, num_candidates=1, contexts=[1] * 9, candidates=[3]), "--max-context"),
    ("ConditionalProbs", CP(context_len=1, num_candidates=7, contexts=[1], candidates=[3] * 7), "--max-candidates"),
    ("TopK", pb.TopKRequest(context=[1, 2], k=6), "--max-topk"),
    ("TopK", pb.TopKRequest(context=[1] * 9, k=1), "--max-context"),
    ("TopK", pb.TopKRequest(context=[1, 999999], k=1), "context[1]"),
    ("PruneTree", _prune(*[_lattice()] * 5), "--max-batch"),
    ("PruneTree", _prune(_lattice(levels=4)), "inputs[0].level_sizes"),
    ("PruneTree", _prune(_lattice(levels=0)), "inputs[0].level_sizes has 0 levels (D)"),
    ("PruneTree", _prune(_lattice(level_sizes=[3, 0])), "inputs[0].level_sizes[1] has 0 candidates (K)"),
    ("PruneTree", _prune(_lattice(k=7)), "--max-candidates"),
    ("PruneTree", _prune(_lattice(), beam_width=5), "params.beam_width"),
    ("PruneTree", _prune(_lattice(), max_nodes=11), "params.max_nodes"),
    ("PruneTree", _prune(_lattice(tokens=[1, 2])), "inputs[0].tokens"),
    ("PruneTree", _prune(_lattice(probs=[0.5])), "inputs[0].probs"),
    ("PruneTree", _prune(_lattice(), _lattice(probs=[0.5, float("nan"), 0.1, 0.2, 0.3, 0.4])), "inputs[1]"),
    ("PruneTree", _prune(_lattice(tokens=[10, 10, 11, 12, 13, 14])), "inputs[0]"),
    ("PruneTree", _prune(_lattice(prefix=[1, 10**9])), "prefix"),
    ("PruneTree", _prune(_lattice(), ngram_weight=-1.0), "ngram_weight"),
    # the wire's int64 carries a negative integer to the engine's check, and its message
    ("PruneTree", _prune(_lattice(), beam_width=-1), "beam_width = -1: must be 1..1024"),
    ("PruneTree", _prune(_lattice(), max_nodes=-5), "max_nodes = -5: must be 0..4096"),
]


@pytest.mark.parametrize("method,request_,field", CASES, ids=[f"{m}-{f}-{i}" for i, (m, _, f) in enumerate(CASES)])
def test_invalid_argument_names_the_field(small: ServerProcess, method: str, request_: Any, field: str) -> None:
    with pytest.raises(grpc.RpcError) as e:
        getattr(small.stub(), method)(request_, timeout=5)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value.details()
    assert field in e.value.details()


def test_index_and_fingerprint_errors(small: ServerProcess, sample_trie: Path) -> None:
    fp = NgramIndex.open(sample_trie).info()["tokenizer"]["fingerprint"]
    with NgramClient(small.target, index="nope") as c, pytest.raises(grpc.RpcError) as e:
        c.topk([1], 1)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND and "dart, sample" in e.value.details()
    with NgramClient(small.target, index="sample", tokenizer_fingerprint=fp) as c:
        got, want = c.topk([1], 1), NgramIndex.open(sample_trie).topk([1], 1)
        assert got.matched == want.matched and got.tokens.tolist() == want.tokens.tolist()
    with NgramClient(small.target, index="sample", tokenizer_fingerprint="other") as c, \
            pytest.raises(grpc.RpcError) as e:
        c.conditional_probs([[1]], [[2]])
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "tokenizer_fingerprint" in e.value.details()
    with NgramClient(small.target, index="dart", tokenizer_fingerprint=fp) as c, pytest.raises(grpc.RpcError) as e:
        c.topk([1], 1)  # the converted DART trie records no tokenizer
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_message_size_limit(small: ServerProcess) -> None:
    with small.client() as c:
        with pytest.raises(grpc.RpcError) as e:
            c.conditional_probs(np.ones((4, 8), np.int64), np.full((4, 6), 10**12, np.int64) + np.arange(6))
        assert e.value.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED)
        big = CP(context_len=1, num_candidates=1, contexts=[100000] * 40000, candidates=[100000] * 40000)
        with pytest.raises(grpc.RpcError) as e:
            small.stub().ConditionalProbs(big, timeout=5)
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # over --max-message-bytes


def test_client_side_type_errors(server: ServerProcess) -> None:
    with server.client() as c:
        with pytest.raises(ValueError, match="contexts"):
            c.conditional_probs([[1.5]], [[1]])
        with pytest.raises(ValueError, match="candidates"):
            c.conditional_probs([[1]], [1])
        with pytest.raises(ValueError, match="beam_width"):
            c.prune([1], [[1]], [[0.5]], beam_width=2.5)


# ---- overload, reload, drain -------------------------------------------------------------

def metrics_text(metrics_port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()


def in_flight(metrics_port: int) -> int:
    text = metrics_text(metrics_port)
    return int(float(next(x for x in text.splitlines() if x.startswith("ngram_in_flight ")).split()[1]))


def wait_in_flight(metrics_port: int, n: int, timeout: float = 60.0) -> None:
    """Until n calls are admitted (their requests read); fails if they never are."""
    deadline = time.monotonic() + timeout
    while (now := in_flight(metrics_port)) < n:
        assert time.monotonic() < deadline, f"only {now} of {n} calls in flight"
        time.sleep(0.005)


def _slow_prune_request(trees: int, seed: int = 1) -> pb.PruneTreeRequest:
    """One PruneTree call that keeps a compute slot busy: 64 levels of 256
    candidates, beam 1024, 4096 nodes (all within the default limits) cost a
    tenth to half a second per tree here, while the request is only 200 kB a
    tree. For the sample trie (4,096 ids)."""
    rng = np.random.default_rng(seed)
    inputs = []
    for _ in range(trees):
        tokens = np.concatenate([rng.choice(4096, 256, replace=False) for _ in range(64)])
        probs = np.sort(rng.random((64, 256)).astype(np.float32), axis=1)[:, ::-1].ravel()
        inputs.append(pb.PruneInput(prefix=[1, 2], level_sizes=[256] * 64, tokens=tokens.tolist(),
                                    probs=probs.tolist()))
    return pb.PruneTreeRequest(inputs=inputs, params=pb.PruneParams(beam_width=1024, max_nodes=4096))


def _engine_trees(trie: Path, req: pb.PruneTreeRequest) -> list[list[int]]:
    idx = NgramIndex.open(trie)
    out = []
    for i in req.inputs:
        k = np.array(i.level_sizes)[0]
        tokens, probs = np.array(i.tokens).reshape(-1, k), np.array(i.probs, np.float32).reshape(-1, k)
        t = idx.prune(np.array(i.prefix), tokens, probs, beam_width=req.params.beam_width,
                      max_nodes=req.params.max_nodes)
        out.append(t.tokens.tolist())
    return out


def test_call_queued_past_its_deadline_is_not_computed(sample_trie: Path) -> None:
    """With the one compute slot busy, a queued call whose deadline passes is
    answered DEADLINE_EXCEEDED without running, and a queued call the client
    cancels is answered CANCELLED without running: both ask for an id outside
    the vocabulary, so running them would have answered INVALID_ARGUMENT."""
    port = free_port()
    bad = pb.TopKRequest(context=[10**9], k=1)
    with ServerProcess([sample_trie], "--threads", "1", "--log-requests", "--max-queue-wait-ms", "600000",
                       "--metrics-port", str(port), "--metrics-host", "127.0.0.1") as s:
        stub = s.stub()
        heavy = stub.PruneTree.future(_slow_prune_request(6), timeout=120)
        wait_in_flight(port, 1)  # admitted with the slot free: computing
        with pytest.raises(grpc.RpcError) as e:
            stub.TopK(bad, timeout=0.1)
        assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        cancelled = stub.TopK.future(bad, timeout=120)
        wait_in_flight(port, 3)  # heavy, the expired call (still queued on the server), this one
        cancelled.cancel()
        assert len(heavy.result().trees) == 6
        deadline = time.monotonic() + 30
        while sum(ev["event"] == "call" for ev in s.events) < 3:
            assert time.monotonic() < deadline, s.events
            time.sleep(0.01)
        calls = [ev for ev in s.events if ev["event"] == "call"]
        text = metrics_text(port)
    assert [(c["method"], c["code"]) for c in calls] == [
        ("PruneTree", grpc.StatusCode.OK.value[0]), ("TopK", grpc.StatusCode.DEADLINE_EXCEEDED.value[0]),
        ("TopK", grpc.StatusCode.CANCELLED.value[0])], calls
    assert "before the call started" in calls[1]["message"] and "while queued" in calls[2]["message"]
    assert 'ngram_requests_total{code="DEADLINE_EXCEEDED",method="TopK"} 1' in text
    assert 'code="INVALID_ARGUMENT"' not in text


def test_resource_exhausted_under_overload(sample_trie: Path) -> None:
    """Over --max-queue a call is refused at once, whatever the speed of the
    machine: two slow calls hold the worker and the one place in the queue."""
    port = free_port()
    with ServerProcess([sample_trie], "--threads", "1", "--max-queue", "1", "--max-queue-wait-ms", "600000",
                       "--metrics-port", str(port), "--metrics-host", "127.0.0.1") as s:
        stub = s.stub()
        slow = [stub.PruneTree.future(_slow_prune_request(6, seed=i), timeout=120) for i in range(2)]
        wait_in_flight(port, 2)
        with pytest.raises(grpc.RpcError) as e:
            stub.TopK(pb.TopKRequest(context=[1], k=1), timeout=30)
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "--max-queue" in e.value.details()
        assert not any(f.done() for f in slow)  # refused while both were still in flight
        assert [len(f.result().trees) for f in slow] == [6, 6]
        assert stub.TopK(pb.TopKRequest(context=[1], k=1), timeout=30).tokens  # places freed
        text = metrics_text(port)
    assert 'ngram_rejected_total{method="TopK",reason="queue_full"} 1' in text


@pytest.fixture(scope="module")
def other_trie(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A second trie with the sample tokenizer but another corpus: other answers."""
    from indexer.cli import SAMPLE_DIR
    from indexer.pipeline import BuildConfig, build

    d = tmp_path_factory.mktemp("other")
    texts = ["the trie host serves a draft tree", "a draft tree of the trie", "PEP 8 is not in here"] * 5
    (d / "o.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    out = d / "other.ngt"
    build(BuildConfig(inputs=[str(d / "o.jsonl")], out=str(out), tokenizer=str(SAMPLE_DIR / "tokenizer.json"),
                      order=3), progress=lambda _m: None)
    return out


def test_reload_swaps_the_trie_under_load(sample_trie: Path, other_trie: Path, tmp_path: Path) -> None:
    """SIGHUP (after mv new live) and NgramAdmin.Reload swap in a different
    trie: answers change to the new trie's, calls running across the swaps
    all succeed with one trie's answers; a reload to a file that does not open
    (reload_failed) keeps the old trie serving; the reload metrics count both."""
    rng = np.random.default_rng(0)
    a, b = NgramIndex.open(sample_trie), NgramIndex.open(other_trie)
    common = b.topk([], 25).tokens  # the other corpus' words, so both tries match some queries
    ctx = np.concatenate([rng.integers(0, 4096, (100, 2)), rng.choice(common, (100, 2))])
    cand = np.concatenate([rng.integers(0, 4096, (100, 25)), np.tile(np.resize(common, 25), (100, 1))])
    want = {"a": a.conditional_probs(ctx, cand), "b": b.conditional_probs(ctx, cand)}
    assert not np.array_equal(want["a"][0], want["b"][0])  # the two tries answer differently

    def which(p: np.ndarray, m: np.ndarray) -> str:
        return next((k for k, (wp, wm) in want.items() if np.array_equal(p, wp) and np.array_equal(m, wm)), "wrong")

    live = tmp_path / "live.ngt"
    shutil.copy(sample_trie, live)
    broken = tmp_path / "broken.ngt"
    broken.write_bytes(sample_trie.read_bytes()[:1000])
    port = free_port()
    seen: list[str] = []
    stop = threading.Event()
    a_copy = tmp_path / "a.ngt"
    shutil.copy(sample_trie, a_copy)
    with ServerProcess([live], "--admin-port", "0", "--threads", "2", "--metrics-port", str(port),
                       "--metrics-host", "127.0.0.1") as s, s.client(timeout=60) as c:
        c.wait_ready()

        def load() -> None:
            while not stop.is_set():
                try:
                    seen.append(which(*c.conditional_probs(ctx, cand)))
                except grpc.RpcError as e:
                    seen.append(str(e.code()))

        def answers_now() -> str:
            """The trie answering after a swap: calls that started before it may still answer the old one,
            so wait until the load threads made two more calls, then ask once more."""
            n = len(seen)
            deadline = time.monotonic() + 60
            while len(seen) < n + 2:
                assert time.monotonic() < deadline, "the load stopped"
                time.sleep(0.005)
            return which(*c.conditional_probs(ctx, cand))

        workers = [threading.Thread(target=load) for _ in range(3)]
        for w in workers:
            w.start()
        admin = pb_grpc.NgramAdminStub(grpc.insecure_channel(f"127.0.0.1:{s.listening['admin_port']}"))
        try:
            assert answers_now() == "a"
            n = len(s.events)
            shutil.copy(other_trie, live.with_suffix(".tmp"))
            os.replace(live.with_suffix(".tmp"), live)  # mv new.ngt live.ngt
            s.proc.send_signal(signal.SIGHUP)
            assert s.wait_event("reload", after=n)["path"] == str(live)
            assert answers_now() == "b"
            n = len(s.events)
            shutil.copy(broken, live.with_suffix(".tmp"))
            os.replace(live.with_suffix(".tmp"), live)
            s.proc.send_signal(signal.SIGHUP)  # reopens live.ngt, now broken
            assert "live.ngt" in s.wait_event("reload_failed", after=n)["error"]
            assert answers_now() == "b"  # the old trie keeps serving
            r = admin.Reload(pb.ReloadRequest(path=str(a_copy)), timeout=30)
            assert r.index == "live" and r.file_bytes == sample_trie.stat().st_size
            assert answers_now() == "a"
            with pytest.raises(grpc.RpcError) as e:
                admin.Reload(pb.ReloadRequest(path=str(broken)), timeout=30)
            assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "broken.ngt" in e.value.details()
            assert answers_now() == "a"
            with pytest.raises(grpc.RpcError) as e:
                admin.Reload(pb.ReloadRequest(path=str(tmp_path / "missing.ngt")), timeout=30)
            assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "missing.ngt" in e.value.details()
            text = metrics_text(port)
        finally:
            stop.set()
            for w in workers:
                w.join(60)
    assert set(seen) == {"a", "b"}, collections.Counter(seen)
    assert 'ngram_reloads_total{index="live",result="ok"} 2' in text
    assert 'ngram_reloads_total{index="live",result="error"} 2' in text  # the missing path: refused before
    assert f'ngram_index_file_bytes{{index="live"}} {sample_trie.stat().st_size}' in text
    assert sum(ev["event"] == "reload" for ev in s.events) == 2
    assert sum(ev["event"] == "reload_failed" for ev in s.events) == 2


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_drain_finishes_calls_in_flight_and_refuses_new_ones(sample_trie: Path, sig: int) -> None:
    """SIGTERM and SIGINT: health turns NOT_SERVING (a watcher is told and
    does not hold the drain), new calls are refused, the calls in flight
    finish with their answers, the process exits 0."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    req = _slow_prune_request(2)
    want = _engine_trees(sample_trie, req)
    results: list[Any] = []
    port = free_port()
    with ServerProcess([sample_trie], "--threads", "1", "--drain-seconds", "120", "--max-queue-wait-ms", "600000",
                       "--metrics-port", str(port), "--metrics-host", "127.0.0.1") as s:
        watch = health_pb2_grpc.HealthStub(grpc.insecure_channel(s.target)).Watch(
            health_pb2.HealthCheckRequest(service="ngram.v1.NgramService"), timeout=120)
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        stub = s.stub()

        def call() -> None:
            try:
                results.append([list(t.tokens) for t in stub.PruneTree(req, timeout=120).trees])
            except grpc.RpcError as e:
                results.append(e.code())

        threads = [threading.Thread(target=call) for _ in range(4)]
        for t in threads:
            t.start()
        wait_in_flight(port, 4)  # one computing, three queued behind it
        s.proc.send_signal(sig)
        drain = s.wait_event("draining")
        try:
            assert next(watch).status == health_pb2.HealthCheckResponse.NOT_SERVING
        except grpc.RpcError as e:  # seen once under CI load: say what the server did meanwhile
            raise AssertionError(f"the health watch ended ({e.code()}) before NOT_SERVING; server: "
                                 f"{s.events[-6:]}, exit {s.proc.poll()}") from None
        with pytest.raises(grpc.RpcError) as e:
            stub.TopK(pb.TopKRequest(context=[1], k=1), timeout=30)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        assert len(results) < 4  # refused while calls were still in flight
        for t in threads:
            t.join(120)
        rc = s.proc.wait(60)  # not --drain-seconds: nothing is left to wait for
    assert rc == 0
    assert drain["signal"] == signal.Signals(sig).name and drain["in_flight"] >= 2
    assert results == [want] * 4
    assert s.events[-1]["event"] == "stopped"


def test_drain_seconds_running_out_cancels_what_is_left(sample_trie: Path) -> None:
    """With --drain-seconds 0.2 and more work queued than that, the process
    exits 0 within --drain-seconds + 1 s; the calls not finished by then,
    the one running included, end UNAVAILABLE (which clients retry
    elsewhere), never CANCELLED."""
    port = free_port()
    results: list[Any] = []
    with ServerProcess([sample_trie], "--threads", "1", "--drain-seconds", "0.2", "--max-queue-wait-ms", "600000",
                       "--metrics-port", str(port), "--metrics-host", "127.0.0.1") as s:
        stub = s.stub()

        def call(seed: int) -> None:
            try:
                results.append(len(stub.PruneTree(_slow_prune_request(4, seed), timeout=120).trees))
            except grpc.RpcError as e:
                results.append(e.code())

        threads = [threading.Thread(target=call, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        wait_in_flight(port, 4)
        t0 = time.monotonic()
        s.proc.send_signal(signal.SIGTERM)
        rc = s.proc.wait(60)
        took = time.monotonic() - t0
        for t in threads:
            t.join(120)
    assert rc == 0 and s.events[-1]["event"] == "stopped"
    assert took < 0.2 + 1.0 + 0.5, took  # the bound, and the signal's and exit's own time on a loaded machine
    cut = [r for r in results if r != 4]
    # Three calls queued behind a call of four slow trees cannot all finish in 0.2 s.
    assert len(cut) >= 3 and set(cut) == {grpc.StatusCode.UNAVAILABLE}, results


def test_ram_and_verify(sample_trie: Path, tmp_path: Path) -> None:
    """--ram reads the trie into memory (same answers, not mapped); --verify
    refuses at startup a file whose section checksum fails, which opens
    without it; a reload under --verify checks too."""
    idx = NgramIndex.open(sample_trie)
    # Token ids of the last level: not checked at open (their order is not), so only a checksum sees the flip.
    sec = next(x for x in idx.sections() if x["kind"] == "tokens" and x["level"] == idx.order)
    bad = tmp_path / "flipped.ngt"
    data = bytearray(sample_trie.read_bytes())
    data[sec["offset"] + sec["length"] // 2] ^= 0x5A
    bad.write_bytes(bytes(data))
    rng = np.random.default_rng(3)
    ctx, cand = rng.integers(0, 4096, (300, 2)), rng.integers(0, 4096, (300, 25))
    p0, m0 = idx.conditional_probs(ctx, cand)
    with ServerProcess([sample_trie], "--ram", "--verify", "--admin-port", "0", "--reload-dir", str(tmp_path)) as s, \
            s.client() as c:
        assert s.events[0]["event"] == "index_loaded" and s.events[0]["mapped"] is False
        info = c.info()
        assert info["mapped"] is False and info["file_bytes"] == sample_trie.stat().st_size
        p, m = c.conditional_probs(ctx, cand)
        np.testing.assert_array_equal(p, p0)
        np.testing.assert_array_equal(m, m0)
        with pytest.raises(grpc.RpcError) as e:
            admin = pb_grpc.NgramAdminStub(grpc.insecure_channel(f"127.0.0.1:{s.listening['admin_port']}"))
            admin.Reload(pb.ReloadRequest(path=str(bad)), timeout=30)
        assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "checksum" in e.value.details()
    with ServerProcess([sample_trie]) as s, s.client() as c:
        assert s.events[0]["mapped"] is True and c.info()["mapped"] is True
    with ServerProcess([bad]) as s:  # unverified: the flipped byte goes unnoticed at startup
        assert s.listening["port"] > 0
    p = subprocess.run([str(BINARY), str(bad), "--verify", "--port", "0", "--host", "127.0.0.1"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1
    failed = [json.loads(x) for x in p.stderr.splitlines() if x.startswith("{")][-1]
    assert failed["event"] == "startup_failed" and "flipped.ngt" in failed["error"] and "checksum" in failed["error"]


# ---- metrics ---------------------------------------------------------------------------

def test_prometheus_metrics(dart_trie: Path) -> None:
    port = free_port()
    with ServerProcess([dart_trie], "--metrics-port", str(port), "--metrics-host", "127.0.0.1") as s, \
            s.client() as c:
        c.topk([1], 3)
        with pytest.raises(grpc.RpcError):
            c.topk([10**9], 3)
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert 'ngram_requests_total{code="OK",method="TopK"} 1' in text
    assert 'ngram_requests_total{code="INVALID_ARGUMENT",method="TopK"} 1' in text
    assert 'ngram_request_seconds_bucket{method="TopK"' in text
    assert "ngram_in_flight 0" in text
    assert f'ngram_index_file_bytes{{index="dart"}} {dart_trie.stat().st_size}' in text
    assert 'ngram_index_age_seconds{index="dart"}' in text and "ngram_process_resident_bytes" in text


def test_bad_startup_is_reported(tmp_path: Path) -> None:
    bad = tmp_path / "bad.ngt"
    bad.write_bytes(b"not a trie")
    p = subprocess.run([str(BINARY), str(bad), "--port", "0", "--host", "127.0.0.1"], capture_output=True,
                       text=True, timeout=20)
    assert p.returncode == 1
    events = [json.loads(x) for x in p.stderr.splitlines() if x.startswith("{")]
    assert events[-1]["event"] == "startup_failed" and "bad.ngt" in events[-1]["error"]
    p = subprocess.run([str(BINARY), str(bad), "--bogus"], capture_output=True, text=True, timeout=20)
    assert p.returncode == 2 and p.stderr.endswith("Error: unknown option --bogus\n")
