"""NgramIndex: the in-process Python API over the C++ engine.

Arrays in, arrays out; the GIL is released inside every query.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ngram_service import _engine
from ngram_service._engine import TrieFormatError
from ngram_service.tree import PrunedTree

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


class TopK(NamedTuple):
    """The k most frequent continuations of a context."""

    tokens: np.ndarray  # int32 [k'], most frequent first
    probs: np.ndarray  # float32 [k'], count(s+w) / count(s)
    counts: np.ndarray  # uint64 [k']
    matched: int  # length of the context suffix s used; 0: unigram distribution


class NgramIndex:
    """A trie file opened for queries.

    ``NgramIndex.open(path)`` maps a plain trie file (opening costs the same
    whatever the file's size); ``mode="ram"`` reads it into memory instead.
    A zstd-compressed trie (``ngram-build --compress``) is always
    decompressed into RAM.
    """

    def __init__(self, engine: "_engine.Trie", compressed_bytes: int | None = None) -> None:
        """engine: an opened ``_engine.Trie``; compressed_bytes: the size of
        the zstd file it was decompressed from, if it was."""
        self._t = engine
        self._compressed_bytes = compressed_bytes
        # The per-query methods are the engine's own (bound here, so that a
        # call runs no Python frame: prune()'s overhead is part of every
        # draft step); the definitions below document them.
        self.prune = engine.prune
        self.conditional_probs = engine.conditional_probs
        try:
            self._meta: dict[str, Any] = json.loads(engine.meta_json.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise TrieFormatError(f"{engine.path}: section meta: not valid UTF-8 JSON ({e})") from e

    @property
    def engine(self) -> "_engine.Trie":
        """The engine's trie, for the bindings that take one (``_engine.PackedLattices.prune``)."""
        return self._t

    @classmethod
    def open(cls, path: str | Path, mode: str = "mmap", verify: bool = False) -> "NgramIndex":
        """Opens a trie file.

        mode: "mmap" (default) or "ram". verify: also check every section's
        checksum (reads the whole file). Raises TrieFormatError (a ValueError)
        for a missing, truncated, corrupted or foreign file.
        """
        if mode not in ("mmap", "ram"):
            raise ValueError(f"mode must be 'mmap' or 'ram', got {mode!r}")
        path = str(path)
        with open(path, "rb") as f:
            magic = f.read(4)
        if magic == ZSTD_MAGIC:
            return cls(_engine.Trie.from_bytes(_decompress(path), path, verify), Path(path).stat().st_size)
        return cls(_engine.Trie.open(path, in_ram=(mode == "ram"), verify=verify))

    @property
    def order(self) -> int:
        """N: the longest n-gram stored."""
        return self._t.order

    @property
    def vocab_size(self) -> int:
        return self._t.vocab_size

    @property
    def eos_id(self) -> int | None:
        e = self._t.eos_id
        return None if e < 0 else e

    def conditional_probs(self, contexts: Any, candidates: Any) -> tuple[np.ndarray, np.ndarray]:
        """DART-compatible conditional probabilities.

        contexts: int [B, C] (C >= 1); candidates: int [B, K].
        Returns (probs float32 [B, K], matched int32 [B, K]): for each query,
        the longest suffix s of the context (at most order-1 tokens) that
        occurs and is followed by the candidate w gives
        p = float32(count(s+w)) * (1 / float32(count(s))) and matched = len(s);
        a candidate never seen after any suffix gets 0 and 0.
        """
        return self._t.conditional_probs(contexts, candidates)

    def count(self, ngram: Any) -> int:
        """Occurrences of an n-gram of 1..order tokens in the corpus (0 if absent)."""
        return self._t.count(ngram)

    def topk(self, context: Any, k: int) -> TopK:
        """The k most frequent continuations of the longest suffix of
        ``context`` (at most order-1 tokens) that has any continuation; with
        none, the k most frequent tokens (matched = 0)."""
        tokens, probs, counts, matched = self._t.topk(context, k)
        return TopK(tokens, probs, counts, matched)

    def prune(self, prefix: Any, topk_tokens: Any, topk_probs: Any, **params: Any) -> PrunedTree:
        """DART tree pruning of one draft lattice; see ngram_service.tree.prune."""
        return _engine.prune(self._t, prefix, topk_tokens, topk_probs, **params)

    def prune_batch(self, requests: Any, *, threads: int | None = None, **params: Any) -> list[PrunedTree]:
        """Many prune requests on all cores, GIL released; see ngram_service.tree.prune_batch."""
        return _engine.prune_batch(self._t, requests, threads=threads, **params)

    def info(self) -> dict[str, Any]:
        """Header, metadata (tokenizer, corpus manifest, build parameters) and
        sizes: file_bytes is the file's size; a zstd-compressed trie also has
        image_bytes (the plain trie held in RAM) and compressed = True.
        ram_bytes is what the trie takes read into RAM (mode="ram", or
        compressed): its image plus, for format version 1, the token words
        (with their count ranks) and child offsets decoded at open for speed
        (docs/FORMAT.md, "In RAM")."""
        counts = [self._t.ngram_count(k) for k in range(1, self.order + 1)]
        sizes = {"file_bytes": self._t.file_size}
        if self._compressed_bytes is not None:  # file_bytes is the file's; image_bytes what it holds
            sizes = {"file_bytes": self._compressed_bytes, "image_bytes": self._t.file_size, "compressed": True}
        sizes["ram_bytes"] = self._t.ram_bytes
        return {
            "path": self._t.path,
            "order": self.order,
            "vocab_size": self.vocab_size,
            "eos_id": self.eos_id,
            **sizes,
            "mapped": self._t.mapped,
            "ngrams": counts,
            "ngrams_total": sum(counts),
            "tokens": self._t.total_tokens,
            **self._meta,
        }

    def sections(self) -> list[dict[str, Any]]:
        """The section table: kind, level, offset, length, count, width, crc32c."""
        return self._t.sections()

    def verify(self) -> None:
        """Recomputes every section's checksum; raises TrieFormatError on a mismatch."""
        self._t.verify_checksums()

    def __repr__(self) -> str:
        return f"NgramIndex({self._t.path!r}, order={self.order}, vocab_size={self.vocab_size})"


def _decompress(path: str) -> bytes:
    import zstandard

    try:
        with open(path, "rb") as f:
            return zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True).read()
    except zstandard.ZstdError as e:
        raise TrieFormatError(f"{path}: corrupted zstd-compressed trie: {e}") from e
