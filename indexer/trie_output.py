"""The write stage: the reduce tasks' level slices streamed, level by level
and range by range, into the trie writer; the file written atomically to a
local path, or written locally and uploaded whole to a URI; optionally
zstd-compressed for shipping."""
from __future__ import annotations

import bisect
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from indexer.build_config import BuildConfig, BuildError
from indexer.range_planning import RangePlan
from indexer.reduce_task import ReduceResult
from indexer.storage import Store, is_uri, upload_atomic
from indexer.trie_assembly import LevelChunk, LevelPlan, write_trie
from indexer.work_store import level_key

#: {range holding unigram t: (t, children counted in later ranges)} (``split_children``).
SplitChildren = dict[int, tuple[int, int]]


def write_output(cfg: BuildConfig, store: Store, meta: dict[str, Any], plans: list[LevelPlan], vocab_size: int,
                 eos_id: int, ranges: int, split_children: SplitChildren) -> int:
    """Writes the trie atomically to a local path, or locally and then uploaded
    whole to a URI (an object appears only once its upload completes); its size."""
    chunks = _reduce_chunks(store, ranges, cfg.order, split_children)

    def write(path: Path) -> int:
        return write_trie(path, order=cfg.order, vocab_size=vocab_size, eos_id=eos_id, meta=meta, plans=plans,
                          chunks=chunks, format_version=cfg.format_version)

    if not is_uri(cfg.out):
        out = Path(cfg.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        return write_file(out, write, cfg.compress)
    with tempfile.TemporaryDirectory(prefix="ngram-out-") as tmp:
        local = Path(tmp) / "trie.ngt"
        size = write_file(local, write, cfg.compress)
        upload_atomic(local, cfg.out)
        return size


def write_file(out: Path, write: Callable[[Path], int], compress: bool) -> int:
    """A trie file at ``out``: ``write(path)`` writes the plain trie
    (atomically, returning its size) there, or, with ``compress``, beside it
    as ``OUT.plain.tmp``, which is then zstd-compressed into ``out``
    (compress_file) and removed: the one compress step of every writer.
    Returns out's size."""
    if not compress:
        return write(out)
    plain = out.with_name(out.name + ".plain.tmp")
    try:
        write(plain)
        return compress_file(plain, out)
    finally:
        plain.unlink(missing_ok=True)  # also when interrupted (Ctrl-C, SIGTERM)


def split_children(plan: RangePlan, reduces: list[ReduceResult]) -> SplitChildren:
    """For a first token t split over several ranges, its unigram's children
    that the ranges after the one holding the unigram counted:
    {range holding unigram t: (t, children to add)}."""
    keys = [tuple(e) for e in plan.edges]
    extra: dict[int, tuple[int, int]] = {}
    for r in reduces:
        t, second = keys[r.index]
        if second < 0 or not r.carried_children:
            continue
        head = bisect.bisect_right(keys, (t, -1)) - 1  # the range holding key [t, -1]
        extra[head] = (t, extra.get(head, (t, 0))[1] + r.carried_children)
    return extra


def _reduce_chunks(store: Store, ranges: int, order: int,
                   split_children: SplitChildren) -> Iterator[tuple[int, LevelChunk]]:
    """(level, chunk) pairs in the order the trie writer takes them: level 1
    of every range, then level 2, ..."""
    for k in range(1, order + 1):
        for i in range(ranges):
            location = store.location(level_key(i, k))
            if store.remote:
                from indexer.storage import filesystem

                fs, path = filesystem(location)
                pf = pq.ParquetFile(fs.open_input_file(path))
            else:
                pf = pq.ParquetFile(location)
            if k == 1 and i in split_children:
                yield k, _with_split_children(pf.read(), *split_children[i], location)
                continue
            for batch in pf.iter_batches(batch_size=1 << 20):
                yield k, LevelChunk(
                    batch.column("w").to_numpy().astype(np.int32, copy=False),
                    batch.column("c").to_numpy().astype(np.uint64, copy=False),
                    batch.column("n").to_numpy().astype(np.uint64, copy=False) if k < order else None,
                )


def _with_split_children(table: pa.Table, token: int, extra: int, location: str) -> LevelChunk:
    """Level 1 of the range holding a split token's unigram, the unigram's
    children counted in the later ranges added (it is the range's last
    unigram: the range ends inside that token's n-grams)."""
    tokens = table.column("w").to_numpy().astype(np.int32)
    children = table.column("n").to_numpy().astype(np.uint64)
    if not len(tokens) or tokens[-1] != token:
        raise BuildError(f"{location}: unigram {token} is missing, but later ranges hold {extra} of its bigrams")
    children[-1] += np.uint64(extra)
    return LevelChunk(tokens, table.column("c").to_numpy().astype(np.uint64), children)


def compress_file(src: Path, dst: Path, level: int = 10) -> int:
    """zstd-compresses a finished trie for shipping; atomic like every write. The frame carries zstd's
    checksum, so a damaged copy is refused while it is decompressed, before any of it is opened."""
    import zstandard

    tmp = dst.with_name(dst.name + f".tmp-{os.getpid()}")
    cctx = zstandard.ZstdCompressor(level=level, threads=-1, write_content_size=True, write_checksum=True)
    try:
        with open(src, "rb") as fi, open(tmp, "wb") as fo:
            cctx.copy_stream(fi, fo, size=src.stat().st_size)
            fo.flush()
            os.fsync(fo.fileno())
        os.replace(tmp, dst)
    finally:
        tmp.unlink(missing_ok=True)  # gone after the rename; left only by a failed or interrupted write
    return dst.stat().st_size
