"""Protobuf's wire format for a PruneTree request's lattices, straight from
numpy arrays.

proto/ngram/v1/ngram.proto defines the messages; this module writes the same
bytes for a ``PruneInput``. Python protobuf fills a repeated field one Python
number at a time: for one lattice of 8 x 25 candidates that cost the client
about 13 µs a call, more than the engine takes for a tenth of the tree. The
lattice fields are fixed-width and packed, so here each is one array copy.
tests/test_wire.py checks every function against protobuf's own encoder.
"""
from __future__ import annotations

import numpy as np

# Wire types (https://protobuf.dev/programming-guides/encoding/).
VARINT, LEN = 0, 2


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
