"""The build's sample, map and reduce tasks.

Each is a plain function of a picklable task description that reads its
inputs from, and writes its outputs to, the build's work ``Store`` (a local
folder or an object-storage prefix) and returns a small result, so any
executor (a local process pool, a Ray cluster) runs them unchanged. A task
computes in a local scratch folder and moves only finished files into the
store; it records its result last (``map/NNNNN.json``, ``reduce/NNNNN.json``),
so a retried or resumed task either finds that record or starts afresh, and
a build that is re-run resumes from the tasks already finished.

sample: the first tokens of one shard -> unigram and bigram counts and distinct
        k-grams per order (to cut the ranges and size them before the map).
map:    one shard -> per order k and per reduce range r, runs of
        (w0..w{k-1}, c), counted with DuckDB in bounded memory chunk by
        chunk, the chunks' runs of one range and order joined as row groups
        of ``shuffle/rRRRRR/<attempt>/oK.parquet`` (zstd). The shuffle
        happens here: a reduce task reads only its range's files.
reduce: one range [lo, hi) of range keys -> per order k, the merged counts
        of every k-gram in the range with count >= min_count, sorted, with
        each entry's number of children in order k+1; then it deletes the
        runs it merged.

A range is an interval of *range keys*: a k-gram's key is its first token
and, for k >= 2, its second (``range_keys``). An edge ``[t, -1]`` cuts
before first token t (its unigram included); ``[t, s]`` with s >= 0 cuts
inside first token t, before second token s, so a frequent first token's
n-grams are spread over several ranges (docs/BUILD.md); its unigram is in
the range that holds key ``[t, -1]``.
"""
from __future__ import annotations

import io
import json
import os
import queue
import shutil
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator

import duckdb
import numpy as np
import pyarrow as pa

from indexer.kgrams import column_list, kgram_table, tokens_left
from indexer.storage import Store, local_scratch

#: Sets faults for tests: ``PHASE:INDEX:MODE[,...]``, e.g. ``map:1:kill``.
#: kill: the task's process exits on its first attempt (as if the node died);
#: kill-always: it exits on every attempt (a task the OOM killer always stops);
#: raise: its first attempt raises an OSError (a transient failure);
#: fail: every attempt raises (a task that cannot succeed).
FAULT_ENV = "NGRAM_BUILD_FAULT"


class InjectedFault(OSError):
    """A transient failure injected by NGRAM_BUILD_FAULT (retried by Ray)."""


class PermanentFault(RuntimeError):
    """A failure injected by NGRAM_BUILD_FAULT on every attempt."""


class MissingRunsError(RuntimeError):
    """The work directory lost runs a reduce task needs."""


def inject_fault(store: Store, fault: tuple[str, str] | None) -> None:
    """Fails as ``fault = (mode, marker key)`` says; the marker in the store
    makes kill and raise happen once, whichever node runs the retry."""
    if fault is None:
        return
    mode, marker = fault
    if mode == "fail":
        raise PermanentFault(f"injected permanent fault ({FAULT_ENV})")
    if mode == "kill-always":
        os._exit(17)
    if store.exists(marker):
        return
    store.write_bytes(marker, b"")
    if mode == "kill":
        os._exit(17)
    raise InjectedFault(f"injected transient fault ({FAULT_ENV})")


def faults_from_env(value: str | None) -> dict[tuple[str, int], str]:
    """``map:1:kill,reduce:0:raise`` -> {("map", 1): "kill", ("reduce", 0): "raise"}."""
    faults = {}
    for item in filter(None, (value or "").split(",")):
        phase, index, mode = (item.split(":") + ["kill"])[:3]
        if (phase not in ("sample", "map", "reduce") or mode not in ("kill", "kill-always", "raise", "fail")
                or not index.isdigit()):
            raise ValueError(f"{FAULT_ENV}: {item!r} is not PHASE:INDEX:MODE (PHASE sample|map|reduce, "
                             "MODE kill|kill-always|raise|fail)")
        faults[(phase, int(index))] = mode
    return faults


