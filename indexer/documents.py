"""Reading a shard's documents as token ids, for the sample and map tasks.

``open_documents`` gives an iterable of ``(ids int32, lengths int64)``
batches, each document followed by the EOS id: a pre-tokenized shard
(``token_shards``) as its ids are, a text shard (``shards.ShardReader``)
encoded by the build's tokenizer. A text shard is read and encoded ahead of
its consumer, who counts meanwhile (``TextDocuments``); and a process that
runs map tasks one after another reads the next task's shard ahead while the
current one counts its last chunk (``NextMapReadAhead``).
"""
from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from indexer.storage import Store
from indexer.work_store import read_sample_ids

if TYPE_CHECKING:
    from indexer.executor import SharedObject
    from indexer.shards import ShardStats
    from indexer.token_shards import FlatTokenReader, ParquetTokenReader
    from indexer.tokenizer import EncodedBatch, Tokenizer

#: Text batches a shard's reader keeps encoding ahead of the counting.
READ_AHEAD_BATCHES = 2

#: A batch of documents: ids (int32, each document followed by EOS) and ids per document (int64).
IdBatch = tuple[np.ndarray, np.ndarray]


@dataclass
class ReadSpec:
    """How a task turns a shard into token ids (text or pre-tokenized)."""

    # None: pre-tokenized inputs only; a SharedObject on a cluster (executor.resolve)
    tokenizer: Tokenizer | SharedObject | None
    vocab_size: int
    eos_id: int
    text_field: str = "text"
    token_field: str = "input_ids"
    token_dtype: str | None = None
    skip_bad: bool = False
    add_special_tokens: bool = False  # the tokenizer's post-processor (a BOS per document), as DART builds


class Documents(Protocol):
    """One shard's documents as id batches, and what reading them cost."""

    pretokenized: bool
    tokenize_seconds: float  # encoding time of the batches yielded so far

    @property
    def stats(self) -> ShardStats: ...

    def fraction_read(self) -> float: ...

    def __iter__(self) -> Iterator[IdBatch]: ...

    def close(self) -> None: ...


class TokenShardDocuments:
    """A pre-tokenized shard: its ids, nothing to encode."""

    pretokenized = True
    tokenize_seconds = 0.0

    def __init__(self, reader: ParquetTokenReader | FlatTokenReader) -> None:
        self._reader = reader

    @property
    def stats(self) -> ShardStats:
        return self._reader.stats

    def fraction_read(self) -> float:
        return self._reader.fraction_read()

    def __iter__(self) -> Iterator[IdBatch]:
        return iter(self._reader)

    def close(self) -> None:
        pass


