"""Converting a trie saved by DART's ``TrieNgram::save`` into our format.

DART stores a node per n-gram with its frequency and parent; we regroup the
nodes by depth (= n-gram length), sort each depth lexicographically (by the
parent's rank, then the token) and hand the levels to the same writer as the
build. Probabilities stay DART's: count(s+w) / count(s) with DART's counts.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from indexer.trie_assembly import FORMAT_VERSION, LevelChunk, LevelPlan, count_histogram, write_trie
from indexer.trie_meta import tokenizer_meta, trie_meta
from ngram_service import _engine
from ngram_service.index import index_name


def convert_dart_trie(
    src: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    tokenizer: str | None = None,
    vocab_size: int | None = None,
    eos: int | str | None = None,
    compress: bool = False,
    name: str | None = None,
    format_version: int = FORMAT_VERSION,
    progress: Callable[[str], None] = lambda _m: None,
) -> int:
    """Writes ``out`` from DART trie ``src`` (trie file format ``format_version``); returns the file size."""
    order, token, parent, freq, depth = _engine.read_dart_trie(str(src))
    progress(f"read {src}: order {order}, {len(token):,} nodes")
    vocab = ("--vocab-size" if vocab_size else "the tokenizer's vocabulary" if tokenizer
             else "the trie's largest token id + 1; --vocab-size sets it")
    tok_meta = None
    eos_id: int | None = eos if isinstance(eos, int) else None
    if tokenizer is not None:
        from indexer.tokenizer import load_tokenizer

        tok = load_tokenizer(tokenizer, eos=eos)
        vocab_size = vocab_size or tok.vocab_size
        eos_id = tok.eos_id
        tok_meta = tokenizer_meta(tok.name, tok.fingerprint, tok.vocab_size)
    elif isinstance(eos, str):
        raise ValueError("--eos as a token string needs --tokenizer")
    nodes = np.arange(1, len(token))
    max_id = int(token[nodes].max()) if nodes.size else 0
    if nodes.size and int(token[nodes].min()) < 0:
        raise ValueError(f"{src}: negative token id {int(token[nodes].min())}")
    vocab_size = vocab_size or max_id + 1
    if max_id >= vocab_size:
        raise ValueError(f"{src}: token id {max_id} does not fit --vocab-size {vocab_size}")
    if eos_id is not None and not 0 <= eos_id < vocab_size:
        raise ValueError(f"{src}: eos id {eos_id} is outside [0, {vocab_size}) ({vocab})")
    if np.any(freq[nodes] < 1):
        raise ValueError(f"{src}: a node has frequency < 1")

    levels = _levels(order, token, parent, freq, depth, src)
    plans = [LevelPlan(len(c), count_histogram(c)) for _, c, _ in levels]
    meta = trie_meta(name=name or index_name(str(out)), tokenizer=tok_meta,
                     corpus={"converted_from": {"dart_trie": Path(src).name, "bytes": Path(src).stat().st_size,
                                                "nodes": len(token)}},
                     build={"tool": "ngram-build --from-dart-trie", "order": order, "eos_id": eos_id})

    def chunks() -> Iterator[tuple[int, LevelChunk]]:
        for k, (t, c, n) in enumerate(levels, start=1):
            yield k, LevelChunk(t, c, n if k < order else None)

    out = Path(out)
    from indexer.trie_output import write_file

    size = write_file(out, lambda path: write_trie(path, order=order, vocab_size=vocab_size, eos_id=eos_id,
                                                   meta=meta, plans=plans, chunks=chunks(),
                                                   format_version=format_version), compress)
    progress(f"wrote {out} ({size:,} bytes), n-grams per order {[p.size for p in plans]}")
    return size


def _levels(order: int, token: np.ndarray, parent: np.ndarray, freq: np.ndarray, depth: np.ndarray,
            src: object) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per depth k: (last tokens, counts, n_children) in lexicographic order."""
    rank = np.zeros(len(token), dtype=np.int64)  # a node's index within its level
    out = []
    prev_size = 1  # the root
    by_depth = np.argsort(depth, kind="stable")
    bounds = np.searchsorted(depth[by_depth], np.arange(order + 2))
    for k in range(1, order + 1):
        ids = by_depth[bounds[k]:bounds[k + 1]]
        prank = rank[parent[ids]]
        srt = np.lexsort((token[ids], prank))
        ids, prank = ids[srt], prank[srt]
        dup = (np.diff(prank) == 0) & (np.diff(token[ids]) == 0)
        if np.any(dup):
            raise ValueError(f"{src}: node {int(ids[1:][dup][0])} repeats a sibling's token")
        rank[ids] = np.arange(len(ids))
        if k > 1:
            out[-1] = (out[-1][0], out[-1][1], np.bincount(prank, minlength=prev_size).astype(np.uint64))
        out.append((token[ids].astype(np.int32), freq[ids].astype(np.uint64), np.zeros(len(ids), np.uint64)))
        prev_size = len(ids)
    return out
