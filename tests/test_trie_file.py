"""The trie file, in both format versions: refusal of truncated, corrupted and foreign files; never a crash."""
from __future__ import annotations

import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ngram_service import NgramIndex, TrieFormatError


def copy(src: Path, dst: Path) -> Path:
    shutil.copyfile(src, dst)
    return dst


def flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x5A
    path.write_bytes(bytes(data))


def test_opens_in_both_modes_with_same_answers(sample_trie_each_format: Path) -> None:
    sample_trie = sample_trie_each_format
    a, b = NgramIndex.open(sample_trie), NgramIndex.open(sample_trie, mode="ram", verify=True)
    ctx = np.array([[1, 2], [5, 6], [100, 7]])
    cand = np.arange(30).reshape(3, 10)
    (pa, ma), (pb, mb) = a.conditional_probs(ctx, cand), b.conditional_probs(ctx, cand)
    np.testing.assert_array_equal(pa, pb)
    np.testing.assert_array_equal(ma, mb)
    assert (ma > 0).any()  # the queries reach the trie's n-grams, not only the zero answer
    for context in ([1, 2], [5], []):
        ta, tb = a.topk(context, 20), b.topk(context, 20)
        assert ta.matched == tb.matched and ta.tokens.tolist() == tb.tokens.tolist()
        assert ta.counts.tolist() == tb.counts.tolist()
    assert a.info()["mapped"] and not b.info()["mapped"]


