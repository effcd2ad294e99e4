"""Benchmark: DART tree pruning on the corpus trie and the golden queries.

    python bench/bench_prune.py [--trie PATH] [--rounds N] [--threads T]

Measures, on the 200 golden queries (D = 8, K = 25, beam 20, 60 nodes, N = 3):
  - NgramIndex.prune per call, one thread: median and p99 in microseconds
    (Python call included; ours against DART's own searcher, measured side by
    side: bash ../shared/tools/dartref/ratios.sh);
  - the engine alone (prune_batch, threads=1), microseconds per tree, with
    the default vector search and, in child processes, each other one the
    CPU has (NGRAM_ENGINE_SIMD=avx512, =avx2, and =0, the portable search):
    their ratios compare the searches on one machine in one run;
  - prune_batch throughput on --threads threads (default 2), trees/s;
  - how many trees equal DART's (same set of token paths);
  - what one prune() call costs beyond the engine (one call per tree against
    one prune_batch of the same trees, one thread, interleaved), on the
    golden trees (where the engine's own noise is several times the
    difference) and on their first levels alone (D = 1, scored by the
    drafter: the engine's work is small, so the difference is the call's);
  - with --scale-trie T --scale-corpus C: the engine's time per tree on T
    (queries drawn from C) over that on --trie (queries drawn from the
    shared corpus the same way), one thread, interleaved;
  - with --size-trie P --size-corpus Q as well (P built from Q, a part of C,
    about --trie's size): that ratio split into the trie's size (Q's queries
    on T over on P) and the workload (Q's queries on P over the shared
    corpus's on --trie).
Prints a table and writes bench/results/prune.json.

--trie defaults to /tmp/corpus3.ngt, built with ngram-build from
../shared/data/corpus when it does not exist yet (or cannot be opened). An
explicit --trie that does not exist is an error.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
GOLDEN = SHARED / "golden" / "tree_sample.npz"
CORPUS = SHARED / "data" / "corpus"
TOKENIZER = SHARED / "data" / "qwen3-tokenizer.json"
DEFAULT_TRIE = Path("/tmp/corpus3.ngt")


def fail(msg: str) -> NoReturn:
    print(f"bench_prune: {msg}", file=sys.stderr)
    sys.exit(2)


def ensure_trie(path: Path, explicit: bool) -> Path:
    if explicit:
        if not path.is_file():
            fail(f"trie {path} does not exist (build it with: ngram-build {CORPUS} --tokenizer {TOKENIZER} "
                 f"--order 3 --out {path})")
        return path
    if path.is_file():
        from ngram_service import NgramIndex, TrieFormatError

        try:
            NgramIndex.open(path)
            return path
        except TrieFormatError as e:  # e.g. an older format version: build it again
            print(f"{e}; rebuilding", file=sys.stderr)
    if not (CORPUS.is_dir() and TOKENIZER.is_file()):
        fail(f"trie {path} does not exist and the corpus to build it ({CORPUS}) is not present")
    print(f"building {path} from {CORPUS} ...", file=sys.stderr)
    cmd = ["ngram-build", str(CORPUS), "--tokenizer", str(TOKENIZER), "--order", "3", "--out", str(path)]
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if r.returncode != 0 or not path.is_file():
        fail(f"could not build {path}: {' '.join(cmd)} exited {r.returncode}\n{r.stderr[-2000:]}")
    return path


def _engine_simd() -> str:
    from ngram_service import _engine

    return str(_engine.simd_search())


def engine_us(idx: Any, reqs: list, params: dict, rounds: int) -> float:
    """The engine alone: one batch on one thread (CPU time of this thread),
    the best of several passes, microseconds per tree."""
    engine = []
    for _ in range(max(3, rounds // 2)):
        t0 = time.thread_time_ns()
        idx.prune_batch(reqs, threads=1, **params)
        engine.append((time.thread_time_ns() - t0) / 1e3 / len(reqs))
    return round(min(engine), 1)


def corpus_documents(corpus: Path, want: int, seed: int) -> list[str]:
    """`want` documents' texts from the corpus's shards (Dolma JSON lines,
    .jsonl.zst or .json.gz), taken at random (seeded) from its first shards."""
    import gzip
    import io

    from ngram_service.zstd_stream import zstd_chunks

    texts: list[str] = []
    for shard in sorted(corpus.glob("*.json*"))[:4]:
        raw = shard.read_bytes()
        raw = gzip.decompress(raw) if shard.suffix == ".gz" else b"".join(zstd_chunks(io.BytesIO(raw)))
        texts += [json.loads(line)["text"] for line in raw.split(b"\n") if line.strip()]
    rng = np.random.default_rng(seed)
    return [texts[i] for i in rng.choice(len(texts), min(want, len(texts)), replace=False)]


def corpus_queries(corpus: Path, n: int, depth: int = 8, k: int = 25, seed: int = 0) -> list[tuple]:
    """n tree queries drawn from a corpus, at n distinct places of its text:
    the prefix is the 64 tokens before the place; level l's candidates are the
    true token at place + l, then k - 1 distinct tokens drawn from the
    sample's token frequencies; their probabilities a seeded Dirichlet draw,
    sorted descending (the true token first). Real contexts and continuations
    of that corpus, where a drafter's lattice is not at hand."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(TOKENIZER))
    docs = [d.ids for d in tok.encode_batch(corpus_documents(corpus, 400, seed))]
    docs = [d for d in docs if len(d) > 64 + depth]
    flat = np.concatenate([np.asarray(d, np.int64) for d in docs])
    values, counts = np.unique(flat, return_counts=True)
    freq = counts / counts.sum()
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        d = docs[i % len(docs)]
        at = int(rng.integers(64, len(d) - depth))
        toks = np.empty((depth, k), np.int64)
        for l in range(depth):
            true = d[at + l]
            others = rng.choice(values, 3 * k, replace=False, p=freq)
            others = [int(x) for x in dict.fromkeys(others.tolist()) if x != true][:k - 1]
            toks[l] = [true, *others]
        probs = np.sort(rng.dirichlet(np.ones(k), depth).astype(np.float32), axis=1)[:, ::-1]
        out.append((np.asarray(d[at - 64:at], np.int64), toks, np.ascontiguousarray(probs)))
    return out


