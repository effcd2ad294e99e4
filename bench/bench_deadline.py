"""How often `dart-generate --drafter none --target` falls back to prompt lookup, per deadline.

    python bench/bench_deadline.py [--deadlines 5,10,20,50,100] [--rounds 6] [--new-tokens 64]
                                   [--out bench/results/deadline.json]

One host (ngram-serve-native, its default threads) on 127.0.0.1 serving the
bundled sample trie (built here), and dart-generate run as a user runs it:
a fresh process per run, `--random-models --drafter none --target HOST
--deadline-ms D --max-new-tokens N --json`. Every round runs each deadline
once, the deadlines in turn, so that the machine's load falls on all of them
alike. A step falls back when its trees do not come from the host (the call
missed its deadline or failed, or the host was left alone for a back-off
after such a miss): the share reported is (steps - remote_steps) / steps
over all runs, and the worst run's share beside it.

The figure that matters is under load: run it while the machine is busy (the
default deadline of dart-generate was chosen with `python -m pytest` running
beside it on the 2-core development VM; docs/DART_CLIENT.md). Prints a table
and writes JSON. Not part of the test run.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_dart import Host  # noqa: E402

PROMPT = "Abstract\n========\n\nThis PEP proposes a new syntax for function decorators"


def run_once(target: str, deadline_ms: float, new_tokens: int, seed: int) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "dart_client.cli", "--random-models", "--drafter", "none", "--target", target,
           "--deadline-ms", str(deadline_ms), "--max-new-tokens", str(new_tokens), "--seed", str(seed),
           "-p", PROMPT, "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=REPO)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}\n{r.stderr}")
    out = json.loads(r.stdout)
    return {"steps": out["steps"], "remote_steps": out["remote_steps"],
            "fallbacks": (out.get("pruner") or {}).get("fallbacks", 0),
            "transport_ms": 1e3 * out["per_step"]["transport_s"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--deadlines", default="5,10,20,50,100", help="deadlines to try, ms, comma-separated")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "deadline.json"))
    args = ap.parse_args()
    deadlines = [float(x) for x in args.deadlines.split(",")]
    with tempfile.TemporaryDirectory() as work:
        trie = Path(work) / "sample.ngt"
        subprocess.run([sys.executable, "-m", "indexer.cli", "--out", str(trie), "-q", "-j", "1"], check=True,
                       cwd=REPO)
        host = Host(trie, threads=0)
        runs: dict[float, list[dict[str, Any]]] = {d: [] for d in deadlines}
        t0 = time.time()
        try:
            for r in range(args.rounds):
                for d in deadlines:
                    runs[d].append(run_once(host.target, d, args.new_tokens, seed=r))
                    x = runs[d][-1]
                    print(f"round {r} deadline {d:g} ms: {x['steps'] - x['remote_steps']} of {x['steps']} steps "
                          f"fell back (load {os.getloadavg()[0]:.1f})", file=sys.stderr, flush=True)
        finally:
            host.stop()
    rows = []
    print(f"{'deadline ms':>11}  {'steps':>6}  {'fell back':>9}  {'share':>6}  {'worst run':>9}  "
          f"{'mean transport ms':>17}")
    for d in deadlines:
        steps = sum(x["steps"] for x in runs[d])
        back = sum(x["steps"] - x["remote_steps"] for x in runs[d])
        worst = max((x["steps"] - x["remote_steps"]) / max(x["steps"], 1) for x in runs[d])
        transport = sum(x["transport_ms"] * x["steps"] for x in runs[d]) / max(steps, 1)
        rows.append({"deadline_ms": d, "steps": steps, "fell_back": back, "share": back / max(steps, 1),
                     "worst_run_share": worst, "mean_transport_ms": transport, "runs": runs[d]})
        print(f"{d:>11g}  {steps:>6}  {back:>9}  {back / max(steps, 1):>6.1%}  {worst:>9.1%}  {transport:>17.3f}")
    doc = {"bench": "deadline", "rounds": args.rounds, "new_tokens": args.new_tokens, "seconds": time.time() - t0,
           "machine": {"cores": os.cpu_count(), "platform": platform.platform(),
                       "loadavg_end": os.getloadavg()}, "deadlines": rows}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
