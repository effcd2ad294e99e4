"""Core benchmark (issue: trie file, engine, ngram-build): one run, a table, JSON.

    python bench/bench_core.py [--corpus DIR] [--tokenizer FILE] [--kernel DIR]

Measures on the shared corpus (N = 3): build throughput end to end and of the
tokenizer alone, peak RSS of the whole build (all processes), bytes per
stored n-gram in the file and in RAM, open-to-first-answer time, and
conditional_probs with 25 candidates (median us per query in a batch of
20,000, one thread: the 1,000 golden queries repeated, which keeps caches
warm). With --kernel DIR (shards from make-kernel-corpus) it also builds
that corpus with --memory-limit 2GB and measures conditional_probs on 20,000
distinct queries drawn from it (text the corpus trie has not seen).

Trie format versions 1 and 2 side by side (issue 17), in the same run: the
shared corpus trie is written in version 1 and converted to version 2; each
--trie PATH (an existing version-1 trie: the Linux-source trie, the
billion-n-gram trie) is converted too. For each pair: bytes per stored
n-gram by section group (tokens, counts, child offsets) in the file and RAM
bytes per n-gram (mode="ram"), and the query times interleaved version 1,
version 2, version 1, ... (thread CPU time, medians of 7): conditional_probs
batched (20,000 queries, K = 25) and one query per call (1,000 calls), and
prune (DART's 200 golden tree requests, one per call). The at-scale ratio is
a --trie's prune time over the shared trie's, per version.

    python bench/bench_core.py --trie /path/to/linux3.ngt
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


def run_build(args: list[str]) -> dict:
    """Runs ngram-build in a subprocess, sampling the RSS of its whole process tree."""
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "indexer.cli", *args, "-q"], stderr=subprocess.PIPE, text=True)
    proc = psutil.Process(p.pid)
    peak = 0
    while p.poll() is None:
        try:
            procs = [proc] + proc.children(recursive=True)
            peak = max(peak, sum(q.memory_info().rss for q in procs if q.is_running()))
        except psutil.Error:
            pass
        time.sleep(0.1)  # sparse: the sampler shares the 2 cores with the build
    seconds = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"build failed: {p.stderr.read()}")
    return {"seconds": seconds, "peak_rss_bytes": peak}


def tokenizer_alone(corpus: Path, tokenizer: str) -> dict:
    from indexer.shard_discovery import expand_inputs
    from indexer.shards import ShardReader
    from indexer.tokenizer import load_tokenizer

    texts = [t for s in expand_inputs([str(corpus)]) for batch in ShardReader(s) for t in batch]
    out = {}
    for backend in ("tiktoken", "hf"):
        for threads in (1, 2):
            tok = load_tokenizer(tokenizer, backend=backend, threads=threads)
            tok.encode_to_arrays(texts[:10])
            t0 = time.perf_counter()
            flat, _ = tok.encode_to_arrays(texts)
            out[f"{backend}_{threads}t_tokens_per_s"] = flat.size / (time.perf_counter() - t0)
    return out


OPEN_SNIPPET = """
import sys, time
t0 = time.perf_counter()
from ngram_service import NgramIndex
t1 = time.perf_counter()
idx = NgramIndex.open(sys.argv[1], mode=sys.argv[2])
p, m = idx.conditional_probs([[100, 200]], [[300, 400]])
t2 = time.perf_counter()
import psutil
print(t2 - t1, psutil.Process().memory_info().rss)
"""

BASE_SNIPPET = """
import time, psutil
from ngram_service import NgramIndex
print(0.0, psutil.Process().memory_info().rss)
"""


def open_time(path: Path, mode: str = "mmap", reps: int = 5) -> tuple[float, int]:
    times, rss = [], []
    for _ in range(reps):
        r = subprocess.run([sys.executable, "-c", OPEN_SNIPPET, str(path), mode], capture_output=True, text=True,
                           check=True)
        t, m = r.stdout.split()
        times.append(float(t))
        rss.append(int(m))
    base = int(subprocess.run([sys.executable, "-c", BASE_SNIPPET], capture_output=True, text=True,
                              check=True).stdout.split()[1])
    return statistics.median(times), statistics.median(rss) - base


def held_out_queries(corpus: Path, tokenizer: str, n: int = 20_000, k: int = 25, seed: int = 0
                     ) -> tuple[np.ndarray, np.ndarray]:
    """n distinct conditional-probability queries from text the trie was not
    built from: a 2-token context at a random place of a document of
    `corpus`, and k distinct candidates, the true next token first, the rest
    drawn from that text's token frequencies."""
    from tokenizers import Tokenizer

    from ngram_service.zstd_stream import zstd_chunks

    shard = sorted(corpus.glob("*.jsonl.zst"))[0]
    with open(shard, "rb") as f:  # every frame, and a cut shard refused (stream_reader read the first frame)
        raw = b"".join(zstd_chunks(f))
    texts = [json.loads(line)["text"] for line in raw.split(b"\n")[:3000] if line.strip()]
    docs = [np.asarray(e.ids, np.int64) for e in Tokenizer.from_file(tokenizer).encode_batch(texts)]
    docs = [d for d in docs if len(d) > 3]
    flat = np.concatenate(docs)
    values, counts = np.unique(flat, return_counts=True)
    rng = np.random.default_rng(seed)
    seen: set[tuple[int, ...]] = set()
    ctx, cand = [], []
    while len(ctx) < n:
        d = docs[int(rng.integers(len(docs)))]
        at = int(rng.integers(2, len(d)))
        others = [int(x) for x in dict.fromkeys(rng.choice(values, 3 * k, p=counts / counts.sum()).tolist())
                  if x != d[at]][:k - 1]
        key = (int(d[at - 2]), int(d[at - 1]), int(d[at]), *others)
        if key in seen:
            continue
        seen.add(key)
        ctx.append(d[at - 2:at])
        cand.append([int(d[at]), *others])
    return np.array(ctx, np.int64), np.array(cand, np.int64)