def test_ram_mode_escapes_a_corrupted_count_rank_as_the_file_does(tmp_path: Path) -> None:
    # In RAM a level's token words carry each count rank that fits beside the
    # token; one that does not, or a corrupted one, is escaped to the file's
    # count ranks. An escaped count rank past the level's count values, read
    # without verify, must answer 0 in RAM exactly as mapped.
    from indexer.trie_assembly import levels_from_ngrams, plans_from_ngrams, write_trie

    bigrams = np.array([(a, b) for a in range(10) for b in range(10)], dtype=np.int64)
    counts = np.array([1 + i % 20 for i in range(len(bigrams))], dtype=np.uint64)  # 20 values: some escaped
    unigrams = np.arange(10, dtype=np.int64).reshape(-1, 1)
    uni_counts = np.array([counts[bigrams[:, 0] == t].sum() + 1 for t in range(10)], dtype=np.uint64)
    levels = [(unigrams, uni_counts), (bigrams, counts)]
    path = tmp_path / "escaped.ngt"
    write_trie(path, order=2, vocab_size=12, eos_id=11, meta={"name": "escaped"}, plans=plans_from_ngrams(levels),
               chunks=levels_from_ngrams(levels))
    sec = {(s["kind"], s["level"]): s for s in NgramIndex.open(path).sections()}
    escapes, values = sec[("count_escapes", 2)], sec[("count_values", 2)]
    assert escapes["count"] > 0 and (1 << escapes["width"]) - 1 >= values["count"]
    data = bytearray(path.read_bytes())
    data[escapes["offset"]] |= (1 << escapes["width"]) - 1  # the first escaped rank: all ones, past the values
    path.write_bytes(bytes(data))

    mapped, ram = NgramIndex.open(path), NgramIndex.open(path, mode="ram")
    got_mapped = [mapped.count(g) for g in bigrams.tolist()]
    assert [ram.count(g) for g in bigrams.tolist()] == got_mapped
    assert got_mapped.count(0) == 1 and sum(c == w for c, w in zip(got_mapped, counts.tolist())) == len(bigrams) - 1
    ctx, cand = unigrams, np.tile(np.arange(12), (10, 1))
    for a, b in zip(mapped.conditional_probs(ctx, cand), ram.conditional_probs(ctx, cand)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("cut", [0, 10, 63, 64, 200, -1, -100])
def test_truncated_file_is_refused(sample_trie_each_format: Path, tmp_path: Path, cut: int) -> None:
    sample_trie = sample_trie_each_format
    data = sample_trie.read_bytes()
    bad = tmp_path / "cut.ngt"
    bad.write_bytes(data[:cut] if cut >= 0 else data[:len(data) + cut])
    with pytest.raises(TrieFormatError, match="cut.ngt"):
        NgramIndex.open(bad)


def test_corrupted_header_and_section_table_are_refused(sample_trie_each_format: Path, tmp_path: Path) -> None:
    sample_trie = sample_trie_each_format
    for offset in (0, 8, 12, 16, 40, 64, 64 + 48 + 8, 64 + 2 * 48 + 16):
        bad = copy(sample_trie, tmp_path / f"h{offset}.ngt")
        flip(bad, offset)
        with pytest.raises(TrieFormatError):
            NgramIndex.open(bad)


def test_corrupted_section_is_caught_by_checksum(sample_trie_each_format: Path, tmp_path: Path) -> None:
    sample_trie = sample_trie_each_format
    idx = NgramIndex.open(sample_trie)
    for s in idx.sections():
        bad = copy(sample_trie, tmp_path / f"{s['kind']}{s['level']}.ngt")
        flip(bad, s["offset"] + s["length"] // 2)
        # Structural checks at open catch some corruptions; the checksum catches the rest.
        with pytest.raises(TrieFormatError, match=f"{bad.name}: (level .*|section {s['kind']}.*checksum)"):
            NgramIndex.open(bad, verify=True)
        # Unverified, a corrupted file still never reads out of bounds: any query
        # answers (perhaps wrongly) or raises, but the process survives.
        try:
            t = NgramIndex.open(bad)
        except TrieFormatError:
            continue
        rng = np.random.default_rng(0)
        t.conditional_probs(rng.integers(0, t.vocab_size, (500, 2)), rng.integers(0, t.vocab_size, (500, 8)))
        t.topk([1, 2], 5)
    r = subprocess.run([sys.executable, "-m", "ngram_service.cli_info", str(bad), "--verify"],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "checksum" in r.stderr


def test_foreign_and_missing_files(tmp_path: Path) -> None:
    foreign = tmp_path / "x.ngt"
    foreign.write_bytes(b"PK\x03\x04" + b"\0" * 200)
    with pytest.raises(TrieFormatError, match="bad magic"):
        NgramIndex.open(foreign)
    with pytest.raises((TrieFormatError, OSError)):
        NgramIndex.open(tmp_path / "missing.ngt")
    zst = tmp_path / "broken.ngt.zst"
    zst.write_bytes(b"\x28\xb5\x2f\xfd" + b"\x01" * 50)
    with pytest.raises(TrieFormatError):
        NgramIndex.open(zst)


def test_header_fields(sample_trie: Path, sample_trie_v2: Path) -> None:
    """ngram-build writes format version 1 by default, version 2 when asked."""
    for path, want in ((sample_trie, 1), (sample_trie_v2, 2)):
        head = path.read_bytes()[:64]
        magic, version, order, vocab, eos = struct.unpack_from("<8sIIQq", head)
        assert magic == b"NGTRIE\r\n" and version == want and order == 3 and vocab == 4096 and eos == 0
        assert NgramIndex.open(path).info()["format_version"] == want


def test_both_versions_answer_alike(sample_trie: Path, sample_trie_v2: Path) -> None:
    """The same counts in both formats: every query answers the same."""
    a, b = NgramIndex.open(sample_trie), NgramIndex.open(sample_trie_v2)
    assert a.info()["ngrams"] == b.info()["ngrams"]
    rng = np.random.default_rng(3)
    top = a.topk([], 300).tokens
    # Contexts that occur (a frequent token, then one of its continuations), and random ones; candidates
    # that continue the context, and frequent tokens.
    seen = [[int(x), int(y)] for x in top[:150] for y in a.topk([int(x)], 6).tokens]
    ctx = np.concatenate([np.array(seen), rng.integers(0, a.vocab_size, (200, 2))])
    cand = np.stack([np.concatenate([a.topk(c.tolist(), 8).tokens, rng.choice(top, 16)])[:16] for c in ctx])
    (pa, ma), (pb, mb) = a.conditional_probs(ctx, cand), b.conditional_probs(ctx, cand)
    assert np.array_equal(pa.view(np.uint32), pb.view(np.uint32)) and np.array_equal(ma, mb)
    assert (ma == 2).sum() > 100 and (ma == 1).sum() > 100  # both lengths of context are exercised
    for c in ctx[:200].tolist() + [[], [int(top[0])]]:
        ta, tb = a.topk(c, 15), b.topk(c, 15)
        assert (ta.matched, ta.tokens.tolist(), ta.counts.tolist()) == (tb.matched, tb.tokens.tolist(), tb.counts.tolist())
    for g in np.concatenate([ctx[:300], cand[:300, :1]], axis=1).tolist():
        for k in (1, 2, 3):
            assert a.count(g[:k]) == b.count(g[:k])


@pytest.mark.parametrize("version", [1, 2])
def test_ngram_info_cli(sample_trie: Path, sample_trie_v2: Path, version: int) -> None:
    path = sample_trie if version == 1 else sample_trie_v2
    r = subprocess.run([sys.executable, "-m", "ngram_service.cli_info", str(path), "--verify", "--json",
                        "--sections"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    import json

    info = json.loads(r.stdout)
    # version 1: per level 4 count sections, tokens and samples (levels 2, 3), child offsets (1 + 3 + 3);
    # version 2: per level 6 count sections, used tokens (level 1) or token ranks (3 each), level 2's dense
    # runs (3), child offsets (1 + 3)
    sections = 1 + 3 * 4 + 2 * 2 + 1 + 3 if version == 1 else 1 + 3 * 6 + 2 + 2 * 3 + 3 + 1 + 3
    assert info["checksums"] == "ok" and info["order"] == 3 and len(info["sections"]) == sections
