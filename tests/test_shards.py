"""Tests for indexer.shards: formats, batching, errors located as file:line."""

from __future__ import annotations

import gzip
import io
import json
import pickle
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from indexer.shard_discovery import expand_inputs
from indexer.shards import ShardError, ShardReader, iter_text_batches, shard_format

from conftest import CORPUS as SHARED_CORPUS  # noqa: E402

# Texts that break naive readers: U+2028/U+2029 and other characters that
# str.splitlines() treats as line ends, CR, tabs, non-ASCII, embedded JSON.
TRICKY = [
    "plain ascii",
    "line\u2028separator and paragraph\u2029separator",
    "next line\x85 file sep\x1c group\x1d record\x1e vt\x0b ff\x0c",
    "windows\r\nnewlines\r\n",
    "中文 русский 😀",
    '{"not": "a document"}',
    "",
]


def jsonl_bytes(texts: list[str], field: str = "text") -> bytes:
    # ensure_ascii=False keeps U+2028 as raw bytes in the line, the hard case.
    return b"".join(
        json.dumps({"id": str(i), field: t, "metadata": {"n": i}}, ensure_ascii=False).encode("utf-8") + b"\n"
        for i, t in enumerate(texts)
    )


def write(path: Path, data: bytes) -> Path:
    name = path.name
    if name.endswith(".gz"):
        data = gzip.compress(data)
    elif name.endswith(".zst"):
        data = zstandard.ZstdCompressor().compress(data)
    path.write_bytes(data)
    return path


def read_all(path: Path, **kw: object) -> list[str]:
    return [t for batch in ShardReader(path, **kw) for t in batch]  # type: ignore[arg-type]


def error_of(path: Path, **kw: object) -> ShardError:
    with pytest.raises(ShardError) as info:
        read_all(path, **kw)
    return info.value


# --------------------------------------------------------------------------
# Formats


@pytest.mark.parametrize("name", ["a.jsonl", "a.json", "a.jsonl.gz", "a.json.gz", "a.jsonl.zst", "a.json.zst"])
def test_every_json_lines_format_round_trips(tmp_path: Path, name: str) -> None:
    path = write(tmp_path / name, jsonl_bytes(TRICKY))
    assert read_all(path) == TRICKY


def test_parquet_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({"id": list(range(len(TRICKY))), "text": TRICKY}), path, row_group_size=3)
    assert read_all(path) == TRICKY


def test_parquet_large_string_and_dictionary_columns(tmp_path: Path) -> None:
    path = tmp_path / "a.parquet"
    table = pa.table(
        {
            "big": pa.array(TRICKY, type=pa.large_string()),
            "dict": pa.array(TRICKY).dictionary_encode(),
        }
    )
    pq.write_table(table, path)
    assert read_all(path, text_field="big") == TRICKY
    assert read_all(path, text_field="dict") == TRICKY


def test_u2028_is_not_a_line_break(tmp_path: Path) -> None:
    path = write(tmp_path / "a.jsonl.zst", jsonl_bytes(["one\u2028two\u2029three"]))
    reader = ShardReader(path)
    assert read_all(path) == ["one\u2028two\u2029three"]
    assert list(reader) and reader.stats.documents == 1


def test_multi_frame_zstd_and_multi_member_gzip(tmp_path: Path) -> None:
    first, second = jsonl_bytes(["a", "b"]), jsonl_bytes(["c"])
    cctx = zstandard.ZstdCompressor(write_content_size=False)
    zst = tmp_path / "m.jsonl.zst"
    # Frames split mid-line too: the line iterator must join across frames.
    zst.write_bytes(cctx.compress(first[:5]) + cctx.compress(first[5:] + second))
    gz = tmp_path / "m.jsonl.gz"
    gz.write_bytes(gzip.compress(first) + gzip.compress(second))
    assert read_all(zst) == ["a", "b", "c"]
    assert read_all(gz) == ["a", "b", "c"]


def test_blank_lines_crlf_and_bom_are_tolerated(tmp_path: Path) -> None:
    data = b'\xef\xbb\xbf{"text": "a"}\r\n\n   \n{"text": "b"}\r\n\n{"text": "c"}'  # no final newline
    path = write(tmp_path / "a.jsonl", data)
    assert read_all(path) == ["a", "b", "c"]


def test_other_text_field(tmp_path: Path) -> None:
    path = write(tmp_path / "a.jsonl.gz", jsonl_bytes(["x", "y"], field="content"))
    assert read_all(path, text_field="content") == ["x", "y"]
    assert "missing field 'text'" in str(error_of(path))


