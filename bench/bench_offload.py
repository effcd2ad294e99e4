"""What a GPU worker pays to get its draft trees: the offload, part by part.

    python bench/bench_offload.py [--device cpu|cuda] [--trie T.ngt] [--batches 1,4,16,64]
                                  [--reps 300] [--out bench/results/offload.json]

One host (ngram-serve-native) on 127.0.0.1 and, in this process, lattices
made from DART's golden ones (../shared/golden/tree_sample.npz: the drafter's
top-25 of 8 positions and the prompts): logits over a 32,000-id draft
vocabulary whose top-25 are the golden candidates (softmax = their golden
probabilities), mapped to the target's ids by d2t, as DART's drafter does.
For each batch size B, every mode below runs once per round, the rounds
interleaved (A, B, C, A, B, C, ...) so that warm-up and the machine's noise
fall on all of them alike:

  floor            an empty PruneTree (no lattices) from Python: grpcio, and
                   the native grpc++ client where built
  ngram_client     NgramClient.prune_batch, the requests built beforehand
  in_process       NgramIndex.prune_batch of the same lattices (the search alone)
  remote_TRANSPORT RemotePruner.prune_batch: top-k (device work and the copy to
                   the host), encode, call, decode, tensors, and the whole call
  local            LocalPruner.prune_batch: top-k, search, tensors, whole call
  local_eager      (on a GPU) local with cuda_graphs=False: the top-k kernels
                   launched one by one instead of replayed as a CUDA graph

Medians and p99 in milliseconds; the targets of issue 27 checked from the
medians of this one run. Prints a table and writes JSON. Not part of the
test run.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import grpc  # noqa: E402

from bench_dart import Host, build_trie  # noqa: E402
from dart_client.pruner import LocalPruner, RemotePruner  # noqa: E402
from ngram_service import NgramIndex  # noqa: E402
from ngram_service.client import NgramClient  # noqa: E402

# ../shared beside the checkout, or NGRAM_SHARED (as the tests read it)
GOLDEN = Path(os.environ.get("NGRAM_SHARED") or REPO.parent / "shared") / "golden"
DRAFT_VOCAB = 32000


def golden_inputs(device: torch.device, draft_vocab: int) -> dict[str, Any]:
    """The golden lattices as drafter logits [200, 8, draft_vocab] with a d2t
    map, their prompts, and the search parameters they were pruned with."""
    z = np.load(GOLDEN / "tree_sample.npz")
    off = z["prompt_offsets"]
    toks, probs = z["topk_tokens"].astype(np.int64), z["topk_probs"]
    targets = np.unique(toks)
    if len(targets) > draft_vocab:
        sys.exit(f"--draft-vocab {draft_vocab}: the golden lattices hold {len(targets)} distinct ids")
    draft_of = {int(t): i for i, t in enumerate(targets)}
    d2t = np.zeros(draft_vocab, dtype=np.int64)
    d2t[:len(targets)] = targets - np.arange(len(targets))
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(toks.shape[0], toks.shape[1], draft_vocab, generator=g) - 30.0
    draft_ids = torch.from_numpy(np.vectorize(draft_of.get)(toks))
    logits.scatter_(2, draft_ids, torch.from_numpy(np.log(np.maximum(probs, 1e-30))))
    params = dict(beam_width=int(z["beam_width"]), max_nodes=int(z["remain_total"]),
                  ngram_weight=float(z["ngram_weight"]))
    prompts = [z["prompt_flat"][off[i]:off[i + 1]].astype(np.int64).tolist() for i in range(len(off) - 1)]
    return {"logits": logits.to(device), "d2t": torch.from_numpy(d2t).to(device), "prompts": prompts,
            "params": params, "topk": toks.shape[2]}


def ms(xs: list[float]) -> dict[str, float]:
    a = np.asarray(xs) * 1e3
    return {"median": round(float(np.median(a)), 4), "p99": round(float(np.percentile(a, 99)), 4)}


def run_batch(b: int, inp: dict[str, Any], modes: dict[str, Callable[[int], dict[str, float]]], reps: int
              ) -> dict[str, dict[str, dict[str, float]]]:
    """Every mode once per round, rounds interleaved; parts per mode."""
    samples: dict[str, dict[str, list[float]]] = {m: {} for m in modes}
    n = len(inp["prompts"])
    for r in range(reps + 5):
        start = (r * b) % n
        for name, fn in modes.items():
            parts = fn(start)
            if r >= 5:  # the first rounds warm up
                for k, v in parts.items():
                    samples[name].setdefault(k, []).append(v)
    return {m: {k: ms(v) for k, v in parts.items()} for m, parts in samples.items()}


def modes_for(b: int, inp: dict[str, Any], host: str, idx: NgramIndex,
              pruners: dict[str, Any], clients: dict[str, NgramClient]) -> dict[str, Callable[[int], dict[str, float]]]:
    logits, d2t, prompts, params = inp["logits"], inp["d2t"], inp["prompts"], inp["params"]
    n = len(prompts)

    def rows(start: int) -> list[int]:
        return [(start + i) % n for i in range(b)]

    # The lattices each request of the engine and NgramClient gets: the pruner's own fit of them.
    z = np.load(GOLDEN / "tree_sample.npz")
    reqs = [(np.asarray(prompts[i][-(idx.order - 1):]), z["topk_tokens"][i], z["topk_probs"][i]) for i in range(n)]
    reqs = [(p, t.astype(np.int64), pr) for p, t, pr in reqs]
    sync = torch.cuda.synchronize if logits.device.type == "cuda" else (lambda: None)
    modes: dict[str, Callable[[int], dict[str, float]]] = {}

    def floor(client: NgramClient, head: bytes) -> Callable[[int], dict[str, float]]:
        def run(_start: int) -> dict[str, float]:
            t = time.perf_counter()
            client.prune_tree_bytes(head, timeout=5.0)
            return {"call": time.perf_counter() - t}
        return run

    for tname, c in clients.items():
        modes[f"floor_{tname}"] = floor(c, c.prune_tree_head(params))

    def ngram_client(start: int) -> dict[str, float]:
        batch = [reqs[i] for i in rows(start)]
        t = time.perf_counter()
        clients["python"].prune_batch(batch, timeout=5.0, **params)
        return {"call": time.perf_counter() - t}
    modes["ngram_client"] = ngram_client

    def in_process(start: int) -> dict[str, float]:
        batch = [reqs[i] for i in rows(start)]
        t = time.perf_counter()
        idx.prune_batch(batch, **params)
        return {"search": time.perf_counter() - t}
    modes["in_process"] = in_process

    def pruner_mode(pr: Any, parts: tuple[str, ...]) -> Callable[[int], dict[str, float]]:
        def run(start: int) -> dict[str, float]:
            sel = rows(start)
            lg = logits[sel]
            toks = [prompts[i] for i in sel]
            sync()
            t = time.perf_counter()
            pr.prune_batch(lg, d2t, toks)
            sync()
            whole = time.perf_counter() - t
            tm = pr.timing
            out = {p: getattr(tm, p) for p in parts}
            out["whole"] = whole
            return out
        return run

    for name, pr in pruners.items():
        parts = ("topk", "encode", "call", "decode", "transport", "tensors") if name.startswith("remote") \
            else ("topk", "search", "tensors")
        modes[name] = pruner_mode(pr, parts)
    return modes


def targets(res: dict[str, Any], remote: str) -> list[dict[str, Any]]:
    """Issue 27's CPU targets, from the medians of this run."""
    out = []
    by_b = {r["batch"]: r["modes"] for r in res["batches"]}
    floor = f"floor_{remote.removeprefix('remote_')}"
    if 1 in by_b:
        m = by_b[1]
        limit = m[floor]["call"]["median"] + m["in_process"]["search"]["median"] + 0.05
        out.append({"target": f"{remote} transport at B=1 <= floor + in-process search + 0.05 ms",
                    "value_ms": m[remote]["transport"]["median"], "limit_ms": round(limit, 4)})
    if 16 in by_b:
        m = by_b[16]
        out.append({"target": f"{remote} tree tensors at B=16 <= 0.1 ms",
                    "value_ms": m[remote]["tensors"]["median"], "limit_ms": 0.1})
        limit = 1.3 * (m[floor]["call"]["median"] + m["in_process"]["search"]["median"] + m[remote]["topk"]["median"])
        out.append({"target": f"{remote} whole offload at B=16 <= 1.3 x (floor + in-process search + top-k)",
                    "value_ms": m[remote]["whole"]["median"], "limit_ms": round(limit, 4)})
    for t in out:
        t["met"] = t["value_ms"] <= t["limit_ms"]
    return out


