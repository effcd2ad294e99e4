"""The native gRPC trie host (ngram-serve-native) through the Python client.

Real server processes on ephemeral ports of 127.0.0.1; skipped when the
native binary was not built (grpc++/protobuf missing at build time).
"""
from __future__ import annotations

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

grpc = pytest.importorskip("grpc")

from ngram_service import NgramIndex  # noqa: E402
from ngram_service.client import NgramClient  # noqa: E402
from ngram_service.proto.ngram.v1 import ngram_pb2 as pb  # noqa: E402
from ngram_service.proto.ngram.v1 import ngram_pb2_grpc as pb_grpc  # noqa: E402
from ngram_service.serve import find_native_binary  # noqa: E402

GOLDEN = Path(__file__).resolve().parents[2] / "shared" / "golden"
BINARY = find_native_binary()
pytestmark = pytest.mark.skipif(
    BINARY is None,
    reason="ngram-serve-native was not built (grpc++/protobuf missing: run infra/install-system-deps.sh "
           "and reinstall, or set NGRAM_SERVE_NATIVE)",
)
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


def test_golden_trees(server: ServerProcess, tree_inputs: list) -> None:
    """The host's trees on the DART sample trie hold DART's node paths where the golden trie is the corpus'
    trie; here we only check the tree encoding the client derives (mask, depths, retrieve rows)."""
    with server.client() as c:
        for t in c.prune_batch(tree_inputs[:20]):
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
    ("PruneTree", _prune(_lattice(k=7)), "--max-candidates"),
    ("PruneTree", _prune(_lattice(), beam_width=5), "params.beam_width"),
    ("PruneTree", _prune(_lattice(), max_nodes=11), "params.max_nodes"),
    ("PruneTree", _prune(_lattice(tokens=[1, 2])), "inputs[0].tokens"),
    ("PruneTree", _prune(_lattice(probs=[0.5])), "inputs[0].probs"),
    ("PruneTree", _prune(_lattice(), _lattice(probs=[0.5, float("nan"), 0.1, 0.2, 0.3, 0.4])), "inputs[1]"),
    ("PruneTree", _prune(_lattice(tokens=[10, 10, 11, 12, 13, 14])), "inputs[0]"),
    ("PruneTree", _prune(_lattice(prefix=[1, 10**9])), "prefix"),
    ("PruneTree", _prune(_lattice(), ngram_weight=-1.0), "ngram_weight"),
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
        assert c.topk([1], 1).matched >= 0
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


def test_deadline_exceeded(server: ServerProcess) -> None:
    ctx, cand = _heavy(60000)
    with server.client() as c, pytest.raises(grpc.RpcError) as e:
        c.conditional_probs(ctx, cand, timeout=0.02)
    assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


def test_client_side_type_errors(server: ServerProcess) -> None:
    with server.client() as c:
        with pytest.raises(ValueError, match="contexts"):
            c.conditional_probs([[1.5]], [[1]])
        with pytest.raises(ValueError, match="candidates"):
            c.conditional_probs([[1]], [1])
        with pytest.raises(ValueError, match="beam_width"):
            c.prune([1], [[1]], [[0.5]], beam_width=2.5)


# ---- overload, reload, drain -------------------------------------------------------------

def _heavy(n: int = 20000) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.integers(0, 2000, (n, 2)), rng.integers(0, 2000, (n, 25))


def test_resource_exhausted_under_overload(dart_trie: Path) -> None:
    # Deterministic overload: two slow calls hold both in-flight places
    # (one computing, one queued behind the single compute slot), so a third
    # call must be refused at once, whatever the speed of the machine; when
    # they finish it succeeds.
    port = free_port()
    req = _heavy_prune_request(3000)
    with ServerProcess([dart_trie], "--threads", "1", "--max-inflight", "2", "--metrics-port", str(port),
                       "--metrics-host", "127.0.0.1") as s:
        stub = s.stub()
        results: list[Any] = []
        slow = [threading.Thread(target=lambda: results.append(len(stub.PruneTree(req, timeout=60).trees)))
                for _ in range(2)]
        for t in slow:
            t.start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and in_flight(port) < 2:
            time.sleep(0.002)
        with pytest.raises(grpc.RpcError) as e:
            stub.TopK(pb.TopKRequest(context=[1], k=1), timeout=10)
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "--max-inflight" in e.value.details()
        for t in slow:
            t.join(60)
        assert results == [3000, 3000]
        stub.TopK(pb.TopKRequest(context=[1], k=1), timeout=10)