def _connect(memory_limit_bytes: int, tmp_dir: Path) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(":memory:")
    con.execute(f"SET memory_limit = '{max(memory_limit_bytes // (1 << 20), 64)}MB'")
    con.execute(f"SET temp_directory = '{tmp_dir}'")
    con.execute("SET threads = 1")  # one task per core; the executor provides parallelism
    con.execute("SET preserve_insertion_order = false")
    return con


class DiskMeter:
    """Samples the bytes under a folder in a background thread; ``peak`` is
    the largest seen (DuckDB's spill files come and go within a statement)."""

    def __init__(self, path: Path, interval: float = 0.2) -> None:
        self.path, self.interval, self.peak = path, interval, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _size(self) -> int:
        total = 0
        for root, _dirs, files in os.walk(self.path):
            for name in files:
                try:
                    total += os.stat(os.path.join(root, name)).st_size
                except OSError:
                    pass  # removed while we looked
        return total

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, self._size())

    def __enter__(self) -> "DiskMeter":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.peak = max(self.peak, self._size())
        self._stop.set()
        self._thread.join()


# --------------------------------------------------------------------------
# Reading documents as token arrays


@dataclass
class ReadSpec:
    """How a task turns a shard into token ids (text or pre-tokenized)."""

    tokenizer: Any | None  # indexer.tokenizer.Tokenizer or a SharedObject of one; None: pre-tokenized inputs only
    vocab_size: int
    eos_id: int
    text_field: str = "text"
    token_field: str = "input_ids"
    token_dtype: str | None = None
    skip_bad: bool = False
    add_special_tokens: bool = False  # the tokenizer's post-processor (a BOS per document), as DART builds


#: Text batches a shard's reader keeps encoding ahead of the counting.
READ_AHEAD_BATCHES = 2