def test_empty_files_yield_nothing(tmp_path: Path) -> None:
    for name in ["e.jsonl", "e.jsonl.gz", "e.jsonl.zst"]:
        assert read_all(write(tmp_path / name, b"")) == []
    (tmp_path / "z.jsonl.zst").write_bytes(b"")  # zero bytes, not even a frame
    assert read_all(tmp_path / "z.jsonl.zst") == []


def test_long_line_spanning_many_chunks(tmp_path: Path) -> None:
    big = "x" * 3_000_000  # several read chunks long
    path = write(tmp_path / "a.jsonl.zst", jsonl_bytes(["a", big, "b"]))
    assert read_all(path) == ["a", big, "b"]


# --------------------------------------------------------------------------
# Batching


def test_batches_are_bounded_by_characters(tmp_path: Path) -> None:
    texts = [f"document {i} " * 10 for i in range(1000)]
    path = write(tmp_path / "a.jsonl.zst", jsonl_bytes(texts))
    batches = list(iter_text_batches(path, batch_chars=5000))
    assert [t for b in batches for t in b] == texts
    assert len(batches) > 10
    longest = max(len(t) for t in texts)
    for b in batches:
        # A batch closes as soon as it reaches the bound.
        assert sum(map(len, b)) < 5000 + longest


def test_huge_document_is_a_batch_of_its_own(tmp_path: Path) -> None:
    path = write(tmp_path / "a.jsonl", jsonl_bytes(["a", "b" * 100, "c"]))
    assert list(iter_text_batches(path, batch_chars=10)) == [["a", "b" * 100], ["c"]]


def test_parquet_batches_are_bounded(tmp_path: Path) -> None:
    texts = ["y" * 100] * 500
    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({"text": texts}), path)
    batches = list(iter_text_batches(path, batch_chars=1000))
    assert sum(len(b) for b in batches) == 500
    assert max(len(b) for b in batches) <= 10


def test_stats_count_documents_and_characters(tmp_path: Path) -> None:
    path = write(tmp_path / "a.jsonl.gz", jsonl_bytes(["ab", "cde"]))
    reader = ShardReader(path)
    list(reader)
    assert (reader.stats.documents, reader.stats.characters, reader.stats.skipped) == (2, 5, 0)
    list(reader)  # a second pass re-reads and resets
    assert reader.stats.documents == 2


# --------------------------------------------------------------------------
# Bad documents: located, or skipped and counted

GOOD = b'{"text": "ok"}\n'
BAD_LINES = [
    (b'{"text": "unterminated\n', "invalid JSON"),
    (b"[1, 2]\n", "line is an array, not a JSON object"),
    (b'"just a string"\n', "not a JSON object"),
    (b'{"id": 1}\n', "missing field 'text'"),
    (b'{"text": null}\n', "field 'text' is null, not a string"),
    (b'{"text": 42}\n', "field 'text' is a number, not a string"),
    (b'{"text": ["a"]}\n', "field 'text' is an array, not a string"),
    (b'{"text": "caf\xe9"}\n', "invalid UTF-8"),
    (b'{"text": "lone \\ud800 surrogate"}\n', "lone UTF-16 surrogate"),
]


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.zst"])
@pytest.mark.parametrize(("line", "message"), BAD_LINES)
def test_bad_document_is_located(tmp_path: Path, suffix: str, line: bytes, message: str) -> None:
    # Line 4: two good lines, a blank one (blank lines still count), then bad.
    path = write(tmp_path / f"s{suffix}", GOOD + GOOD + b"\n" + line + GOOD)
    err = error_of(path)
    assert str(err).startswith(f"{path}:4: ")
    assert message in str(err)
    assert (err.path, err.line) == (str(path), 4)


def test_escaped_surrogate_pair_is_fine(tmp_path: Path) -> None:
    path = write(tmp_path / "a.jsonl", b'{"text": "\\ud83d\\ude00 and \\\\ud800 (escaped backslash)"}\n')
    assert read_all(path) == ["\U0001f600 and \\ud800 (escaped backslash)"]


def test_skip_bad_counts_and_keeps_first_messages(tmp_path: Path) -> None:
    lines = [GOOD]
    for bad, _ in BAD_LINES:
        lines += [bad, GOOD]
    path = write(tmp_path / "a.jsonl.gz", b"".join(lines))
    reader = ShardReader(path, skip_bad=True)
    assert [t for b in reader for t in b] == ["ok"] * (len(BAD_LINES) + 1)
    stats = reader.stats
    assert stats.documents == len(BAD_LINES) + 1
    assert stats.skipped == len(BAD_LINES)
    assert stats.errors[0] == f"{path}:2: invalid JSON: Unterminated string starting at (column 10)"
    assert stats.errors[3].startswith(f"{path}:8: missing field 'text'")
    assert len(stats.errors) == len(BAD_LINES)


