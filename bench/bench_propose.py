"""Proposals per second per core, in process: NgramIndex.propose on contexts
cut from held-out documents, one thread, for each trie and representation.

    python bench/bench_propose.py --text HELDOUT.jsonl --tokenizer TOK TRIE... \\
        [--contexts 3000] [--passes 5] [--max-nodes 64] [--settings '[{}, {"max_branch": 16}]']
        [--out bench/results/propose.json]

Each context is the document up to a uniformly drawn position (at most its
last 2,048 tokens). A pass proposes one tree for every context; the first
pass meets runs of children for the first time (a cold trie: each run's
bound is computed and kept, cpp/engine/run_bounds.h, and each long run is
read whole once and its list kept, cpp/engine/run_top_cache.h), later
passes find them kept (warm: a long-running host's steady state). Times are this
thread's CPU time (time.thread_time), so that other work on a shared machine
inflates them less; the passes of every (trie, mode, setting) are
interleaved, so that settings compare as ratios within one run.
"batched/s" is the same contexts through propose_batch on one thread, --batch
contexts a call (what a host or LocalProposer does with a batch): the
per-call cost of Python and the bindings shared. Prints
a table and writes JSON; the warm median is what issue 31's goal (20,000
trees of 64 nodes per second per core) is checked against. Not part of the
test run. bench/heldout_split.py makes held-out documents and a training
part to build the tries from.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ngram_eval.synthetic import load_documents  # noqa: E402
from ngram_service import NgramIndex  # noqa: E402

GOAL_TREES_PER_SECOND = 20_000


def contexts(docs: list[np.ndarray], n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        d = docs[int(rng.integers(len(docs)))]
        end = int(rng.integers(1, len(d)))
        out.append(np.ascontiguousarray(d[max(0, end - 2048):end]))
    return out


def parse_settings(ap: argparse.ArgumentParser, text: str) -> list[dict]:
    """--settings: a JSON list of propose keyword dicts, else a usage error."""
    try:
        settings = json.loads(text)
    except json.JSONDecodeError as e:
        ap.error(f"--settings: not JSON ({e})")
    if not isinstance(settings, list) or not all(isinstance(x, dict) for x in settings):
        ap.error(f"--settings: a JSON list of objects, got {text!r}")
    return settings


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tries", nargs="+")
    ap.add_argument("--text", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--contexts", type=int, default=3000)
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--max-nodes", type=int, default=64)
    ap.add_argument("--modes", default="mmap,ram")
    ap.add_argument("--batch", type=int, default=64,
                    help="also time propose_batch on one thread, this many contexts a call (0: not)")
    ap.add_argument("--settings", default="[{}]",
                    help="JSON list of propose keyword dicts, each timed beside the others ({}: the defaults)")
    ap.add_argument("--out", default="bench/results/propose.json")
    a = ap.parse_args()
    settings = parse_settings(ap, a.settings)
    docs, _ = load_documents([a.text], a.tokenizer)
    ctxs = contexts(docs, a.contexts)
    opened = {(t, m): NgramIndex.open(t, mode=m) for t in a.tries for m in a.modes.split(",")}
    runs = {(t, m, i): index for (t, m), index in opened.items() for i in range(len(settings))}
    times: dict[tuple[str, str, int], list[float]] = {k: [] for k in runs}
    batched: dict[tuple[str, str, int], list[float]] = {k: [] for k in runs}
    nodes: dict[tuple[str, str, int], int] = {}
    chunks = [ctxs[i:i + a.batch] for i in range(0, len(ctxs), a.batch)] if a.batch else []
    for p in range(a.passes):
        for key, index in runs.items():
            params = {"max_nodes": a.max_nodes, **settings[key[2]]}
            t0 = time.thread_time()
            made = 0
            for c in ctxs:
                made += len(index.propose(c, **params).tokens) - 1
            times[key].append(time.thread_time() - t0)
            nodes[key] = made
            if a.batch:  # the engine's thread runs in this one (threads=1): its time is this thread's
                t0 = time.thread_time()
                for chunk in chunks:
                    index.propose_batch(chunk, threads=1, **params)
                batched[key].append(time.thread_time() - t0)
        print(f"pass {p + 1}/{a.passes} done", file=sys.stderr)
    rows = []
    print(f"{len(ctxs)} contexts from {len(docs)} documents, {a.max_nodes} nodes, one thread, CPU time")
    print(f"{'trie':<24} {'mode':<5} {'order':>5} {'setting':<22} {'cold trees/s':>12} {'warm trees/s':>12} "
          f"{'us/tree':>8} {'batched/s':>10} {'nodes/tree':>10}")
    for (trie, mode, i), ts in times.items():
        cold = len(ctxs) / ts[0]
        warm = len(ctxs) / statistics.median(ts[1:]) if len(ts) > 1 else cold
        bt = batched[(trie, mode, i)]
        warm_batched = len(ctxs) / statistics.median(bt[1:] if len(bt) > 1 else bt) if bt else None
        row = {"trie": trie, "mode": mode, "order": runs[(trie, mode, i)].order, "setting": settings[i],
               "cold_trees_per_second": cold,
               "warm_trees_per_second": warm, "us_per_tree_warm": 1e6 / warm,
               "warm_batched_trees_per_second": warm_batched, "batch": a.batch,
               "nodes_per_tree": nodes[(trie, mode, i)] / len(ctxs), "pass_seconds": ts,
               "goal_met": warm >= GOAL_TREES_PER_SECOND}
        rows.append(row)
        label = json.dumps(settings[i], separators=(",", ":"))[1:-1] or "defaults"
        print(f"{Path(trie).name:<24} {mode:<5} {row['order']:>5} {label:<22} {cold:>12.0f} {warm:>12.0f} "
              f"{row['us_per_tree_warm']:>8.1f} {warm_batched or 0:>10.0f} {row['nodes_per_tree']:>10.1f}")
    out = {"contexts": len(ctxs), "max_nodes": a.max_nodes, "passes": a.passes, "rows": rows,
           "goal_trees_per_second": GOAL_TREES_PER_SECOND, "machine": platform.processor() or platform.machine(),
           "load_average": os.getloadavg(), "command": " ".join(sys.argv)}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(a.out).with_suffix(".tmp")
    tmp.write_text(json.dumps(out, indent=2) + "\n")
    os.replace(tmp, a.out)


if __name__ == "__main__":
    main()
