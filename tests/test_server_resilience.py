"""One trie host for a whole cluster: what no request, client or operator
mistake may do to it (issue 39, one test per row of its table). Real server
processes on 127.0.0.1, real gRPC over real sockets, the sample trie.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from concurrent import futures
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import grpc

from ngram_service import NgramIndex
from ngram_service.proto.ngram.v1 import ngram_pb2 as pb
from ngram_service.proto.ngram.v1 import ngram_pb2_grpc as pb_grpc
from test_server import BINARY, ServerProcess, free_port, metrics_text, wait_in_flight

pytestmark = pytest.mark.needs_server
CODES = grpc.StatusCode


def _metrics(*extra: str) -> tuple[int, list[str]]:
    port = free_port()
    return port, ["--metrics-port", str(port), "--metrics-host", "127.0.0.1", *extra]


# The sample trie's most frequent tokens: each one-token context below grows
# a full tree of 4,097 nodes.
FREQUENT = [199, 14, 267, 12, 13, 287, 259, 306]


def _monster_proposal(trees: int) -> pb.ProposeTreeRequest:
    """Row 1's request at `trees` one-token contexts: every value within the
    default limits, each tree as large as the engine allows (341 such trees
    are the most --max-request-work admits)."""
    params = pb.ProposeParams(max_nodes=4096, max_depth=64, max_branch=32, min_prob=0.0)
    return pb.ProposeTreeRequest(contexts=[pb.ProposeInput(context=[FREQUENT[i % 8]]) for i in range(trees)],
                                 params=params)


def _code(fn: Any) -> Any:
    try:
        fn()
        return CODES.OK
    except grpc.RpcError as e:
        return e.code()


def _call_events(s: ServerProcess, method: str) -> list[dict[str, Any]]:
    return [ev for ev in s.events if ev.get("event") == "call" and ev.get("method") == method]


# ---- row 1: work bounded before it starts, and stopped at its deadline --------------------------

def test_a_reply_that_cannot_be_sent_is_refused_before_any_work(sample_trie: Path) -> None:
    """Row 1 as reported: 65,536 trees of up to 4,097 nodes could never fit
    one reply; refused at once, naming the bound and the figure."""
    with ServerProcess([sample_trie], "--threads", "1") as s:
        t0 = time.monotonic()
        with pytest.raises(grpc.RpcError) as e:
            s.stub().ProposeTree(_monster_proposal(65536), timeout=30)
        assert time.monotonic() - t0 < 10  # 1,390 s of work before
        assert e.value.code() == CODES.RESOURCE_EXHAUSTED
        assert "--max-message-bytes" in e.value.details() and "65,536 trees" in e.value.details()
        assert s.stub().TopK(pb.TopKRequest(context=[1], k=1), timeout=10).tokens  # the worker is free


@pytest.mark.parametrize("method,request_", [
    ("ProposeTree", _monster_proposal(1000)),
    ("PruneTree", pb.PruneTreeRequest(
        inputs=[pb.PruneInput(prefix=[1], level_sizes=[8] * 64, tokens=list(range(512)), probs=[0.5] * 512)] * 100,
        params=pb.PruneParams(beam_width=1024, max_nodes=64))),
    ("ConditionalProbs", pb.ConditionalProbsRequest(context_len=1, num_candidates=2, contexts=[1] * 2000,
                                                    candidates=[1] * 4000)),
], ids=["propose", "prune", "probs"])
def test_work_over_the_budget_is_refused_naming_it(sample_trie: Path, method: str, request_: Any) -> None:
    """--max-request-work: refused before any search, with the figure and how it is made up."""
    work = "1000" if method != "ConditionalProbs" else "5000"
    with ServerProcess([sample_trie], "--max-request-work", work) as s:
        with pytest.raises(grpc.RpcError) as e:
            getattr(s.stub(), method)(request_, timeout=30)
    assert e.value.code() == CODES.INVALID_ARGUMENT
    msg = e.value.details()
    assert "work units" in msg and "--max-request-work" in msg and f"limit is {int(work):,}" in msg, msg


def _slow_prune(trees: int = 8) -> pb.PruneTreeRequest:
    """PruneTree's costliest shape within the work budget: 64 levels of 256
    candidates, beam 1024 (16.5 M work units a tree: eight fit the budget),
    about a tenth of a second a tree here."""
    from test_server import _slow_prune_request
    return _slow_prune_request(trees)


def _untimed_seconds(stub: Any, req: Any) -> float:
    t0 = time.monotonic()
    assert len(stub.PruneTree(req, timeout=120).trees) == len(req.inputs)
    return time.monotonic() - t0


def _second_call(s: ServerProcess, method: str) -> dict[str, Any]:
    """The log line of the second call of `method` (the first is the untimed one)."""
    deadline = time.monotonic() + 10
    while len(_call_events(s, method)) < 2:
        assert time.monotonic() < deadline, s.events
        time.sleep(0.01)
    return _call_events(s, method)[1]


@pytest.mark.parametrize("how", ["deadline", "cancel"])
def test_a_call_given_up_frees_its_worker_at_once(sample_trie: Path, how: str) -> None:
    """Row 1 at the largest work the budget admits: a call whose 0.1 s
    deadline passes, or that its client cancels after 0.1 s, stops inside the
    engine, so the one worker answers the next call right after; before, it
    went on for the whole search after the client had given up."""
    req = _slow_prune()
    with ServerProcess([sample_trie], "--threads", "1", "--log-requests") as s:
        stub = s.stub()
        untimed = _untimed_seconds(stub, req)
        assert untimed > 0.3, f"too little work to show anything ({untimed:.2f} s)"
        t0 = time.monotonic()
        if how == "deadline":
            assert _code(lambda: stub.PruneTree(req, timeout=0.1)) == CODES.DEADLINE_EXCEEDED
        else:
            f = stub.PruneTree.future(req, timeout=60)
            time.sleep(0.1)
            assert f.cancel()
        assert stub.TopK(pb.TopKRequest(context=[1], k=1), timeout=30).tokens
        waited = time.monotonic() - t0
        ev = _second_call(s, "PruneTree")
    assert waited < 0.1 + min(0.3, untimed / 3), (waited, untimed)
    # The client's own deadline may reach the server as a cancellation
    # (RST_STREAM) just before the server's copy of it passes.
    want = {CODES.DEADLINE_EXCEEDED, CODES.CANCELLED} if how == "deadline" else {CODES.CANCELLED}
    assert ev["code"] in {c.value[0] for c in want} and "trees" in ev["message"], ev
    assert ev["seconds"] < 0.1 + 0.15, ev  # the worker was freed within the engine's check interval


# ---- rows 2, 3: admission that sheds load ----------------------------------------------------------

def _medium_prune(seed: int) -> pb.PruneTreeRequest:
    """About 10-50 ms of work here: eight levels of 64 candidates, beam 64."""
    rng = np.random.default_rng(seed)
    inputs = []
    for _ in range(4):
        tokens = np.concatenate([rng.choice(4096, 64, replace=False) for _ in range(8)])
        probs = np.sort(rng.random((8, 64)).astype(np.float32), axis=1)[:, ::-1].ravel()
        inputs.append(pb.PruneInput(prefix=[1, 2], level_sizes=[64] * 8, tokens=tokens.tolist(), probs=probs.tolist()))
    return pb.PruneTreeRequest(inputs=inputs, params=pb.PruneParams(beam_width=64, max_nodes=256))


def test_over_the_queue_calls_are_refused_at_once(sample_trie: Path) -> None:
    """Row 2: 48 concurrent calls against one worker and a queue of 2: most
    are refused with RESOURCE_EXHAUSTED, fast, none queues without bound."""
    port, extra = _metrics()
    with ServerProcess([sample_trie], "--threads", "1", "--max-queue", "2", *extra) as s:
        stub = s.stub()
        first = stub.PruneTree.future(_slow_prune(), timeout=60)  # the worker stays busy
        wait_in_flight(port, 1)
        requests = [_medium_prune(i) for i in range(48)]
        t0 = time.monotonic()
        ended: list[float] = []
        fs = []
        for r in requests:
            fs.append(stub.PruneTree.future(r, timeout=60))
            fs[-1].add_done_callback(lambda _f: ended.append(time.monotonic() - t0))
        codes = [f.code() for f in fs]
        refused_at = sorted(ended)[:codes.count(CODES.RESOURCE_EXHAUSTED)]
        for f in fs:
            if f.code() == CODES.RESOURCE_EXHAUSTED:
                assert "--max-queue" in f.details(), f.details()
        assert first.code() == CODES.OK
        text = metrics_text(port)
    assert codes.count(CODES.RESOURCE_EXHAUSTED) >= 40, codes
    assert set(codes) <= {CODES.OK, CODES.RESOURCE_EXHAUSTED}, codes
    assert sorted(refused_at)[len(refused_at) // 2] < 0.5, refused_at  # answered at once, not after a wait
    assert 'ngram_rejected_total{method="PruneTree",reason="queue_full"}' in text


def test_a_call_is_answered_while_load_goes_on(sample_trie: Path) -> None:
    """Row 3: with one worker, a queue of 8 and 24 clients calling back to
    back for 4 s, every admitted call is answered within a few calls' time,
    the first one included (before, it was answered only when the load
    ended: the thread that freed the worker ran the queued calls)."""
    with ServerProcess([sample_trie], "--threads", "1", "--max-queue", "8") as s:
        stub = s.stub()
        req = _medium_prune(1)
        stop = time.monotonic() + 4.0
        lat: list[tuple[float, float]] = []
        lock = threading.Lock()

        def client() -> None:
            while time.monotonic() < stop:
                t = time.monotonic()
                try:
                    stub.PruneTree(req, timeout=30)
                except grpc.RpcError as e:
                    assert e.code() == CODES.RESOURCE_EXHAUSTED, e
                    time.sleep(0.005)
                    continue
                with lock:
                    lat.append((t, time.monotonic() - t))

        threads = [threading.Thread(target=client) for _ in range(24)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert len(lat) > 10
    lat.sort()
    first_latency = lat[0][1]
    worst = max(x for _, x in lat)
    assert first_latency < 2.0 and worst < 2.5, (first_latency, worst, len(lat))


# ---- row 4: metrics answer with idle and slow connections open ----------------------------------

def test_metrics_answer_while_idle_connections_are_open(sample_trie: Path) -> None:
    port, extra = _metrics()
    with ServerProcess([sample_trie], *extra):
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(4)]
        half = socket.create_connection(("127.0.0.1", port))
        half.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # a header never finished
        try:
            for _ in range(3):
                t0 = time.monotonic()
                assert "ngram_in_flight" in urllib.request.urlopen(
                    f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
                assert time.monotonic() - t0 < 5
        finally:
            for c in [*idle, half]:
                c.close()


# ---- row 5: a drain answers UNAVAILABLE, and ends in time -----------------------------------------

def test_calls_cut_by_a_drain_get_unavailable(sample_trie: Path) -> None:
    """Row 5: SIGTERM under load from 12 clients (no client retries): every
    call either succeeds or ends UNAVAILABLE, never CANCELLED; the process
    exits 0 within --drain-seconds + 1 s."""
    with ServerProcess([sample_trie], "--threads", "1", "--drain-seconds", "0.5") as s:
        channel = grpc.insecure_channel(s.target, options=[("grpc.enable_retries", 0)])
        stub = pb_grpc.NgramServiceStub(channel)
        codes: list[Any] = []
        done = threading.Event()
        req = _medium_prune(2)
        slow = _monster_proposal(60)

        def client(i: int) -> None:
            while not done.is_set():
                codes.append(_code(lambda: (stub.ProposeTree(slow, timeout=30) if i % 4 == 0
                                            else stub.PruneTree(req, timeout=30))))

        threads = [threading.Thread(target=client, args=(i,)) for i in range(12)]
        for t in threads:
            t.start()
        time.sleep(1.0)
        t0 = time.monotonic()
        s.proc.send_signal(signal.SIGTERM)
        rc = s.proc.wait(30)
        took = time.monotonic() - t0
        done.set()
        for t in threads:
            t.join(30)
        channel.close()
    assert rc == 0
    assert took < 0.5 + 1.0 + 0.5, took  # the bound, plus the signal's and exit's own time here
    assert CODES.OK in codes and CODES.UNAVAILABLE in codes
    assert set(codes) <= {CODES.OK, CODES.UNAVAILABLE, CODES.RESOURCE_EXHAUSTED}, \
        {c: codes.count(c) for c in set(codes)}


# ---- rows 6, 11, 13: reload, SIGHUP and the admin listener ----------------------------------------

@pytest.fixture()
def live_dir(tmp_path: Path, sample_trie: Path) -> Path:
    d = tmp_path / "tries"
    d.mkdir()
    shutil.copy(sample_trie, d / "live.ngt")
    return d


def _admin(s: ServerProcess) -> pb_grpc.NgramAdminStub:
    return pb_grpc.NgramAdminStub(grpc.insecure_channel(f"127.0.0.1:{s.listening['admin_port']}"))


def test_admin_has_its_own_loopback_listener(live_dir: Path) -> None:
    """Row 13: Reload is not served on the query port, only on the admin
    listener (127.0.0.1 by default), and opens files in the reload
    directory only."""
    with ServerProcess([live_dir / "live.ngt"], "--admin-port", "0") as s:
        assert s.listening["admin_host"] == "127.0.0.1" and s.listening["admin_port"] != s.port
        on_query_port = pb_grpc.NgramAdminStub(grpc.insecure_channel(s.target))
        assert _code(lambda: on_query_port.Reload(pb.ReloadRequest(), timeout=10)) == CODES.UNIMPLEMENTED
        r = _admin(s).Reload(pb.ReloadRequest(), timeout=30)
        assert r.index == "live"
        with pytest.raises(grpc.RpcError) as e:
            _admin(s).Reload(pb.ReloadRequest(path="/etc/passwd"), timeout=10)
        assert e.value.code() == CODES.PERMISSION_DENIED and "--reload-dir" in e.value.details()
        (live_dir / "link.ngt").symlink_to("/etc/passwd")
        with pytest.raises(grpc.RpcError) as e:
            _admin(s).Reload(pb.ReloadRequest(path=str(live_dir / "link.ngt")), timeout=10)
        assert e.value.code() == CODES.PERMISSION_DENIED  # resolved before it is compared
    with ServerProcess([live_dir / "live.ngt"]) as s:
        assert "admin_port" not in s.listening


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_reload_refuses_what_is_not_a_regular_file_at_once(live_dir: Path, kind: str) -> None:
    """Row 6: a FIFO (which blocked the reload, every later one and, after
    a SIGHUP, SIGTERM) or a directory is refused at once; SIGHUP and SIGTERM
    still work after it."""
    bad = live_dir / "bad"
    os.mkfifo(bad) if kind == "fifo" else bad.mkdir()
    with ServerProcess([live_dir / "live.ngt"], "--admin-port", "0") as s:
        t0 = time.monotonic()
        with pytest.raises(grpc.RpcError) as e:
            _admin(s).Reload(pb.ReloadRequest(path=str(bad)), timeout=10)
        assert time.monotonic() - t0 < 5
        assert e.value.code() == CODES.FAILED_PRECONDITION
        assert ("FIFO" if kind == "fifo" else "directory") in e.value.details()
        n = len(s.events)
        s.proc.send_signal(signal.SIGHUP)
        assert s.wait_event("reload", after=n)["path"] == str(live_dir / "live.ngt")
        assert s.stop(timeout=10) == 0


def test_sighup_reopens_the_command_line_file(live_dir: Path, sample_trie: Path, tmp_path: Path) -> None:
    """Row 11: after Reload(path=X), `mv new live && kill -HUP` reloads live,
    the file named on the command line, not X; the log says which."""
    other = live_dir / "other.ngt"
    shutil.copy(sample_trie, other)
    with ServerProcess([live_dir / "live.ngt"], "--admin-port", "0") as s, s.client() as c:
        assert _admin(s).Reload(pb.ReloadRequest(path=str(other)), timeout=30).path == str(other.resolve())
        assert c.info()["path"] == str(other.resolve())
        n = s.events.index(s.wait_event("reload")) + 1  # the admin's line has been read: the next is SIGHUP's
        s.proc.send_signal(signal.SIGHUP)
        ev = s.wait_event("reload", after=n)
        assert ev["path"] == str(live_dir / "live.ngt") and ev["cause"] == "SIGHUP"
        assert c.info()["path"] == str(live_dir / "live.ngt")


# ---- row 7: client input quoted capped ------------------------------------------------------------

def test_long_names_are_quoted_capped(sample_trie: Path) -> None:
    with ServerProcess([sample_trie]) as s:
        stub = s.stub()
        with pytest.raises(grpc.RpcError) as e:
            stub.TopK(pb.TopKRequest(index="x" * 16000, context=[1], k=1), timeout=10)
        assert e.value.code() == CODES.NOT_FOUND and "(16,000 bytes)" in e.value.details()
        assert len(e.value.details()) < 300
        with pytest.raises(grpc.RpcError) as e:
            stub.TopK(pb.TopKRequest(tokenizer_fingerprint="f" * 16000, context=[1], k=1), timeout=10)
        assert e.value.code() == CODES.FAILED_PRECONDITION and "(16,000 bytes)" in e.value.details()


# ---- row 9: one server per port -------------------------------------------------------------------

def test_a_second_server_on_a_port_in_use_fails_to_start(sample_trie: Path) -> None:
    with ServerProcess([sample_trie]) as s:
        p = subprocess.run([str(BINARY), str(sample_trie), "--host", "127.0.0.1", "--port", str(s.port)],
                           capture_output=True, text=True, timeout=30)
    assert p.returncode == 1
    failed = [json.loads(x) for x in p.stderr.splitlines() if x.startswith("{")][-1]
    assert failed["event"] == "startup_failed" and f"127.0.0.1:{s.port}" in failed["error"], failed


# ---- row 10: numeric flags range-checked -----------------------------------------------------------

@pytest.mark.parametrize("flag,value,range_", [
    ("--threads", "99999999999", "0..1024"),
    ("--threads", "4294967297", "0..1024"),
    ("--threads", "99999999999999999999999", "0..1024"),
    ("--max-queue", "0", "1..65536"),
    ("--max-request-work", "134217729", "1..134217728"),
    ("--max-message-bytes", "4294967296", "1024..2147483647"),
    ("--max-batch", "0", "1..1048576"),
    ("--metrics-port", "65536", "0..65535"),
    ("--admin-port", "-1", "0..65535"),
], ids=lambda x: x if x.startswith("--") else None)
def test_numeric_flags_are_range_checked(flag: str, value: str, range_: str) -> None:
    p = subprocess.run([str(BINARY), "x.ngt", flag, value], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2
    last = p.stderr.splitlines()[-1]
    assert last.startswith(f"Error: {flag}: ") and range_ in last, last


@pytest.mark.parametrize("args,said", [
    (["--metrics-host", "127.0.0.1"], "Error: --metrics-host needs --metrics-port"),
    (["--admin-host", "127.0.0.1"], "Error: --admin-host needs --admin-port"),
    (["--name", ""], "Error: --name: an empty index name"),
    (["--port", "5555", "--metrics-port", "5555"], "Error: --metrics-port 5555 is --port's too: give each listener "
                                                   "its own port"),
    (["--metrics-port", "5556", "--admin-port", "5556"], "Error: --admin-port 5556 is --metrics-port's too: give "
                                                         "each listener its own port"),
], ids=["metrics-host", "admin-host", "empty-name", "port-twice", "admin-on-metrics"])
def test_flags_that_cannot_apply_are_refused(args: list[str], said: str) -> None:
    p = subprocess.run([str(BINARY), "x.ngt", *args], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and p.stderr.splitlines()[-1] == said, p.stderr


def test_metrics_listener_failures_name_it(sample_trie: Path, tmp_path: Path) -> None:
    """A metrics port in use is refused naming --metrics-port (not civetweb's words alone); --metrics-port 0
    picks a free port, as --port 0 does, and logs it; --reload-dir must be a directory."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        p = subprocess.run([str(BINARY), str(sample_trie), "--host", "127.0.0.1", "--port", "0", "--metrics-port",
                            str(busy)], capture_output=True, text=True, timeout=30)
    assert p.returncode == 1
    failed = json.loads(p.stderr.splitlines()[-1])
    assert failed["event"] == "startup_failed"
    assert failed["error"].startswith(f"--metrics-port: cannot listen on 127.0.0.1:{busy} (in use"), failed
    with ServerProcess([sample_trie], "--metrics-port", "0", "--metrics-host", "127.0.0.1") as s:
        port = int(s.listening["metrics"].rsplit(":", 1)[1])
        assert port > 0 and "\nngram_workers " in metrics_text(port)
    p = subprocess.run([str(BINARY), str(sample_trie), "--port", "0", "--admin-port", "0", "--reload-dir",
                        str(sample_trie)], capture_output=True, text=True, timeout=30)
    assert p.returncode == 1 and f"--reload-dir {sample_trie}: not a directory" in p.stderr.splitlines()[-1]


