"""How much of a reduce's work one first token, or one (first, second) pair,
holds: the floor of the largest reduce range before and after ranges could
split a first token by its second token (docs/BUILD.md, "Reduce").

For a corpus (text shards and a tokenizer), counts the distinct 1..N-grams
(what a reduce task holds in DuckDB) and prints, for the heaviest first
tokens and the heaviest (first, second) pairs, their share of them.

    python bench/bench_hot_tokens.py ../shared/data/corpus --tokenizer ../shared/data/qwen3-tokenizer.json

Writes bench/results/hot_tokens.json.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from indexer.kgrams import kgram_table, tokens_left
from indexer.shard_discovery import find_shards
from indexer.shards import ShardReader
from indexer.tokenizer import load_tokenizer


def distinct_kgrams(flat: np.ndarray, left: np.ndarray, k: int) -> np.ndarray:
    """Distinct k-grams as rows [k] (int64), sorted."""
    table = kgram_table(flat, left, k)
    cols = [table.column(f"w{j}").to_numpy().astype(np.int64) for j in range(k)]
    key = np.zeros(len(cols[0]), np.int64)
    for c in cols:  # ids < 2^18: three fit in 63 bits
        key = (key << 18) | c
    key = np.unique(key)
    return np.stack([(key >> (18 * (k - 1 - j))) & ((1 << 18) - 1) for j in range(k)], axis=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("inputs", nargs="+")
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--order", type=int, default=3)
    ap.add_argument("--top", type=int, default=5)
    args = ap.parse_args()
    tok = load_tokenizer(args.tokenizer)
    flats, lengths = [], []
    for shard in find_shards(args.inputs):
        for texts in ShardReader(shard.location, "text"):
            flat, lens = tok.encode_to_arrays(texts)
            flats.append(flat)
            lengths.append(lens)
    flat, lens = np.concatenate(flats), np.concatenate(lengths)
    left = tokens_left(lens)
    grams = [distinct_kgrams(flat, left, k) for k in range(1, args.order + 1)]
    total = sum(len(g) for g in grams)
    # the bytes DuckDB holds per row, as the plan estimates them (8k + 32)
    weight = [8 * k + 32 for k in range(1, args.order + 1)]
    state = sum(len(g) * w for g, w in zip(grams, weight))
    by_first: dict[int, float] = {}
    by_pair: dict[tuple[int, int], float] = {}
    for k, (g, w) in enumerate(zip(grams, weight), start=1):
        firsts, counts = np.unique(g[:, 0], return_counts=True)
        for t, c in zip(firsts.tolist(), counts.tolist()):
            by_first[t] = by_first.get(t, 0) + c * w
        if k >= 2:
            pairs, counts = np.unique(g[:, 0] * (1 << 18) + g[:, 1], return_counts=True)
            for p, c in zip(pairs.tolist(), counts.tolist()):
                by_pair[(p >> 18, p & ((1 << 18) - 1))] = by_pair.get((p >> 18, p & ((1 << 18) - 1)), 0) + c * w
    top_first = sorted(by_first.items(), key=lambda kv: -kv[1])[: args.top]
    top_pair = sorted(by_pair.items(), key=lambda kv: -kv[1])[: args.top]
    rows = []
    print(f"{len(flat):,} tokens, {total:,} distinct 1..{args.order}-grams, ~{state / 1e6:.0f} MB of reduce state")
    print(f"{'what':<8} {'key':<28} {'share of reduce state':>22}")
    for t, v in top_first:
        text = tok.decode([t]) if hasattr(tok, "decode") else str(t)
        print(f"{'first':<8} {repr(text)[:28]:<28} {v / state:>21.2%}")
        rows.append({"kind": "first", "ids": [t], "text": text, "share": v / state})
    for (a, b), v in top_pair:
        text = tok.decode([a, b]) if hasattr(tok, "decode") else f"{a} {b}"
        print(f"{'pair':<8} {repr(text)[:28]:<28} {v / state:>21.2%}")
        rows.append({"kind": "pair", "ids": [a, b], "text": text, "share": v / state})
    out = Path(__file__).parent / "results" / "hot_tokens.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"inputs": args.inputs, "tokens": int(len(flat)), "distinct": total,
                               "state_bytes": state, "top": rows}, indent=1))


if __name__ == "__main__":
    main()
