"""One trie host under overload: what the callers it admits get, and how
fast it refuses the rest.

    python bench/bench_overload.py [--trie T.ngt] [--threads 1 2] [--loads 1 2 4 8]
                                   [--seconds 4] [--out bench/results/overload.json]

For each --threads T, one real ngram-serve-native on loopback with its
default admission (--max-queue 8 x T, --max-queue-wait-ms 500) and
--log-requests (each call's server-side time, queue wait and status):

  1. capacity: 4 x T closed-loop callers (native transport) for --seconds:
     calls/s answered OK, of a fixed mix of PruneTree (4 lattices of 8 levels
     x 16 candidates, beam 20), ProposeTree (4 sequences of 256 tokens) and
     ConditionalProbs (256 queries x 16 candidates) x --scale (default 16:
     a few ms a call, so that a Python load generator can offer 8 x what
     the host serves);
  2. for each transport (grpcio futures, the grpc++ native client) and each
     load L in --loads: calls arrive open-loop (Poisson, as a cluster's
     workers send whatever the host's latency) at L x capacity for
     --seconds: throughput (OK calls/s), admitted p50/p99 (client side),
     queue wait p50/p99 and rejection latency p50/p99 (server side, from the
     call log), the share refused, and the cores the server used (from
     /proc: on a machine the generator shares, what is left to the server).

Targets (issue 39), as ratios within one run: at 4x, admitted p99 <= 3 x the
p99 at 1x and throughput >= 0.9 x that at 1x; rejections answered within
5 ms (p99, server side). The load generator shares the machine with the
server: on 2 cores, T = 2 competes with it. Prints a table and writes JSON.
Not part of the test run.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import queue
import random
import subprocess
import sys
import tempfile
import threading
import time
from concurrent import futures
from pathlib import Path
from typing import Any, Callable

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import grpc  # noqa: E402

from ngram_service import NgramIndex  # noqa: E402
from ngram_service.proto.ngram.v1 import ngram_pb2 as pb  # noqa: E402
from ngram_service.serve import find_native_binary  # noqa: E402

METHODS = ("PruneTree", "ProposeTree", "ConditionalProbs")
OK, EXHAUSTED = grpc.StatusCode.OK.value[0], grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]


def cpu_seconds(pid: int) -> float:
    """The process's user + system CPU time."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(xs, q)) if xs else float("nan")


def sample_trie() -> Path:
    """The bundled sample corpus, order 3, built once into the temp folder."""
    from indexer.cli import SAMPLE_DIR
    from indexer.pipeline import BuildConfig, build

    out = Path(tempfile.gettempdir()) / "bench_overload_sample.ngt"
    if not out.exists():
        build(BuildConfig(inputs=[str(SAMPLE_DIR / "corpus")], out=str(out),
                          tokenizer=str(SAMPLE_DIR / "tokenizer.json"), order=3), progress=lambda _m: None)
    return out


def requests(trie: Path, scale: int, seed: int = 0) -> dict[str, list[bytes]]:
    """Eight serialized requests of each method, made from the trie's own
    continuations so that lookups hit."""
    idx = NgramIndex.open(trie)
    rng = np.random.default_rng(seed)
    frequent = idx.topk([], 64).tokens

    def sequence(n: int) -> list[int]:
        seq = [int(rng.choice(frequent))]
        while len(seq) < n:
            nxt = idx.topk(seq[-2:], 8).tokens
            seq.append(int(rng.choice(nxt)) if len(nxt) else int(rng.choice(frequent)))
        return seq

    out: dict[str, list[bytes]] = {m: [] for m in METHODS}
    for _ in range(8):
        inputs = []
        for _ in range(4 * scale):
            prefix = sequence(32)
            levels = [rng.choice(idx.vocab_size, 16, replace=False) for _ in range(8)]
            probs = np.sort(rng.random((8, 16)).astype(np.float32), axis=1)[:, ::-1]
            inputs.append(pb.PruneInput(prefix=prefix, level_sizes=[16] * 8,
                                        tokens=np.concatenate(levels).tolist(), probs=probs.ravel().tolist()))
        out["PruneTree"].append(pb.PruneTreeRequest(inputs=inputs, params=pb.PruneParams(
            beam_width=20, max_nodes=60)).SerializeToString())
        out["ProposeTree"].append(pb.ProposeTreeRequest(
            contexts=[pb.ProposeInput(context=sequence(256)) for _ in range(4 * scale)]).SerializeToString())
        ctx = np.array([sequence(2) for _ in range(256 * scale)])
        cand = rng.integers(0, idx.vocab_size, (256 * scale, 16))
        out["ConditionalProbs"].append(pb.ConditionalProbsRequest(
            context_len=2, num_candidates=16, contexts=ctx.ravel().tolist(),
            candidates=cand.ravel().tolist()).SerializeToString())
    return out


