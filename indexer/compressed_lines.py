"""The lines of a JSON-lines shard's byte stream, plain, gzip or zstd, with
a cut or corrupt compressed stream reported (``StreamBroken``) instead of
read as a shorter valid one."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import BinaryIO

from ngram_service import zstd_stream

# Compressed bytes read per step. Small enough that the decompressed output of
# one step stays a few MB for text, large enough that per-call overhead is noise.
READ_SIZE = 1 << 18


class StreamBroken(Exception):
    """Raised by a chunk source when the compressed stream is cut or corrupt.

    The line iterator turns it into a ShardError carrying the line number.
    """


def plain_chunks(f: BinaryIO) -> Iterator[bytes]:
    while chunk := f.read(READ_SIZE):
        yield chunk


def gzip_chunks(f: BinaryIO) -> Iterator[bytes]:
    # GzipFile checks each member's CRC and length and raises EOFError when
    # the file ends inside a member, which is what we want. read1, not read:
    # read gathers several decompression steps and drops what it gathered
    # when one raises, so the lines before a break would never reach the
    # line counter and the error would name line 1.
    gz = gzip.GzipFile(fileobj=f, mode="rb")
    try:
        while chunk := gz.read1(READ_SIZE):
            yield chunk
    except EOFError as e:
        raise StreamBroken(f"truncated gzip stream ({e})") from e
    except (OSError, zlib.error) as e:  # BadGzipFile is an OSError
        raise StreamBroken(f"corrupt gzip stream ({e})") from e


def zstd_chunks(f: BinaryIO) -> Iterator[bytes]:
    try:
        yield from zstd_stream.zstd_chunks(f, READ_SIZE)
    except zstd_stream.ZstdStreamError as e:
        raise StreamBroken(str(e)) from e


def split_lines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """Split a byte stream on b"\\n" only.

    Never str.splitlines(): texts hold U+2028/U+2029 (and \\x1c..\\x1e, \\x85),
    which it treats as line ends. A line longer than a chunk is gathered in a
    list and joined once, so huge documents cost linear, not quadratic, time.
    """
    pending: list[bytes] = []
    for chunk in chunks:
        parts = chunk.split(b"\n")
        if len(parts) == 1:
            pending.append(chunk)
            continue
        if pending:
            pending.append(parts[0])
            parts[0] = b"".join(pending)
            pending = []
        last = parts.pop()
        if last:
            pending.append(last)
        yield from parts
    if pending:
        yield b"".join(pending)


def chunk_source(shard_format: str) -> Callable[[BinaryIO], Iterator[bytes]]:
    """The decompressed chunks of a ``jsonl``, ``jsonl.gz`` or ``jsonl.zst`` file."""
    return {"jsonl": plain_chunks, "jsonl.gz": gzip_chunks, "jsonl.zst": zstd_chunks}[shard_format]