class TextDocuments:
    """A text shard tokenized in batches, read and encoded ahead of its
    consumer: a reader thread reads, decompresses and parses the next
    batches and hands them, in order, to the tokenizer's one encoding thread
    (``Tokenizer.encode_to_arrays_async``), at most ``ahead`` batches before
    the consumer (who counts meanwhile); ``ahead=0`` reads and encodes only
    when asked. ``known``: the ids of the shard's first documents, already
    encoded (the sample's), yielded first; the reader skips those documents."""

    pretokenized = False

    def __init__(self, location: str, spec: ReadSpec, batch_chars: int | None = None, ahead: int = READ_AHEAD_BATCHES,
                 known: IdBatch | None = None) -> None:
        from indexer.executor import resolve
        from indexer.shards import DEFAULT_BATCH_CHARS, ShardReader

        self._reader = ShardReader(location, spec.text_field, skip_bad=spec.skip_bad,
                                   batch_chars=batch_chars or DEFAULT_BATCH_CHARS)
        self._tokenizer: Tokenizer = resolve(spec.tokenizer)  # type: ignore[assignment]
        self._add_special_tokens = spec.add_special_tokens
        self._ahead = ahead
        self._known = known
        self.tokenize_seconds = 0.0
        # Futures of encoded batches, in order; then None (the end) or the exception that ended reading.
        self._encoded: queue.Queue[Future[EncodedBatch] | BaseException | None] | None = None
        self._stop = threading.Event()
        self._reader_thread: threading.Thread | None = None

    @property
    def stats(self) -> ShardStats:
        return self._reader.stats

    def fraction_read(self) -> float:
        return self._reader.fraction_read()

    def _texts(self) -> Iterator[list[str]]:
        """The reader's batches, less the documents ``known`` holds."""
        skip = len(self._known[1]) if self._known is not None else 0
        for texts in self._reader:
            if skip:
                dropped = min(skip, len(texts))
                texts, skip = texts[dropped:], skip - dropped
                if not texts:
                    continue
            yield texts
        if skip:
            from indexer.shards import ShardError

            raise ShardError(self._reader.path, None, f"holds {skip} documents fewer than when it was sampled")

    def start_reading_ahead(self) -> None:
        """Starts the reader thread (idempotent; ``ahead > 0`` only)."""
        if self._reader_thread is not None or self._ahead <= 0:
            return
        self._encoded = queue.Queue(maxsize=self._ahead)
        self._reader_thread = threading.Thread(target=self._read_and_encode, name=f"shard-reader {self._reader.path}",
                                               daemon=True)
        self._reader_thread.start()

    def _read_and_encode(self) -> None:
        """The reader thread: every batch handed to the encoding thread, in order."""
        try:
            for texts in self._texts():
                future = self._tokenizer.encode_to_arrays_async(texts, add_special_tokens=self._add_special_tokens)
                if not self._hand_over(future):
                    return
            self._hand_over(None)
        except BaseException as e:  # a bad shard, a read error: the consumer raises it
            self._hand_over(e)

    def _hand_over(self, item: Future[EncodedBatch] | BaseException | None) -> bool:
        """Queues ``item`` for the consumer; False once the consumer has left."""
        assert self._encoded is not None
        while not self._stop.is_set():
            try:
                self._encoded.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def close(self) -> None:
        """Stops reading ahead (a consumer that leaves early)."""
        self._stop.set()
        if self._reader_thread is not None:
            self._reader_thread.join()

    def __iter__(self) -> Iterator[IdBatch]:
        if self._known is not None:
            yield self._known
        if self._ahead <= 0:
            for texts in self._texts():
                batch = self._tokenizer.encode_to_batch(texts, self._add_special_tokens)
                self.tokenize_seconds += batch.seconds
                yield batch.ids, batch.lengths
            return
        self.start_reading_ahead()
        assert self._encoded is not None
        try:
            while (item := self._encoded.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                batch = item.result()
                self.tokenize_seconds += batch.seconds
                yield batch.ids, batch.lengths
        finally:
            self.close()


def open_documents(location: str, spec: ReadSpec, batch_tokens: int | None = None, ahead: int = READ_AHEAD_BATCHES,
                   known: IdBatch | None = None) -> Documents:
    """One shard's documents; ``batch_tokens`` bounds the ids a batch reads
    (a text batch: about 4 characters a token). A text shard is read and
    encoded ``ahead`` batches ahead of its consumer, ``known`` ids of its
    first documents taken as they are."""
    from indexer.shards import ShardError
    from indexer.token_shards import BATCH_TOKENS, pretokenized_reader

    reader = pretokenized_reader(location, token_field=spec.token_field, vocab_size=spec.vocab_size,
                                 eos_id=spec.eos_id, token_dtype=spec.token_dtype, skip_bad=spec.skip_bad,
                                 batch_tokens=batch_tokens or BATCH_TOKENS)
    if reader is not None:
        return TokenShardDocuments(reader)
    if spec.tokenizer is None:
        what = f"no column {spec.token_field!r} of token ids" if location.lower().endswith(".parquet") else "text"
        raise ShardError(location, None, f"holds {what}: give --tokenizer to read text shards")
    return TextDocuments(location, spec, batch_chars=4 * batch_tokens if batch_tokens else None, ahead=ahead,
                         known=known)


class NextMapReadAhead:
    """The documents of the map task this process runs next, read and encoded
    ahead while the current task counts its last chunk: at ``-j 1`` the driver
    runs the maps one after another, and hands this to each (``run_map``).
    Holds at most one shard; ``close`` stops its reader (a build that fails
    before that task runs)."""

    def __init__(self) -> None:
        self._held: tuple[str, int, TextDocuments] | None = None  # (store root, map index, documents)

    def start(self, store: Store, index: int, location: str, spec: ReadSpec) -> None:
        """Starts reading map ``index``'s shard (after its sampled documents)."""
        self.close()
        try:
            docs = open_documents(location, spec, known=read_sample_ids(store, index))
        except Exception:  # noqa: BLE001 (that task meets the same error itself, and reports it)
            return
        if isinstance(docs, TextDocuments):
            docs.start_reading_ahead()
            self._held = (store.root, index, docs)

    def take(self, store: Store, index: int) -> TextDocuments | None:
        """Map ``index``'s documents, if they are the ones read ahead."""
        if self._held is None or self._held[:2] != (store.root, index):
            return None
        docs, self._held = self._held[2], None
        return docs

    def close(self) -> None:
        if self._held is not None:
            self._held[2].close()
            self._held = None
