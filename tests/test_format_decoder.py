"""docs/FORMAT.md, read by decoders written here from the document alone.

A trie is written by the C++ writers (version 1: TrieWriter; version 2:
write_trie_v2) from brute-force counts; this file decodes its header,
section table and every section kind of each version with numpy and Python
(nothing of the engine's reader) and must find exactly the counted n-grams,
and the engine's reader must agree.
"""
from __future__ import annotations

import json
import math
import struct
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from indexer.trie_assembly import levels_from_ngrams, plans_from_ngrams, write_trie
from ngram_service import NgramIndex

KINDS = {1: "meta", 2: "count_values", 3: "count_ranks", 4: "tokens", 5: "child_low", 6: "token_samples",
         7: "child_high", 8: "child_select", 9: "count_escapes", 10: "count_escape_index", 11: "child_offsets"}
KINDS_V2 = {**{k: v for k, v in KINDS.items() if v not in ("tokens", "token_samples")},
            12: "used_tokens", 13: "used_token_ranks", 14: "count_ranks2", 15: "count_ranks2_index",
            16: "token_bits", 17: "token_starts", 18: "token_ends", 19: "dense_runs", 20: "dense_bits",
            21: "dense_ranks"}
ORDER, VOCAB, EOS = 4, 300, 299


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), bit by bit over a byte table."""
    table = crc32c.table  # type: ignore[attr-defined]
    crc = 0xFFFFFFFF
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _crc_table() -> list[int]:
    out = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        out.append(c)
    return out


crc32c.table = _crc_table()  # type: ignore[attr-defined]


def unpack(buf: bytes, n: int, width: int) -> np.ndarray:
    """Element i: bits [i*w, i*w + w) of the little-endian u64 word stream."""
    if width == 0:
        return np.zeros(n, np.uint64)
    words = np.frombuffer(buf, "<u8")
    bit = np.arange(n, dtype=np.uint64) * np.uint64(width)
    word, shift = (bit >> np.uint64(6)).astype(np.int64), bit & np.uint64(63)
    lo = words[word] >> shift
    spill = shift + np.uint64(width) > np.uint64(64)
    hi = np.where(spill, words[np.minimum(word + 1, len(words) - 1)] << ((np.uint64(64) - shift) & np.uint64(63)), 0)
    mask = np.uint64((1 << width) - 1) if width < 64 else np.uint64(2**64 - 1)
    return (lo | hi.astype(np.uint64)) & mask


def packed_bytes(n: int, width: int) -> int:
    return (math.ceil(n * width / 64) + 1) * 8


def bits_for(x: int) -> int:
    """ceil(log2 x)."""
    return max(x - 1, 0).bit_length()


def decode(path: Path) -> tuple[dict, dict, list[dict[tuple[int, ...], int]]]:
    data = path.read_bytes()
    version, order, vocab, eos, sections, kinds_in_order = read_header_and_sections(data, KINDS)
    assert version == 1
    header = dict(version=version, order=order, vocab=vocab, eos=eos)

    # The documented order: meta, then per level its count sections, tokens, samples, then child offsets.
    want = [("meta", 0)]
    for k in range(1, order + 1):
        want += [(n, k) for n in ("count_values", "count_ranks", "count_escapes", "count_escape_index")]
        if k >= 2:
            want += [("tokens", k), ("token_samples", k)]
        if k == 1 and order > 1:
            want.append(("child_offsets", 1))
        elif 2 <= k < order:
            want += [("child_low", k), ("child_high", k), ("child_select", k)]
    assert kinds_in_order == want

    meta_sec = sections[("meta", 0)]
    assert meta_sec["width"] == 8 and meta_sec["count"] == meta_sec["length"]
    meta = json.loads(meta_sec["body"].decode("utf-8"))

    def packed(name: str, k: int, n: int | None = None, width: int | None = None) -> np.ndarray:
        s = sections[(name, k)]
        if n is not None:
            assert s["count"] == n, (name, k)
        if width is not None:
            assert s["width"] == width, (name, k)
        assert s["length"] == packed_bytes(s["count"], s["width"]), (name, k)
        return unpack(s["body"], s["count"], s["width"])

    # Counts of every level.
    sizes, counts = [], []
    for k in range(1, order + 1):
        cv = sections[("count_values", k)]
        assert cv["width"] == 64 and cv["length"] >= 8 * cv["count"]
        values = np.frombuffer(cv["body"][:8 * cv["count"]], "<u8")
        assert np.all(np.diff(values.astype(np.float64)) > 0)  # strictly ascending
        ranks_sec = sections[("count_ranks", k)]
        b = ranks_sec["width"]
        assert b in (1, 2, 4, 8, 16, 32)
        n = ranks_sec["count"]
        ranks = packed("count_ranks", k)
        escape = ranks == np.uint64(2**b - 1)
        esc = packed("count_escapes", k, n=int(escape.sum()), width=max(bits_for(len(values)), 1))
        before = np.cumsum(escape) - escape  # escaped entries before entry i
        idx = packed("count_escape_index", k, n=math.ceil(n / 64), width=max(bits_for(int(escape.sum()) + 1), 1))
        np.testing.assert_array_equal(idx, before[::64])
        full = ranks.astype(np.int64)
        full[escape] = esc[before[escape]].astype(np.int64)
        sizes.append(n)
        counts.append(values[full])
    assert sizes[0] == vocab

    # Tokens of levels >= 2, with their samples.
    tokens = [np.arange(vocab, dtype=np.uint64)]
    for k in range(2, order + 1):
        t = packed("tokens", k, n=sizes[k - 1], width=bits_for(vocab))
        np.testing.assert_array_equal(packed("token_samples", k, n=math.ceil(len(t) / 16), width=32), t[::16])
        tokens.append(t)

    # Child offsets: plain for level 1, Elias-Fano for levels 2 .. N-1.
    offsets = [packed("child_offsets", 1, n=vocab + 1, width=bits_for(sizes[1] + 1)).astype(np.int64)]
    for k in range(2, order):
        n, u = sizes[k - 1] + 1, sizes[k]
        low_bits = int(math.floor(math.log2(u / n))) if u >= 2 * n else 0
        low = packed("child_low", k, n=n, width=low_bits).astype(np.int64)
        high_len = n + (u >> low_bits) + 1
        high = packed("child_high", k, n=high_len, width=1)
        ones = np.flatnonzero(high)
        assert len(ones) == n
        np.testing.assert_array_equal(packed("child_select", k, n=math.ceil(n / 64), width=bits_for(high_len + 1)),
                                      ones[::64])
        offsets.append(((ones - np.arange(n)) << low_bits) | low)
    for k, off in enumerate(offsets, start=1):
        assert off[0] == 0 and off[-1] == sizes[k] and np.all(np.diff(off) >= 0)

    # Walk the trie: every entry's n-gram and count.
    grams: list[dict[tuple[int, ...], int]] = []
    paths: list[tuple[int, ...]] = [(t,) for t in range(vocab)]
    for k in range(1, order + 1):
        grams.append({p: int(c) for p, c in zip(paths, counts[k - 1]) if c > 0})
        if k == order:
            break
        nxt: list[tuple[int, ...]] = []
        off = offsets[k - 1]
        for i, p in enumerate(paths):
            nxt += [p + (int(tokens[k][j]),) for j in range(off[i], off[i + 1])]
        assert len(nxt) == sizes[k]
        paths = nxt
    return header, meta, grams


def read_header_and_sections(data: bytes, kinds: dict[int, str]) -> tuple[int, int, int, int, dict, list]:
    magic, version, order, vocab, eos, n_sec, head_crc, table_off, length, reserved = struct.unpack_from(
        "<8sIIQqIIQQQ", data, 0)
    assert magic == b"NGTRIE\r\n" and table_off == 64 and reserved == 0 and length == len(data)
    table = data[64:64 + 48 * n_sec]
    assert crc32c(data[:36] + b"\0\0\0\0" + data[40:64] + table) == head_crc
    sections: dict[tuple[str, int], dict] = {}
    in_order = []
    for i in range(n_sec):
        kind, level, off, ln, count, width, crc, res = struct.unpack_from("<IIQQQIIQ", table, 48 * i)
        assert off % 64 == 0 and off + ln <= length and res == 0
        body = data[off:off + ln]
        assert crc32c(body) == crc, (kinds[kind], level)
        sections[(kinds[kind], level)] = dict(body=body, count=count, width=width, length=ln)
        in_order.append((kinds[kind], level))
    return version, order, vocab, eos, sections, in_order


def elias_fano(high: np.ndarray, low: np.ndarray, n: int, low_bits: int) -> np.ndarray:
    ones = np.flatnonzero(high)
    assert len(ones) == n
    return ((ones - np.arange(n)) << low_bits) | low.astype(np.int64)


def decode_v2(path: Path) -> tuple[dict, dict, list[dict[tuple[int, ...], int]]]:
    """docs/FORMAT.md, "Version 2"."""
    data = path.read_bytes()
    version, order, vocab, eos, sections, in_order = read_header_and_sections(data, KINDS_V2)
    assert version == 2
    header = dict(version=version, order=order, vocab=vocab, eos=eos)
    want = [("meta", 0)]
    for k in range(1, order + 1):
        want += [(n, k) for n in ("count_values", "count_ranks", "count_escape_index", "count_ranks2",
                                  "count_ranks2_index", "count_escapes")]
        want += [("used_tokens", 1), ("used_token_ranks", 1)] if k == 1 else \
            [("token_bits", k), ("token_starts", k), ("token_ends", k)]
        if k == 2:
            want += [("dense_runs", 2), ("dense_bits", 2), ("dense_ranks", 2)]
        if k < order:
            want += [("child_offsets", 1)] if k == 1 else [("child_low", k), ("child_high", k), ("child_select", k)]
    assert in_order == want
    meta = json.loads(sections[("meta", 0)]["body"].decode("utf-8"))
    assert meta["format_version"] == 2

    def packed(name: str, k: int, n: int | None = None, width: int | None = None) -> np.ndarray:
        s = sections[(name, k)]
        assert n is None or s["count"] == n, (name, k, s["count"], n)
        assert width is None or s["width"] == width, (name, k, s["width"], width)
        assert s["length"] == packed_bytes(s["count"], s["width"]), (name, k)
        return unpack(s["body"], s["count"], s["width"])

    def escapes_before(codes: np.ndarray) -> np.ndarray:
        return np.cumsum(codes) - codes

    sizes, counts = [], []
    for k in range(1, order + 1):
        values = np.frombuffer(sections[("count_values", k)]["body"], "<u8")
        assert np.all(np.diff(values.astype(np.float64)) > 0)
        b1 = sections[("count_ranks", k)]["width"]
        assert b1 in (1, 2, 4, 8, 16, 32)
        r1 = packed("count_ranks", k).astype(np.int64)
        n = len(r1)
        esc1 = r1 == 2**b1 - 1
        n1 = int(esc1.sum())
        np.testing.assert_array_equal(packed("count_escape_index", k, n=math.ceil(n / 64), width=max(bits_for(n1 + 1), 1)),
                                      escapes_before(esc1)[::64])
        b2 = sections[("count_ranks2", k)]["width"]
        assert b2 in (1, 2, 4, 8, 16, 32)
        r2 = packed("count_ranks2", k, n=n1).astype(np.int64)
        esc2 = r2 == 2**b2 - 1
        n2 = int(esc2.sum())
        np.testing.assert_array_equal(packed("count_ranks2_index", k, n=math.ceil(n1 / 64), width=max(bits_for(n2 + 1), 1)),
                                      escapes_before(esc2)[::64])
        full = packed("count_escapes", k, n=n2, width=max(bits_for(len(values)), 1)).astype(np.int64)
        second = np.where(esc2, 2**b1 - 1 + 2**b2 - 1 + full[np.minimum(escapes_before(esc2), max(n2 - 1, 0))] if n2 else 0,
                          2**b1 - 1 + r2)
        rank = r1.copy()
        rank[esc1] = second
        sizes.append(n)
        counts.append(values[rank])

    # Level 1 has an entry per token; its count sections hold the tokens that occur, in token order.
    used = packed("used_tokens", 1, n=vocab, width=1).astype(bool)
    np.testing.assert_array_equal(packed("used_token_ranks", 1, n=math.ceil(vocab / 64), width=max(bits_for(vocab + 1), 1)),
                                  escapes_before(used)[::64])
    used_ids = np.flatnonzero(used)
    assert sizes[0] == len(used_ids) and np.all(counts[0] > 0)
    unigrams = np.zeros(vocab, dtype=np.uint64)
    unigrams[used_ids] = counts[0]
    sizes[0], counts[0] = vocab, unigrams

    offsets = []
    for k in range(1, order):
        if k == 1:  # plain, for the tokens that occur; a token that does not has no children
            used_off = packed("child_offsets", 1, n=len(used_ids) + 1, width=bits_for(sizes[1] + 1)).astype(np.int64)
            off = np.full(vocab + 1, used_off[-1], dtype=np.int64)
            off[used_ids] = used_off[:-1]
            off = np.minimum.accumulate(off[::-1])[::-1]  # an unused token's run starts where the next one's does
            assert off[0] == 0 and np.all(np.diff(used_off) >= 0) and used_off[-1] == sizes[1]
            offsets.append(off)
            continue
        n, u = sizes[k - 1] + 1, sizes[k]
        low_bits = int(math.floor(math.log2(u / n))) if u >= 2 * n else 0
        high_len = n + (u >> low_bits) + 1
        high = packed("child_high", k, n=high_len, width=1)
        off = elias_fano(high, packed("child_low", k, n=n, width=low_bits), n, low_bits)
        np.testing.assert_array_equal(packed("child_select", k, n=math.ceil(n / 64), width=bits_for(high_len + 1)),
                                      np.flatnonzero(high)[::64])
        assert off[0] == 0 and off[-1] == sizes[k] and np.all(np.diff(off) >= 0)
        offsets.append(off)

    # Tokens: the chunked sequence S, then ranks, then token ids through the shorter suffixes.
    tokens = [np.arange(vocab)]
    suffix = np.arange(vocab)  # per entry of the level before: its suffix's index in the level before that
    for k in range(2, order + 1):
        off = offsets[k - 2]
        parent = np.repeat(np.arange(len(off) - 1), np.diff(off))
        in_dense = np.zeros(sizes[k - 1], dtype=bool)
        if k == 2:  # the dense runs: bitmaps over the used tokens' ranks, a rank sample per 512 bits
            used_count = len(used_ids)
            width = math.ceil(used_count / 512) * 512
            dense = packed("dense_runs", 2, width=max(bits_for(vocab), 1)).astype(np.int64)
            assert np.all(np.diff(dense) > 0)
            dense_bits = packed("dense_bits", 2, n=len(dense) * width, width=1).reshape(len(dense), width)
            dense_ranks = packed("dense_ranks", 2, n=len(dense) * (width // 512), width=bits_for(used_count + 1))
            dense_x = np.zeros(sizes[1], dtype=np.int64)
            for d, p in enumerate(dense):
                assert not dense_bits[d, used_count:].any()
                ones = np.flatnonzero(dense_bits[d])
                assert len(ones) == off[p + 1] - off[p] > 0
                np.testing.assert_array_equal(dense_ranks[d * (width // 512):(d + 1) * (width // 512)],
                                              np.searchsorted(ones, np.arange(0, width, 512)))
                in_dense[off[p]:off[p + 1]] = True
                dense_x[off[p]:off[p + 1]] = ones
        n = int((~in_dense).sum())
        chunks = math.ceil(n / 128)
        bits_sec = sections[("token_bits", k)]
        nbits = bits_sec["count"]
        bits = packed("token_bits", k, width=1)
        starts = packed("token_starts", k, n=chunks + 1, width=max(bits_for(nbits + 1), 1)).astype(np.int64)
        ends = packed("token_ends", k, n=chunks).astype(np.int64)
        assert starts[-1] == nbits
        S = []
        for c in range(chunks):
            m = min(128, n - 128 * c)
            base = 0 if c == 0 else int(ends[c - 1]) + 1
            u = int(ends[c]) - base
            low_bits = int(math.floor(math.log2(u / m))) if u >= 2 * m else 0
            at = int(starts[c])
            low = [int("".join(str(int(b)) for b in bits[at + j * low_bits: at + (j + 1) * low_bits][::-1]) or "0", 2)
                   for j in range(m)]
            hi_at = at + m * low_bits
            high = bits[hi_at: hi_at + m + (u >> low_bits) + 1]
            assert hi_at + len(high) == (int(starts[c + 1])) and len(high) == m + (u >> low_bits) + 1
            S += (base + elias_fano(high, np.array(low), m, low_bits)).tolist()
        S = np.array(S, dtype=np.int64)
        assert np.all(np.diff(S) > 0)
        # S holds the entries outside dense runs; a run's base is the value before its first one in S.
        outside_before = np.cumsum(~in_dense) - ~in_dense  # per entry: the entries outside dense runs before it
        first_s = outside_before[off[parent]] - 1  # the S index before the run's first value
        run_base = np.where(first_s >= 0, S[np.maximum(first_s, 0)] + 1, 0)
        x = np.zeros(sizes[k - 1], dtype=np.int64)
        x[~in_dense] = S - run_base[~in_dense]
        if k == 2:
            x[in_dense] = dense_x[in_dense]
        if k == 2:
            tok = used_ids[x]
            here = tok  # the suffix (w2) is entry w2 of level 1
        else:
            here = offsets[k - 3][suffix[parent]] + x  # the index of (w2 .. wk) in level k-1
            tok = tokens[k - 2][here]
        tokens.append(tok)
        suffix = here

    grams: list[dict[tuple[int, ...], int]] = []
    paths: list[tuple[int, ...]] = [(t,) for t in range(vocab)]
    for k in range(1, order + 1):
        grams.append({p: int(c) for p, c in zip(paths, counts[k - 1]) if c > 0})
        if k == order:
            break
        off = offsets[k - 1]
        paths = [p + (int(tokens[k][j]),) for i, p in enumerate(paths) for j in range(off[i], off[i + 1])]
        assert len(paths) == sizes[k]
    return header, meta, grams


def decode_any(path: Path) -> tuple[dict, dict, list[dict[tuple[int, ...], int]]]:
    version = struct.unpack_from("<I", path.read_bytes(), 8)[0]
    return decode(path) if version == 1 else decode_v2(path)


@pytest.fixture(scope="module", params=[1, 2], ids=["format1", "format2"])
def written(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Counter]]:
    """Zipf-distributed documents over 300 ids (some never used, 299 = EOS), N = 4: varied counts, so that
    some levels escape ranks, and long and short runs of children; in each format version."""
    rng = np.random.default_rng(42)
    docs = []
    for _ in range(400):
        doc = np.minimum(rng.zipf(1.3, rng.integers(5, 60)), 250).tolist()
        docs.append(doc + [EOS])
    counts = [Counter() for _ in range(ORDER)]
    for d in docs:
        for k in range(1, ORDER + 1):
            for i in range(len(d) - k + 1):
                counts[k - 1][tuple(d[i:i + k])] += 1
    levels = []
    for k in range(1, ORDER + 1):
        grams = np.array(sorted(counts[k - 1]), dtype=np.int64).reshape(-1, k)
        levels.append((grams, np.array([counts[k - 1][tuple(g)] for g in grams.tolist()], dtype=np.uint64)))
    path = tmp_path_factory.mktemp("format") / f"zipf{request.param}.ngt"
    write_trie(path, order=ORDER, vocab_size=VOCAB, eos_id=EOS, meta={"name": "zipf"},
               plans=plans_from_ngrams(levels), chunks=levels_from_ngrams(levels), format_version=request.param)
    return path, counts


def test_independent_decoder_reads_exactly_the_counted_ngrams(written: tuple[Path, list[Counter]]) -> None:
    path, counts = written
    header, meta, grams = decode_any(path)
    assert (header["order"], header["vocab"], header["eos"]) == (ORDER, VOCAB, EOS)
    assert meta["name"] == "zipf"
    for k in range(ORDER):
        assert grams[k] == dict(counts[k]), f"level {k + 1}"
    idx = NgramIndex.open(path, verify=True)
    assert idx.info()["ngrams"][1:] == [len(g) for g in grams[1:]]
    for k in range(ORDER):
        for g, c in list(grams[k].items())[::7]:
            assert idx.count(list(g)) == c


def test_the_fixture_exercises_every_section_kind(written: tuple[Path, list[Counter]]) -> None:
    """Escapes and Elias-Fano low bits are not empty somewhere, so their decoding above was tested."""
    path, _ = written
    secs = NgramIndex.open(path).sections()
    version = struct.unpack_from("<I", path.read_bytes(), 8)[0]
    assert {s["kind"] for s in secs} == set((KINDS if version == 1 else KINDS_V2).values())
    assert any(s["kind"] == "count_escapes" and s["count"] > 0 for s in secs)
    assert any(s["kind"] == "child_low" and s["width"] > 0 for s in secs)
    if version == 1:
        assert any(s["kind"] == "token_samples" and s["count"] > 1 for s in secs)
    else:  # both tiers escape somewhere; several chunks of tokens, some with low bits
        assert any(s["kind"] == "count_ranks2" and s["count"] > 0 for s in secs)
        assert any(s["kind"] == "token_ends" and s["count"] > 1 for s in secs)
        assert any(s["kind"] == "dense_runs" and s["count"] > 1 for s in secs)


def test_decoder_reads_a_built_trie(sample_trie_each_format: Path) -> None:
    """The same decoders on ngram-build's output (the bundled sample, N = 3): its meta and level sizes."""
    sample_trie = sample_trie_each_format
    header, meta, grams = decode_any(sample_trie)
    info = NgramIndex.open(sample_trie).info()
    assert header["order"] == info["order"] == meta["build"]["order"] == 3
    assert meta["tokenizer"]["fingerprint"] == info["tokenizer"]["fingerprint"]
    assert [len(g) for g in grams[1:]] == info["ngrams"][1:]
    assert sum(grams[0].values()) == meta["corpus"]["tokens"]  # EOS tokens included
    assert grams[0][(header["eos"],)] == meta["corpus"]["documents"]
