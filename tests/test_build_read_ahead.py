"""The map reuses the ids its shard's sample encoded, and with a core to spare
reads and encodes ahead (at -j 1 the next shard too) while it counts: same
counts, no thread left behind; with none to spare it reads nothing ahead."""
from __future__ import annotations

import random
import threading
from pathlib import Path

import numpy as np
import pytest
from conftest import SAMPLE_TOKENIZER
from test_build import brute_counts, check_exact, random_texts, write_jsonl_zst

import indexer.executor
import indexer.pipeline
import indexer.shards
from indexer.fault_injection import PermanentFault
from indexer.pipeline import BuildConfig, build
from indexer.storage import Store
from indexer.tokenizer import load_tokenizer
from indexer.work_store import sample_ids_key


def small_batches(monkeypatch: pytest.MonkeyPatch, sample_tokens: int) -> None:
    # Samples that end inside their shards, and shards of many batches, so
    # that the reader runs ahead and blocks on its bounded queue.
    monkeypatch.setattr(indexer.pipeline, "SAMPLE_TOKENS", sample_tokens)
    monkeypatch.setattr(indexer.shards, "DEFAULT_BATCH_CHARS", 400)


def cores(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    monkeypatch.setattr(indexer.executor, "available_cores", lambda: n)


def reader_threads() -> list[threading.Thread]:
    """The threads reading a shard ahead, named ``shard-reader PATH``."""
    return [t for t in threading.enumerate() if t.name.startswith("shard-reader")]


def test_map_starts_after_the_sampled_documents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    small_batches(monkeypatch, sample_tokens=700)
    cores(monkeypatch, 2)
    rng = random.Random(21)
    corpus, shards = tmp_path / "corpus", []
    corpus.mkdir()
    for s in range(5):
        shards.append(random_texts(rng, 120))
        write_jsonl_zst(corpus / f"s{s}.jsonl.zst", shards[-1])
    out = tmp_path / "t.ngt"
    build(BuildConfig(inputs=[str(corpus)], out=str(out), tokenizer=str(SAMPLE_TOKENIZER), order=4, workers=1,
                      keep_tmp=True), progress=lambda _m: None)
    tok = load_tokenizer(str(SAMPLE_TOKENIZER))
    flat, lengths = tok.encode_to_arrays([t for texts in shards for t in texts])
    check_exact(out, brute_counts(flat, lengths, 4), 4)

    # The samples kept the ids of some, not all, of their shards' documents.
    (store_dir,) = (tmp_path / "t.ngt.build").iterdir()
    store = Store(str(store_dir))
    kept = [i for i in range(len(shards)) if store.exists(sample_ids_key(i))]
    assert len(kept) == 4
    for i in kept:
        with np.load(store_dir / sample_ids_key(i)) as z:
            docs = len(z["lengths"])
            assert 0 < docs < len(shards[i])
            want_ids, want_lengths = tok.encode_to_arrays(shards[i][:docs])
            assert np.array_equal(z["ids"], want_ids) and np.array_equal(z["lengths"], want_lengths)
    assert not reader_threads()


def test_a_failed_map_stops_the_read_ahead(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Map 0 (the largest shard) runs first and reads map 1's shard ahead;
    # map 1 then fails before reading: its reader must stop, not wait forever.
    small_batches(monkeypatch, sample_tokens=200)
    cores(monkeypatch, 2)
    rng = random.Random(5)
    write_jsonl_zst(tmp_path / "a.jsonl.zst", random_texts(rng, 200))
    write_jsonl_zst(tmp_path / "b.jsonl.zst", random_texts(rng, 150))
    monkeypatch.setenv("NGRAM_BUILD_FAULT", "map:1:fail")
    with pytest.raises(PermanentFault):
        build(BuildConfig(inputs=[str(tmp_path)], out=str(tmp_path / "t.ngt"), tokenizer=str(SAMPLE_TOKENIZER),
                          order=3, workers=1), progress=lambda _m: None)
    assert not reader_threads()


@pytest.mark.parametrize("spare", [False, True])
def test_reads_ahead_only_with_a_core_to_spare(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spare: bool) -> None:
    small_batches(monkeypatch, sample_tokens=300)
    cores(monkeypatch, 2 if spare else 1)
    rng = random.Random(8)
    shards = [random_texts(rng, 120) for _ in range(3)]
    for i, texts in enumerate(shards):
        write_jsonl_zst(tmp_path / f"s{i}.jsonl.zst", texts)
    out = tmp_path / "t.ngt"
    # The build runs in this process (-j 1): record which shards get a reader thread as each starts (polling
    # the live threads missed short-lived readers on a loaded machine).
    read_ahead: set[str] = set()
    start = threading.Thread.start

    def recording_start(thread: threading.Thread) -> None:
        if thread.name.startswith("shard-reader "):
            read_ahead.add(thread.name.split(" ", 1)[1])
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", recording_start)
    build(BuildConfig(inputs=[str(tmp_path)], out=str(out), tokenizer=str(SAMPLE_TOKENIZER), order=3, workers=1),
          progress=lambda _m: None)
    monkeypatch.undo()
    flat, lengths = load_tokenizer(str(SAMPLE_TOKENIZER)).encode_to_arrays([t for s in shards for t in s])
    check_exact(out, brute_counts(flat, lengths, 3), 3)
    assert read_ahead == ({str(tmp_path / f"s{i}.jsonl.zst") for i in range(3)} if spare else set())
    assert not reader_threads()