def test_skip_bad_keeps_only_a_few_messages(tmp_path: Path) -> None:
    path = write(tmp_path / "a.jsonl", b"{}\n" * 50 + GOOD)
    reader = ShardReader(path, skip_bad=True)
    assert [t for b in reader for t in b] == ["ok"]
    assert reader.stats.skipped == 50
    assert 0 < len(reader.stats.errors) <= 10


# --------------------------------------------------------------------------
# Broken compressed streams: fatal, even with skip_bad


def many_lines(n: int = 20_000) -> bytes:
    return jsonl_bytes([f"document number {i} with some text" for i in range(n)])


@pytest.mark.parametrize("skip_bad", [False, True])
def test_zstd_truncated_mid_frame_is_detected(tmp_path: Path, skip_bad: bool) -> None:
    # zstandard's stream_reader returns a clean EOF for this file; we must not.
    blob = zstandard.ZstdCompressor().compress(many_lines())
    path = tmp_path / "cut.jsonl.zst"
    path.write_bytes(blob[: len(blob) // 2])
    err = error_of(path, skip_bad=skip_bad)
    assert "truncated zstd stream" in str(err)
    assert err.line is not None and 1 < err.line < 20_000
    assert str(err).startswith(f"{path}:{err.line}: ")


def test_zstd_cut_inside_second_frame_is_detected(tmp_path: Path) -> None:
    cctx = zstandard.ZstdCompressor()
    first = cctx.compress(jsonl_bytes(["a"]))
    path = tmp_path / "cut.jsonl.zst"
    path.write_bytes(first + cctx.compress(many_lines(100))[:4])  # the next frame's magic only
    err = error_of(path)
    assert str(err) == f"{path}:2: truncated zstd stream (the file ends inside a frame)"


def test_zstd_garbage_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl.zst"
    path.write_bytes(zstandard.ZstdCompressor().compress(jsonl_bytes(["a"])) + b"not zstd at all")
    assert "corrupt zstd stream" in str(error_of(path, skip_bad=True))


@pytest.mark.parametrize("skip_bad", [False, True])
def test_gzip_truncated_is_detected(tmp_path: Path, skip_bad: bool) -> None:
    blob = gzip.compress(many_lines())
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(blob[: len(blob) // 2])
    err = error_of(path, skip_bad=skip_bad)
    assert "truncated gzip stream" in str(err)
    assert err.line is not None and err.line > 1


@pytest.mark.parametrize("skip_bad", [False, True])
def test_small_gzip_truncated_inside_line_7_names_line_7(tmp_path: Path, skip_bad: bool) -> None:
    # A shard much smaller than one read step: six complete lines, then the
    # file ends inside the seventh (a sync flush there makes the cut exact).
    data = jsonl_bytes([f"document {i}" for i in range(10)])
    cut = data.index(b"document 6") + 4
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb") as gz:
        gz.write(data[:cut])
        gz.flush()
        readable = out.tell()
        gz.write(data[cut:])
    path = tmp_path / "trunc.json.gz"
    path.write_bytes(out.getvalue()[:readable])
    err = error_of(path, skip_bad=skip_bad)
    assert err.line == 7
    assert str(err).startswith(f"{path}:7: truncated gzip stream")


def test_gzip_corrupt_is_detected(tmp_path: Path) -> None:
    blob = bytearray(gzip.compress(many_lines(200)))
    blob[-6] ^= 0xFF  # inside the CRC32 / length trailer
    path = tmp_path / "bad.jsonl.gz"
    path.write_bytes(bytes(blob))
    assert "corrupt gzip stream" in str(error_of(path))


def test_not_gzip_at_all(tmp_path: Path) -> None:
    path = tmp_path / "plain.jsonl.gz"
    path.write_bytes(GOOD)
    assert str(error_of(path)).startswith(f"{path}:1: corrupt gzip stream")


# --------------------------------------------------------------------------
# Parquet errors


def test_parquet_missing_column(tmp_path: Path) -> None:
    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({"body": ["x"], "id": [1]}), path)
    assert str(error_of(path)) == f"{path}: no column 'text' (columns: body, id)"


def test_parquet_wrong_type(tmp_path: Path) -> None:
    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({"text": [1, 2]}), path)
    assert str(error_of(path)) == f"{path}: column 'text' has type int64, not string"


def test_parquet_null_is_a_bad_document_by_row(tmp_path: Path) -> None:
    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({"text": ["a", "b", None, "d", None]}), path, row_group_size=2)
    assert str(error_of(path)) == f"{path}:3: field 'text' is null, not a string"
    reader = ShardReader(path, skip_bad=True)
    assert [t for b in reader for t in b] == ["a", "b", "d"]
    assert reader.stats.skipped == 2
    assert reader.stats.errors == [
        f"{path}:3: field 'text' is null, not a string",
        f"{path}:5: field 'text' is null, not a string",
    ]


def test_parquet_unreadable(tmp_path: Path) -> None:
    path = tmp_path / "a.parquet"
    path.write_bytes(b"this is not parquet")
    assert "not a readable Parquet file" in str(error_of(path))


# --------------------------------------------------------------------------
# Inputs


def make_tree(root: Path) -> None:
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / ".hidden").mkdir()
    for rel in ["b.jsonl.zst", "a.json.gz", "sub/c.parquet", "sub/deeper/d.jsonl", ".hidden/x.jsonl", "sub/._e.jsonl"]:
        (root / rel).write_bytes(b"")
    (root / "README.md").write_text("not a shard")
    (root / "sub" / "sums.sha256").write_text("not a shard")


