"""Small random corpora for the build tests: zstd JSON-lines shards of words
picked to exercise the tokenizer (multi-byte characters, newlines, spaces)."""
from __future__ import annotations

import json
import random
from pathlib import Path

import zstandard

WORDS = ["the", " trie", " host", "draft", " tree", "\n", "naïve", "日本", "é", "42", "x", "PEP", " of", " a"]


def write_shards(root: Path, *, seed: int, shards: int, docs: int, max_words: int = 80,
                 first_in_sub: bool = False) -> Path:
    """Writes ``root/part-{s}.jsonl.zst`` (the first in ``root/sub`` when
    ``first_in_sub``, so that inputs are found in sub-folders too); returns root."""
    rng = random.Random(seed)
    if first_in_sub:
        (root / "sub").mkdir(parents=True, exist_ok=True)
    for s in range(shards):
        texts = ["".join(rng.choice(WORDS) for _ in range(rng.randint(0, max_words))) for _ in range(docs)]
        lines = "".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts)
        where = root / "sub" if first_in_sub and s == 0 else root
        (where / f"part-{s}.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(lines.encode()))
    return root