def test_reload_under_load_fails_nothing(dart_trie: Path, tmp_path: Path) -> None:
    live = tmp_path / "live.ngt"
    shutil.copy(dart_trie, live)
    other = tmp_path / "other.ngt"
    shutil.copy(dart_trie, other)
    z = np.load(GOLDEN / "dart-sample-queries.npz")
    ctx, cand, want = z["contexts"][:200], z["candidates"][:200], z["probs"][:200]
    failures: list[Any] = []
    calls = [0]
    stop = threading.Event()
    with ServerProcess([live], "--admin", "--threads", "2") as s, s.client() as c:
        c.wait_ready()

        def load() -> None:
            while not stop.is_set():
                try:
                    p, _ = c.conditional_probs(ctx, cand, timeout=10)
                    if not np.array_equal(p, want):
                        failures.append("wrong answer")
                    calls[0] += 1
                except grpc.RpcError as e:
                    failures.append(e.code())

        workers = [threading.Thread(target=load) for _ in range(4)]
        for w in workers:
            w.start()
        admin = pb_grpc.NgramAdminStub(grpc.insecure_channel(s.target))
        for i in range(6):
            time.sleep(0.1)
            if i % 2:
                n = len(s.events)
                shutil.copy(other, live.with_suffix(".tmp"))
                os.replace(live.with_suffix(".tmp"), live)  # a new file under the same name
                s.proc.send_signal(signal.SIGHUP)
                s.wait_event("reload", after=n)
            else:
                r = admin.Reload(pb.ReloadRequest(path=str(other if i % 4 == 0 else live)), timeout=10)
                assert r.index == "live" and r.file_bytes == dart_trie.stat().st_size
        time.sleep(0.1)
        stop.set()
        for w in workers:
            w.join(30)
        with pytest.raises(grpc.RpcError) as e:
            admin.Reload(pb.ReloadRequest(path=str(tmp_path / "missing.ngt")), timeout=10)
        assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert c.topk([1], 1).matched >= 0  # the old index keeps serving
    assert failures == [] and calls[0] > 10
    assert sum(ev["event"] == "reload" for ev in s.events) == 6


def in_flight(metrics_port: int) -> int:
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    return int(float(next(x for x in text.splitlines() if x.startswith("ngram_in_flight ")).split()[1]))


def _heavy_prune_request(trees: int) -> Any:
    """One PruneTree call of many random lattices: long to compute, short to send."""
    from ngram_service.proto.ngram.v1 import ngram_pb2 as pb

    rng = np.random.default_rng(1)
    probs = np.sort(rng.random((8, 25)).astype(np.float32), axis=1)[:, ::-1].ravel().tolist()
    inputs = [pb.PruneInput(prefix=rng.integers(0, 2000, 2).tolist(), level_sizes=[25] * 8,
                            tokens=np.concatenate([rng.choice(2000, 25, replace=False) for _ in range(8)]).tolist(),
                            probs=probs) for _ in range(trees)]
    return pb.PruneTreeRequest(inputs=inputs)


def test_sigterm_drains_in_flight_calls(dart_trie: Path) -> None:
    req = _heavy_prune_request(3000)
    results: list[Any] = []
    port = free_port()
    with ServerProcess([dart_trie], "--threads", "1", "--metrics-port", str(port),
                       "--metrics-host", "127.0.0.1") as s, \
            s.client() as c:
        stub = s.stub()

        def call() -> None:
            try:
                results.append(len(stub.PruneTree(req, timeout=60).trees))
            except grpc.RpcError as e:
                results.append(e.code())

        threads = [threading.Thread(target=call) for _ in range(4)]
        for t in threads:
            t.start()
        # Until all four calls are in flight: admitted, their requests read
        # (a call still uploading at SIGTERM is not in flight).
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and in_flight(port) < 4:
            time.sleep(0.002)
        t0 = time.monotonic()
        s.proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(60)
        rc = s.proc.wait(30)
        elapsed = time.monotonic() - t0
        with pytest.raises(grpc.RpcError) as e:
            c.topk([1], 1, timeout=2)
        assert e.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    assert rc == 0
    assert results == [3000] * 4, results
    assert elapsed < 10
    drain = next(ev for ev in s.events if ev["event"] == "draining")
    # Calls queue behind one compute slot, so most are still in flight when
    # the drain starts, and every one of them succeeds.
    assert drain["in_flight"] >= 2 and s.events[-1]["event"] == "stopped"


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
    p = subprocess.run([str(BINARY), str(bad)], capture_output=True, text=True, timeout=20)
    assert p.returncode == 2 and "--port is required" in p.stderr