def table(res: dict[str, Any]) -> str:
    lines = [f"{'B':>3}  {'mode':<16} " + "  ".join(f"{p:>15}" for p in
                                                     ("topk", "encode", "call", "decode", "search", "tensors", "whole"))]
    for r in res["batches"]:
        for mode, parts in r["modes"].items():
            cells = []
            for p in ("topk", "encode", "call", "decode", "search", "tensors", "whole"):
                v = parts.get(p)
                cells.append(f"{v['median']:7.3f}/{v['p99']:7.3f}" if v else f"{'-':>15}")
            lines.append(f"{r['batch']:>3}  {mode:<16} " + "  ".join(cells))
    lines.append("milliseconds, median/p99")
    for t in res["targets"]:
        lines.append(f"{'met' if t['met'] else 'MISSED':<7}{t['target']}: {t['value_ms']:.3f} ms (limit "
                     f"{t['limit_ms']:.3f} ms)")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--trie", type=Path, help="the host's trie (default: DART's sample trie converted, as bench_dart)")
    ap.add_argument("--batches", default="1,4,16,64")
    ap.add_argument("--reps", type=int, default=300, help="rounds per batch size")
    ap.add_argument("--draft-vocab", type=int, default=DRAFT_VOCAB)
    ap.add_argument("--host-threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "offload.json")
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: torch sees no GPU")
    device = torch.device(args.device)
    work = Path(tempfile.mkdtemp(prefix="bench-offload-"))
    trie, trie_note = build_trie(argparse.Namespace(trie=args.trie), 151669, work)
    inp = golden_inputs(device, args.draft_vocab)
    idx = NgramIndex.open(trie)
    host = Host(trie, args.host_threads)
    params = inp["params"]
    try:
        clients = {"python": NgramClient(host.target, timeout=5.0, with_scores=False, retry_attempts=1)}
        transports = ["python"]
        try:
            clients["native"] = NgramClient(host.target, timeout=5.0, with_scores=False, retry_attempts=1,
                                            transport="native")
            transports.append("native")
        except ImportError as e:
            print(f"native client not available here: {e}", file=sys.stderr)
        for c in clients.values():
            c.wait_ready()
        pruners: dict[str, Any] = {f"remote_{t}": RemotePruner(host.target, deadline=5.0, transport=t,
                                                               topk=inp["topk"], **params) for t in transports}
        pruners["local"] = LocalPruner(idx, topk=inp["topk"], **params)
        if device.type == "cuda":
            pruners["local_eager"] = LocalPruner(idx, topk=inp["topk"], cuda_graphs=False, **params)
        res: dict[str, Any] = {
            "device": str(device), "gpu": torch.cuda.get_device_name() if device.type == "cuda" else None,
            "trie": str(trie), "trie_note": trie_note, "host_threads": args.host_threads, "cpus": os.cpu_count(),
            "python": platform.python_version(), "torch": torch.__version__, "grpcio": grpc.__version__,
            "draft_vocab": args.draft_vocab, "reps": args.reps, "unit": "ms", "batches": [],
        }
        for b in (int(x) for x in args.batches.split(",")):
            modes = modes_for(b, inp, host.target, idx, pruners, clients)
            res["batches"].append({"batch": b, "modes": run_batch(b, inp, modes, args.reps)})
            print(f"B={b} done", file=sys.stderr)
        res["targets"] = [t for r in pruners if r.startswith("remote") for t in targets(res, r)]
        for p in pruners.values():
            if hasattr(p, "close"):
                p.close()
        for c in clients.values():
            c.close()
    finally:
        host.stop()
    print(table(res))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
