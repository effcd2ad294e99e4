"""ngram-build's options through the command line, each checked for what it promises."""
from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from indexer.tokenizer import load_tokenizer
from ngram_service import NgramIndex
from ngram_service.index import index_name

from conftest import SAMPLE_TOKENIZER
from test_build import brute_counts, check_exact, random_texts, run_cli, write_jsonl_zst

TOK = str(SAMPLE_TOKENIZER)


@pytest.fixture(scope="module")
def texts() -> list[list[str]]:
    rng = random.Random(23)
    return [random_texts(rng, 40) for _ in range(3)]


@pytest.fixture()
def shards(tmp_path: Path, texts: list[list[str]]) -> Path:
    d = tmp_path / "in"
    d.mkdir()
    for i, t in enumerate(texts):
        write_jsonl_zst(d / f"s{i}.jsonl.zst", t)
    return d


def counts_of(texts: list[str], order: int, eos: int | str | None = None) -> list:
    flat, lengths = load_tokenizer(TOK, eos=eos).encode_to_arrays(texts)
    return brute_counts(flat, lengths, order)


def built(*args: str) -> None:
    r = run_cli(*args, "-q")
    assert r.returncode == 0, r.stderr


def test_min_count_with_two_workers(shards: Path, tmp_path: Path, texts: list[list[str]]) -> None:
    out = tmp_path / "m.ngt"
    built(str(shards), "--tokenizer", TOK, "-n", "3", "--min-count", "2", "-j", "2", "--out", str(out))
    assert NgramIndex.open(out).info()["build"]["min_count"] == 2
    check_exact(out, counts_of(sum(texts, []), 3), 3, min_count=2)


def test_compress_is_the_plain_file_in_one_zstd_frame_read_into_ram(shards: Path, tmp_path: Path) -> None:
    plain, packed = tmp_path / "p.ngt", tmp_path / "p.ngt.zst"
    built(str(shards), "--tokenizer", TOK, "--out", str(plain), "-j", "1")
    built(str(shards), "--tokenizer", TOK, "--out", str(packed), "-j", "1", "--compress", "--name", "p")
    raw = packed.read_bytes()
    assert raw[:4] == b"\x28\xb5\x2f\xfd" and len(raw) < plain.stat().st_size
    assert zstandard.ZstdDecompressor().decompress(raw) == plain.read_bytes()
    for mode in ("mmap", "ram"):
        idx = NgramIndex.open(packed, mode=mode, verify=True)
        assert idx.info()["mapped"] is False  # decompressed into memory whatever the mode
        ref = NgramIndex.open(plain)
        rng = np.random.default_rng(1)
        ctx, cand = rng.integers(0, 4096, (200, 2)), rng.integers(0, 4096, (200, 12))
        for x, y in zip(idx.conditional_probs(ctx, cand), ref.conditional_probs(ctx, cand)):
            np.testing.assert_array_equal(x, y)
        assert idx.topk([], 30).tokens.tolist() == ref.topk([], 30).tokens.tolist()


def test_the_default_name_is_the_one_the_server_gives(shards: Path, tmp_path: Path) -> None:
    """Without --name the header holds OUT's file name less .zst and its last extension, as the server
    names the index (a dotted name kept whole, not cut at its first dot)."""
    for out, name in (("corpus.v2.ngt", "corpus.v2"), ("corpus.v2.ngt.zst", "corpus.v2"), ("plain", "plain")):
        built(str(shards), "--tokenizer", TOK, "--out", str(tmp_path / out), "-j", "1",
              *(["--compress"] if out.endswith(".zst") else []))
        assert NgramIndex.open(tmp_path / out).info()["name"] == name == index_name(out)


def test_a_compressed_file_that_holds_no_trie_is_refused_by_its_first_bytes(tmp_path: Path) -> None:
    """A .zst of something else is refused from its first decompressed bytes,
    naming the file; the rest of the stream (here corrupt) is never read."""
    bad = tmp_path / "notes.ngt.zst"
    head = zstandard.ZstdCompressor().compress(b"just some text, no trie at all\n" * 4)
    bad.write_bytes(head + b"\x28\xb5\x2f\xfd" + b"\xff" * 64)  # a second, broken frame
    for mode in ("mmap", "ram"):
        with pytest.raises(ValueError, match=r"notes\.ngt\.zst: not a trie file \(bad magic\)"):
            NgramIndex.open(bad, mode=mode)


