"""Study: which trie drafts best. Orders 2..6 x --min-count 1, 2, 5 on the shared corpus, measured
with ngram-eval's synthetic lattices on held-out text from the same sources and from another source.

    python bench/eval_study.py [--shared ../shared] [--work /tmp/eval-study] [--steps 4000] [--docs-out docs]

1. Hold-out: every 25th document of every corpus shard (by line number) goes to the in-domain
   held-out set; the others are copied to a training folder, from which the tries are built
   (ngram-build -j 1, to leave cores to others). The other source is the first 2 MB of the Linux
   6.1 Documentation tree (``../shared/tools/make-kernel-corpus``, from Debian's linux-source-6.1).
2. 15 tries: --order 2..6 x --min-count 1, 2, 5 (kept in --work; rebuilt only when missing).
3. ngram-eval's replay (ngram_eval.report.evaluate) of --steps synthetic lattices per held-out
   set (the default logit model, seed 0) through every trie at DART's parameters (beam 20,
   60 nodes, lambda 0.5) and at lambda 0 (the tree without the n-gram: the same for every trie);
   and a grid (lambda 0.25..2 x 30 / 60 nodes) on one trie.

Prints a table, writes bench/results/eval_study.json and the plots
docs/eval_bytes_same.png, docs/eval_bytes_other.png, docs/eval_grid.png.
"""
from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ngram_service.zstd_stream import zstd_chunks  # noqa: E402

ORDERS = (2, 3, 4, 5, 6)
MIN_COUNTS = (1, 2, 5)
HOLD_EVERY = 25


def read_lines(path: Path) -> list[bytes]:
    raw = path.read_bytes()
    if path.name.endswith(".gz"):
        raw = gzip.decompress(raw)
    elif path.name.endswith(".zst"):
        raw = b"".join(zstd_chunks(io.BytesIO(raw)))
    return [line for line in raw.split(b"\n") if line.strip()]


def split_corpus(corpus: Path, train: Path, held: Path) -> None:
    """Every HOLD_EVERY-th document of each shard to ``held``, the rest to ``train`` (plain JSON lines)."""
    train.mkdir(parents=True, exist_ok=True)
    held.mkdir(parents=True, exist_ok=True)
    for shard in sorted(corpus.iterdir()):
        lines = read_lines(shard)
        stem = shard.name.split(".")[0]
        keep = [x for i, x in enumerate(lines) if i % HOLD_EVERY != HOLD_EVERY - 1]
        out = [x for i, x in enumerate(lines) if i % HOLD_EVERY == HOLD_EVERY - 1]
        (train / f"{stem}.jsonl").write_bytes(b"\n".join(keep) + b"\n")
        if out:
            (held / f"{stem}.jsonl").write_bytes(b"\n".join(out) + b"\n")