def interleaved_us(pairs: list[tuple[Any, list]], params: dict, rounds: int) -> np.ndarray:
    """Engine microseconds per tree for each (index, queries) pair, one
    thread, thread CPU time, the pairs interleaved in every round: [rounds,
    pairs]."""
    for idx, reqs in pairs:
        idx.prune_batch(reqs, threads=1, **params)  # page in, grow the workspace
    times = np.empty((rounds, len(pairs)))
    for r in range(rounds):
        for i, (idx, reqs) in enumerate(pairs):
            t0 = time.thread_time_ns()
            idx.prune_batch(reqs, threads=1, **params)
            times[r, i] = (time.thread_time_ns() - t0) / 1e3 / len(reqs)
    return times


def scale_ratios(small: Any, small_reqs: list, big: Any, big_reqs: list, params: dict, rounds: int,
                 part: Any = None, part_reqs: list | None = None) -> tuple[dict, dict | None]:
    """Engine microseconds per tree on two tries, one thread, interleaved
    passes (thread CPU time); the median ratio big / small. With `part` (a
    trie of part of the large corpus, about --trie's size) the same passes
    also split it into the trie's size (part's queries on the large trie over
    on `part`) and the workload (part's queries on `part` over --trie's own on
    --trie): medians of the per-round ratios."""
    pairs = [(small, small_reqs), (big, big_reqs)]
    if part is not None:
        pairs += [(part, part_reqs), (big, part_reqs)]
    a = interleaved_us(pairs, params, rounds)
    ratio = {"small_us_per_tree": round(float(np.median(a[:, 0])), 1),
             "big_us_per_tree": round(float(np.median(a[:, 1])), 1),
             "big_over_small": round(float(np.median(a[:, 1] / a[:, 0])), 3)}
    if part is None:
        return ratio, None
    return ratio, {"part_us_per_tree": round(float(np.median(a[:, 2])), 1),
                   "big_on_part_queries_us_per_tree": round(float(np.median(a[:, 3])), 1),
                   "size_ratio": round(float(np.median(a[:, 3] / a[:, 2])), 3),
                   "workload_ratio": round(float(np.median(a[:, 2] / a[:, 0])), 3)}