def test_expand_directory_recursively(tmp_path: Path) -> None:
    make_tree(tmp_path)
    got = expand_inputs([str(tmp_path)])
    assert got == [tmp_path / "a.json.gz", tmp_path / "b.jsonl.zst", tmp_path / "sub/c.parquet", tmp_path / "sub/deeper/d.jsonl"]


def test_expand_globs_sorted_and_deduplicated(tmp_path: Path) -> None:
    make_tree(tmp_path)
    got = expand_inputs([f"{tmp_path}/**/*.jsonl", f"{tmp_path}/*.zst", str(tmp_path / "b.jsonl.zst"), f"{tmp_path}/./b.jsonl.zst"])
    assert got == [tmp_path / "b.jsonl.zst", tmp_path / "sub/deeper/d.jsonl"]
    # A glob skips files that are not shards, and expands matched folders.
    assert expand_inputs([f"{tmp_path}/*"]) == expand_inputs([str(tmp_path)])


def test_expand_errors(tmp_path: Path) -> None:
    make_tree(tmp_path)
    (tmp_path / "empty").mkdir()
    cases = {
        str(tmp_path / "README.md"): "unsupported file type",
        str(tmp_path / "missing.jsonl"): "no such file or directory",
        f"{tmp_path}/*.txt": "pattern matches no shard files",
        str(tmp_path / "empty"): "directory holds no shard files",
        "s3://bucket/x.jsonl.zst": "remote URLs",
    }
    for given, message in cases.items():
        with pytest.raises(ShardError) as info:
            expand_inputs([str(tmp_path / "a.json.gz"), given])
        assert str(info.value).startswith(f"{given}: {message}")
        assert isinstance(info.value, ValueError)


def test_shard_format_and_unsupported_reader(tmp_path: Path) -> None:
    assert shard_format("x/A.JSONL.ZST") == "jsonl.zst"
    assert shard_format("a.json.gz") == "jsonl.gz"
    assert shard_format("a.parquet") == "parquet"
    assert shard_format("a.txt") is None
    assert shard_format(".jsonl") is None
    with pytest.raises(ShardError, match="unsupported file type"):
        ShardReader(tmp_path / "a.txt")


def test_shard_error_pickles() -> None:
    # Workers raise it in another process; it must survive the trip.
    err = pickle.loads(pickle.dumps(ShardError("a.jsonl", 17, "missing field 'text'")))
    assert (err.path, err.line, err.message) == ("a.jsonl", 17, "missing field 'text'")
    assert str(err) == "a.jsonl:17: missing field 'text'"


# --------------------------------------------------------------------------
# The shared corpus (Dolma shards)


@pytest.mark.skipif(not SHARED_CORPUS.is_dir(), reason="shared corpus not available")
def test_real_dolma_shards() -> None:
    files = expand_inputs([str(SHARED_CORPUS)])
    assert len(files) >= 2
    by_name = {f.name: f for f in files}
    gz = ShardReader(by_name["cc_en_head-0000.json.gz"])
    assert sum(len(b) for b in gz) == gz.stats.documents == 20
    zst = ShardReader(by_name["gsm8k-0000.jsonl.zst"])
    texts = [t for b in zst for t in b]
    assert len(texts) == 7137 and zst.stats.skipped == 0
    assert any("\u2028" in t for t in texts)  # and it did not split the document