def query_speed(path: Path, golden: Path | None, batch: int = 20_000, reps: int = 9,
                queries: tuple[np.ndarray, np.ndarray] | None = None) -> dict:
    from ngram_service import NgramIndex

    idx = NgramIndex.open(path)
    if queries is not None:
        ctx, cand = queries
        batch = len(ctx)
    elif golden and golden.exists():
        g = np.load(golden)
        reps_needed = -(-batch // len(g["contexts"]))
        ctx = np.tile(g["contexts"], (reps_needed, 1))[:batch]
        cand = np.tile(g["candidates"], (reps_needed, 1))[:batch]
    else:
        rng = np.random.default_rng(0)
        ctx = rng.integers(0, idx.vocab_size, (batch, 2))
        cand = rng.integers(0, idx.vocab_size, (batch, 25))
    ctx, cand = np.ascontiguousarray(ctx, np.int64), np.ascontiguousarray(cand, np.int64)
    idx.conditional_probs(ctx, cand)
    per_query = []
    for _ in range(reps):  # CPU time of this thread (the engine runs in it): other tenants' load does not count
        t0 = time.thread_time()
        idx.conditional_probs(ctx, cand)
        per_query.append((time.thread_time() - t0) / batch * 1e6)
    return {"batch": batch, "candidates": int(cand.shape[1]), "median_us_per_query": statistics.median(per_query),
            "min_us_per_query": min(per_query)}


SECTION_GROUPS = {  # section kind -> what it stores (docs/FORMAT.md)
    "tokens": "tokens", "token_samples": "tokens", "token_bits": "tokens", "token_starts": "tokens",
    "token_ends": "tokens", "used_tokens": "tokens", "used_token_ranks": "tokens", "dense_runs": "tokens",
    "dense_bits": "tokens", "dense_ranks": "tokens",
    "count_values": "counts", "count_ranks": "counts", "count_escapes": "counts", "count_escape_index": "counts",
    "count_ranks2": "counts", "count_ranks2_index": "counts",
    "child_offsets": "child offsets", "child_low": "child offsets", "child_high": "child offsets",
    "child_select": "child offsets", "meta": "meta",
}


def bytes_by_section(path: Path) -> dict:
    """Bytes per stored n-gram: per section group and per section kind."""
    from ngram_service import NgramIndex

    idx = NgramIndex.open(path)
    n = idx.info()["ngrams_total"]
    kinds: dict[str, int] = {}
    for sec in idx.sections():
        kinds[sec["kind"]] = kinds.get(sec["kind"], 0) + sec["length"]
    groups: dict[str, int] = {}
    for kind, b in kinds.items():
        groups[SECTION_GROUPS[kind]] = groups.get(SECTION_GROUPS[kind], 0) + b
    return {"ngrams": n, "file_bytes": idx.info()["file_bytes"], "file_bytes_per_ngram": idx.info()["file_bytes"] / n,
            "groups_bytes_per_ngram": {g: b / n for g, b in sorted(groups.items())},
            "kinds_bytes_per_ngram": {k: b / n for k, b in sorted(kinds.items())}}


def golden_workloads(golden: Path) -> dict:
    """The queries every version is timed on: DART's golden conditional-probability queries (batched: the
    1,000 repeated to 20,000; per call: each once) and its 200 golden tree requests."""
    g = np.load(golden / "prob_sample.npz")
    t = np.load(golden / "tree_sample.npz")
    off = t["prompt_offsets"]
    return {
        "ctx": np.ascontiguousarray(np.tile(g["contexts"], (20, 1)), np.int64),
        "cand": np.ascontiguousarray(np.tile(g["candidates"], (20, 1)), np.int64),
        "one_ctx": [np.ascontiguousarray(g["contexts"][i:i + 1], np.int64) for i in range(len(g["contexts"]))],
        "one_cand": [np.ascontiguousarray(g["candidates"][i:i + 1], np.int64) for i in range(len(g["contexts"]))],
        "trees": [(t["prompt_flat"][off[i]:off[i + 1]], t["topk_tokens"][i], t["topk_probs"][i])
                  for i in range(len(off) - 1)],
        "tree_params": dict(beam_width=int(t["beam_width"]), max_nodes=int(t["remain_total"]),
                            ngram_weight=float(t["ngram_weight"]), level_weights=t["level_weights"],
                            logit_weights=t["logit_weights"], eos_token_id=int(t["eos_token"])),
    }


def interleaved_query_times(paths: list[Path], w: dict, reps: int = 7,
                            held_out: tuple[np.ndarray, np.ndarray] | None = None) -> list[dict]:
    """Per path: median us of conditional_probs per query (batched; one per call), of prune per tree, and
    with held_out, of conditional_probs per query on those distinct queries; the paths take turns."""
    from ngram_service import NgramIndex

    idx = [NgramIndex.open(p, mode="ram") for p in paths]

    def batched(i: NgramIndex, ctx: np.ndarray, cand: np.ndarray) -> float:
        t0 = time.thread_time()
        i.conditional_probs(ctx, cand)
        return (time.thread_time() - t0) / len(ctx) * 1e6

    def per_call(i: NgramIndex) -> float:
        f = i.conditional_probs
        t0 = time.thread_time()
        for a, b in zip(w["one_ctx"], w["one_cand"]):
            f(a, b)
        return (time.thread_time() - t0) / len(w["one_ctx"]) * 1e6

    def prune(i: NgramIndex) -> float:
        t0 = time.thread_time()
        for r in w["trees"]:
            i.prune(*r, **w["tree_params"])
        return (time.thread_time() - t0) / len(w["trees"]) * 1e6

    tests = {"probs_batched_us": lambda i: batched(i, w["ctx"], w["cand"]), "probs_per_call_us": per_call,
             "prune_per_tree_us": prune}
    if held_out is not None:
        hc, hk = (np.ascontiguousarray(x, np.int64) for x in held_out)
        tests["probs_held_out_us"] = lambda i: batched(i, hc, hk)
    samples: list[dict[str, list[float]]] = [{k: [] for k in tests} for _ in paths]
    for i in idx:  # warm up
        for f in tests.values():
            f(i)
    for _ in range(reps):
        for j, i in enumerate(idx):
            for k, f in tests.items():
                samples[j][k].append(f(i))
    return [{k: statistics.median(v) for k, v in s.items()} for s in samples]


def compare_versions(name: str, v1: Path, tmp: Path, w: dict,
                     held_out: tuple[np.ndarray, np.ndarray] | None = None) -> dict:
    """Version 1 at v1 and its conversion to version 2: sizes and interleaved query times."""
    from indexer.trie_assembly import convert_to_v2

    v2 = tmp / f"{name}.v2.ngt"
    t0 = time.perf_counter()
    convert_to_v2(v1, v2)
    convert_s = time.perf_counter() - t0
    out: dict = {"convert_to_v2_s": convert_s}
    times = interleaved_query_times([v1, v2], w, held_out=held_out)
    for version, path, qt in ((1, v1, times[0]), (2, v2, times[1])):
        size = bytes_by_section(path)
        rss = open_time(path, "ram", reps=3)[1]
        out[f"v{version}"] = {**size, "ram_bytes_per_ngram": rss / size["ngrams"], **qt}
    v2.unlink()
    return out


def version_rows(name: str, c: dict) -> list[tuple[str, str]]:
    a, b = c["v1"], c["v2"]
    rows = [(f"{name}: n-grams", f"{a['ngrams']:,}"),
            (f"{name}: file bytes per n-gram, v1 / v2", f"{a['file_bytes_per_ngram']:.3f} / {b['file_bytes_per_ngram']:.3f}"),
            (f"{name}: RAM bytes per n-gram (mode=ram), v1 / v2",
             f"{a['ram_bytes_per_ngram']:.3f} / {b['ram_bytes_per_ngram']:.3f}")]
    for g in sorted(set(a["groups_bytes_per_ngram"]) | set(b["groups_bytes_per_ngram"])):
        rows.append((f"{name}:   {g} bytes per n-gram, v1 / v2",
                     f"{a['groups_bytes_per_ngram'].get(g, 0):.3f} / {b['groups_bytes_per_ngram'].get(g, 0):.3f}"))
    for k, label in (("probs_batched_us", "conditional_probs batched K=25 (us/query)"),
                     ("probs_per_call_us", "conditional_probs one per call (us/call)"),
                     ("probs_held_out_us", "conditional_probs held-out distinct (us/query)"),
                     ("prune_per_tree_us", "prune, golden trees (us/tree)")):
        if k in a:
            rows.append((f"{name}: {label}, v1 / v2 (ratio)", f"{a[k]:.3f} / {b[k]:.3f} ({b[k] / a[k]:.2f})"))
    rows.append((f"{name}: version 2 written from version 1 (s)", f"{c['convert_to_v2_s']:.2f}"))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, default=SHARED / "data" / "corpus")
    ap.add_argument("--tokenizer", default=str(SHARED / "data" / "qwen3-tokenizer.json"))
    ap.add_argument("--kernel", type=Path, default=None, help="kernel corpus shards (make-kernel-corpus)")
    ap.add_argument("--trie", type=Path, action="append", default=[],
                    help="an existing version-1 trie (e.g. the Linux-source or billion-n-gram trie) to compare "
                         "with its version-2 conversion; the conversion holds version 2's sections in memory")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "core.json")
    a = ap.parse_args()
    if not a.corpus.is_dir():
        sys.exit(f"{a.corpus}: corpus not found (pass --corpus)")
    from ngram_service import NgramIndex

    results: dict = {"machine": {"cpus": psutil.cpu_count(), "memory_bytes": psutil.virtual_memory().total}}
    with tempfile.TemporaryDirectory() as tmp:
        trie = Path(tmp) / "corpus3.ngt"
        b = run_build([str(a.corpus), "--tokenizer", a.tokenizer, "-n", "3", "-j", "2", "--out", str(trie)])
        info = NgramIndex.open(trie).info()
        n = info["ngrams_total"]
        tokens = info["corpus"]["tokens"]
        results["build"] = {**b, "tokens": tokens, "tokens_per_s": tokens / b["seconds"], "ngrams": n,
                            "ngrams_per_order": info["ngrams"], "file_bytes": info["file_bytes"]}
        results["tokenizer_alone"] = tokenizer_alone(a.corpus, a.tokenizer)
        t_map, rss_map = open_time(trie, "mmap")
        t_ram, rss_ram = open_time(trie, "ram")
        results["size"] = {"file_bytes_per_ngram": info["file_bytes"] / n, "ram_bytes_per_ngram": rss_ram / n,
                           "ram_rss_delta_bytes": rss_ram}
        results["open_to_first_answer_s"] = {"mmap": t_map, "ram": t_ram}
        # The golden 1,000 queries repeated to 20,000 (warm caches), and, with
        # --kernel, 20,000 distinct queries from text not in the corpus.
        results["conditional_probs"] = query_speed(trie, SHARED / "golden" / "prob_sample.npz")
        if a.kernel:
            results["conditional_probs_held_out"] = query_speed(
                trie, None, queries=held_out_queries(a.kernel, a.tokenizer))
        # Format versions 1 and 2 on the same tries, interleaved.
        w = golden_workloads(SHARED / "golden")
        results["formats"] = {"shared": compare_versions("shared", trie, Path(tmp), w)}
        for extra in a.trie:
            results["formats"][extra.stem] = compare_versions(extra.stem, extra, Path(tmp), w)
        for name, c in results["formats"].items():
            if name != "shared":
                for v in ("v1", "v2"):
                    c[v]["at_scale_prune_ratio"] = c[v]["prune_per_tree_us"] / results["formats"]["shared"][v][
                        "prune_per_tree_us"]
        if a.kernel:
            kt = Path(tmp) / "kernel3.ngt"
            kb = run_build([str(a.kernel), "--tokenizer", a.tokenizer, "-n", "3", "-j", "2", "--memory-limit", "2GB",
                            "--out", str(kt)])
            ki = NgramIndex.open(kt).info()
            results["kernel"] = {**kb, "tokens": ki["corpus"]["tokens"],
                                 "tokens_per_s": ki["corpus"]["tokens"] / kb["seconds"],
                                 "ngrams": ki["ngrams_total"], "file_bytes": ki["file_bytes"],
                                 "bytes_per_ngram": ki["file_bytes"] / ki["ngrams_total"],
                                 "open_to_first_answer_s": open_time(kt, "mmap")[0]}

    rows = [
        ("build: tokens", f"{results['build']['tokens']:,}"),
        ("build: seconds (end to end, -j 2)", f"{results['build']['seconds']:.2f}"),
        ("build: M tokens/s end to end", f"{results['build']['tokens_per_s'] / 1e6:.2f}"),
        ("build: peak RSS, all processes (MB)", f"{results['build']['peak_rss_bytes'] / 1e6:.0f}"),
        *[(f"tokenizer alone: {k.replace('_tokens_per_s', '')} (M tokens/s)", f"{v / 1e6:.2f}")
          for k, v in results["tokenizer_alone"].items()],
        ("n-grams (1..3)", f"{n:,}"),
        ("file bytes per n-gram", f"{results['size']['file_bytes_per_ngram']:.2f}"),
        ("RAM bytes per n-gram (mode=ram, RSS delta)", f"{results['size']['ram_bytes_per_ngram']:.2f}"),
        ("open to first answer, mmap (ms)", f"{results['open_to_first_answer_s']['mmap'] * 1e3:.1f}"),
        ("open to first answer, ram (ms)", f"{results['open_to_first_answer_s']['ram'] * 1e3:.1f}"),
        ("conditional_probs K=25, golden 1k repeated to 20k: median us/query",
         f"{results['conditional_probs']['median_us_per_query']:.3f}"),
        *([("conditional_probs K=25, 20k distinct held-out queries: median us/query",
            f"{results['conditional_probs_held_out']['median_us_per_query']:.3f}")]
          if "conditional_probs_held_out" in results else []),
    ]
    if "kernel" in results:
        k = results["kernel"]
        rows += [("kernel: tokens", f"{k['tokens']:,}"), ("kernel: M tokens/s", f"{k['tokens_per_s'] / 1e6:.2f}"),
                 ("kernel: peak RSS (MB)", f"{k['peak_rss_bytes'] / 1e6:.0f}"), ("kernel: n-grams", f"{k['ngrams']:,}"),
                 ("kernel: bytes per n-gram", f"{k['bytes_per_ngram']:.2f}"),
                 ("kernel: open to first answer (ms)", f"{k['open_to_first_answer_s'] * 1e3:.1f}")]
    for name, c in results.get("formats", {}).items():
        rows += version_rows(name, c)
        if "at_scale_prune_ratio" in c["v1"]:
            rows.append((f"{name}: at-scale ratio (prune us/tree over shared's), v1 / v2",
                         f"{c['v1']['at_scale_prune_ratio']:.2f} / {c['v2']['at_scale_prune_ratio']:.2f}"))
    width = max(len(r[0]) for r in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value:>14}")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(results, indent=2))
    print(f"\nwrote {a.out}")


if __name__ == "__main__":
    main()
