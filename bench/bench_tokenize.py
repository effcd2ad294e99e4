"""The Hugging Face backend against DART's own tokenization, per core.

    python bench/bench_tokenize.py [--corpus DIR] [--tokenizer FILE] [--docs N] [--repeats R]

DART's build (../shared/tools/dartref/dart_build.py) calls
``tokenizers.Tokenizer.encode(text, add_special_tokens=True)`` once per
document on the main thread. This runs that call and our backends
(``Tokenizer.encode_to_arrays``, ids plus one EOS a document, on its encoding thread, in
the batches a map task reads) on the same documents, interleaved, R times, and reports the median process CPU
seconds of each (CPU, not wall: the machine is shared) and ours / DART. It
checks that the HF backend's ids equal DART's call's ids first.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, default=SHARED / "data" / "corpus")
    ap.add_argument("--tokenizer", default=str(SHARED / "data" / "qwen3-tokenizer.json"))
    ap.add_argument("--docs", type=int, default=0, help="the first N documents only (0: all)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "tokenize.json")
    a = ap.parse_args()

    from tokenizers import Tokenizer as HFTokenizer

    from indexer.shard_discovery import expand_inputs
    from indexer.shards import ShardReader
    from indexer.tokenizer import load_tokenizer

    # The build's batches: what ShardReader gives a map task.
    batches = [batch for s in expand_inputs([str(a.corpus)]) for batch in ShardReader(s)]
    if a.docs:
        batches = [b[: max(0, a.docs - sum(map(len, batches[:i])))] for i, b in enumerate(batches)]
        batches = [b for b in batches if b]
    texts = [t for b in batches for t in b]
    dart = HFTokenizer.from_file(a.tokenizer)
    ours = {b: load_tokenizer(a.tokenizer, backend=b) for b in ("hf", "tiktoken")}
    eos = ours["hf"].eos_id

    def dart_call() -> np.ndarray:
        return np.array([i for t in texts for i in [*dart.encode(t, add_special_tokens=True).ids, eos]], np.int32)

    runs = {"DART: Tokenizer.encode per document": dart_call}
    def ours_call(tok: Any) -> np.ndarray:
        return np.concatenate([tok.encode_to_arrays(batch)[0] for batch in batches])

    runs.update({f"ours: {b} backend": (lambda tok=tok: ours_call(tok)) for b, tok in ours.items()})
    want = dart_call()
    assert np.array_equal(runs["ours: hf backend"](), want), "the hf backend's ids differ from DART's call"

    cpu: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(a.repeats):
        for name, f in runs.items():
            t0 = time.process_time()
            f()
            cpu[name].append(time.process_time() - t0)
    base = statistics.median(cpu["DART: Tokenizer.encode per document"])
    rows = {name: {"cpu_s": statistics.median(v), "cpu_s_all": v, "ours_over_dart": statistics.median(v) / base}
            for name, v in cpu.items()}
    print(f"{len(texts):,} documents, {len(want):,} tokens (EOS included), median of {a.repeats}, process CPU:")
    print(f"{'':40} {'CPU s':>8} {'/ DART':>8} {'M tokens/s':>11}")
    for name, r in rows.items():
        print(f"{name:40} {r['cpu_s']:8.2f} {r['ours_over_dart']:8.3f} {len(want) / r['cpu_s'] / 1e6:11.2f}")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"documents": len(texts), "tokens": len(want), "repeats": a.repeats, "runs": rows},
                                indent=2))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
