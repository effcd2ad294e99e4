"""Clients balance over the replicas behind one DNS name (a Kubernetes headless Service).

A headless Service is a DNS name with one A record per ready pod; a gRPC
client given ``dns:///name:port`` resolves it and, with the round_robin
policy NgramClient configures, keeps a connection to every address. Here the
name is served by a small DNS server on 127.0.0.1 (the ``dns://HOST:PORT/``
authority form points gRPC's resolver at it; ``dns:///`` would ask the
system's resolver) and resolves to two native servers on 127.0.0.1:P and
127.0.0.2:P, both loopback. One of them is killed (SIGKILL) mid-run: no call
fails.
"""
from __future__ import annotations

import json
import signal
import socket
import struct
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import require_module

grpc = require_module("grpc")

from ngram_service import NgramIndex  # noqa: E402
from ngram_service.client import NgramClient, channel_targets  # noqa: E402
from ngram_service.serve import find_native_binary  # noqa: E402

BINARY = find_native_binary()
needs_native = pytest.mark.skipif(BINARY is None, reason="ngram-serve-native was not built")
NAME = "trie-host.ngram.test"


class DnsServer:
    """Answers A queries for the names it holds (UDP, 127.0.0.1, a free port);
    AAAA and other types get an empty answer, unknown names NXDOMAIN."""

    def __init__(self, records: dict[str, list[str]]) -> None:
        self.records = records
        self.queries: list[tuple[str, int]] = []
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                data, peer = self.sock.recvfrom(4096)
            except OSError:
                return
            qid, flags = struct.unpack(">HH", data[:4])
            i, labels = 12, []
            while data[i]:
                labels.append(data[i + 1:i + 1 + data[i]].decode())
                i += 1 + data[i]
            qtype = struct.unpack(">H", data[i + 1:i + 3])[0]
            question = data[12:i + 5]
            name = ".".join(labels).lower()
            self.queries.append((name, qtype))
            ips = self.records.get(name)
            answers = [struct.pack(">HHHIH", 0xC00C, 1, 1, 1, 4) + socket.inet_aton(ip)
                       for ip in (ips if ips is not None and qtype == 1 else [])]
            # QR, AA, RD copied, RA; rcode 3 (NXDOMAIN) for an unknown name.
            out_flags = 0x8480 | (flags & 0x0100) | (0 if ips is not None else 3)
            header = struct.pack(">HHHHHH", qid, out_flags, 1, len(answers), 0, 0)
            self.sock.sendto(header + question + b"".join(answers), peer)

    def close(self) -> None:
        self.sock.close()