class _TextDocuments:
    """A text shard tokenized in batches, read and encoded ahead of its
    consumer: a reader thread reads, decompresses and parses the next
    batches and hands them, in order, to the tokenizer's one encoding thread
    (``Tokenizer.encode_to_arrays_async``), at most ``ahead`` batches before
    the consumer (who counts meanwhile); ``ahead=0`` reads and encodes only
    when asked. ``known``: the ids of the shard's first documents, already
    encoded (the sample's), yielded first; the reader skips those documents."""

    pretokenized = False

    def __init__(self, location: str, spec: ReadSpec, batch_chars: int | None = None, ahead: int = READ_AHEAD_BATCHES,
                 known: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        from indexer.executor import resolve
        from indexer.shards import DEFAULT_BATCH_CHARS, ShardReader

        self._reader = ShardReader(location, spec.text_field, skip_bad=spec.skip_bad,
                                   batch_chars=batch_chars or DEFAULT_BATCH_CHARS)
        self._tokenizer = resolve(spec.tokenizer)
        self._add_special_tokens = spec.add_special_tokens
        self._ahead = ahead
        self._known = known
        self.tokenize_seconds = 0.0
        self._queue: queue.Queue[Any] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def stats(self) -> Any:
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

    def start(self) -> None:
        """Starts reading and encoding ahead (idempotent; ``ahead > 0`` only)."""
        if self._thread is not None or self._ahead <= 0:
            return
        self._queue = queue.Queue(maxsize=self._ahead)
        self._thread = threading.Thread(target=self._read_ahead, name="shard-reader", daemon=True)
        self._thread.start()

    def _read_ahead(self) -> None:
        assert self._queue is not None
        try:
            for texts in self._texts():
                future = self._tokenizer.encode_to_arrays_async(texts, add_special_tokens=self._add_special_tokens)
                if not self._put(future):
                    return
            self._put(None)
        except BaseException as e:  # a bad shard, a read error: the consumer raises it
            self._put(e)

    def _put(self, item: Any) -> bool:
        assert self._queue is not None
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def close(self) -> None:
        """Stops reading ahead (a consumer that leaves early)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def __iter__(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        if self._known is not None:
            yield self._known
        if self._ahead <= 0:
            for texts in self._texts():
                batch = self._tokenizer.encode_to_batch(texts, self._add_special_tokens)
                self.tokenize_seconds += batch.seconds
                yield batch.ids, batch.lengths
            return
        self.start()
        assert self._queue is not None
        try:
            while (item := self._queue.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                batch = item.result()
                self.tokenize_seconds += batch.seconds
                yield batch.ids, batch.lengths
        finally:
            self.close()


def open_documents(location: str, spec: ReadSpec, batch_tokens: int | None = None, ahead: int = READ_AHEAD_BATCHES,
                   known: tuple[np.ndarray, np.ndarray] | None = None) -> Any:
    """An iterable of ``(ids int32, lengths int64)`` batches over one shard,
    with ``stats``, ``fraction_read()`` and ``pretokenized``; ``batch_tokens``
    bounds the ids a pre-tokenized batch reads. A text shard is read and
    encoded ``ahead`` batches ahead of its consumer (``_TextDocuments``),
    ``known`` ids of its first documents taken as they are."""
    from indexer.shards import ShardError
    from indexer.token_shards import BATCH_TOKENS, pretokenized_reader

    reader = pretokenized_reader(location, token_field=spec.token_field, vocab_size=spec.vocab_size,
                                 eos_id=spec.eos_id, token_dtype=spec.token_dtype, skip_bad=spec.skip_bad,
                                 batch_tokens=batch_tokens or BATCH_TOKENS)
    if reader is not None:
        reader.pretokenized = True
        reader.tokenize_seconds = 0.0
        return reader
    if spec.tokenizer is None:
        what = f"no column {spec.token_field!r} of token ids" if location.lower().endswith(".parquet") else "text"
        raise ShardError(location, None, f"holds {what}: give --tokenizer to read text shards")
    # About 4 characters a token: text batches of the same size.
    return _TextDocuments(location, spec, batch_chars=4 * batch_tokens if batch_tokens else None, ahead=ahead,
                          known=known)


# --------------------------------------------------------------------------
# sample


@dataclass
class SampleTask:
    location: str
    spec: ReadSpec
    order: int
    max_tokens: int = 1_000_000
    # Where the ids it encoded are kept for the shard's map (sample_ids_key), if anywhere.
    store: Store | None = None
    index: int = 0  # the shard's map task

    @property
    def label(self) -> str:
        return f"sample of {self.location}"


@dataclass
class SampleResult:
    location: str
    tokens: int
    fraction: float  # of the shard the sample read
    unigrams: list[list[int]]  # [token id, count]
    distinct: list[int]  # distinct k-grams in the sample, per order
    bigrams: np.ndarray | None = None  # int64 rows [first token, second token, count]


def sample_ids_key(index: int) -> str:
    """The ids a sample encoded of map ``index``'s shard: its first documents."""
    return f"sample/{index:05d}.npz"


def run_sample(task: SampleTask) -> SampleResult:
    # Nothing read ahead: the sample stops after max_tokens.
    docs = open_documents(task.location, task.spec, batch_tokens=max(task.max_tokens // 4, 1024), ahead=0)
    flats, lengths, n = [], [], 0
    for flat, lens in docs:
        flats.append(flat)
        lengths.append(lens)
        n += int(flat.size)
        if n >= task.max_tokens:
            break
    if not flats:
        return SampleResult(task.location, 0, docs.fraction_read(), [], [0] * task.order)
    flat, lens = np.concatenate(flats), np.concatenate(lengths)
    if task.store is not None and not docs.pretokenized:
        # The shard's map starts after these documents instead of encoding them again.
        _write_known_ids(task.store, sample_ids_key(task.index), flat, lens)
    left = tokens_left(lens)
    ids, counts = np.unique(flat, return_counts=True)
    pairs = kgram_table(flat, left, 2)
    pair_keys = (pairs.column("w0").to_numpy().astype(np.int64) << 32) | pairs.column("w1").to_numpy().astype(np.int64)
    pair_keys, pair_counts = np.unique(pair_keys, return_counts=True)
    bigrams = np.stack([pair_keys >> 32, pair_keys & 0xFFFFFFFF, pair_counts], axis=1)
    con = duckdb.connect(":memory:")
    con.execute("SET threads = 1")
    distinct = []
    for k in range(1, task.order + 1):
        con.register("grams", kgram_table(flat, left, k))
        distinct.append(con.execute(f"SELECT count(*) FROM (SELECT DISTINCT {column_list(k)} FROM grams)").fetchall()[0][0])
        con.unregister("grams")
    con.close()
    return SampleResult(task.location, n, max(docs.fraction_read(), 1e-9),
                        [[int(i), int(c)] for i, c in zip(ids, counts)], distinct, bigrams)


# --------------------------------------------------------------------------
# range keys


def range_keys(first: np.ndarray, second: np.ndarray | None, vocab_size: int) -> np.ndarray:
    """k-grams' range keys as int64, ordered like ``[first, second]`` pairs:
    ``second`` None (unigrams) sorts as -1, before every second token."""
    keys = first.astype(np.int64) * (vocab_size + 1)
    if second is not None:
        keys += second.astype(np.int64) + 1
    return keys


def edge_keys(edges: list[list[int]], vocab_size: int) -> np.ndarray:
    """Range edges ``[first, second or -1]`` as range keys."""
    pairs = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    return pairs[:, 0] * (vocab_size + 1) + pairs[:, 1] + 1


class RangeLookup:
    """The reduce range of each k-gram, from ``edges`` (``MapTask.edges``).

    A first token that no edge splits by its second token lies in one range
    whatever follows it: a table over first tokens answers those with one
    read each. Only the k-grams of split first tokens (a few frequent ones)
    are placed by searching their range keys among the edges; searching
    every k-gram's key took about a sixth of a map's counting time."""

    def __init__(self, edges: list[list[int]], vocab_size: int) -> None:
        self._vocab_size = vocab_size
        self._inner = edge_keys(edges[1:-1], vocab_size)
        firsts = range_keys(np.arange(vocab_size, dtype=np.int64), None, vocab_size)
        self._by_first = np.searchsorted(self._inner, firsts, side="right").astype(np.int32)
        self._split = np.zeros(vocab_size, dtype=bool)
        self._split[[e[0] for e in edges[1:-1] if e[1] >= 0]] = True

    def ranges(self, first: np.ndarray, second: np.ndarray | None) -> np.ndarray:
        """int32 range index of each k-gram (``second`` None: unigrams);
        token ids must lie in ``[0, vocab_size)``."""
        if first.size and not 0 <= int(first.min()) <= int(first.max()) < self._vocab_size:
            bad = first[(first < 0) | (first >= self._vocab_size)][0]
            raise ValueError(f"token id {int(bad)} is outside [0, {self._vocab_size})")
        part = self._by_first[first]
        if second is not None:
            rows = np.flatnonzero(self._split[first])
            if rows.size:
                keys = range_keys(first[rows], second[rows], self._vocab_size)
                part[rows] = np.searchsorted(self._inner, keys, side="right")
        return part


# --------------------------------------------------------------------------
# map


@dataclass
class MapTask:
    index: int
    location: str  # the shard: local path or URI
    name: str  # as the manifest records it
    store: Store
    edges: list[list[int]]  # reduce range r holds range keys [edges[r], edges[r+1]) (see range_keys)
    order: int
    spec: ReadSpec
    chunk_tokens: int = 4_000_000
    memory_limit_bytes: int = 512 << 20
    fault: tuple[str, str] | None = None
    # Whether a core is free beside the task (Executor.spare_core) to read
    # and encode its shard ahead of the counting on; without one, doing so
    # only interleaves the two on one core (a -j 2 map on 2 cores: 8 % more
    # time with tiktoken, 4 % with HF).
    read_ahead: bool = True
    # (index, location) of the map task this process runs next, when it runs
    # them one after another (-j 1): its shard is read and encoded while this
    # one counts its last chunk.
    then: tuple[int, str] | None = None

    @property
    def label(self) -> str:
        return f"map {self.index} ({self.name})"


@dataclass
class MapResult:
    index: int
    name: str
    bytes: int
    documents: int
    tokens: int  # including one EOS per document
    attempt: str = ""  # the shuffle folder name of the attempt that finished
    range_bytes: list[int] = field(default_factory=list)  # run bytes written per reduce range
    pretokenized: bool = False
    skipped: int = 0
    errors: list[str] = field(default_factory=list)
    runs: int = 0
    tokenize_seconds: float = 0.0
    seconds: float = 0.0
    scratch_peak_bytes: int = 0
    peak_rss_bytes: int = 0  # the worker process' peak RSS when the task ended
    resumed: bool = False


def map_done_key(index: int) -> str:
    return f"map/{index:05d}.json"


def shuffle_prefix(range_index: int) -> str:
    return f"shuffle/r{range_index:05d}"


def _recorded(store: Store, key: str, result_type: type) -> Any:
    """A task's recorded result if it finished before (resume), else None."""
    if not store.exists(key):
        return None
    r = result_type(**json.loads(store.read_bytes(key)))
    r.resumed = True
    return r


def _record(store: Store, key: str, result: Any) -> None:
    store.write_bytes(key, json.dumps(asdict(result), sort_keys=True).encode())


# The next map task's documents, being read and encoded ahead (MapTask.then).
_READ_AHEAD: dict[tuple[str, int], _TextDocuments] = {}


def _read_ahead(store: Store, index: int, location: str, spec: ReadSpec) -> None:
    drop_read_ahead()
    try:
        docs = open_documents(location, spec, known=_read_known_ids(store, sample_ids_key(index)))
    except Exception:  # noqa: BLE001 (that task meets the same error itself, and reports it)
        return
    if isinstance(docs, _TextDocuments):
        docs.start()
        _READ_AHEAD[(store.root, index)] = docs


def drop_read_ahead() -> None:
    """Stops reading ahead for a map task that will not run here after all."""
    while _READ_AHEAD:
        _READ_AHEAD.popitem()[1].close()


def run_map(task: MapTask) -> MapResult:
    store = task.store
    docs = _READ_AHEAD.pop((store.root, task.index), None)
    try:
        if (finished := _recorded(store, map_done_key(task.index), MapResult)) is not None:
            return finished
        inject_fault(store, task.fault)
        if docs is None:
            docs = open_documents(task.location, task.spec, ahead=READ_AHEAD_BATCHES if task.read_ahead else 0,
                                  known=_read_known_ids(store, sample_ids_key(task.index)))
        return _run_map(task, docs)
    finally:
        if isinstance(docs, _TextDocuments):
            docs.close()


def _run_map(task: MapTask, docs: Any) -> MapResult:
    store = task.store
    t_start = time.perf_counter()
    # A fresh folder name per attempt: a killed attempt's files are never
    # mistaken for this one's (reduce reads only the recorded attempt).
    attempt = f"m{task.index:05d}-{uuid.uuid4().hex[:8]}"
    scratch = local_scratch(store, attempt)
    parts = len(task.edges) - 1
    lookup = RangeLookup(task.edges, task.spec.vocab_size)
    result = MapResult(index=task.index, name=task.name, bytes=0, documents=0, tokens=0, attempt=attempt,
                       range_bytes=[0] * parts)
    result.pretokenized = docs.pretokenized
    pending: list[tuple[np.ndarray, np.ndarray]] = []
    pending_tokens = 0
    chunk_files: dict[tuple[int, int], list[Path]] = {}  # (range, order) -> one run file per chunk

    with DiskMeter(scratch) as meter:
        con = _connect(task.memory_limit_bytes, scratch / "spill")

        def flush() -> None:
            nonlocal pending, pending_tokens
            if not pending:
                return
            flat = np.concatenate([p[0] for p in pending])
            left = tokens_left(np.concatenate([p[1] for p in pending]))
            pending, pending_tokens = [], 0
            for k in range(1, task.order + 1):
                grams = kgram_table(flat, left, k)
                second = grams.column("w1").to_numpy() if k >= 2 else None
                part = lookup.ranges(grams.column("w0").to_numpy(), second)
                con.register("grams", grams.append_column("p", pa.array(part)))
                cols = column_list(k)
                run_dir = scratch / f"o{k}-{result.runs:05d}"
                con.execute(
                    f"COPY (SELECT p, {cols}, count(*)::UBIGINT AS c FROM grams GROUP BY ALL ORDER BY {cols}) "
                    f"TO '{run_dir}' (FORMAT parquet, COMPRESSION zstd, PARTITION_BY (p), "
                    f"FILENAME_PATTERN 'f{{i}}')"
                )
                con.unregister("grams")
                for part_dir in run_dir.glob("p=*"):
                    chunk_files.setdefault((int(part_dir.name[2:]), k), []).extend(sorted(part_dir.glob("*.parquet")))
            result.runs += 1

        for flat, lengths in docs:
            result.documents += len(lengths)
            result.tokens += int(flat.size)
            pending.append((flat, lengths))
            pending_tokens += int(flat.size)
            if pending_tokens >= task.chunk_tokens:
                flush()
        if task.then is not None:
            _read_ahead(store, *task.then, task.spec)
        flush()
        con.close()
        # One object per (range, order): the chunks' runs as row groups of one
        # file, so the store holds maps x ranges x orders objects, not x chunks.
        # (A shard of one chunk has one file each: moved as it is.)
        for (r, k), files in sorted(chunk_files.items()):
            merged = files[0]
            if len(files) > 1:
                merged = scratch / f"r{r:05d}-o{k}.parquet"
                _concatenate_parquet(files, merged)
            result.range_bytes[r] += store.put(merged, f"{shuffle_prefix(r)}/{attempt}/o{k}.parquet")
    shutil.rmtree(scratch, ignore_errors=True)
    result.bytes = _size_of(task.location)
    result.skipped = docs.stats.skipped
    result.errors = list(docs.stats.errors[:10])
    result.tokenize_seconds = docs.tokenize_seconds
    result.scratch_peak_bytes = meter.peak
    result.peak_rss_bytes = peak_rss_bytes()
    result.seconds = time.perf_counter() - t_start
    _record(store, map_done_key(task.index), result)
    return result


def _concatenate_parquet(files: list[Path], out: Path) -> None:
    """Row groups of several Parquet files (same schema) into one file,
    streamed, then the inputs deleted."""
    import pyarrow.parquet as pq

    writer = None
    for f in files:
        table = pq.read_table(f)
        if writer is None:
            writer = pq.ParquetWriter(out, table.schema, compression="zstd")
        writer.write_table(table, row_group_size=1 << 20)
        f.unlink()
    if writer is not None:
        writer.close()


def peak_rss_bytes() -> int:
    """This process' peak resident memory so far (a pool worker's covers the
    tasks it ran before too: an upper bound for the task)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _write_known_ids(store: Store, key: str, ids: np.ndarray, lengths: np.ndarray) -> None:
    buf = io.BytesIO()
    np.savez(buf, ids=ids, lengths=lengths)
    store.write_bytes(key, buf.getvalue())


def _read_known_ids(store: Store, key: str) -> tuple[np.ndarray, np.ndarray] | None:
    """The ids a sample encoded of a shard's first documents, if it kept them."""
    if not store.exists(key):
        return None
    with np.load(io.BytesIO(store.read_bytes(key))) as z:
        ids, lengths = z["ids"], z["lengths"]
    if ids.dtype != np.int32 or lengths.dtype != np.int64 or int(lengths.sum()) != len(ids):
        raise MissingRunsError(f"{store.location(key)}: not the ids of whole documents; re-run with --no-resume")
    return ids, lengths


def _size_of(location: str) -> int:
    from indexer.storage import filesystem

    fs, path = filesystem(location)
    return int(fs.get_file_info(path).size or 0)


# --------------------------------------------------------------------------
# reduce


@dataclass
class ReduceTask:
    index: int
    lo: list[int]  # range keys in [lo, hi): [first token, second token or -1]
    hi: list[int]
    attempts: list[str]  # the finished map attempts that wrote runs for this range
    store: Store
    order: int
    min_count: int = 1
    memory_limit_bytes: int = 512 << 20
    fault: tuple[str, str] | None = None

    @property
    def label(self) -> str:
        return f"reduce {self.index} (range keys {self.lo} .. {self.hi})"


@dataclass
class ReduceResult:
    index: int
    sizes: list[int]  # entries per level
    count_values: list[list[list[int]]]  # per level: [count value, entries with it] pairs
    input_bytes: int = 0  # run bytes read (and deleted afterwards)
    # A range starting inside first token t (lo = [t, s >= 0]): its bigrams
    # that start with t, children of unigram t (which an earlier range holds).
    carried_children: int = 0
    output_bytes: int = 0
    scratch_peak_bytes: int = 0
    peak_rss_bytes: int = 0  # the worker process' peak RSS when the task ended
    seconds: float = 0.0
    resumed: bool = False


def reduce_done_key(index: int) -> str:
    return f"reduce/{index:05d}.json"


def level_key(range_index: int, k: int) -> str:
    """Reduce output for level k: columns w (last token, int32), c (count), n (children)."""
    return f"reduce/r{range_index:05d}/level{k}.parquet"


def run_reduce(task: ReduceTask) -> ReduceResult:
    store = task.store
    if (finished := _recorded(store, reduce_done_key(task.index), ReduceResult)) is not None:
        return finished
    inject_fault(store, task.fault)
    t_start = time.perf_counter()
    wanted = set(task.attempts)
    runs = [f for f in store.list(shuffle_prefix(task.index)) if f.key.split("/")[2] in wanted]
    missing = wanted - {f.key.split("/")[2] for f in runs}
    if missing:
        raise MissingRunsError(f"range {task.index}: the runs of map attempt(s) {sorted(missing)} are gone from "
                               f"the work directory {store.root}; re-run with --no-resume")
    scratch = local_scratch(store, f"r{task.index:05d}")
    n = task.order
    sizes, values = [], []
    with DiskMeter(scratch) as meter:
        by_order: dict[int, list[str]] = {k: [] for k in range(1, n + 1)}
        for f in runs:
            k = int(f.key.rsplit("/", 1)[1].split(".")[0][1:])  # .../oK.parquet
            by_order[k].append(str(store.fetch(f.key, scratch)))
        # In-memory tables spill to temp_directory beyond memory_limit, and are
        # faster than a database file for these write-once intermediates.
        con = _connect(task.memory_limit_bytes, scratch / "spill")
        for k in range(1, n + 1):
            cols = column_list(k)
            if by_order[k]:
                con.execute(
                    f"CREATE TABLE lvl{k} AS SELECT {cols}, sum(c)::UBIGINT AS c "
                    f"FROM read_parquet({by_order[k]!r}) GROUP BY ALL HAVING sum(c) >= {task.min_count}"
                )
            else:
                con.execute(f"CREATE TABLE lvl{k} ({', '.join(f'w{j} INTEGER' for j in range(k))}, c UBIGINT)")
        output_bytes = 0
        for k in range(1, n + 1):
            cols = column_list(k)
            if k < n:
                children = (
                    f"LEFT JOIN (SELECT {cols}, count(*) AS n FROM lvl{k + 1} GROUP BY ALL) b "
                    f"USING ({cols})"
                )
                n_expr = "coalesce(b.n, 0)::UBIGINT"
            else:
                children, n_expr = "", "0::UBIGINT"
            local = scratch / f"level{k}.parquet"
            con.execute(
                f"COPY (SELECT a.w{k - 1}::INTEGER AS w, a.c AS c, {n_expr} AS n FROM lvl{k} a {children} "
                f"ORDER BY {column_list(k, 'a.')}) TO '{local}' (FORMAT parquet, COMPRESSION zstd)"
            )
            output_bytes += store.put(local, level_key(task.index, k))
            sizes.append(con.execute(f"SELECT count(*) FROM lvl{k}").fetchall()[0][0])
            values.append(sorted([v, f] for v, f in con.execute(f"SELECT c, count(*) FROM lvl{k} GROUP BY c").fetchall()))
        carried = 0
        if task.lo[1] >= 0 and n >= 2:
            carried = con.execute(f"SELECT count(*) FROM lvl2 WHERE w0 = {int(task.lo[0])}").fetchall()[0][0]
        con.close()
    shutil.rmtree(scratch, ignore_errors=True)
    result = ReduceResult(task.index, sizes, values, input_bytes=sum(f.size for f in runs), carried_children=carried,
                          output_bytes=output_bytes, scratch_peak_bytes=meter.peak, peak_rss_bytes=peak_rss_bytes(),
                          seconds=time.perf_counter() - t_start)
    _record(store, reduce_done_key(task.index), result)
    # The runs are merged: free their space now (a retry finds the record above).
    store.delete(shuffle_prefix(task.index))
    return result
