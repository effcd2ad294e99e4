"""The gRPC trie host under load: one real server process on loopback.

    python bench/bench_server.py [--trie /tmp/corpus3.ngt] [--out bench/results/server.json]

Measures, on the golden pruning inputs (../shared/golden/tree_sample.npz):
  1. PruneTree, one tree per call, from Python (NgramClient): p50/p99 beside
     in-process pruning (NgramIndex.prune) and an empty call (PruneTree with
     no trees);
  2. PruneTree at 4/16/64 concurrent calls (grpc.aio, requests built once):
     trees/s, p50/p99, server CPU time per tree from /proc;
  3. ConditionalProbs with 1,000 queries a call: queries/s (raw stub and
     NgramClient, which adds numpy <-> protobuf conversion);
  4. server RSS beside the trie file's size.
Prints a table and writes JSON. Not part of the test run.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import grpc  # noqa: E402

from ngram_service import NgramIndex  # noqa: E402
from ngram_service.client import NgramClient, _probs_request  # noqa: E402
from ngram_service.proto.ngram.v1 import ngram_pb2 as pb  # noqa: E402
from ngram_service.proto.ngram.v1 import ngram_pb2_grpc as pb_grpc  # noqa: E402
from ngram_service.serve import find_native_binary  # noqa: E402

GOLDEN = REPO.parent / "shared" / "golden"
CLK = os.sysconf("SC_CLK_TCK")
OPTS = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)]


def start_server(trie: Path, threads: int) -> tuple[subprocess.Popen, int]:
    binary = find_native_binary()
    if binary is None:
        sys.exit("ngram-serve-native was not built")
    p = subprocess.Popen([str(binary), str(trie), "--host", "127.0.0.1", "--port", "0", "--threads", str(threads),
                          "--max-queue", "1024"], stderr=subprocess.PIPE, text=True)
    assert p.stderr is not None
    for line in p.stderr:
        ev = json.loads(line)
        if ev["event"] == "listening":
            return p, ev["port"]
        if ev["event"] == "startup_failed":
            sys.exit(f"server failed: {ev}")
    sys.exit("server exited")


def cpu_seconds(pid: int) -> float:
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / CLK  # utime + stime


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q)) * 1e6  # microseconds


def timed(fn: Any, items: list[Any], passes: int) -> list[float]:
    lat = []
    for _ in range(passes):
        for it in items:
            t = time.perf_counter()
            fn(it)
            lat.append(time.perf_counter() - t)
    return lat


async def concurrent_prune(target: str, reqs: list[pb.PruneTreeRequest], conc: int, seconds: float
                           ) -> tuple[int, list[float], float]:
    async with grpc.aio.insecure_channel(target, options=OPTS) as ch:
        stub = pb_grpc.NgramServiceStub(ch)
        await ch.channel_ready()
        lat: list[float] = []
        stop = time.perf_counter() + seconds

        async def worker(w: int) -> None:
            i = w
            while time.perf_counter() < stop:
                t = time.perf_counter()
                await stub.PruneTree(reqs[i % len(reqs)], timeout=10)
                lat.append(time.perf_counter() - t)
                i += conc

        t0 = time.perf_counter()
        await asyncio.gather(*(worker(w) for w in range(conc)))
        return len(lat), lat, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trie", type=Path, default=Path("/tmp/corpus3.ngt"))
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "server.json")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--seconds", type=float, default=3.0, help="duration of each concurrency level")
    args = ap.parse_args()

    z = np.load(GOLDEN / "tree_sample.npz")
    off = z["prompt_offsets"]
    lattices = [(z["prompt_flat"][off[i]:off[i + 1]], z["topk_tokens"][i], z["topk_probs"][i])
                for i in range(len(off) - 1)]
    params = dict(beam_width=int(z["beam_width"]), max_nodes=int(z["remain_total"]),
                  ngram_weight=float(z["ngram_weight"]), eos_token_id=int(z["eos_token"]))
    idx = NgramIndex.open(args.trie)
    server, port = start_server(args.trie, args.threads)
    target = f"127.0.0.1:{port}"
    res: dict[str, Any] = {
        "trie": str(args.trie), "trie_bytes": args.trie.stat().st_size, "server_threads": args.threads,
        "cpus": os.cpu_count(), "python": platform.python_version(), "grpcio": grpc.__version__,
        "note": "client and server share the machine's cores",
    }
    try:
        with NgramClient(target, timeout=10) as c:
            c.wait_ready()
            for r in lattices[:20]:  # warm up both sides
                c.prune(*r, **params)
                idx.prune(*r, **params)
            # 1. one tree per call
            unary = timed(lambda r: c.prune(*r, **params), lattices, 3)
            local = timed(lambda r: idx.prune(*r, **params), lattices, 3)
            empty_req = pb.PruneTreeRequest()
            stub = pb_grpc.NgramServiceStub(grpc.insecure_channel(target, options=OPTS))
            empty = timed(lambda _r: stub.PruneTree(empty_req, timeout=10), lattices, 3)
            step = [lattices[i:i + 16] for i in range(0, len(lattices), 16)]
            batch16 = timed(lambda b: c.prune_batch(b, **params), step, 3)
            res["prune_one_tree_us"] = {
                name: {"p50": pct(v, 50), "p99": pct(v, 99), "n": len(v)}
                for name, v in [("in_process", local), ("unary_client", unary),
                                ("empty_call", empty), ("batch16_unary_per_call", batch16)]
            }
            # 3. ConditionalProbs, 1,000 queries a call
            q = np.load(GOLDEN / "prob_sample.npz")
            ctx, cand = q["contexts"][:1000], q["candidates"][:1000]
            req = _probs_request("", "", ctx, cand)
            raw = timed(lambda _r: stub.ConditionalProbs(req, timeout=10), list(range(50)), 1)
            cli = timed(lambda _r: c.conditional_probs(ctx, cand), list(range(50)), 1)
            inproc = timed(lambda _r: idx.conditional_probs(ctx, cand), list(range(50)), 1)
            res["conditional_probs_1000"] = {
                name: {"queries_per_s": 1000 / float(np.median(v)), "p50_us": pct(v, 50)}
                for name, v in [("raw_stub", raw), ("ngram_client", cli), ("in_process", inproc)]
            }
        # 2. concurrency
        reqs = []
        pp = pb.PruneParams(beam_width=params["beam_width"], max_nodes=params["max_nodes"],
                            ngram_weight=params["ngram_weight"], eos_token_id=params["eos_token_id"])
        for p, t, pr in lattices:
            inp = pb.PruneInput(prefix=p.tolist(), level_sizes=[t.shape[1]] * t.shape[0],
                                tokens=t.ravel().tolist(), probs=pr.ravel().tolist())
            reqs.append(pb.PruneTreeRequest(params=pp, inputs=[inp], with_scores=True))
        res["prune_concurrent"] = {}
        for conc in (4, 16, 64):
            cpu0 = cpu_seconds(server.pid)
            n, lat, el = asyncio.run(concurrent_prune(target, reqs, conc, args.seconds))
            cpu = cpu_seconds(server.pid) - cpu0
            res["prune_concurrent"][str(conc)] = {
                "trees_per_s": n / el, "p50_us": pct(lat, 50), "p99_us": pct(lat, 99),
                "server_cpu_us_per_tree": cpu / n * 1e6, "calls": n,
            }
        res["server_rss_bytes"] = rss_bytes(server.pid)
    finally:
        server.terminate()
        server.wait(30)

    print(f"trie {res['trie']} ({res['trie_bytes'] / 1e6:.1f} MB), server threads {args.threads}, "
          f"cpus {res['cpus']} (shared with the client)")
    print(f"\n{'PruneTree, one tree per call':<34}{'p50 us':>10}{'p99 us':>10}")
    for k, v in res["prune_one_tree_us"].items():
        print(f"  {k:<32}{v['p50']:>10.1f}{v['p99']:>10.1f}")
    print(f"\n{'PruneTree concurrent calls':<30}{'trees/s':>10}{'p50 us':>10}{'p99 us':>10}{'cpu us/tree':>13}")
    for k, v in res["prune_concurrent"].items():
        print(f"  {k:<28}{v['trees_per_s']:>10.0f}{v['p50_us']:>10.0f}{v['p99_us']:>10.0f}"
              f"{v['server_cpu_us_per_tree']:>13.1f}")
    print(f"\n{'ConditionalProbs, 1000 queries/call':<38}{'queries/s':>12}{'p50 us':>10}")
    for k, v in res["conditional_probs_1000"].items():
        print(f"  {k:<36}{v['queries_per_s']:>12.0f}{v['p50_us']:>10.0f}")
    print(f"\nserver RSS {res['server_rss_bytes'] / 1e6:.1f} MB, trie file {res['trie_bytes'] / 1e6:.1f} MB")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
