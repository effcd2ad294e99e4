"""Reading pre-tokenized shards: token ids in, no tokenizer run.

Two layouts, both yielding what ``Tokenizer.encode_to_arrays`` yields
(``(ids int32, lengths int64)``, every document followed by one EOS):

``ParquetTokenReader``
    a Parquet column of lists of integers (``input_ids``, as Hugging Face
    ``datasets`` stores tokenized data); one row is one document and the EOS
    is appended, as for text.
``FlatTokenReader``
    a flat token array as written by Dolma's ``dolma tokens`` and OLMo's
    ``prepare_memmap_dataset``: a headerless memory map of uint16 or uint32
    ids (or a NumPy ``.npy`` file with a header), documents back to back,
    each ending with the EOS id. Where a ``.csv.gz`` metadata file of the
    same name sits beside it (Dolma: ``start,end,...`` token offsets per
    document) the documents are cut there, else after every EOS.

Malformed input is a ``ShardError`` naming the file and the row (Parquet,
1-based) or the document (flat arrays, 1-based): ids outside
``[0, vocab_size)``, a column of the wrong type, null rows or ids, an empty
file, a file whose size is not a whole number of ids, tokens after the last
EOS (a truncated file).
"""
from __future__ import annotations

import ast
import csv
import gzip
import io
import os
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow.fs as pafs

from indexer.shards import ShardError, ShardStats, open_parquet
from indexer.storage import filesystem, is_uri

#: Token ids read per step (a flat array is streamed, never read whole).
BATCH_TOKENS = 4_000_000

_NPY_MAGIC = b"\x93NUMPY"
_FLAT_DTYPES = {"uint16": np.dtype("<u2"), "uint32": np.dtype("<u4")}


def _first_bad_id(values: np.ndarray, vocab_size: int) -> int | None:
    bad = np.flatnonzero((values < 0) | (values >= vocab_size))
    return int(bad[0]) if bad.size else None


