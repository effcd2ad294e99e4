"""Protobuf's wire format for the per-call messages of PruneTree, straight
from and to numpy arrays.

proto/ngram/v1/ngram.proto defines the messages; this module writes and
reads the same bytes for a ``PruneInput`` and a ``PruneTreeResponse``. Python
protobuf fills or reads a repeated field one Python number at a time (about
25 ns each): for one lattice of 8 x 25 candidates that cost the client 15 µs
a call to build and 6 µs to read, more than the engine takes for half the
tree. The lattice and tree fields are fixed-width and packed, so here they
are one array copy each. tests/test_wire.py checks every function against
protobuf's own encoder and parser.
"""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np

# Wire types (https://protobuf.dev/programming-guides/encoding/).
VARINT, I64, LEN, I32 = 0, 1, 2, 5


def varint(n: int) -> bytes:
    """A non-negative integer as a base-128 varint."""
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def length_delimited(field: int, payload: bytes) -> bytes:
    """Field `field` holding `payload` (a message, or a packed array)."""
    return varint(field << 3 | LEN) + varint(len(payload)) + payload


def packed(field: int, values: np.ndarray, dtype: str) -> bytes:
    """A packed repeated fixed-width field: `values` as little-endian
    `dtype` ('<i8' sfixed64, '<u4' fixed32, '<i4' sfixed32, '<f4' float).
    Empty arrays are left out, as protobuf leaves them out."""
    if len(values) == 0:
        return b""
    return length_delimited(field, np.ascontiguousarray(values, dtype=dtype).tobytes())


def prune_input(prefix: np.ndarray, level_sizes: np.ndarray, tokens: np.ndarray, probs: np.ndarray) -> bytes:
    """A serialized PruneInput: prefix and tokens as int64, level sizes as
    uint32, probs as float32 (callers pass integer ids and sizes that fit)."""
    return (packed(1, prefix, "<i8") + packed(2, level_sizes, "<u4") + packed(3, tokens, "<i8")
            + packed(4, probs, "<f4"))


def _read_varint(data: memoryview, pos: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated message: a varint runs past the end")
        b = data[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return n, pos
        shift += 7


def fields(data: bytes | memoryview) -> Iterator[tuple[int, int, int | memoryview]]:
    """(field, wire type, value) of each field of a serialized message: an
    int for VARINT, I64 and I32 (raw little-endian bits), the payload for LEN."""
    view = memoryview(data)
    pos = 0
    while pos < len(view):
        key, pos = _read_varint(view, pos)
        field, wire = key >> 3, key & 7
        if wire == VARINT:
            value, pos = _read_varint(view, pos)
        elif wire in (I64, I32):
            size = 8 if wire == I64 else 4
            if pos + size > len(view):
                raise ValueError("truncated message: a fixed-width field runs past the end")
            value = int.from_bytes(view[pos:pos + size], "little")
            pos += size
        elif wire == LEN:
            size, pos = _read_varint(view, pos)
            if pos + size > len(view):
                raise ValueError("truncated message: a length-delimited field runs past the end")
            value = view[pos:pos + size]
            pos += size
        else:
            raise ValueError(f"unsupported wire type {wire} (field {field})")
        yield field, wire, value


def _fixed_array(chunks: list[bytes], dtype: str) -> np.ndarray:
    return np.frombuffer(b"".join(chunks), dtype=dtype).astype(dtype[1:], copy=True)


def prune_tree_response(data: bytes) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """A serialized PruneTreeResponse as (tokens int32, parents int32,
    scores float32) per tree; scores is empty when the server sent none. A
    repeated field may come packed or one element at a time (both are
    valid encodings); unknown fields are skipped."""
    trees = []
    for field, wire, value in fields(data):
        if field != 1 or wire != LEN:
            continue
        parts: dict[int, list[bytes]] = {1: [], 2: [], 3: []}
        for f, w, v in fields(value):
            if f in parts:
                parts[f].append(bytes(v) if w == LEN else int(v).to_bytes(4, "little"))
        trees.append((_fixed_array(parts[1], "<i4"), _fixed_array(parts[2], "<i4"), _fixed_array(parts[3], "<f4")))
    return trees