class Host:
    """ngram-serve-native with --log-requests; its call log kept."""

    def __init__(self, trie: Path, threads: int) -> None:
        binary = find_native_binary()
        if binary is None:
            sys.exit("ngram-serve-native was not built")
        self.proc = subprocess.Popen([str(binary), str(trie), "--host", "127.0.0.1", "--port", "0",
                                      "--threads", str(threads), "--log-requests"],
                                     stderr=subprocess.PIPE, text=True)
        self.calls: list[dict[str, Any]] = []
        ready: queue.Queue = queue.Queue()

        def read() -> None:
            assert self.proc.stderr is not None
            for line in self.proc.stderr:
                ev = json.loads(line)
                if ev["event"] == "call":
                    self.calls.append(ev)
                elif ev["event"] in ("listening", "startup_failed"):
                    ready.put(ev)
            ready.put(None)

        threading.Thread(target=read, daemon=True).start()
        ev = ready.get(timeout=60)
        if not ev or ev["event"] != "listening":
            sys.exit(f"server failed: {ev}")
        self.target = f"127.0.0.1:{ev['port']}"
        self.listening = ev

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


class Caller:
    """One transport: `call(method, body, done)` starts a call and, when it
    ends, runs done(status code) on some thread."""

    def __init__(self, target: str, transport: str, workers: int) -> None:
        self.transport = transport
        opts = [("grpc.max_receive_message_length", 64 << 20), ("grpc.enable_retries", 0)]
        if transport == "grpcio":
            self.channel = grpc.insecure_channel(target, options=opts)
            grpc.channel_ready_future(self.channel).result(timeout=30)
            self.methods = {m: self.channel.unary_unary(f"/ngram.v1.NgramService/{m}") for m in METHODS}
        else:
            from ngram_service.native_client import NativeChannels, method_path

            self.native = {m: NativeChannels([target], opts, None, method_path(m)) for m in METHODS}
            self.pool = futures.ThreadPoolExecutor(workers)

    def call(self, method: str, body: bytes, done: Callable[[int], None]) -> None:
        if self.transport == "grpcio":
            f = self.methods[method].future(body, timeout=10)
            f.add_done_callback(lambda f: done(f.code().value[0]))
        else:
            def run() -> None:
                try:
                    self.native[method].call(body, 10.0)
                    done(OK)
                except grpc.RpcError as e:
                    done(e.code().value[0])
            self.pool.submit(run)

    def close(self) -> None:
        if self.transport == "grpcio":
            self.channel.close()
        else:
            self.pool.shutdown(wait=True)


def closed_loop(caller: Caller, reqs: dict[str, list[bytes]], callers: int, seconds: float) -> float:
    """Calls answered OK per second with `callers` calls always outstanding."""
    stop = time.monotonic() + seconds
    ok = [0]
    lock = threading.Lock()
    done_all = threading.Event()
    live = [callers]
    rng = random.Random(1)

    def next_call() -> None:
        m = METHODS[rng.randrange(3)]
        caller.call(m, reqs[m][rng.randrange(8)], finished)

    def finished(code: int) -> None:
        with lock:
            ok[0] += code == OK
            if time.monotonic() >= stop:
                live[0] -= 1
                if live[0] == 0:
                    done_all.set()
                return
        next_call()

    t0 = time.monotonic()
    for _ in range(callers):
        next_call()
    done_all.wait(seconds + 30)
    return ok[0] / (time.monotonic() - t0)


def open_loop(caller: Caller, reqs: dict[str, list[bytes]], rate: float, seconds: float) -> dict[str, Any]:
    """Poisson arrivals at `rate` calls/s for `seconds`; each call's client
    latency and status."""
    rng = random.Random(2)
    results: list[tuple[int, float]] = []
    lock = threading.Lock()
    t_start = time.monotonic()
    t_next = t_start
    sent = 0
    while True:
        t_next += rng.expovariate(rate)
        if t_next - t_start > seconds:
            break
        delay = t_next - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        m = METHODS[rng.randrange(3)]
        t0 = time.monotonic()

        def done(code: int, t0: float = t0) -> None:
            with lock:
                results.append((code, time.monotonic() - t0))
        caller.call(m, reqs[m][rng.randrange(8)], done)
        sent += 1
    deadline = time.monotonic() + 30
    while len(results) < sent and time.monotonic() < deadline:
        time.sleep(0.01)
    elapsed = time.monotonic() - t_start
    ok_lat = [x for c, x in results if c == OK]
    return {"offered_per_s": sent / seconds, "sent": sent, "answered": len(results),
            "ok_per_s": len(ok_lat) / elapsed,
            "admitted_p50_ms": pct(ok_lat, 50) * 1e3, "admitted_p99_ms": pct(ok_lat, 99) * 1e3,
            "refused_share": sum(c == EXHAUSTED for c, _ in results) / max(1, len(results)),
            "other_errors": sum(c not in (OK, EXHAUSTED) for c, _ in results)}


