"""Pre-tokenized inputs (Parquet lists of ids, Dolma/OLMo .npy arrays) give the
text build's n-gram sections; malformed ones fail naming file and row."""
from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from indexer.cli import SAMPLE_DIR
from indexer.pipeline import BuildConfig, build
from indexer.shards import ShardError, ShardReader
from indexer.tokenizer import load_tokenizer
from ngram_service import NgramIndex

TOKENIZER = SAMPLE_DIR / "tokenizer.json"
CORPUS = SAMPLE_DIR / "corpus"


def quiet(_m: str) -> None:
    pass


def ngram_sections(path: Path) -> list[tuple]:
    """Every section but meta: kind, level, size, CRC."""
    return [(s["kind"], s["level"], s["length"], s["count"], s["crc32c"])
            for s in NgramIndex.open(path).sections() if s["kind"] != "meta"]


@pytest.fixture(scope="module")
def docs() -> list[np.ndarray]:
    """The bundled sample corpus tokenized, one array per document (no EOS)."""
    tok = load_tokenizer(str(TOKENIZER))
    texts = [t for batch in ShardReader(next(CORPUS.glob("*.jsonl.gz"))) for t in batch]
    return [np.array(ids, dtype=np.int64) for ids in tok.encode_batch(texts)]


@pytest.fixture(scope="module")
def text_trie(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("text") / "t.ngt"
    build(BuildConfig(inputs=[str(CORPUS)], out=str(out), tokenizer=str(TOKENIZER), order=3, workers=1),
          progress=quiet)
    return out


def pretokenized(inputs: list[Path], out: Path, **kw) -> BuildConfig:
    return BuildConfig(inputs=[str(p) for p in inputs], out=str(out), tokenizer=None, vocab_size=4096, eos=0,
                       order=3, workers=1, **kw)


def write_parquet(path: Path, rows: list, field: str = "input_ids", type_: pa.DataType | None = None) -> Path:
    pq.write_table(pa.table({field: pa.array(rows, type_ or pa.list_(pa.int32())), "text": ["x"] * len(rows)}), path)
    return path


def test_parquet_token_lists_give_the_text_builds_sections(docs, text_trie: Path, tmp_path: Path) -> None:
    half = len(docs) // 2
    write_parquet(tmp_path / "a.parquet", [d.tolist() for d in docs[:half]])
    write_parquet(tmp_path / "b.parquet", [d.tolist() for d in docs[half:]], type_=pa.large_list(pa.int64()))
    out = tmp_path / "p.ngt"
    report = build(pretokenized([tmp_path], out), progress=quiet)
    assert report.tokenize_seconds == 0
    assert ngram_sections(out) == ngram_sections(text_trie)
    info = NgramIndex.open(out).info()
    assert info["corpus"]["documents"] == len(docs) and info["build"]["token_field"] == "input_ids"


def test_dolma_npy_arrays_give_the_text_builds_sections(docs, text_trie: Path, tmp_path: Path) -> None:
    # Dolma / OLMo: a headerless uint16 memory map, every document ending in EOS ...
    third = len(docs) // 3
    with_eos = [np.append(d, 0) for d in docs]
    np.concatenate(with_eos[:third]).astype("<u2").tofile(tmp_path / "part-0.npy")
    # ... a NumPy .npy with a header (uint32) ...
    np.save(tmp_path / "part-1.npy", np.concatenate(with_eos[third:2 * third]).astype(np.uint32))
    # ... and one with Dolma's metadata (start,end,id,src,loc), documents cut there.
    rest = with_eos[2 * third:]
    np.concatenate(rest).astype("<u2").tofile(tmp_path / "part-2.npy")
    ends = np.cumsum([len(d) for d in rest])
    rows = "".join(f"{s},{e},doc{i},src,{i}\n" for i, (s, e) in enumerate(zip(np.r_[0, ends[:-1]], ends)))
    (tmp_path / "part-2.csv.gz").write_bytes(gzip.compress(rows.encode()))
    out = tmp_path / "n.ngt"
    build(pretokenized([tmp_path], out), progress=quiet)
    assert ngram_sections(out) == ngram_sections(text_trie)
    assert NgramIndex.open(out).info()["corpus"]["documents"] == len(docs)


def test_cli_without_tokenizer(docs, text_trie: Path, tmp_path: Path) -> None:
    write_parquet(tmp_path / "a.parquet", [d.tolist() for d in docs])
    out = tmp_path / "c.ngt"
    base = [sys.executable, "-m", "indexer.cli", str(tmp_path / "a.parquet"), "--out", str(out), "-j", "1"]
    r = subprocess.run(base, capture_output=True, text=True)
    assert r.returncode == 2 and "--vocab-size and --eos" in r.stderr
    r = subprocess.run(base + ["--vocab-size", "4096", "--eos", "0"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert ngram_sections(out) == ngram_sections(text_trie)


def bad_inputs(tmp: Path) -> dict[str, tuple[Path, str]]:
    cases = {
        "id out of range": (write_parquet(tmp / "range.parquet", [[1, 2], [3], [5, 4096, 7]]),
                            "range.parquet:3: token id 4096 is outside [0, 4096)"),
        "negative id": (write_parquet(tmp / "neg.parquet", [[1, -2]]), "neg.parquet:1: token id -2"),
        "wrong parquet type": (write_parquet(tmp / "float.parquet", [[1.5]], type_=pa.list_(pa.float32())),
                               "float.parquet: column 'input_ids' has type list<element: float>, not a list of integer"),
        "null row": (write_parquet(tmp / "null.parquet", [[1], None]), "null.parquet:2: field 'input_ids' is null"),
        "empty parquet": (write_parquet(tmp / "empty.parquet", []), "empty.parquet: empty file"),
    }
    np.save(tmp / "float.npy", np.zeros(4, np.float32))
    cases["wrong npy dtype"] = (tmp / "float.npy", "float.npy: array dtype is float32")
    np.save(tmp / "2d.npy", np.zeros((2, 3), np.uint16))
    cases["ragged npy"] = (tmp / "2d.npy", "2d.npy: array has shape (2, 3)")
    (tmp / "odd.npy").write_bytes(b"\x01\x00\x00\x00\x07")
    cases["odd size"] = (tmp / "odd.npy", "odd.npy: size 5 bytes is not a whole number of 2-byte ids")
    (tmp / "empty.npy").write_bytes(b"")
    cases["empty npy"] = (tmp / "empty.npy", "empty.npy: empty token array")
    np.array([5, 0, 6, 0, 9, 9], "<u2").tofile(tmp / "tail.npy")
    cases["truncated npy"] = (tmp / "tail.npy", "tail.npy:3: 2 token(s) after the last EOS")
    np.array([5, 0, 6, 5000, 0], "<u2").tofile(tmp / "big.npy")
    cases["npy id out of range"] = (tmp / "big.npy", "big.npy:2: token id 5000 at token offset 3")
    return cases


def test_malformed_pretokenized_input_names_file_and_row(tmp_path: Path) -> None:
    for what, (path, message) in bad_inputs(tmp_path).items():
        with pytest.raises(ShardError) as info:
            build(pretokenized([path], tmp_path / "x.ngt"), progress=quiet)
        assert message in str(info.value), what
        assert str(info.value).startswith(str(path)), what
    assert not (tmp_path / "x.ngt").exists()


def test_text_shard_without_tokenizer_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ShardError, match="give --tokenizer to read text shards"):
        build(pretokenized([CORPUS], tmp_path / "x.ngt"), progress=quiet)
