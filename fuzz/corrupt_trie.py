"""Corrupted copies of a trie file, one region at a time, and what opening them does.

Every region of a file (format version 1 or 2) is hit: the header, the section table and
each section (docs/FORMAT.md), with bit flips (first, middle and last byte,
and random ones), 4-byte overwrites and truncations.

    python fuzz/corrupt_trie.py TRIE --check      # open each in this process, print a JSON summary
    python fuzz/corrupt_trie.py TRIE --out DIR    # write each as a file (for fuzz_trie_reader under ASan)

--check asks: with verify=True every copy is refused (TrieFormatError);
without it, each copy is refused or answers queries, and nothing else
happens (no other exception, no crash, no hang: run it with a timeout).
Exit status 0 when that holds, 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import random
import struct
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

HEADER_BYTES = 64
ENTRY_BYTES = 48


def regions(data: bytes) -> list[tuple[str, int, int]]:
    """(name, offset, length) of the header, the section table and every section."""
    count, = struct.unpack_from("<I", data, 32)
    table, = struct.unpack_from("<Q", data, 40)
    out = [("header", 0, HEADER_BYTES), ("section_table", table, count * ENTRY_BYTES)]
    for i in range(count):
        kind, level, offset, length = struct.unpack_from("<IIQQ", data, table + i * ENTRY_BYTES)
        out.append((f"section[{i}] kind {kind} level {level}", offset, length))
    return out


def variants(data: bytes, seed: int = 13, random_flips: int = 6) -> Iterator[tuple[str, bytes]]:
    """(description, corrupted bytes): bit flips and overwrites inside each region, and truncations."""
    rng = random.Random(seed)
    for name, off, length in regions(data):
        if length == 0:
            continue
        spots = sorted({off, off + length // 2, off + length - 1,
                        *(off + rng.randrange(length) for _ in range(random_flips))})
        for pos in spots:
            bit = rng.randrange(8)
            b = bytearray(data)
            b[pos] ^= 1 << bit
            yield f"{name}: bit {bit} of byte {pos} flipped", bytes(b)
        pos = off + rng.randrange(max(1, length - 3))
        b = bytearray(data)
        b[pos:pos + 4] = rng.randbytes(4) if b[pos:pos + 4] != b"\xff\xff\xff\xff" else b"\0\0\0\0"
        if bytes(b) != data:
            yield f"{name}: 4 bytes at {pos} overwritten", bytes(b)
        yield f"{name}: truncated at {off + length // 2}", data[:off + length // 2]
    yield "empty file", b""


def _query(index) -> None:  # noqa: ANN001 - an NgramIndex
    import numpy as np

    v = max(1, min(index.vocab_size, 1 << 20))
    rng = np.random.default_rng(0)
    ctx = rng.integers(0, v, size=(8, 3))
    cand = rng.integers(0, v, size=(8, 4))
    index.conditional_probs(ctx, cand)
    for row in ctx[:4]:
        index.topk(row, 5)
        index.count(row[: min(len(row), index.order)])
    toks = np.stack([rng.choice(v, size=min(v, 3), replace=False) for _ in range(3)])
    probs = np.full(toks.shape, 0.3, dtype=np.float32)
    index.prune(ctx[0], toks, probs, eos_token_id=-1)


def check(path: Path) -> dict:
    from ngram_service import NgramIndex
    from ngram_service._engine import TrieFormatError

    data = path.read_bytes()
    summary = {"variants": 0, "refused_with_verify": 0, "refused_without_verify": 0,
               "answered_without_verify": 0, "refused_by_a_query": 0, "not_refused_with_verify": [],
               "other_errors": []}
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "corrupt.ngt"
        for what, blob in variants(data):
            summary["variants"] += 1
            f.write_bytes(blob)
            try:
                NgramIndex.open(f, verify=True)
                summary["not_refused_with_verify"].append(what)
            except TrieFormatError:
                summary["refused_with_verify"] += 1
            for mode in ("mmap", "ram"):
                try:
                    index = NgramIndex.open(f, mode=mode)
                except TrieFormatError:
                    summary["refused_without_verify"] += 1
                    continue
                except Exception as e:  # noqa: BLE001 - anything else is the finding
                    summary["other_errors"].append(f"{what} ({mode}, open): {type(e).__name__}: {e}")
                    continue
                try:
                    _query(index)
                    summary["answered_without_verify"] += 1
                except ValueError:  # a corrupted structure found by a query, or ids outside the vocabulary
                    summary["refused_by_a_query"] += 1
                except Exception as e:  # noqa: BLE001
                    summary["other_errors"].append(f"{what} ({mode}, query): {type(e).__name__}: {e}")
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trie", type=Path, help="a valid, uncompressed trie file (format version 1 or 2)")
    ap.add_argument("--check", action="store_true", help="open every corrupted copy here; print a JSON summary")
    ap.add_argument("--out", type=Path, help="write every corrupted copy into this folder")
    a = ap.parse_args(argv)
    if not a.check and not a.out:
        ap.error("give --check, --out DIR or both")
    data = a.trie.read_bytes()
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        n = 0
        for n, (_what, blob) in enumerate(variants(data), 1):
            (a.out / f"corrupt-{n:05d}").write_bytes(blob)
        print(json.dumps({"written": n, "folder": str(a.out)}))
    if a.check:
        s = check(a.trie)
        print(json.dumps(s, indent=1))
        return 0 if not s["not_refused_with_verify"] and not s["other_errors"] else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