def test_a_cut_or_corrupted_compressed_trie_is_refused_as_such(shards: Path, tmp_path: Path) -> None:
    """A compressed trie cut anywhere (even before its first block ends, when no byte of the trie has come
    out) reads as a cut stream, and a corrupted one as corrupt, naming the file: never as a shorter trie or
    a file with a bad magic."""
    packed = tmp_path / "p.ngt.zst"
    built(str(shards), "--tokenizer", TOK, "--out", str(packed), "-j", "1", "--compress")
    raw = packed.read_bytes()
    bad = tmp_path / "bad.ngt.zst"
    for cut in (6, 40, len(raw) // 2, len(raw) - 1):
        bad.write_bytes(raw[:cut])
        with pytest.raises(ValueError, match=r"bad\.ngt\.zst: zstd-compressed trie: truncated zstd stream "
                                             r"\(the file ends inside a frame\)$"):
            NgramIndex.open(bad)
    flipped = bytearray(raw)
    flipped[len(raw) // 2] ^= 0xFF
    bad.write_bytes(bytes(flipped))
    with pytest.raises(ValueError, match=r"bad\.ngt\.zst: zstd-compressed trie: corrupt zstd stream \("):
        NgramIndex.open(bad)  # zstd's checksum (ngram-build --compress writes it), before the engine's checks


def test_small_memory_limit_and_tmp_dir(shards: Path, tmp_path: Path) -> None:
    """--memory-limit 256MB (the smallest accepted: the smallest share a task gets, small count chunks) gives
    the same bytes as the default; the runs go to --tmp-dir, whose other files are left alone, even by
    --no-resume; no OUT.build appears."""
    ref = tmp_path / "ref" / "t.ngt"
    built(str(shards), "--tokenizer", TOK, "-n", "4", "--out", str(ref), "-j", "1")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "keep.txt").write_text("not ngram-build's")
    out = tmp_path / "t.ngt"
    args = [str(shards), "--tokenizer", TOK, "-n", "4", "--out", str(out), "-j", "2", "--memory-limit", "256MB",
            "--tmp-dir", str(scratch)]
    built(*args, "--keep-tmp")
    assert out.read_bytes() == ref.read_bytes()
    records = list(scratch.glob("build-*/map/*.json"))  # the finished maps' records, kept by --keep-tmp
    assert records, list(scratch.rglob("*"))
    assert not (tmp_path / "t.ngt.build").exists()
    built(*args, "--no-resume")
    assert out.read_bytes() == ref.read_bytes()
    assert (scratch / "keep.txt").read_text() == "not ngram-build's"
    assert not list(scratch.glob("build-*"))  # its own work removed after success


def test_duckdb_spills_to_the_work_directory_under_its_memory_limit(tmp_path: Path) -> None:
    """The connection the build tasks use (memory_limit, temp_directory) spills an aggregation larger than its
    limit to files in the task's folder and still answers exactly."""
    from indexer.task_resources import duckdb_connection

    con = duckdb_connection(64 << 20, tmp_path / "spill")
    seen: set[str] = set()
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            seen.update(p.name for p in tmp_path.rglob("*") if p.is_file())
            time.sleep(0.002)

    w = threading.Thread(target=watch)
    w.start()
    try:
        groups, total = con.execute(
            "SELECT count(*), sum(c) FROM (SELECT i % 4000000 AS g, count(*) AS c FROM range(8000000) t(i) GROUP BY g)"
        ).fetchone()
    finally:
        stop.set()
        w.join()
    assert (groups, total) == (4_000_000, 8_000_000)
    assert con.execute("SELECT current_setting('memory_limit')").fetchone()[0].endswith("MiB")
    assert any(n.startswith("duckdb_temp") for n in seen), seen


def test_text_field_in_json_and_parquet(tmp_path: Path, texts: list[list[str]]) -> None:
    """The text under another field: JSON lines and a Parquet column give the counts of those texts."""
    docs = texts[0] + texts[1]
    d = tmp_path / "in"
    d.mkdir()
    (d / "a.jsonl").write_text("".join(json.dumps({"body": t, "text": "decoy"}) + "\n" for t in texts[0]))
    pq.write_table(pa.table({"body": texts[1], "text": ["decoy"] * len(texts[1])}), d / "b.parquet",
                   row_group_size=7)
    out = tmp_path / "t.ngt"
    built(str(d), "--tokenizer", TOK, "-n", "3", "--text-field", "body", "--out", str(out), "-j", "2")
    info = NgramIndex.open(out).info()
    assert info["build"]["text_field"] == "body" and info["corpus"]["documents"] == len(docs)
    check_exact(out, counts_of(docs, 3), 3)
    r = run_cli(str(d), "--tokenizer", TOK, "--text-field", "nope", "--out", str(tmp_path / "x.ngt"), "-q")
    assert r.returncode == 1 and "nope" in r.stderr


@pytest.mark.parametrize("eos", ["7", "'"])  # an id, and the token string of id 7
def test_eos_option(shards: Path, tmp_path: Path, texts: list[list[str]], eos: str) -> None:
    out = tmp_path / "e.ngt"
    built(str(shards), "--tokenizer", TOK, "-n", "3", "--eos", eos, "--out", str(out), "-j", "1")
    idx = NgramIndex.open(out)
    assert idx.eos_id == 7 and idx.info()["build"]["eos_id"] == 7
    check_exact(out, counts_of(sum(texts, []), 3, eos=7), 3)
    assert idx.count([0]) == 0  # the tokenizer's own EOS (id 0) is no longer appended


def test_tokenizer_backends_give_the_same_file(shards: Path, tmp_path: Path) -> None:
    outs = {}
    for backend in ("hf", "tiktoken", "auto"):
        outs[backend] = tmp_path / backend / "t.ngt"
        r = run_cli(str(shards), "--tokenizer", TOK, "--tokenizer-backend", backend, "--out", str(outs[backend]),
                    "-j", "1")
        assert r.returncode == 0, r.stderr
        assert f"({backend if backend != 'auto' else 'tiktoken'}, vocab 4096" in r.stderr.splitlines()[0]
    assert outs["hf"].read_bytes() == outs["tiktoken"].read_bytes() == outs["auto"].read_bytes()
