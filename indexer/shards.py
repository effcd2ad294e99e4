"""Reading corpus shards: Dolma-style JSON lines (plain, gzip, zstd) and Parquet.

A shard is read as a stream of *batches of document texts*, each batch bounded
by its total number of characters, so memory stays flat whatever the shard
size. Nothing else of a document (id, metadata) is kept.

Supported files (by name, case-insensitive):

==============================  ===============================================
``.jsonl`` ``.json``            JSON lines, one object per line
``.jsonl.gz`` ``.json.gz``      the same, gzip-compressed (multi-member is fine)
``.jsonl.zst`` ``.json.zst``    the same, zstd-compressed (multi-frame is fine)
``.parquet``                    a string column holding the text, or a list of
                                token ids (pre-tokenized, ``indexer.token_shards``)
``.npy``                        flat token ids (Dolma / OLMo), ``indexer.token_shards``
==============================  ===============================================

Shards may be local or in object storage (``s3://``, ``gs://``, through
``indexer.storage``); ``indexer.shard_discovery`` finds them.

Errors name the place: ``ShardError`` prints as ``path:line: message`` where
``line`` is 1-based (for Parquet it is the 1-based row number).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from indexer.compressed_lines import READ_SIZE, StreamBroken, chunk_source, split_lines
from indexer.storage import filesystem, is_uri

__all__ = [
    "DEFAULT_BATCH_CHARS",
    "SUPPORTED_SUFFIXES",
    "ShardError",
    "ShardReader",
    "ShardStats",
    "iter_text_batches",
    "shard_format",
]

#: Default bound on the characters in one batch (~4 M characters is a few
#: tens of MB of Python strings plus the token ids made from them).
DEFAULT_BATCH_CHARS = 4_000_000

#: File name endings we read, mapped to the format name.
SUPPORTED_SUFFIXES: dict[str, str] = {
    ".jsonl": "jsonl",
    ".json": "jsonl",
    ".jsonl.gz": "jsonl.gz",
    ".json.gz": "jsonl.gz",
    ".jsonl.zst": "jsonl.zst",
    ".json.zst": "jsonl.zst",
    ".parquet": "parquet",
    ".npy": "npy",
}

# How many error messages ShardStats keeps when skip_bad is on; the count
# itself is exact.
_MAX_KEPT_ERRORS = 10


# JSON escapes of UTF-16 surrogates (\ud800..\udfff). json.loads turns a *lone*
# one into a Python str that cannot be encoded as UTF-8, which would crash the
# tokenizer later; we look for them only in lines that contain such an escape.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class ShardError(ValueError):
    """A problem with a shard (or an input pattern), located as ``path:line``.

    ``line`` is 1-based; for Parquet it is the 1-based row; ``None`` when the
    problem is not tied to a line (missing column, unreadable file, bad input).
    """

    def __init__(self, path: str | os.PathLike[str], line: int | None, message: str) -> None:
        self.path = os.fspath(path)
        self.line = line
        self.message = message
        where = self.path if line is None else f"{self.path}:{line}"
        super().__init__(f"{where}: {message}")

    # Exceptions are pickled by their args; ours has three, so say so, or a
    # ShardError raised in a worker process could not be sent back.
    def __reduce__(self) -> tuple[type[ShardError], tuple[str, int | None, str]]:
        return (type(self), (self.path, self.line, self.message))


@dataclass
class ShardStats:
    """What a reader saw in one pass over a shard."""

    documents: int = 0  #: documents yielded
    characters: int = 0  #: characters in the documents yielded
    skipped: int = 0  #: bad documents skipped (only with skip_bad=True)
    errors: list[str] = field(default_factory=list)  #: the first few skip reasons

    def _record_skip(self, message: str) -> None:
        self.skipped += 1
        if len(self.errors) < _MAX_KEPT_ERRORS:
            self.errors.append(message)


def shard_format(path: str | os.PathLike[str]) -> str | None:
    """Return ``"jsonl"``, ``"jsonl.gz"``, ``"jsonl.zst"``, ``"parquet"`` or None."""
    name = os.path.basename(os.fspath(path)).lower()
    # Longest suffix first so ".jsonl.gz" is not mistaken for something else.
    for suffix in sorted(SUPPORTED_SUFFIXES, key=len, reverse=True):
        if name.endswith(suffix) and len(name) > len(suffix):
            return SUPPORTED_SUFFIXES[suffix]
    return None


def supported_list() -> str:
    """The supported file endings, for messages."""
    return ", ".join(SUPPORTED_SUFFIXES)


# --------------------------------------------------------------------------
# Documents
def _describe(value: object) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", list: "an array", dict: "an object"}.get(
        type(value), type(value).__name__
    )


def _json_lines_hint(line: str, lineno: int, message: str) -> str:
    """A JSON lines error that says what the format wants where the file may
    not be JSON lines at all: an array (a common .json, one array of
    objects), or its first line."""
    if line.lstrip().startswith("["):
        return f"{message}: a JSON array; expected one JSON object a line (JSON lines), not an array of them"
    return f"{message}; expected one JSON object a line (JSON lines)" if lineno == 1 else message


# --------------------------------------------------------------------------
# Readers


class ShardReader:
    """Iterate over one shard as batches of document texts.

    >>> reader = ShardReader("corpus/a.jsonl.zst")
    >>> for texts in reader:          # list[str], about batch_chars characters
    ...     ...
    >>> reader.stats.documents, reader.stats.skipped

    Each batch holds whole documents and at least one; a batch closes as soon
    as its characters reach ``batch_chars`` (so one huge document is a batch
    of its own). Empty lines and lines of whitespace are ignored; every other
    line must be a JSON object whose ``text_field`` is a string.

    Bad documents are a ``ShardError`` naming ``path:line``. They are: a line
    that is not valid JSON, not an object, lacks the field, whose field is not
    a string (``null`` included), whose bytes are not UTF-8, or whose text
    holds a lone UTF-16 surrogate escape (``"\\ud800"``, not encodable as
    UTF-8). For Parquet: a missing column or a non-string column (always
    fatal), a null text (a bad document, located by row).

    With ``skip_bad=True`` bad documents are skipped and counted in
    ``stats.skipped``; ``stats.errors`` keeps the first few messages.

    A truncated or corrupt *compressed stream* is fatal even with
    ``skip_bad``: everything after the break is lost, and silently indexing
    part of a shard is worse than failing. The error names the line where the
    stream broke. Batches before the break have already been yielded, so a
    caller must discard what it did with this shard when the error arrives.
    (zstd frames are checked for completeness by us, because zstandard's
    ``stream_reader`` reports a file cut mid-frame as a normal end of file.)

    Iterating again re-reads the file and resets ``stats``.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        text_field: str = "text",
        *,
        batch_chars: int = DEFAULT_BATCH_CHARS,
        skip_bad: bool = False,
    ) -> None:
        if batch_chars < 1:
            raise ValueError("batch_chars must be positive")
        # A URI stays a string (Path would fold its "//").
        self.path: str | Path = path if isinstance(path, str) and is_uri(path) else Path(path)
        fmt = shard_format(self.path)
        if fmt is None:
            raise ShardError(self.path, None, f"unsupported file type (expected one of {supported_list()})")
        self.format = fmt
        self.text_field = text_field
        self.batch_chars = batch_chars
        self.skip_bad = skip_bad
        self.stats = ShardStats()
        self._counter: _CountingReader | None = None
        self._parquet_rows = (0, 0)  # rows read, rows in the file

    def fraction_read(self) -> float:
        """How much of the shard the iteration so far has consumed, in (0, 1]
        (of the file's bytes; of a Parquet file's rows). The build samples
        the start of a few shards and scales up with it."""
        if self.format == "parquet":
            done, total = self._parquet_rows
            return done / total if total else 1.0
        if not self._counter or not self._counter.size:
            return 1.0
        # The byte stream is read a step (READ_SIZE) ahead of the documents
        # yielded: count half a step as not yet used (a sample reads little).
        used = self._counter.consumed
        if used < self._counter.size:
            used = max(used - READ_SIZE // 2, 1)
        return min(used / self._counter.size, 1.0)

    def __iter__(self) -> Iterator[list[str]]:
        return self.iter_batches()

    def iter_batches(self) -> Iterator[list[str]]:
        """Yield lists of texts, each of about ``batch_chars`` characters."""
        self.stats = ShardStats()
        stats = self.stats
        texts = self._parquet_texts() if self.format == "parquet" else self._jsonl_texts()
        batch: list[str] = []
        chars = 0
        for text in texts:
            batch.append(text)
            chars += len(text)
            if chars >= self.batch_chars:
                stats.documents += len(batch)
                stats.characters += chars
                yield batch
                batch, chars = [], 0
        if batch:
            stats.documents += len(batch)
            stats.characters += chars
            yield batch

    # -- JSON lines ---------------------------------------------------------

    def _bad(self, line: int | None, message: str) -> None:
        # One place decides between "raise" and "skip and count".
        if not self.skip_bad:
            raise ShardError(self.path, line, message)
        self.stats._record_skip(str(ShardError(self.path, line, message)))

    def _open(self) -> BinaryIO:
        try:
            if isinstance(self.path, str):
                fs, key = filesystem(self.path)
                size = fs.get_file_info(key).size or 0
                raw = fs.open_input_stream(key, compression=None)  # we decompress, checking the stream
            else:
                size = self.path.stat().st_size
                raw = open(self.path, "rb")
        except OSError as e:
            raise ShardError(self.path, None, f"cannot open ({e.strerror or e})") from e
        self._counter = _CountingReader(raw, size)
        return self._counter  # type: ignore[return-value]

    def _jsonl_texts(self) -> Iterator[str]:
        chunks = chunk_source(self.format)
        field_name = self.text_field
        lineno = 0
        with self._open() as f:
            try:
                for raw in split_lines(chunks(f)):
                    lineno += 1
                    if not raw or raw.isspace():
                        continue
                    try:
                        line = raw.decode("utf-8")
                    except UnicodeDecodeError as e:
                        self._bad(lineno, f"invalid UTF-8 at byte {e.start} of the line")
                        continue
                    if lineno == 1 and line.startswith("\ufeff"):
                        line = line[1:]  # a UTF-8 byte order mark is not JSON
                    try:
                        obj = json.loads(line)
                    except json.JSONDecodeError as e:
                        self._bad(lineno, _json_lines_hint(line, lineno, f"invalid JSON: {e.msg} (column {e.colno})"))
                        continue
                    except RecursionError:
                        self._bad(lineno, "invalid JSON: nested too deeply")
                        continue
                    if type(obj) is not dict:
                        message = f"line is {_describe(obj)}, not a JSON object"
                        self._bad(lineno, _json_lines_hint(line, lineno, message))
                        continue
                    try:
                        text = obj[field_name]
                    except KeyError:
                        self._bad(lineno, f"missing field {field_name!r}")
                        continue
                    if type(text) is not str:
                        self._bad(lineno, f"field {field_name!r} is {_describe(text)}, not a string")
                        continue
                    if _SURROGATE_ESCAPE.search(raw) and _LONE_SURROGATE.search(text):
                        self._bad(lineno, f"field {field_name!r} holds a lone UTF-16 surrogate escape")
                        continue
                    yield text
            except StreamBroken as e:
                raise ShardError(self.path, lineno + 1, str(e)) from e
            except OSError as e:  # read errors of the file itself
                raise ShardError(self.path, lineno + 1, f"read error ({e})") from e

    # -- Parquet ------------------------------------------------------------

    def _parquet_texts(self) -> Iterator[str]:
        import pyarrow as pa
        import pyarrow.compute as pc

        field_name = self.text_field
        pf = open_parquet(self.path)
        schema = pf.schema_arrow
        index = schema.get_field_index(field_name)
        if index < 0:
            names = ", ".join(schema.names)
            raise ShardError(self.path, None, f"no column {field_name!r} (columns: {names})")
        dtype = schema.field(index).type
        if pa.types.is_dictionary(dtype):
            dtype = dtype.value_type
        is_string_view = getattr(pa.types, "is_string_view", lambda t: False)  # pyarrow >= 16
        if not (pa.types.is_string(dtype) or pa.types.is_large_string(dtype) or is_string_view(dtype)):
            raise ShardError(self.path, None, f"column {field_name!r} has type {dtype}, not string")

        row = 0  # rows before the current record batch
        try:
            for record_batch in pf.iter_batches(batch_size=self._parquet_rows_per_batch(pf), columns=[field_name]):
                column = record_batch.column(0)
                if pa.types.is_dictionary(column.type):
                    column = column.dictionary_decode()
                present = column
                if column.null_count:
                    # Report null rows one by one (they are bad documents),
                    # then drop them in one vectorised step.
                    null_rows = pc.indices_nonzero(pc.is_null(column)).to_pylist()
                    for i in null_rows:
                        self._bad(row + i + 1, f"field {field_name!r} is null, not a string")
                    present = column.drop_null()
                try:
                    texts = present.to_pylist()
                except UnicodeDecodeError:
                    # Parquet writers do not all validate UTF-8; find the row.
                    texts = self._decode_rows(column, row)
                yield from texts
                row += record_batch.num_rows
                self._parquet_rows = (row, pf.metadata.num_rows)
        except (OSError, pa.ArrowException) as e:
            raise ShardError(self.path, row + 1, f"unreadable Parquet data ({e})") from e

    def _decode_rows(self, column: object, row: int) -> list[str]:
        # Slow path, only for a record batch known to hold invalid UTF-8.
        # Nulls were reported already and are left out here.
        texts = []
        for i in range(len(column)):  # type: ignore[arg-type]
            try:
                text = column[i].as_py()  # type: ignore[index]
            except UnicodeDecodeError as e:
                self._bad(row + i + 1, f"invalid UTF-8 at byte {e.start} of the text")
                continue
            if text is not None:
                texts.append(text)
        return texts

    def _parquet_rows_per_batch(self, pf: object) -> int:
        # Choose the row count of a record batch from the column's average
        # uncompressed size so one batch holds about batch_chars bytes,
        # whether documents are tweets or books.
        md = pf.metadata  # type: ignore[attr-defined]
        total_bytes = total_rows = 0
        for g in range(md.num_row_groups):
            rg = md.row_group(g)
            for c in range(rg.num_columns):
                col = rg.column(c)
                if col.path_in_schema == self.text_field:
                    total_bytes += col.total_uncompressed_size
                    total_rows += rg.num_rows
        if not total_rows or not total_bytes:
            return 1024
        per_row = total_bytes / total_rows
        return int(min(65536, max(1, self.batch_chars // max(per_row, 1))))


class _CountingReader:
    """A binary file that counts the bytes read from it."""

    def __init__(self, raw: BinaryIO, size: int) -> None:
        self._raw, self.size, self.consumed = raw, size, 0

    def read(self, n: int = -1) -> bytes:
        data = self._raw.read(n)
        self.consumed += len(data)
        return data

    def close(self) -> None:
        self._raw.close()

    def __enter__(self) -> _CountingReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_parquet(path: str | Path) -> pq.ParquetFile:  # noqa: F821
    """A ParquetFile for a local path or URI; ShardError if unreadable."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        if isinstance(path, str) and is_uri(path):
            fs, key = filesystem(path)
            return pq.ParquetFile(fs.open_input_file(key))
        return pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as e:
        raise ShardError(path, None, f"not a readable Parquet file ({e})") from e


def iter_text_batches(
    path: str | os.PathLike[str],
    text_field: str = "text",
    batch_chars: int = DEFAULT_BATCH_CHARS,
    skip_bad: bool = False,
) -> Iterator[list[str]]:
    """Shorthand for ``iter(ShardReader(path, text_field, ...))`` when stats are not needed."""
    return ShardReader(path, text_field, batch_chars=batch_chars, skip_bad=skip_bad).iter_batches()
