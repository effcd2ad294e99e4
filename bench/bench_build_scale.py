"""Benchmark: ngram-build at scale (issue 10): executors, shuffle, temporary disk.

    python bench/bench_build_scale.py [--kernel DIR] [--synthetic DIR] [--memory-limit 4GB]

1. ``--kernel DIR`` (shards made by ../shared/tools/make-kernel-corpus), Qwen3
   tokenizer, N = 3, --memory-limit 2GB: the local executor (-j 2) against a
   2-CPU local Ray cluster. Per build: wall time, tokens/s (end to end and map
   phase), the largest worker-process peak RSS any task reported, the run
   bytes each reduce task read (median, max, and all runs together, which is
   what every reduce would read if it scanned all runs), peak temporary bytes
   (the build's own account, and a folder sampler as a cross-check), and
   whether the two tries are byte-identical.
2. ``--synthetic DIR`` (made by bench/make_synthetic_tokens.py): a
   pre-tokenized build with --memory-limit (default 4GB), -j 2: wall time,
   peak RSS of all processes, peak temporary disk, n-grams, bytes per n-gram,
   open-to-first-answer time, and DART ``prune`` latency on the golden tree
   queries against this trie and the small shared-corpus trie, in the same run.

Prints a table and writes bench/results/build_scale.json.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
QWEN = SHARED / "data" / "qwen3-tokenizer.json"
CORPUS = SHARED / "data" / "corpus"
TREES = SHARED / "golden" / "tree_sample.npz"


class RssMeter:
    """Peak RSS of this process and all its children (pool workers), sampled."""

    def __init__(self, interval: float = 0.2) -> None:
        self.peak, self.interval = 0, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.wait(self.interval):
            total = 0
            for p in [me, *me.children(recursive=True)]:
                try:
                    total += p.memory_info().rss
                except psutil.Error:
                    pass
            self.peak = max(self.peak, total)

    def __enter__(self) -> "RssMeter":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def timed_build(cfg, work: Path) -> dict:
    from indexer.task_resources import DiskMeter
    from indexer.pipeline import build

    work.mkdir(parents=True, exist_ok=True)
    with RssMeter() as rss, DiskMeter(work, interval=0.5) as disk:
        t0 = time.perf_counter()
        report = build(cfg, progress=lambda m: None if m.startswith("[map") or m.startswith("[reduce") else print(
            "   ", m, file=sys.stderr, flush=True))
        wall = time.perf_counter() - t0
    read = report.reduce_input_bytes or [0]
    return {
        "wall_s": wall, "tokens": report.tokens, "documents": report.documents,
        "tokens_per_s": report.tokens / wall, "map_tokens_per_s": report.map_tokens_per_second,
        "phase_s": report.phase_seconds, "ranges": report.ranges, "ngrams": report.ngrams,
        "file_bytes": report.file_bytes,
        "peak_rss_all_processes": rss.peak, "peak_task_rss": report.peak_task_rss_bytes,
        "reduce_read_median": statistics.median(read), "reduce_read_max": max(read), "runs_total": sum(read),
        "peak_tmp_reported": report.peak_tmp_bytes, "peak_work_bytes": report.peak_work_bytes,
        "peak_task_scratch": report.peak_task_scratch_bytes, "peak_tmp_sampled": disk.peak,
    }


def mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


def kernel_bench(kernel: Path, tmp: Path) -> dict:
    import ray

    from indexer.pipeline import BuildConfig

    out = {}
    for executor in ("local", "ray"):
        if executor == "ray":
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
        print(f"kernel corpus, executor {executor} ...", file=sys.stderr, flush=True)
        cfg = BuildConfig(inputs=[str(kernel)], out=str(tmp / f"kernel-{executor}" / "kernel.ngt"), tokenizer=str(QWEN),
                          order=3, workers=2, memory_limit_bytes=2 << 30, tmp_dir=str(tmp / f"work-{executor}"),
                          executor=executor)
        out[executor] = timed_build(cfg, tmp / f"work-{executor}")
        if executor == "ray":
            ray.shutdown()
    a, b = (tmp / "kernel-local" / "kernel.ngt").read_bytes(), (tmp / "kernel-ray" / "kernel.ngt").read_bytes()
    out["identical_bytes"] = a == b
    return out


def prune_latency_us(trie: Path, rounds: int = 3) -> float:
    from ngram_service import NgramIndex

    g = dict(np.load(TREES))
    off = g["prompt_offsets"]
    reqs = [(g["prompt_flat"][off[i]:off[i + 1]], g["topk_tokens"][i], g["topk_probs"][i]) for i in range(len(off) - 1)]
    params = dict(beam_width=int(g["beam_width"]), max_nodes=int(g["remain_total"]),
                  ngram_weight=float(g["ngram_weight"]), level_weights=g["level_weights"],
                  logit_weights=g["logit_weights"], eos_token_id=int(g["eos_token"]))
    idx = NgramIndex.open(trie)
    for r in reqs:
        idx.prune(*r, **params)
    lat = []
    for _ in range(rounds):
        for r in reqs:
            t0 = time.perf_counter_ns()
            idx.prune(*r, **params)
            lat.append(time.perf_counter_ns() - t0)
    return float(np.median(lat) / 1e3)


def open_time_ms(trie: Path) -> float:
    import subprocess

    # A fresh process (nothing of the file cached in it), the imports done before the clock starts.
    code = ("import time;from ngram_service import NgramIndex;t=time.perf_counter();"
            f"i=NgramIndex.open({str(trie)!r});i.count([1]);print((time.perf_counter()-t)*1e3)")
    runs = [float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
            for _ in range(3)]
    return statistics.median(runs)


def synthetic_bench(synthetic: Path, tmp: Path, memory_limit: int) -> dict:
    from indexer.pipeline import BuildConfig, build

    meta = json.loads((synthetic / ".synthetic.json").read_text())
    out_path = tmp / "synthetic" / "synthetic.ngt"
    cfg = BuildConfig(inputs=[str(synthetic)], out=str(out_path), tokenizer=None, vocab_size=meta["vocab_size"],
                      eos=meta["eos"], order=3, workers=2, memory_limit_bytes=memory_limit,
                      tmp_dir=str(tmp / "work-synthetic"))
    print("synthetic corpus ...", file=sys.stderr, flush=True)
    r = timed_build(cfg, tmp / "work-synthetic")
    r["ngrams_total"] = sum(r["ngrams"])
    r["bytes_per_ngram"] = r["file_bytes"] / r["ngrams_total"]
    r["open_ms"] = open_time_ms(out_path)
    small = tmp / "corpus3.ngt"
    build(BuildConfig(inputs=[str(CORPUS)], out=str(small), tokenizer=str(QWEN), order=3, workers=2),
          progress=lambda m: None)
    r["prune_us_median"] = prune_latency_us(out_path)
    r["prune_us_median_small_shared_trie"] = prune_latency_us(small)
    r["memory_limit"] = memory_limit
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernel", type=Path, default=None)
    ap.add_argument("--synthetic", type=Path, default=None)
    ap.add_argument("--memory-limit", default="4GB")
    ap.add_argument("--tmp", type=Path, default=None, help="work folder [default: a temporary one]")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "build_scale.json")
    a = ap.parse_args()
    if not (a.kernel or a.synthetic):
        sys.exit("give --kernel DIR and/or --synthetic DIR")
    from indexer.cli import parse_size

    tmp = a.tmp or Path(tempfile.mkdtemp(prefix="bench-build-scale-"))
    result: dict = {"machine": {"cpus": os.cpu_count(), "load_avg_at_start": os.getloadavg()}}
    if a.kernel:
        result["kernel"] = kernel_bench(a.kernel, tmp)
    if a.synthetic:
        result["synthetic"] = synthetic_bench(a.synthetic, tmp, parse_size(a.memory_limit))
    result["machine"]["load_avg_at_end"] = os.getloadavg()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=1))

    rows = [("", "wall", "tokens/s", "map tok/s", "peak RSS task", "peak RSS all", "reduce read med/max",
             "all runs", "ranges", "peak tmp (reported/sampled)")]
    for name in ("local", "ray"):
        if "kernel" in result:
            k = result["kernel"][name]
            rows.append((f"kernel {name}", f"{k['wall_s']:.1f} s", f"{k['tokens_per_s'] / 1e6:.2f} M",
                         f"{k['map_tokens_per_s'] / 1e6:.2f} M", mb(k["peak_task_rss"]), mb(k["peak_rss_all_processes"]),
                         f"{mb(k['reduce_read_median'])} / {mb(k['reduce_read_max'])}", mb(k["runs_total"]),
                         str(k["ranges"]), f"{mb(k['peak_tmp_reported'])} / {mb(k['peak_tmp_sampled'])}"))
    if "synthetic" in result:
        s = result["synthetic"]
        rows.append(("synthetic local", f"{s['wall_s']:.1f} s", f"{s['tokens_per_s'] / 1e6:.2f} M",
                     f"{s['map_tokens_per_s'] / 1e6:.2f} M", mb(s["peak_task_rss"]), mb(s["peak_rss_all_processes"]),
                     f"{mb(s['reduce_read_median'])} / {mb(s['reduce_read_max'])}", mb(s["runs_total"]),
                     str(s["ranges"]), f"{mb(s['peak_tmp_reported'])} / {mb(s['peak_tmp_sampled'])}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
    if "kernel" in result:
        print(f"kernel: local and Ray tries byte-identical: {result['kernel']['identical_bytes']}")
    if "synthetic" in result:
        s = result["synthetic"]
        print(f"synthetic: {s['tokens']:,} tokens, {s['ngrams_total']:,} n-grams {s['ngrams']}, "
              f"{s['bytes_per_ngram']:.2f} bytes/n-gram, open to first answer {s['open_ms']:.2f} ms (fresh process), prune median {s['prune_us_median']:.0f} us vs "
              f"{s['prune_us_median_small_shared_trie']:.0f} us on the small shared trie")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