def call_overhead_us(idx: Any, reqs: list, params: dict, rounds: int) -> float:
    """What one prune() call costs beyond the engine: per tree, one call per
    tree minus one prune_batch of them all on one thread (thread CPU time,
    interleaved passes, the median difference)."""
    diffs = []
    for _ in range(rounds):
        t0 = time.thread_time_ns()
        for r in reqs:
            idx.prune(*r, **params)
        t1 = time.thread_time_ns()
        idx.prune_batch(reqs, threads=1, **params)
        t2 = time.thread_time_ns()
        diffs.append(((t1 - t0) - (t2 - t1)) / 1e3 / len(reqs))
    return round(float(np.median(diffs)), 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trie", type=Path, default=None, help=f"trie file (default {DEFAULT_TRIE}, built if missing)")
    ap.add_argument("--rounds", type=int, default=10, help="passes over the 200 queries per measurement")
    ap.add_argument("--threads", type=int, default=2, help="threads for the prune_batch throughput")
    ap.add_argument("--mode", choices=["mmap", "ram"], default="mmap", help="how to open the trie")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "prune.json")
    ap.add_argument("--scale-trie", type=Path, default=None,
                    help="a much larger trie (e.g. the Linux-source one) to compare per tree with --trie")
    ap.add_argument("--scale-corpus", type=Path, default=None,
                    help="the corpus --scale-trie was built from: its tree queries are drawn from it")
    ap.add_argument("--size-trie", type=Path, default=None,
                    help="a trie of part of --scale-corpus, about --trie's size: splits the scale ratio into "
                         "the trie's size and the workload (needs --size-corpus)")
    ap.add_argument("--size-corpus", type=Path, default=None,
                    help="the part of --scale-corpus --size-trie was built from: the split's queries are drawn from it")
    ap.add_argument("--engine-only", action="store_true",
                    help="print only the engine's microseconds per tree (how the narrower searches are measured)")
    args = ap.parse_args()

    if not GOLDEN.is_file():
        fail(f"golden trees {GOLDEN} are not present")
    trie = ensure_trie(args.trie or DEFAULT_TRIE, explicit=args.trie is not None)

    from ngram_service import NgramIndex, TrieFormatError

    try:
        idx = NgramIndex.open(trie, mode=args.mode)
    except TrieFormatError as e:
        fail(f"cannot open {trie}: {e} (rebuild it with ngram-build)")
    if idx.order != 3:
        fail(f"{trie} has order {idx.order}; the golden trees need N = 3")

    g = {k: v for k, v in np.load(GOLDEN).items()}
    off = g["prompt_offsets"]
    n = len(off) - 1
    reqs = [(g["prompt_flat"][off[i]:off[i + 1]], g["topk_tokens"][i], g["topk_probs"][i]) for i in range(n)]
    params = dict(beam_width=int(g["beam_width"]), max_nodes=int(g["remain_total"]),
                  ngram_weight=float(g["ngram_weight"]), level_weights=g["level_weights"],
                  logit_weights=g["logit_weights"], eos_token_id=int(g["eos_token"]))

    if args.engine_only:
        print(json.dumps({"engine_us_per_tree_min": engine_us(idx, reqs, params, args.rounds),
                          "simd_search": _engine_simd()}))
        return

    # Identical trees: the same set of token paths as DART's.
    trees = idx.prune_batch(reqs, threads=args.threads, **params)
    identical = 0
    for i, t in enumerate(trees):
        gold = {tuple(int(x) for x in row if x >= 0) for row in g["node_paths"][i][1:]}
        identical += set(t.paths()[1:]) == gold and t.n_nodes == len(gold)

    # Per call, one thread, through the Python API.
    for r in reqs:  # warm-up: page in the trie, grow the workspace
        idx.prune(*r, **params)
    lat = []
    for _ in range(args.rounds):
        for r in reqs:
            t0 = time.perf_counter_ns()
            idx.prune(*r, **params)
            lat.append(time.perf_counter_ns() - t0)
    lat_us = np.array(lat) / 1e3

    engine = engine_us(idx, reqs, params, args.rounds)
    by_search = {_engine_simd(): engine}
    for setting in ("avx512", "avx2", "0"):  # the other searches this CPU has, each in a child process
        if setting == _engine_simd():
            continue
        child = subprocess.run([sys.executable, __file__, "--engine-only", "--trie", str(trie), "--mode", args.mode,
                                "--rounds", str(args.rounds)], capture_output=True, text=True, check=False,
                               env={**os.environ, "NGRAM_ENGINE_SIMD": setting})
        if child.returncode != 0:
            fail(f"the NGRAM_ENGINE_SIMD={setting} run failed:\n{child.stderr[-2000:]}")
        out = json.loads(child.stdout.splitlines()[-1])
        by_search.setdefault(out["simd_search"], out["engine_us_per_tree_min"])  # avx512 without it: avx2

    # Throughput on `threads` threads.
    batch = reqs * args.rounds
    idx.prune_batch(reqs, threads=args.threads, **params)
    tps = []
    for _ in range(3):
        t0 = time.perf_counter()
        idx.prune_batch(batch, threads=args.threads, **params)
        tps.append(len(batch) / (time.perf_counter() - t0))

    overhead = call_overhead_us(idx, reqs, params, max(5, args.rounds))
    first_levels = [(p, t[:1], q[:1]) for p, t, q in reqs]
    first_params = {**params, "level_weights": params["level_weights"][:1],
                    "logit_weights": params["logit_weights"][:1]}
    overhead_light = call_overhead_us(idx, first_levels, first_params, 10 * max(5, args.rounds))

    scale = None
    if args.scale_trie:
        if not (args.scale_corpus and args.scale_corpus.is_dir()):
            fail("--scale-trie needs --scale-corpus DIR (the corpus it was built from)")
        big = NgramIndex.open(args.scale_trie, mode=args.mode)
        small_q, big_q = corpus_queries(CORPUS, n), corpus_queries(args.scale_corpus, n)
        part = part_q = None
        if args.size_trie:
            if not (args.size_corpus and args.size_corpus.is_dir()):
                fail("--size-trie needs --size-corpus DIR (the part of --scale-corpus it was built from)")
            part, part_q = NgramIndex.open(args.size_trie, mode=args.mode), corpus_queries(args.size_corpus, n)
        ratio, split = scale_ratios(idx, small_q, big, big_q, params, max(5, args.rounds), part, part_q)
        scale = {"trie": str(args.scale_trie), "corpus": str(args.scale_corpus),
                 "ngrams": big.info()["ngrams_total"], "small_ngrams": idx.info()["ngrams_total"],
                 "queries": f"{n} per trie, drawn from its own corpus (corpus_queries)", **ratio}
        if split is not None:
            scale["split"] = {"trie": str(args.size_trie), "corpus": str(args.size_corpus),
                              "ngrams": part.info()["ngrams_total"], **split}
    elif args.size_trie:
        fail("--size-trie needs --scale-trie and --scale-corpus")

    result = {
        "trie": str(trie),
        "trie_mode": args.mode,
        "queries": n,
        "draft_length": int(g["draft_length"]),
        "k": int(g["topk_tokens"].shape[2]),
        "beam_width": params["beam_width"],
        "max_nodes": params["max_nodes"],
        "identical_trees": identical,
        "prune_us_median": round(float(np.median(lat_us)), 1),
        "prune_us_p99": round(float(np.percentile(lat_us, 99)), 1),
        "prune_us_mean": round(float(lat_us.mean()), 1),
        "engine_us_per_tree_min": engine,
        "prune_call_overhead_us": overhead,
        "prune_call_overhead_us_first_level": overhead_light,
        "scale": scale,
        "engine_simd_search": _engine_simd(),
        "engine_us_per_tree_min_by_search": by_search,
        "batch_threads": args.threads,
        "batch_trees_per_s": round(max(tps)),
        "samples": len(lat),
        "machine": {"cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2),
                    "python": platform.python_version(), "platform": platform.platform()},
    }
    rows = [
        (f"identical trees (of {n})", f"{identical}"),
        ("prune() median, 1 thread", f"{result['prune_us_median']:.1f} us"),
        ("prune() p99, 1 thread", f"{result['prune_us_p99']:.1f} us"),
        *((f"engine only, 1 thread, {'portable' if name == 'none' else name} search", f"{us:.1f} us/tree")
          for name, us in by_search.items()),
        ("prune() call overhead over prune_batch", f"{overhead:.2f} us"),
        ("the same, first levels only (D = 1)", f"{overhead_light:.2f} us"),
        (f"prune_batch, {args.threads} threads", f"{result['batch_trees_per_s']:,} trees/s"),
        *([(f"scale: {scale['ngrams']:,} n-grams / {scale['small_ngrams']:,}, engine per tree",
            f"{scale['big_us_per_tree']} / {scale['small_us_per_tree']} us = {scale['big_over_small']}x")]
          if scale else []),
        *([(f"  of which size: {scale['ngrams']:,} / {scale['split']['ngrams']:,} n-grams, same queries",
            f"{scale['split']['big_on_part_queries_us_per_tree']} / {scale['split']['part_us_per_tree']} us = "
            f"{scale['split']['size_ratio']}x"),
           ("  and workload: its queries on the part / --trie's on --trie",
            f"{scale['split']['workload_ratio']}x")]
          if scale and "split" in scale else []),
        ("load average (1 min)", f"{result['machine']['load_avg_1m']}"),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"DART tree pruning: {trie} ({args.mode}), D={result['draft_length']} K={result['k']} "
          f"beam={result['beam_width']} nodes={result['max_nodes']}, {len(lat)} calls")
    for name, val in rows:
        print(f"  {name:<{width}}  {val:>18}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    if identical != n:
        sys.exit(1)


if __name__ == "__main__":
    main()