def build(train: Path, tokenizer: Path, order: int, min_count: int, out: Path) -> float:
    if out.is_file():
        return 0.0
    t0 = time.perf_counter()
    subprocess.run(["ngram-build", str(train), "--tokenizer", str(tokenizer), "--order", str(order),
                    "--min-count", str(min_count), "--out", str(out), "-j", "1", "--memory-limit", "1GB"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", type=Path, default=REPO.parent / "shared")
    ap.add_argument("--work", type=Path, default=Path("/tmp/eval-study"))
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--docs-out", type=Path, default=REPO / "docs")
    a = ap.parse_args()
    corpus, tokenizer = a.shared / "data" / "corpus", a.shared / "data" / "qwen3-tokenizer.json"
    if not corpus.is_dir() or not tokenizer.is_file():
        sys.exit(f"eval_study: {corpus} or {tokenizer} is missing (--shared)")
    from ngram_eval.plot import plot_against_bytes, plot_grid
    from ngram_eval.replay import PruneSetting
    from ngram_eval.report import evaluate
    from ngram_eval.synthetic import LogitModel, load_documents, synthetic_lattices

    work = a.work
    train, held, other = work / "train", work / "held-same", work / "held-other"
    if not train.is_dir():
        split_corpus(corpus, train, held)
    split = {name: sum(len(read_lines(f)) for f in folder.iterdir()) for name, folder in
             (("train_docs", train), ("held_docs", held))}
    if not other.is_dir():
        subprocess.run([sys.executable, str(a.shared / "tools" / "make-kernel-corpus"), str(other), "--max-mb", "2"],
                       check=True, stdout=subprocess.DEVNULL)
    tries: dict[tuple[int, int], Path] = {}
    build_s: dict[str, float] = {}
    for n in ORDERS:
        for c in MIN_COUNTS:
            p = work / f"o{n}-mc{c}.ngt"
            s = build(train, tokenizer, n, c, p)
            tries[(n, c)] = p
            build_s[p.name] = s
            print(f"built {p.name}" + (f" in {s:.1f} s" if s else " (kept)"), file=sys.stderr)

    model = LogitModel()
    base = PruneSetting()  # the engine's defaults: DART's production settings
    no_ngram = PruneSetting(ngram_weight=0.0)
    results: dict[str, Any] = {"command": " ".join(sys.argv), "split": split, "hold_every": HOLD_EVERY,
                               "model": model.as_dict(), "steps": a.steps, "sets": {}}
    for name, folder in (("same", held), ("other", other)):
        docs, nbytes = load_documents([str(folder)], str(tokenizer))
        lat = synthetic_lattices(docs, model, a.steps, seed=0, source=f"held-out ({name})")
        info = {"mode": "synthetic", "documents": len(docs), "text_bytes": nbytes}
        res = evaluate([str(p) for p in tries.values()], lat, [base, no_ngram], lattice_info=info)
        results["sets"][name] = res
        print(f"{name}: {len(lat)} lattices from {len(docs)} documents ({nbytes:,} bytes)", file=sys.stderr)
    grid_trie = tries[(4, 2)]
    grid = [PruneSetting(max_nodes=m, ngram_weight=w) for m in (30, 60) for w in (0.25, 0.5, 1.0, 2.0)]
    docs, _ = load_documents([str(held)], str(tokenizer))
    lat = synthetic_lattices(docs, model, a.steps, seed=0, source="held-out (same)")
    results["grid"] = evaluate([str(grid_trie), str(tries[(2, 1)])], lat, grid)

    out = REPO / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "eval_study.json").write_text(json.dumps(results, indent=2) + "\n")
    print_table(results)
    for name in ("same", "other"):
        res = results["sets"][name]
        series = []
        for c in MIN_COUNTS:
            pts = [{"file_bytes": t["file_bytes"], "mean_accepted_length": t["mean_accepted_length"],
                    "ci95": t["ci95"], "note": f"N={t['order']}"} for t in res["tries"] if t["min_count"] == c]
            series.append({"label": f"--min-count {c}", "points": pts})
        baseline = res["tries"][0]["grid"][1]["mean_accepted_length"]
        where = "held-out documents, same sources" if name == "same" else "Linux Documentation (another source)"
        plot_against_bytes(series, a.docs_out / f"eval_bytes_{name}.png",
                           f"{res['lattices']['steps']} synthetic lattices from {where}", baseline=baseline)
    plot_grid(results["grid"], a.docs_out / "eval_grid.png",
              title="pruning grid (beam 20), held-out documents of the corpus's sources")


def print_table(results: dict[str, Any]) -> None:
    same, other = results["sets"]["same"], results["sets"]["other"]
    print(f"{'trie':<12} {'MB':>7} {'n-grams':>11}   {'tau same':>14} {'tau other':>14}   "
          f"{'vs o2-mc1 (paired)':>18} {'hit2..N same':<30} {'us/tree':>7}")
    for ts, to in zip(same["tries"], other["tries"]):
        hits = " ".join(f"{v:.3f}" for v in ts["hit_rate"].values())
        print(f"{Path(ts['path']).name:<12} {ts['file_bytes'] / 1e6:7.1f} {ts['ngrams_total']:>11,}   "
              f"{ts['mean_accepted_length']:6.3f} +-{ts['ci95']:.3f} {to['mean_accepted_length']:6.3f} +-{to['ci95']:.3f}"
              f"   {ts['vs_first']['mean']:+.3f} +-{ts['vs_first']['ci95']:.3f}   {hits:<30} {ts['prune_us_per_tree']:7.1f}")
    for name, res in (("same", same), ("other", other)):
        g = res["tries"][0]["grid"][1]
        print(f"no n-gram (lambda 0), {name}: {g['mean_accepted_length']:.3f} +-{g['ci95']:.3f}")
    print("grid (beam 20):")
    for t in results["grid"]["tries"]:
        for g in t["grid"]:
            s = g["setting"]
            print(f"  {Path(t['path']).name:<12} nodes {s['max_nodes']:>3} lambda {s['ngram_weight']:<5g} "
                  f"{g['mean_accepted_length']:.3f} +-{g['ci95']:.3f}  {g['prune_us_per_tree']:.1f} us/tree")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