def server_side(calls: list[dict[str, Any]]) -> dict[str, float]:
    """Queue wait of the calls run, and the time to answer the calls refused
    at admission (a full or stalled queue) or shed after waiting."""
    ran = [c.get("queue_seconds", 0.0) for c in calls if c["code"] != EXHAUSTED]
    at_once = [c["seconds"] for c in calls if c["code"] == EXHAUSTED and c.get("queue_seconds", 0.0) == 0]
    shed = [c["seconds"] for c in calls if c["code"] == EXHAUSTED and c.get("queue_seconds", 0.0) > 0]
    return {"queue_wait_p50_ms": pct(ran, 50) * 1e3, "queue_wait_p99_ms": pct(ran, 99) * 1e3,
            "refused_at_once": len(at_once), "refusal_p50_ms": pct(at_once, 50) * 1e3,
            "refusal_p99_ms": pct(at_once, 99) * 1e3, "shed_after_waiting": len(shed)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trie", type=Path, help="a trie file (default: the bundled sample corpus, built once)")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--loads", type=float, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--transports", nargs="+", default=["grpcio", "native"], choices=["grpcio", "native"])
    ap.add_argument("--seconds", type=float, default=4.0, help="duration of each load level")
    ap.add_argument("--scale", type=int, default=16, help="requests' size: lattices, sequences, queries / 4, 4, 256")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "overload.json")
    args = ap.parse_args()
    trie = args.trie or sample_trie()
    reqs = requests(trie, args.scale)
    res: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
                           "trie": str(trie), "seconds": args.seconds, "runs": []}
    print(f"{'T':>2} {'transport':>9} {'load':>5} {'offered/s':>9} {'ok/s':>7} {'p50 ms':>7} {'p99 ms':>7} "
          f"{'wait p99':>8} {'refused':>7} {'refuse p99 ms':>13} {'server cores':>12}")
    for threads in args.threads:
        host = Host(trie, threads)
        try:
            cap_caller = Caller(host.target, "native", 8 * threads)
            closed_loop(cap_caller, reqs, 4 * threads, 1.0)  # warm-up
            capacity = closed_loop(cap_caller, reqs, 4 * threads, args.seconds)
            cap_caller.close()
            print(f"{threads:>2} capacity: {capacity:.0f} calls/s")
            for transport in args.transports:
                caller = Caller(host.target, transport, 256)
                rows = []
                for load in args.loads:
                    n = len(host.calls)
                    cpu0, t0 = cpu_seconds(host.proc.pid), time.monotonic()
                    row = {"threads": threads, "transport": transport, "load": load, "capacity_per_s": capacity,
                           **open_loop(caller, reqs, load * capacity, args.seconds)}
                    row["server_cores"] = (cpu_seconds(host.proc.pid) - cpu0) / (time.monotonic() - t0)
                    time.sleep(0.3)  # the call log catches up
                    row.update(server_side(host.calls[n:]))
                    rows.append(row)
                    print(f"{threads:>2} {transport:>9} {load:>4.0f}x {row['offered_per_s']:>9.0f} "
                          f"{row['ok_per_s']:>7.0f} {row['admitted_p50_ms']:>7.2f} {row['admitted_p99_ms']:>7.2f} "
                          f"{row['queue_wait_p99_ms']:>8.2f} {row['refused_share']:>7.1%} "
                          f"{row['refusal_p99_ms']:>13.3f} {row['server_cores']:>12.2f}")
                caller.close()
                base = next((r for r in rows if r["load"] == 1), None)
                at4 = next((r for r in rows if r["load"] == 4), None)
                if base and at4:
                    check = {"threads": threads, "transport": transport,
                             "p99_ratio_4x": at4["admitted_p99_ms"] / base["admitted_p99_ms"],
                             "throughput_ratio_4x": at4["ok_per_s"] / base["ok_per_s"],
                             "refusal_p99_ms_4x": at4["refusal_p99_ms"]}
                    check["met"] = (check["p99_ratio_4x"] <= 3 and check["throughput_ratio_4x"] >= 0.9
                                    and check["refusal_p99_ms_4x"] <= 5)
                    res.setdefault("targets", []).append(check)
                    print(f"   4x vs 1x: p99 {check['p99_ratio_4x']:.2f}x (<= 3), throughput "
                          f"{check['throughput_ratio_4x']:.2f}x (>= 0.9), refusals p99 "
                          f"{check['refusal_p99_ms_4x']:.3f} ms (<= 5): {'met' if check['met'] else 'NOT met'}")
                res["runs"].extend(rows)
        finally:
            host.stop()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