class ParquetTokenReader:
    """A Parquet shard whose ``token_field`` holds one list of ids per document."""

    def __init__(self, path: str | Path, token_field: str, vocab_size: int, eos_id: int,
                 *, batch_tokens: int = BATCH_TOKENS, skip_bad: bool = False) -> None:
        self.path, self.token_field = path, token_field
        self.vocab_size, self.eos_id = vocab_size, eos_id
        self.batch_tokens, self.skip_bad = batch_tokens, skip_bad
        self.stats = ShardStats()
        self._rows = (0, 0)

    def fraction_read(self) -> float:
        done, total = self._rows
        return done / total if total else 1.0

    def __iter__(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        import pyarrow as pa
        import pyarrow.compute as pc

        self.stats = ShardStats()
        pf = open_parquet(self.path)
        schema = pf.schema_arrow
        index = schema.get_field_index(self.token_field)
        if index < 0:
            raise ShardError(self.path, None, f"no column {self.token_field!r} (columns: {', '.join(schema.names)})")
        dtype = schema.field(index).type
        if not (pa.types.is_list(dtype) or pa.types.is_large_list(dtype)) or not pa.types.is_integer(dtype.value_type):
            raise ShardError(self.path, None,
                             f"column {self.token_field!r} has type {dtype}, not a list of integer token ids")
        total_rows = pf.metadata.num_rows
        if total_rows == 0:
            raise ShardError(self.path, None, "empty file: no documents")
        per_row = max(sum(pf.metadata.row_group(g).column(index).total_uncompressed_size
                          for g in range(pf.metadata.num_row_groups)) / total_rows, 1.0)
        rows_per_batch = int(min(65536, max(1, self.batch_tokens * 2 // per_row)))
        row = 0
        for rb in pf.iter_batches(batch_size=rows_per_batch, columns=[self.token_field]):
            column = rb.column(0)
            keep = np.ones(len(column), dtype=bool)
            if column.null_count:
                for i in pc.indices_nonzero(pc.is_null(column)).to_pylist():
                    self._bad(row + i + 1, f"field {self.token_field!r} is null, not a list of token ids")
                    keep[i] = False
                column = column.filter(pa.array(keep))
            lengths = pc.list_value_length(column).to_numpy(zero_copy_only=False).astype(np.int64)
            values_arr = column.flatten()
            if values_arr.null_count:
                at = pc.indices_nonzero(pc.is_null(values_arr)).to_pylist()[0]
                raise ShardError(self.path, self._row_of(at, lengths, keep, row),
                                 f"field {self.token_field!r} holds a null token id")
            values = values_arr.to_numpy(zero_copy_only=False)
            bad = _first_bad_id(values, self.vocab_size)
            if bad is not None:
                raise ShardError(self.path, self._row_of(bad, lengths, keep, row),
                                 f"token id {int(values[bad])} is outside [0, {self.vocab_size}) "
                                 f"(vocabulary size {self.vocab_size})")
            row += rb.num_rows
            self._rows = (row, total_rows)
            if not lengths.size:
                continue
            flat = np.insert(values.astype(np.int32), np.cumsum(lengths), self.eos_id)
            self.stats.documents += int(lengths.size)
            yield flat, lengths + 1

    @staticmethod
    def _row_of(position: int, lengths: np.ndarray, keep: np.ndarray, row0: int) -> int:
        """1-based file row of a position in the batch's flattened ids."""
        doc = int(np.searchsorted(np.cumsum(lengths), position, side="right"))
        return row0 + int(np.flatnonzero(keep)[doc]) + 1

    def _bad(self, row: int, message: str) -> None:
        if not self.skip_bad:
            raise ShardError(self.path, row, message)
        self.stats._record_skip(str(ShardError(self.path, row, message)))


class FlatTokenReader:
    """A flat array of token ids (Dolma ``.npy``), documents separated by EOS."""

    def __init__(self, path: str | Path, vocab_size: int, eos_id: int, *, token_dtype: str | None = None,
                 batch_tokens: int = BATCH_TOKENS) -> None:
        self.path = path
        self.vocab_size, self.eos_id = vocab_size, eos_id
        self.token_dtype, self.batch_tokens = token_dtype, batch_tokens
        self.stats = ShardStats()
        self._progress = (0, 1)

    def fraction_read(self) -> float:
        done, total = self._progress
        return min(done / total, 1.0) if total else 1.0

    def _open(self) -> tuple[object, int]:
        location = os.fspath(self.path)
        try:
            fs, key = filesystem(location)
            return fs.open_input_file(key), fs.get_file_info(key).size
        except OSError as e:
            raise ShardError(self.path, None, f"cannot open ({e})") from e

    def _layout(self, f: object, size: int) -> tuple[np.dtype, int]:
        """(dtype, header bytes): from a .npy header, else --token-dtype, else
        the smallest of uint16/uint32 that holds the vocabulary (Dolma's rule)."""
        head = f.read(min(size, 4096))  # type: ignore[attr-defined]
        if head.startswith(_NPY_MAGIC):
            header_len_size = 2 if head[6] == 1 else 4
            header_len = int.from_bytes(head[8:8 + header_len_size], "little")
            start = 8 + header_len_size
            try:
                header = ast.literal_eval(head[start:start + header_len].decode("latin1"))
                dtype = np.dtype(header["descr"])
                shape = tuple(header["shape"])
            except (ValueError, SyntaxError, KeyError, TypeError) as e:
                raise ShardError(self.path, None, f"unreadable .npy header ({e})") from e
            if len(shape) != 1:
                raise ShardError(self.path, None, f"array has shape {shape}: expected a flat (1-D) token array")
            if dtype.kind != "u" or dtype.itemsize not in (2, 4):
                raise ShardError(self.path, None, f"array dtype is {dtype}, expected uint16 or uint32 token ids")
            return dtype.newbyteorder("<") if dtype.byteorder == "=" else dtype, start + header_len
        if self.token_dtype is not None:
            if self.token_dtype not in _FLAT_DTYPES:
                raise ShardError(self.path, None, f"--token-dtype must be uint16 or uint32, got {self.token_dtype}")
            return _FLAT_DTYPES[self.token_dtype], 0
        return _FLAT_DTYPES["uint16" if self.vocab_size <= 1 << 16 else "uint32"], 0

    def _metadata_ends(self) -> np.ndarray | None:
        """Document end offsets from the Dolma metadata file beside the array, if any."""
        location = os.fspath(self.path)
        meta = location[: -len(".npy")] + ".csv.gz"
        try:
            fs, key = filesystem(meta)
            if fs.get_file_info(key).type != pafs.FileType.File:
                return None
            with fs.open_input_stream(key, compression=None) as f:
                raw = gzip.decompress(f.read())
        except (OSError, EOFError) as e:
            raise ShardError(meta, None, f"cannot read metadata ({e})") from e
        ends, expect = [], 0
        for line, row in enumerate(csv.reader(io.StringIO(raw.decode("utf-8"))), 1):
            if not row or (line == 1 and not row[0].strip().isdigit()):
                continue  # a header row
            try:
                start, end = int(row[0]), int(row[1])
            except (ValueError, IndexError):
                raise ShardError(meta, line, "expected start,end token offsets in the first two columns") from None
            if start != expect or end <= start:
                raise ShardError(meta, line, f"document [{start}, {end}) does not follow the previous one "
                                             f"(which ended at {expect})")
            ends.append(end)
            expect = end
        return np.array(ends, dtype=np.int64)

    def __iter__(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        self.stats = ShardStats()
        ends = self._metadata_ends()
        f, size = self._open()
        with f:  # type: ignore[attr-defined]
            dtype, header = self._layout(f, size)
            f.seek(header)  # type: ignore[attr-defined]
            body = size - header
            if body % dtype.itemsize:
                raise ShardError(self.path, None, f"size {body} bytes is not a whole number of {dtype.itemsize}-byte "
                                                  f"ids (truncated, or not {dtype.name}: see --token-dtype)")
            total = body // dtype.itemsize
            if total == 0:
                raise ShardError(self.path, None, "empty token array: no documents")
            if ends is not None and int(ends[-1]) != total:
                raise ShardError(self.path, None, f"metadata lists documents up to token {int(ends[-1])}, "
                                                  f"the array holds {total} tokens")
            yield from self._documents(f, dtype, total, ends)

    def _documents(self, f: object, dtype: np.dtype, total: int,
                   ends: np.ndarray | None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        carry = np.empty(0, dtype=np.int64)
        offset = 0  # tokens read before this chunk
        docs = 0  # documents yielded before this chunk
        while offset < total:
            n = min(self.batch_tokens, total - offset)
            chunk = np.frombuffer(f.read(n * dtype.itemsize), dtype=dtype)  # type: ignore[attr-defined]
            if chunk.size != n:
                raise ShardError(self.path, docs + 1, f"file ended early at token {offset + chunk.size}")
            bad = _first_bad_id(chunk, self.vocab_size)
            if bad is not None:
                raise ShardError(self.path, self._document_of(offset + bad, docs, chunk[:bad], ends),
                                 f"token id {int(chunk[bad])} at token offset {offset + bad} is outside "
                                 f"[0, {self.vocab_size}) (vocabulary size {self.vocab_size})")
            tokens = np.concatenate([carry, chunk.astype(np.int64)])
            base = offset - carry.size  # file offset of tokens[0]
            offset += n
            if ends is not None:
                cut = ends[(ends > base) & (ends <= offset)] - base
            else:
                cut = np.flatnonzero(tokens == self.eos_id) + 1
            if not cut.size:
                carry = tokens
                continue
            flat, lengths = _with_eos(tokens[: int(cut[-1])], np.diff(cut, prepend=0), self.eos_id)
            carry = tokens[int(cut[-1]):]
            docs += int(lengths.size)
            self.stats.documents += int(lengths.size)
            self._progress = (offset, total)
            yield flat, lengths
        if carry.size:
            raise ShardError(self.path, docs + 1, f"{carry.size} token(s) after the last EOS id {self.eos_id} "
                                                  "(a truncated file, or the wrong --eos)")

    def _document_of(self, position: int, docs: int, before: np.ndarray, ends: np.ndarray | None) -> int:
        """1-based document holding token ``position``; ``before`` is the
        chunk up to it (the carried tokens hold no EOS)."""
        if ends is not None:
            return int(np.searchsorted(ends, position, side="right")) + 1
        return docs + int(np.count_nonzero(before == self.eos_id)) + 1


def _with_eos(tokens: np.ndarray, lengths: np.ndarray, eos_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Documents as the build wants them: each ending in exactly one EOS
    (documents cut by metadata may lack it; it is appended then)."""
    ends = np.cumsum(lengths)
    missing = tokens[ends - 1] != eos_id
    if missing.any():
        tokens = np.insert(tokens, ends[missing], eos_id)
        lengths = lengths + missing
    return tokens.astype(np.int32), lengths.astype(np.int64)


def pretokenized_reader(location: str, *, token_field: str, vocab_size: int, eos_id: int,
                        token_dtype: str | None, skip_bad: bool,
                        batch_tokens: int = BATCH_TOKENS) -> ParquetTokenReader | FlatTokenReader | None:
    """The pre-tokenized reader for a shard, or None when it holds text (a
    Parquet file without ``token_field``, or a JSON-lines file)."""
    name = location.lower()
    if name.endswith(".npy"):
        return FlatTokenReader(location, vocab_size, eos_id, token_dtype=token_dtype, batch_tokens=batch_tokens)
    if name.endswith(".parquet"):
        schema = open_parquet(location if is_uri(location) else Path(location)).schema_arrow
        if schema.get_field_index(token_field) >= 0:
            return ParquetTokenReader(location, token_field, vocab_size, eos_id, skip_bad=skip_bad,
                                      batch_tokens=batch_tokens)
    return None
