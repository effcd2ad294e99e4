"""What a new user meets opening tries: ngram-info's sizes and section table,
and the refusal of a compressed or foreign file by the mapping engine."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import zstandard
from click.testing import CliRunner

from ngram_service import NgramIndex, TrieFormatError, _engine
from ngram_service.cli_info import main as info_main


@pytest.fixture(scope="module")
def compressed(sample_trie: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    # What ngram-build --compress writes: the plain file, zstd-compressed.
    path = tmp_path_factory.mktemp("z") / "sample.ngt.zst"
    path.write_bytes(zstandard.ZstdCompressor().compress(sample_trie.read_bytes()))
    return path


def test_info_of_a_compressed_trie_gives_the_file_size(sample_trie: Path, compressed: Path) -> None:
    info = NgramIndex.open(compressed).info()
    assert info["file_bytes"] == compressed.stat().st_size < sample_trie.stat().st_size
    assert info["image_bytes"] == sample_trie.stat().st_size and info["compressed"] is True
    plain = NgramIndex.open(sample_trie).info()
    assert plain["file_bytes"] == sample_trie.stat().st_size and "compressed" not in plain
    out = CliRunner().invoke(info_main, [str(compressed)]).output
    assert info["ram_bytes"] == plain["ram_bytes"] > sample_trie.stat().st_size  # the image and what it decodes
    assert f"({compressed.stat().st_size:,} bytes, zstd-compressed; {info['ram_bytes']:,} bytes in RAM" in out


def test_ram_bytes_are_the_image_and_the_decoded_arrays(sample_trie: Path, sample_trie_v2: Path) -> None:
    # Version 1 decodes its tokens (with their count ranks) and Elias-Fano
    # child offsets at open in RAM; version 2 holds its image only.
    for path, decodes in ((sample_trie, True), (sample_trie_v2, False)):
        info = NgramIndex.open(path).info()
        ram = NgramIndex.open(path, mode="ram")
        assert ram.engine.decoded_bytes == info["ram_bytes"] - info["file_bytes"]
        assert (ram.engine.decoded_bytes > 0) == decodes
        assert NgramIndex.open(path).engine.decoded_bytes == 0  # mapped: the file as it is
        out = CliRunner().invoke(info_main, [str(path)]).output
        assert f"in RAM      {info['ram_bytes']:,} bytes" in out


def test_sections_table_is_aligned(sample_trie: Path) -> None:
    r = CliRunner().invoke(info_main, [str(sample_trie), "--sections"])
    assert r.exit_code == 0
    rows = [line for line in r.output.splitlines() if line.startswith("  ")]
    # Names of 4 to 18 characters (meta ... count_escape_index): every column
    # starts at the same place whatever the section's name.
    assert {"meta", "count_escape_index"} <= {row.split()[0] for row in rows}
    for word in (" level ", " offset ", " bytes ", " crc "):
        assert len({row.index(word) for row in rows}) == 1, word


def test_mapping_a_compressed_trie_names_the_fix(compressed: Path) -> None:
    with pytest.raises(TrieFormatError) as e:
        _engine.Trie.open(str(compressed))
    msg = str(e.value)
    assert "zstd-compressed trie" in msg and "zstd -d" in msg and "NgramIndex.open" in msg


def test_random_bytes_get_no_zstd_hint(tmp_path: Path) -> None:
    junk = tmp_path / "junk.ngt"
    junk.write_bytes(os.urandom(4096).replace(b"\x28\xb5\x2f\xfd", b"0000"))
    with pytest.raises(TrieFormatError) as e:
        NgramIndex.open(junk)
    msg = str(e.value).removeprefix(str(junk))
    assert msg == ": not a trie file (bad magic)"


def test_a_trie_without_a_tokenizer_says_so(tmp_path: Path) -> None:
    """A trie whose header records no tokenizer (DART's converted without --tokenizer, or written by the
    API) is shown as such, not as "None sha256:None"."""
    import numpy as np

    from indexer.trie_assembly import levels_from_ngrams, plans_from_ngrams, write_trie

    levels = [(np.array([[1], [2]]), np.array([3, 1], dtype=np.uint64)),
              (np.array([[1, 2]]), np.array([1], dtype=np.uint64))]
    path = tmp_path / "bare.ngt"
    write_trie(path, order=2, vocab_size=4, eos_id=None, meta={"name": "bare"}, plans=plans_from_ngrams(levels),
               chunks=levels_from_ngrams(levels))
    out = CliRunner().invoke(info_main, [str(path)]).output
    assert "tokenizer   none recorded (clients cannot check their tokenizer against this trie)" in out
    assert "None" not in out.split("build")[0]


def test_ngram_query_verify_checks_a_local_trie_before_answering(sample_trie: Path, tmp_path: Path) -> None:
    """A flipped byte in the tokens of the top level goes unnoticed by a query that does not read it;
    `ngram-query --trie F --verify` refuses the file by its section's checksum, and --verify without
    --trie is a usage error (a host checks its tries itself)."""
    from ngram_service.query_cli import main as query_main

    section = [s for s in NgramIndex.open(sample_trie).sections() if s["kind"] == "tokens"][-1]
    bad = tmp_path / "bad.ngt"
    data = bytearray(sample_trie.read_bytes())
    data[section["offset"] + section["length"] // 2] ^= 0x40
    bad.write_bytes(bytes(data))
    assert CliRunner().invoke(query_main, ["--trie", str(bad), "info"]).exit_code == 0
    r = CliRunner().invoke(query_main, ["--trie", str(bad), "--verify", "info"])
    assert r.exit_code == 2
    assert f"{bad}: section tokens (level {section['level']}): checksum mismatch" in r.output
    assert CliRunner().invoke(query_main, ["--trie", str(sample_trie), "--verify", "info"]).exit_code == 0
    r = CliRunner().invoke(query_main, ["--verify", "info"])
    assert r.exit_code == 2 and "--verify checks a local --trie file" in r.output