def test_a_trie_overwritten_in_place_is_named_as_the_server_dies(sample_trie: Path, tmp_path: Path) -> None:
    """cp (or >) over a mapped trie cuts the pages the server maps: the next read faults (SIGBUS). The server
    cannot go on, but its last log line names the file, says why and what to do, and it dies by the same signal."""
    live = tmp_path / "c.ngt"
    shutil.copy(sample_trie, live)
    s = ServerProcess([sample_trie, live])  # two mappings: the line names the one that faulted
    try:
        with open(live, "r+b") as f:  # in place: the same inode, cut
            f.truncate(4096)
        with pytest.raises(grpc.RpcError):
            s.stub().TopK(pb.TopKRequest(index="c", context=[3000], k=300), timeout=10)
        assert s.proc.wait(timeout=30) == -signal.SIGBUS
    finally:
        s.kill()
    fatal = [e for e in s.events if e.get("event") == "trie_file_changed"]
    assert fatal and fatal[0]["level"] == "fatal" and "(mv)" in fatal[0]["error"], s.events[-3:]
    assert fatal[0]["file"] == str(live.resolve())


# ---- row 12: memory after large replies ------------------------------------------------------------

def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(x.split()[1]) * 1024 for x in f if x.startswith("VmRSS:"))


def test_memory_returns_after_large_replies(sample_trie: Path) -> None:
    """Row 12: eight concurrent replies of about 40 MB; afterwards the
    server's resident memory is back within 64 MB of before them."""
    req = pb.ProposeTreeRequest(
        contexts=[pb.ProposeInput(context=[5 + i % 300]) for i in range(4000)],
        params=pb.ProposeParams(max_nodes=1200, max_depth=64, max_branch=2, min_prob=0.0))
    with ServerProcess([sample_trie], "--threads", "2", "--max-queue-wait-ms", "600000") as s:
        stub = s.stub()
        stub.ProposeTree(pb.ProposeTreeRequest(contexts=[pb.ProposeInput(context=[5])]), timeout=30)
        before = _rss(s.proc.pid)
        with futures.ThreadPoolExecutor(8) as pool:
            sizes = list(pool.map(lambda _: stub.ProposeTree(req, timeout=300).ByteSize(), range(8)))
        time.sleep(0.5)
        after = _rss(s.proc.pid)
    assert min(sizes) > 30 << 20, sizes
    assert after - before < 64 << 20, (before >> 20, after >> 20)


def test_deprecated_flags_still_work_and_say_so(live_dir: Path) -> None:
    """--max-inflight N is --max-queue N less --threads; --admin is --admin-port 0; each says so once, as JSON."""
    with ServerProcess([live_dir / "live.ngt"], "--threads", "2", "--max-inflight", "10", "--admin") as s:
        assert s.listening["max_queue"] == 8 and s.listening["admin_port"] > 0
        assert _admin(s).Reload(pb.ReloadRequest(), timeout=30).index == "live"
    warned = [ev for ev in s.events if ev.get("event") == "deprecated_flag"]
    assert [w["flag"] for w in warned] == ["--max-inflight", "--admin"], warned
    assert "--max-queue" in warned[0]["use"] and "--admin-port" in warned[1]["use"]
