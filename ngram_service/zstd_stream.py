"""A zstd stream's decompressed bytes, with a cut or corrupt stream reported
instead of read as a shorter valid one: compressed tries (``ngram-build
--compress``) and zstd shards both read through it."""
from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

import zstandard


class ZstdStreamError(ValueError):
    """The stream is cut inside a frame, or corrupt; the message says which."""


def zstd_chunks(f: BinaryIO, read_size: int = 1 << 18) -> Iterator[bytes]:
    """The decompressed bytes of every frame of ``f``, chunk by chunk.

    Not ZstdDecompressor.stream_reader: when the file ends inside a frame it
    just returns EOF. A decompressobj per frame exposes ``eof``, so an
    unfinished frame at the end of the file is detected; ``unused_data``
    carries the rest into the next frame (several frames concatenated are one
    stream). max_window_size admits files written with ``zstd --long``."""
    dctx = zstandard.ZstdDecompressor(max_window_size=1 << 31)
    dobj = None
    try:
        while data := f.read(read_size):
            while data:
                if dobj is None:
                    dobj = dctx.decompressobj()
                out = dobj.decompress(data)
                if out:
                    yield out
                if dobj.eof:
                    data, dobj = dobj.unused_data, None
                else:
                    data = b""
    except zstandard.ZstdError as e:
        raise ZstdStreamError(f"corrupt zstd stream ({e})") from e
    if dobj is not None:
        raise ZstdStreamError("truncated zstd stream (the file ends inside a frame)")
