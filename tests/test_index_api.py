"""NgramIndex: counts, top-k, validation errors, DART trie conversion."""
from __future__ import annotations

import os
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from indexer.trie_assembly import levels_from_ngrams, plans_from_ngrams, write_trie
from ngram_service import NgramIndex, TrieFormatError, _engine

from conftest import GOLDEN


@pytest.fixture()
def tiny(tmp_path: Path) -> NgramIndex:
    """Documents [0 1 2 1 2 4] and [1 2 3 4] (4 = EOS), N = 3, vocab 6."""
    docs = [[0, 1, 2, 1, 2, 4], [1, 2, 3, 4]]
    from collections import Counter

    levels = []
    for k in (1, 2, 3):
        c = Counter(tuple(d[i:i + k]) for d in docs for i in range(len(d) - k + 1))
        grams = np.array(sorted(c), dtype=np.int64).reshape(-1, k)
        levels.append((grams, np.array([c[tuple(g)] for g in grams.tolist()], dtype=np.uint64)))
    path = tmp_path / "tiny.ngt"
    write_trie(path, order=3, vocab_size=6, eos_id=4, meta={"name": "tiny"}, plans=plans_from_ngrams(levels),
               chunks=levels_from_ngrams(levels))
    return NgramIndex.open(path, verify=True)


def test_counts_and_probs(tiny: NgramIndex) -> None:
    assert tiny.count([1, 2]) == 3 and tiny.count([2]) == 3 and tiny.count([5]) == 0 and tiny.count([1, 2, 4]) == 1
    p, m = tiny.conditional_probs([[1, 2], [0, 5], [9 % 6, 3]], [[1, 3, 4], [1, 2, 0], [4, 0, 1]])
    # context [1 2]: count 3; [1 2 1] 1, [1 2 3] 1, [1 2 4] 1
    assert m[0].tolist() == [2, 2, 2] and np.allclose(p[0], 1 / 3)
    # context [0 5]: [0 5] absent, [5] absent -> nothing
    assert m[1].tolist() == [0, 0, 0]
    # context [3 3]: [3 3] absent, [3] -> 4 only
    assert m[2].tolist() == [1, 0, 0] and p[2, 0] == 1.0
    assert tiny.info()["ngrams"] == [5, 6, 6]


def test_topk(tiny: NgramIndex) -> None:
    t = tiny.topk([1, 2], 2)
    assert t.matched == 2 and t.tokens.tolist() == [1, 3] and t.counts.tolist() == [1, 1]
    t = tiny.topk([5, 2], 5)  # [5 2] absent: backs off to [2]
    assert t.matched == 1 and t.tokens.tolist() == [1, 3, 4] and np.allclose(t.probs, 1 / 3)
    t = tiny.topk([5], 2)  # no continuation at all: unigrams
    assert t.matched == 0 and t.tokens.tolist() == [1, 2] and t.probs[0] == pytest.approx(3 / 10)
    assert tiny.topk([1], 0).tokens.size == 0


@pytest.fixture(scope="module")
def built_with_counts(tmp_path_factory: pytest.TempPathFactory):
    """A trie built by ngram-build from random texts (many tied counts) and the brute-force counts."""
    import random

    from indexer.pipeline import BuildConfig, build
    from indexer.tokenizer import load_tokenizer
    from test_build import brute_counts, random_texts, write_jsonl_zst

    from conftest import SAMPLE_TOKENIZER

    d = tmp_path_factory.mktemp("topk")
    texts = random_texts(random.Random(8), 150)
    write_jsonl_zst(d / "a.jsonl.zst", texts)
    build(BuildConfig(inputs=[str(d / "a.jsonl.zst")], out=str(d / "t.ngt"), tokenizer=str(SAMPLE_TOKENIZER),
                      order=3, workers=1), progress=lambda _m: None)
    flat, lengths = load_tokenizer(str(SAMPLE_TOKENIZER)).encode_to_arrays(texts)
    return NgramIndex.open(d / "t.ngt"), brute_counts(flat, lengths, 3)


