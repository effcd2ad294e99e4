"""The tokenizer fingerprint a trie's header records: its one definition.

A fingerprint is the hex sha256 of a canonical JSON of what decides the ids
of plain text, so that two files that tokenize alike fingerprint alike
(whitespace, key order and the decoder do not count). The build
(``indexer.tokenizer``) stamps it into every trie; the runtime
(``dart_client``) recomputes it from the model's tokenizer.json to check a
trie before using it.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

__all__ = ["canonical_sha256", "hf_fingerprint", "tiktoken_fingerprint", "tokenizer_json_fingerprint", "trie_fingerprint"]


def canonical_sha256(obj: Any) -> str:
    blob = json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()


def hf_fingerprint(cfg: dict[str, Any]) -> str:
    """Fingerprint of a parsed Hugging Face tokenizer.json."""
    # Only what decides the ids of plain text: model (vocab, merges and
    # options), normalizer, pre-tokenizer, added tokens. Not the decoder,
    # padding, truncation or post-processor, nor key order or whitespace.
    model = dict(cfg.get("model") or {})
    vocab = model.get("vocab")
    if isinstance(vocab, dict):
        model["vocab"] = sorted(([i, t] for t, i in vocab.items()), key=lambda p: (p[0], p[1]))
    merges = model.get("merges")
    if isinstance(merges, list):
        # Old files store "a b", new ones ["a", "b"]; both mean the same.
        model["merges"] = [m.split(" ", 1) if isinstance(m, str) else list(m) for m in merges]
    added = sorted(
        (
            {k: tok.get(k) for k in ("id", "content", "special", "lstrip", "rstrip", "single_word", "normalized")}
            for tok in cfg.get("added_tokens") or []
        ),
        key=lambda t: t["id"],
    )
    return canonical_sha256(
        {
            "format": "hf-tokenizer",
            "model": model,
            "normalizer": cfg.get("normalizer"),
            "pre_tokenizer": cfg.get("pre_tokenizer"),
            "added_tokens": added,
        }
    )


def tiktoken_fingerprint(ranks: dict[bytes, int], pattern: str, special: dict[str, int]) -> str:
    """Fingerprint of a tiktoken rank table with its split pattern and special tokens."""
    import base64

    return canonical_sha256(
        {
            "format": "tiktoken-bpe",
            "ranks": [[r, base64.b64encode(t).decode("ascii")] for t, r in sorted(ranks.items(), key=lambda x: x[1])],
            "pattern": pattern,
            "special_tokens": sorted([i, s] for s, i in special.items()),
        }
    )


def tokenizer_json_fingerprint(spec: str | Path) -> str:
    """Fingerprint of a tokenizer.json file, or of the tokenizer.json in a folder."""
    path = Path(spec).expanduser()
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        raise FileNotFoundError(f"{spec}: no tokenizer.json there (give the file, or a folder holding one)")
    try:
        cfg = json.loads(path.read_bytes())
    except ValueError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(cfg, dict) or "model" not in cfg:
        raise ValueError(f"{path}: not a Hugging Face tokenizer.json (no 'model')")
    return hf_fingerprint(cfg)


def trie_fingerprint(info: dict[str, Any]) -> str:
    """The tokenizer fingerprint a trie records (``info["tokenizer"]["fingerprint"]``
    of NgramIndex.info() or NgramClient.info()); "" when it records none."""
    tokenizer = info.get("tokenizer")
    fp = tokenizer.get("fingerprint") if isinstance(tokenizer, dict) else None
    return fp if isinstance(fp, str) else ""
