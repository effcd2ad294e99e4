"""Generate a synthetic pre-tokenized corpus for ngram-build scale tests.

    python bench/make_synthetic_tokens.py OUT_DIR [--tokens 1e9] [--shard-tokens 5e7] [--seed 0]

Writes Dolma-style flat token arrays (headerless little-endian uint32
``part-NNNNN.npy``, every document ending in the EOS id) over the Qwen3
vocabulary (151,669 ids, EOS 151,643). The statistics are meant to be
realistic for an n-gram build, not for a language model:

- unigrams are Zipfian (exponent 1.1) over a random permutation of the
  vocabulary, as natural-language token frequencies roughly are;
- a Markov component repeats phrases: with probability 0.35 a token is its
  predecessor's fixed successor (a random map), so frequent bigrams and
  trigrams recur far more often than independent draws would give;
- document lengths are geometric with mean 700 tokens.

With these settings about 10^9 tokens give on the order of 10^9 distinct
1..3-grams (the scale of DART's published Dolma trie); the benchmark
reports the exact number it built.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

VOCAB = 151_669
EOS = 151_643
ZIPF_EXPONENT = 1.1
FOLLOW_PROBABILITY = 0.35
MEAN_DOCUMENT_TOKENS = 700


def shard_tokens(rng: np.random.Generator, n: int, cdf: np.ndarray, rank_to_id: np.ndarray,
                 successor: np.ndarray) -> np.ndarray:
    """n tokens (documents included, EOS-terminated) as uint32."""
    tokens = rank_to_id[np.searchsorted(cdf, rng.random(n), side="right").clip(0, VOCAB - 1)]
    follow = np.flatnonzero(rng.random(n) < FOLLOW_PROBABILITY)
    follow = follow[follow > 0]
    # Chains of followers resolve one step per pass; a chain longer than
    # 12 (probability 0.35^12, about 3e-6) keeps an independent draw.
    for _ in range(12):
        tokens[follow] = successor[tokens[follow - 1]]
    tokens[tokens == EOS] = EOS - 1  # EOS only ends documents
    ends = np.cumsum(rng.geometric(1.0 / MEAN_DOCUMENT_TOKENS, size=n // MEAN_DOCUMENT_TOKENS * 2 + 16))
    ends = ends[ends < n] - 1
    tokens[ends] = EOS
    tokens[-1] = EOS
    return tokens.astype("<u4")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--tokens", type=float, default=1e9)
    ap.add_argument("--shard-tokens", type=float, default=5e7)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(a.seed)
    weights = 1.0 / np.arange(1, VOCAB + 1, dtype=np.float64) ** ZIPF_EXPONENT
    cdf = np.cumsum(weights) / weights.sum()
    rank_to_id = rng.permutation(VOCAB).astype(np.uint32)
    successor = rng.permutation(VOCAB).astype(np.uint32)
    total, shard = int(a.tokens), int(a.shard_tokens)
    written = 0
    for i in range(-(-total // shard)):
        n = min(shard, total - written)
        shard_tokens(rng, n, cdf, rank_to_id, successor).tofile(a.out / f"part-{i:05d}.npy")
        written += n
        print(f"part-{i:05d}.npy: {n:,} tokens", flush=True)
    # A hidden file: never taken for a shard.
    (a.out / ".synthetic.json").write_text(json.dumps({
        "generator": "bench/make_synthetic_tokens.py", "tokens": written, "vocab_size": VOCAB, "eos": EOS,
        "dtype": "uint32", "zipf_exponent": ZIPF_EXPONENT, "follow_probability": FOLLOW_PROBABILITY,
        "mean_document_tokens": MEAN_DOCUMENT_TOKENS, "seed": a.seed}, indent=1))


if __name__ == "__main__":
    main()