def brute_topk(counts: list, context: list[int], k: int) -> tuple[list[int], list[int], list[float], int]:
    """README: the most frequent continuations of the longest context suffix that has any (ties by token
    id), p = count(s w) / count(s); else the most frequent tokens, p = count / all tokens (matched 0)."""
    order = len(counts)
    for ln in range(min(order - 1, len(context)), 0, -1):
        s = tuple(context[len(context) - ln:])
        conts = sorted((-c, g[-1]) for g, c in counts[ln].items() if g[:-1] == s)
        if conts:
            top = conts[:k]
            inv = np.float32(1) / np.float32(counts[ln - 1][s])
            return [w for _, w in top], [-c for c, _ in top], [float(np.float32(-c) * inv) for c, _ in top], ln
    uni = sorted((-c, g[0]) for g, c in counts[0].items())[:k]
    total = sum(counts[0].values())
    return [w for _, w in uni], [-c for c, _ in uni], [-c / total for c, _ in uni], 0


def test_topk_equals_brute_force(built_with_counts) -> None:
    idx, counts = built_with_counts
    rng = np.random.default_rng(4)
    bigrams = list(counts[1])
    contexts = [list(g) for g in bigrams[:: max(1, len(bigrams) // 40)]]  # contexts that occur: order-2 runs
    contexts += [[int(t)] for t in rng.choice([g[0] for g in counts[0]], 20)]
    contexts += [[4000, int(g[0])] for g in list(counts[0])[:10]]  # an unseen pair: backs off to one token
    contexts += [[4000], [4001, 4002], []]  # nothing: unigrams
    n_tokens = sum(1 for c in counts[0].values() if c > 0)
    ties = 0
    for ctx in contexts:
        for k in (1, 2, 3, 7, 50, n_tokens, 4096, 10_000):  # k beyond every run and beyond the vocabulary
            want_tokens, want_counts, want_probs, want_matched = brute_topk(counts, ctx, k)
            got = idx.topk(ctx, k)
            assert got.matched == want_matched, (ctx, k)
            assert got.tokens.tolist() == want_tokens, (ctx, k)
            assert got.counts.tolist() == want_counts, (ctx, k)
            np.testing.assert_allclose(got.probs, want_probs, rtol=1e-6)
            ties += len(want_counts) - len(set(want_counts))
    assert ties > 100  # the ties-by-token-id rule was exercised


@pytest.mark.parametrize("call, message", [
    (lambda i: i.conditional_probs([[1, 6]], [[1]]), r"contexts\[1\] = 6 is not a token id"),
    (lambda i: i.conditional_probs([[1, 2]], [[-1]]), r"candidates\[0\] = -1"),
    # int32 arrays (checked where they lie): a negative id, the first of
    # several bad ones, one id past the vocabulary among many good ones.
    (lambda i: i.conditional_probs(np.array([[1, 2]], np.int32), np.array([[3, -5]], np.int32)),
     r"candidates\[1\] = -5"),
    (lambda i: i.conditional_probs(np.array([[1, 2], [9, 2**31 - 1]], np.int32), np.ones((2, 1), np.int32)),
     r"contexts\[2\] = 9 is not a token id"),
    (lambda i: i.conditional_probs(np.ones((3, 2), np.int32), np.array([[1] * 20, [2] * 20, [1] * 19 + [6]], np.int32)),
     r"candidates\[59\] = 6 is not a token id"),
    (lambda i: i.conditional_probs([[1, 2]], [[1], [2]]), "batch sizes must match"),
    (lambda i: i.conditional_probs([1, 2], [[1]]), "2-D"),
    (lambda i: i.conditional_probs(np.zeros((1, 0), int), [[1]]), "at least one context token"),
    (lambda i: i.conditional_probs([[1.5, 2]], [[1]]), "must be integers"),
    (lambda i: i.count([1, 2, 3, 4]), "must be 1..3"),
    (lambda i: i.count([]), "must be 1..3"),
    (lambda i: i.count([2**40]), "not a token id"),
    (lambda i: i.topk([1], -1), "k must be"),
    (lambda i: i.topk([7], 1), "not a token id"),
    (lambda i: NgramIndex.open(i.info()["path"], mode="disk"), "mode must be"),
])
def test_invalid_input_is_a_value_error(tiny: NgramIndex, call, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call(tiny)


def opened_in_a_thread(open_it: Callable[[], object]) -> BaseException | None:
    """What open_it() raised, run in a thread that must end within seconds:
    an open that waits for a FIFO's writer fails the test instead of
    hanging the suite (the thread, a daemon, is left waiting)."""
    caught: list[BaseException | None] = [None]

    def run() -> None:
        try:
            open_it()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            caught[0] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout=10)
    assert not t.is_alive(), "opening blocked"
    return caught[0]


@pytest.mark.parametrize("kind", ["FIFO", "directory"])
@pytest.mark.parametrize("how", ["NgramIndex.open", "Trie.open", "ram"])
def test_only_a_regular_file_is_opened_and_at_once(tmp_path: Path, kind: str, how: str) -> None:
    path = tmp_path / "trie.ngt"
    if kind == "FIFO":
        os.mkfifo(path)
    else:
        path.mkdir()
    opens = {"NgramIndex.open": lambda: NgramIndex.open(path), "Trie.open": lambda: _engine.Trie.open(str(path)),
             "ram": lambda: NgramIndex.open(path, mode="ram")}
    e = opened_in_a_thread(opens[how])
    assert isinstance(e, TrieFormatError) and isinstance(e, ValueError), repr(e)
    assert str(e) == f"{path}: is a {kind}, not a regular file"


def test_a_character_device_is_refused() -> None:
    e = opened_in_a_thread(lambda: NgramIndex.open("/dev/null"))
    assert isinstance(e, TrieFormatError) and str(e) == "/dev/null: is a character device, not a regular file"


# Every array argument's dtype is judged by one rule (cpp/python/arrays.h,
# require_real): numbers on the real line, nothing cast from anything else.
ODD_DTYPES = {
    "complex": lambda a: np.asarray(a, np.complex128) + 1j,
    "object": lambda a: np.asarray(a).astype(object),
    "bool": lambda a: np.asarray(a).astype(bool),
    "str": lambda a: np.asarray(a).astype(str),
    "bytes": lambda a: np.asarray(a).astype(bytes),
    "void": lambda a: np.zeros(np.shape(a), dtype="V4"),
    "datetime": lambda a: np.asarray(a).astype("datetime64[s]"),
}


@pytest.mark.parametrize("odd", list(ODD_DTYPES), ids=list(ODD_DTYPES))
def test_numbers_that_are_not_real_are_refused_naming_the_argument(tiny: NgramIndex, odd: str) -> None:
    toks, probs = np.array([[1, 2], [2, 3]]), np.array([[0.5, 0.25], [0.5, 0.25]], np.float32)
    ids = np.array([1, 2])
    # (the name in the error, the argument's values, the call given them in the odd dtype)
    calls: list[tuple[str, np.ndarray, Callable[[np.ndarray], object]]] = [
        ("topk_probs", probs, lambda x: tiny.prune(ids, toks, x)),
        ("topk_probs[1]", probs[1], lambda x: tiny.prune(ids, list(toks), [probs[0], x])),
        ("level_weights", probs[0], lambda x: tiny.prune(ids, toks, probs, level_weights=x)),
        ("prefix", ids, lambda x: tiny.prune(x, toks, probs)),
        ("topk_tokens", toks, lambda x: tiny.prune(ids, x, probs)),
        ("requests[0]: topk_probs", probs, lambda x: tiny.prune_batch([(ids, toks, x)])),
        ("context", ids, lambda x: tiny.propose(x)),
        ("contexts[0]: context", ids, lambda x: tiny.propose_batch([x])),
        ("contexts", toks, lambda x: tiny.conditional_probs(x, toks)),
        ("candidates", toks, lambda x: tiny.conditional_probs(toks, x)),
        ("context", ids, lambda x: tiny.topk(x, 2)),
        ("ngram", ids, lambda x: tiny.count(x)),
    ]
    for field, values, call in calls:
        x = ODD_DTYPES[odd](values)
        assert x.dtype.kind not in "fiu"
        with pytest.raises(ValueError) as e:
            call(x)
        assert str(e.value) == f"{field}: dtype {x.dtype} is not a real number type", field


def test_a_list_holding_a_complex_number_is_refused(tiny: NgramIndex) -> None:
    """Not only arrays: a list numpy reads as complex is refused too."""
    with pytest.raises(ValueError, match=r"^topk_probs: dtype complex128 is not a real number type$"):
        tiny.prune([1, 2], np.array([[1, 2]]), [[0.5, 0.25 + 1e-3j]])


def test_dart_trie_conversion_matches_dart_answers(tmp_path: Path) -> None:
    src = GOLDEN / "dart-sample.trie"
    if not src.exists():
        pytest.skip("../shared/golden is not present")
    out = tmp_path / "dart.ngt"
    r = subprocess.run([sys.executable, "-m", "indexer.cli", "--from-dart-trie", str(src), "--out", str(out),
                        "--vocab-size", "151669", "--eos", "151643"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    g = np.load(GOLDEN / "dart-sample-queries.npz")
    idx = NgramIndex.open(out, verify=True)
    probs, matched = idx.conditional_probs(g["contexts"], g["candidates"])
    assert np.array_equal(matched, g["matched"])
    assert np.array_equal(probs.view(np.uint32), g["probs"].view(np.uint32))
    assert idx.info()["ngrams_total"] == 557_191


def write_dart(path: Path, nodes: list[tuple[int, int, int, list[tuple[int, int]]]], order: int = 2) -> None:
    out = struct.pack("<QQ", order, len(nodes))
    for token, parent, freq, children in nodes:
        out += struct.pack("<iQiQ", token, parent, freq, len(children))
        for t, c in children:
            out += struct.pack("<iQ", t, c)
    path.write_bytes(out)


def test_dart_trie_errors(tmp_path: Path) -> None:
    from indexer.dart_convert import convert_dart_trie

    good = [(-1, 0, 0, [(7, 1), (3, 2)]), (7, 0, 2, [(3, 3)]), (3, 0, 1, []), (3, 1, 1, [])]
    src = tmp_path / "ok.trie"
    write_dart(src, good)
    convert_dart_trie(src, tmp_path / "ok.ngt")
    idx = NgramIndex.open(tmp_path / "ok.ngt")
    assert idx.count([7, 3]) == 1 and idx.count([7]) == 2 and idx.vocab_size == 8
    data = src.read_bytes()
    (tmp_path / "cut.trie").write_bytes(data[:-5])
    # Each node is token i32, parent u64, freq i32, n_children u64 (24 bytes), then its children (token i32, id
    # u64); node 3, the last, starts at byte 128: the cut loses the end of its n_children.
    with pytest.raises(TrieFormatError,
                       match=r"cut\.trie: truncated DART trie at byte 140 \(reading n_children of node 3\)"):
        convert_dart_trie(tmp_path / "cut.trie", tmp_path / "x.ngt")
    (tmp_path / "cut.trie").write_bytes(data[:96])  # inside node 1's child entry (bytes 88..100)
    with pytest.raises(TrieFormatError, match=r"truncated DART trie at byte 92 \(reading child id of node 1\)"):
        convert_dart_trie(tmp_path / "cut.trie", tmp_path / "x.ngt")
    bad = [(-1, 0, 0, [(7, 1)]), (7, 5, 2, [])]
    write_dart(tmp_path / "bad.trie", bad)
    with pytest.raises(TrieFormatError, match="node 1 has parent 5"):
        convert_dart_trie(tmp_path / "bad.trie", tmp_path / "x.ngt")
    assert not (tmp_path / "x.ngt").exists()