class Replica:
    """ngram-serve-native on HOST:PORT, one log line per call."""

    def __init__(self, trie: Path, host: str, port: int) -> None:
        self.host = host
        self.proc = subprocess.Popen([str(BINARY), str(trie), "--host", host, "--port", str(port), "--log-requests",
                                      "--threads", "1"], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        self.calls = 0
        self.ready = threading.Event()
        self.exited = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            event = json.loads(line).get("event")
            if event == "listening":
                self.ready.set()
            elif event == "call":
                self.calls += 1
        self.exited.set()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


def _start_pair(trie: Path) -> tuple[Replica, Replica, int]:
    """Two replicas on the same port of 127.0.0.1 and 127.0.0.2 (as two pods share a container port)."""
    for _ in range(20):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        pair = Replica(trie, "127.0.0.1", port), Replica(trie, "127.0.0.2", port)
        for r in pair:
            while not (r.ready.is_set() or r.exited.is_set()):
                time.sleep(0.01)
        if all(r.ready.is_set() for r in pair):
            return pair[0], pair[1], port
        for r in pair:  # the port was taken meanwhile: another one
            r.kill()
    raise RuntimeError("no port free on both 127.0.0.1 and 127.0.0.2")


@pytest.fixture()
def replicas(sample_trie: Path):
    a, b, port = _start_pair(sample_trie)
    dns = DnsServer({NAME: ["127.0.0.1", "127.0.0.2"]})
    try:
        yield a, b, f"dns://127.0.0.1:{dns.port}/{NAME}:{port}", dns
    finally:
        a.kill()
        b.kill()
        dns.close()


def _until(cond: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def test_a_dns_target_is_passed_through() -> None:
    assert channel_targets("dns:///trie-host.ngram.svc.cluster.local:50051") == [
        "dns:///trie-host.ngram.svc.cluster.local:50051"]
    # Several names (not IP literals): one channel each, taken in turn.
    assert channel_targets(["dns:///a:1", "dns:///b:1"]) == ["dns:///a:1", "dns:///b:1"]
    with pytest.raises(ValueError, match="'dns:///a': the name 'a': no port"):
        channel_targets("dns:///a")


@needs_native
def test_dns_target_with_the_system_resolver(replicas, sample_trie: Path) -> None:
    """The literal dns:/// form (the system's resolver: localhost is 127.0.0.1 here)."""
    a, _, target, _ = replicas
    port = target.rsplit(":", 1)[1]
    with NgramClient(f"dns:///localhost:{port}") as client:
        assert client.info() == NgramIndex.open(sample_trie).info()
    _until(lambda: a.calls >= 1, 10, "the call's log line")  # the replica logs it after it answers


@needs_native
def test_client_balances_over_a_name_and_survives_a_killed_replica(replicas, sample_trie: Path) -> None:
    a, b, target, dns = replicas
    idx = NgramIndex.open(sample_trie)
    rng = np.random.default_rng(0)
    batches = [(rng.integers(0, idx.vocab_size, (8, 2)), rng.integers(0, idx.vocab_size, (8, 5))) for _ in range(16)]
    expected = [idx.conditional_probs(c, w) for c, w in batches]
    errors: list[BaseException] = []
    done = {"before": 0, "after": 0}
    killed = threading.Event()
    stop = threading.Event()

    with NgramClient(target, timeout=10) as client:
        def work(seed: int) -> None:
            i = seed
            while not stop.is_set():
                c, w = batches[i % len(batches)]
                try:
                    p, m = client.conditional_probs(c, w)
                    np.testing.assert_array_equal(p, expected[i % len(batches)][0])
                    np.testing.assert_array_equal(m, expected[i % len(batches)][1])
                    done["after" if killed.is_set() else "before"] += 1
                except BaseException as e:  # noqa: BLE001 (collected: the test fails on any)
                    errors.append(e)
                i += 1

        threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
        for t in threads:
            t.start()
        try:
            _until(lambda: a.calls >= 50 and b.calls >= 50, 60, "calls on both replicas")
            b.kill()
            killed.set()
            a_at_kill = a.calls
            _until(lambda: a.calls >= a_at_kill + 200 or errors, 60, "calls after the kill")
        finally:
            stop.set()
            for t in threads:
                t.join()
    assert not errors, errors[:3]
    assert done["before"] >= 100 and done["after"] >= 150
    assert (NAME, 1) in dns.queries  # the name was resolved by the test's DNS server, not bypassed


@needs_native
def test_remote_pruner_over_a_name_with_one_retry_never_falls_back(replicas, sample_trie: Path) -> None:
    torch = require_module("torch")
    from dart_client.pruner import LocalPruner, RemotePruner

    a, b, target, _ = replicas
    local = LocalPruner(sample_trie)
    gen = torch.Generator().manual_seed(0)
    steps = [(torch.randn(5, 300, generator=gen), list(range(100 + s, 120 + s))) for s in range(8)]
    want = [local(lg, None, toks) for lg, toks in steps]
    # One retry: a call caught on the killed replica is sent again, to the other.
    with RemotePruner(target, deadline=30.0, client_options={"retry_attempts": 2}) as pr:  # never the limit
        n = 0

        def step() -> None:
            nonlocal n
            lg, toks = steps[n % len(steps)]
            tree = pr(lg, None, toks)
            for f in ("draft_tokens", "retrieve_indices", "tree_mask", "tree_position_ids"):
                assert torch.equal(getattr(tree, f), getattr(want[n % len(steps)], f)), f
            n += 1

        while a.calls < 30 or b.calls < 30:
            step()
        killer = threading.Timer(0.05, b.kill)
        killer.start()
        a_at_kill = a.calls
        while a.calls < a_at_kill + 100:
            step()
        killer.join()
        assert pr.stats.fallbacks == 0 and not pr.stats.errors, pr.stats.as_dict()
        assert pr.stats.remote_ok == n
