"""Assembling a trie file from sorted per-level arrays.

Every path into the file format goes through here: the build pipeline (its
reduce outputs, streamed), the DART converter and the tests (in-memory
arrays). Level k's entries are the k-grams in lexicographic order; for each
we need its last token, its count and how many (k+1)-grams extend it.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np

from ngram_service import _engine

# What write_trie (and ngram-build) write unless told otherwise: version 1, whose lookups are the fastest
# today; version 2 (docs/FORMAT.md) takes about half the bytes and is opt-in until its lookups catch up.
FORMAT_VERSION = _engine.FORMAT_VERSION
FORMAT_VERSIONS = (_engine.FORMAT_VERSION, _engine.FORMAT_VERSION_2)


@dataclass
class LevelChunk:
    """A run of consecutive entries of one level, in the level's order.

    For level 1, ``tokens`` are the token ids (they need not be dense: the
    writer fills absent ids with count 0)."""

    tokens: np.ndarray  # int32
    counts: np.ndarray  # uint64
    n_children: np.ndarray | None  # uint64; None for the last level


@dataclass
class LevelPlan:
    """What must be known about a level before its entries stream in."""

    size: int = 0
    count_values: Counter = field(default_factory=Counter)  # count value -> entries with it


def meta_json(meta: dict[str, Any]) -> bytes:
    """The meta section: canonical JSON (sorted keys) so equal inputs give equal bytes."""
    return json.dumps(meta, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def write_trie(
    path: str | Path,
    *,
    order: int,
    vocab_size: int,
    eos_id: int | None,
    meta: dict[str, Any],
    plans: list[LevelPlan],
    chunks: Iterable[tuple[int, LevelChunk]],
    format_version: int = FORMAT_VERSION,
) -> int:
    """Writes a trie file atomically from (level, chunk) pairs; returns its size.

    ``format_version`` 2 (docs/FORMAT.md, "Version 2") is written from a
    version-1 file beside ``path`` (removed after), since each entry's token
    becomes its rank among the continuations of its suffix, which needs the
    whole trie; the input must then be suffix-closed (counted tries are), or
    ValueError names the first n-gram whose suffix is missing.

    ``plans[k-1]`` gives level k's size and how many entries have each count
    (level 1 counts only the tokens that occur: the file is dense over the
    vocabulary, the others get count 0). Chunks of one level must arrive in
    order; levels may interleave.
    """
    if format_version not in FORMAT_VERSIONS:
        raise ValueError(f"format_version must be one of {FORMAT_VERSIONS}, got {format_version!r}")
    if len(plans) != order:
        raise ValueError(f"need {order} level plans, got {len(plans)}")
    meta = {**meta, "format_version": format_version}
    if format_version == 2:
        path = Path(path)
        v1 = path.with_name(path.name + ".v1.tmp")
        try:
            write_trie(v1, order=order, vocab_size=vocab_size, eos_id=eos_id, meta=meta, plans=plans,
                       chunks=chunks, format_version=1)
            return convert_to_v2(v1, path)
        finally:
            v1.unlink(missing_ok=True)
    sizes = [vocab_size] + [p.size for p in plans[1:]]
    histograms = [Counter(p.count_values) for p in plans]
    if plans[0].size < vocab_size:
        histograms[0][0] += vocab_size - plans[0].size
    values = [sorted(h) for h in histograms]
    freqs = [[h[v] for v in vals] for h, vals in zip(histograms, values)]
    writer = _engine.TrieWriter(
        str(path), order, vocab_size, -1 if eos_id is None else eos_id, meta_json(meta), sizes, values, freqs
    )
    next_token = 0  # level 1 is written densely: fill the ids no chunk names
    for k, chunk in chunks:
        if k == 1:
            next_token = _append_unigrams(writer, chunk, next_token, vocab_size, order)
        else:
            writer.append(k, chunk.tokens, chunk.counts, chunk.n_children)
    if next_token < vocab_size:
        _append_unigram_gap(writer, vocab_size - next_token, order)
    writer.finish()
    return writer.file_size


def convert_to_v2(src: str | Path, dst: str | Path) -> int:
    """Writes ``dst`` (atomically) in format version 2 from the version-1 trie ``src``, with the same meta
    but ``format_version`` 2; returns its size. ValueError when ``src`` is not suffix-closed."""
    source = _engine.Trie.open(str(src))
    if source.format_version != 1:
        raise ValueError(f"{src}: format version {source.format_version}, need a version-1 trie")
    meta = {**json.loads(source.meta_json), "format_version": 2}
    return _engine.write_trie_v2(source, str(dst), meta_json(meta))


def _append_unigrams(writer: Any, chunk: LevelChunk, next_token: int, vocab_size: int, order: int) -> int:
    tok = chunk.tokens.astype(np.int64)
    if tok.size == 0:
        return next_token
    if tok[0] < next_token or (tok.size > 1 and np.any(np.diff(tok) <= 0)):
        raise ValueError("level 1 chunks must list token ids in strictly ascending order")
    if tok[-1] >= vocab_size:
        raise ValueError(f"token id {int(tok[-1])} out of range for vocab_size {vocab_size}")
    span = int(tok[-1]) + 1 - next_token
    counts = np.zeros(span, dtype=np.uint64)
    counts[tok - next_token] = chunk.counts
    children = None
    if order > 1:
        children = np.zeros(span, dtype=np.uint64)
        children[tok - next_token] = chunk.n_children
    writer.append(1, None, counts, children)
    return int(tok[-1]) + 1


def _append_unigram_gap(writer: Any, n: int, order: int) -> None:
    zeros = np.zeros(n, dtype=np.uint64)
    writer.append(1, None, zeros, zeros if order > 1 else None)


def _rows_as_keys(rows: np.ndarray) -> np.ndarray:
    """Rows of non-negative ids as byte strings whose order is lexicographic."""
    be = np.ascontiguousarray(rows.astype(">u4"))
    return be.view(f"V{4 * rows.shape[1]}").ravel()


def levels_from_ngrams(ngrams: list[tuple[np.ndarray, np.ndarray]]) -> Iterator[tuple[int, LevelChunk]]:
    """In-memory levels: ``ngrams[k-1]`` = (int [n_k, k] sorted lexicographically,
    counts [n_k]). Yields one chunk per level with children counted from the
    next level's prefixes."""
    order = len(ngrams)
    for k in range(1, order + 1):
        grams, counts = ngrams[k - 1]
        n_children = None
        if k < order:
            nxt = ngrams[k][0]
            parents = np.searchsorted(_rows_as_keys(grams), _rows_as_keys(nxt[:, :k])) if len(nxt) else np.zeros(0, np.int64)
            n_children = np.bincount(parents, minlength=len(grams)).astype(np.uint64)
        yield k, LevelChunk(grams[:, k - 1].astype(np.int32), counts.astype(np.uint64), n_children)


def count_histogram(counts: np.ndarray) -> Counter:
    """count value -> number of entries with it."""
    values, freq = np.unique(counts, return_counts=True)
    return Counter(dict(zip(values.tolist(), freq.tolist())))


def plans_from_ngrams(ngrams: list[tuple[np.ndarray, np.ndarray]]) -> list[LevelPlan]:
    return [LevelPlan(len(c), count_histogram(c)) for _, c in ngrams]
