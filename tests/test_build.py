"""ngram-build against a brute-force counter, golden answers, resume, determinism."""
from __future__ import annotations

import gzip
import io
import json
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import zstandard

from indexer.pipeline import BuildConfig, build
from indexer.tokenizer import load_tokenizer
from ngram_service import NgramIndex

from conftest import CORPUS, GOLDEN, QWEN, SAMPLE_TOKENIZER, needs_shared

WORDS = ["the", "trie", " host", "draft", "tree", "\n", "naïve", "日本", "\u2028", "é", "42", "  ", "x", "PEP"]


def write_jsonl_zst(path: Path, texts: list[str]) -> None:
    lines = "".join(json.dumps({"id": str(i), "text": t}, ensure_ascii=False) + "\n" for i, t in enumerate(texts))
    path.write_bytes(zstandard.ZstdCompressor().compress(lines.encode()))


def random_texts(rng: random.Random, n: int) -> list[str]:
    return ["".join(rng.choice(WORDS) for _ in range(rng.randint(0, 60))) for _ in range(n)]


def brute_counts(flat: np.ndarray, lengths: np.ndarray, order: int) -> list[Counter]:
    counts = [Counter() for _ in range(order)]
    start = 0
    for n in lengths.tolist():
        doc = flat[start:start + n].tolist()
        start += n
        for k in range(1, order + 1):
            for i in range(len(doc) - k + 1):
                counts[k - 1][tuple(doc[i:i + k])] += 1
    return counts


def check_exact(trie: Path, counts: list[Counter], order: int, min_count: int = 1) -> None:
    # Mapped (the file as it is) and in RAM (version 1 decodes its count
    # ranks and child offsets at open): both must answer as the counts.
    check_exact_in(NgramIndex.open(trie, verify=True), counts, order, min_count)
    ram = NgramIndex.open(trie, mode="ram")
    if order >= 3:  # level 2's child offsets are Elias-Fano in the file: decoded
        assert ram.engine.decoded_bytes > 0
    check_exact_in(ram, counts, order, min_count)


def check_exact_in(idx: NgramIndex, counts: list[Counter], order: int, min_count: int) -> None:
    assert idx.order == order
    for k in range(1, order + 1):
        expected = {g: c for g, c in counts[k - 1].items() if c >= min_count}
        assert idx.info()["ngrams"][k - 1] == len(expected), f"order {k}: n-gram count differs"
        for g, c in expected.items():
            assert idx.count(list(g)) == c, (g, c)
    # Conditional probabilities against the definition, on contexts that occur and that do not.
    rng = random.Random(7)
    grams = [g for k in range(2, order + 1) for g in counts[k - 1]]
    vocab = sorted({g[0] for g in counts[0]}) + [idx.vocab_size - 1]
    for _ in range(200):
        g = list(rng.choice(grams))
        ctx = g[:-1] if rng.random() < 0.8 else [rng.choice(vocab) for _ in range(rng.randint(1, order))]
        cands = [g[-1]] + [rng.choice(vocab) for _ in range(5)]
        p, m = idx.conditional_probs([ctx], [cands])
        for j, w in enumerate(cands):
            want_p, want_m = np.float32(0), 0
            for ln in range(min(order - 1, len(ctx)), 0, -1):
                s = tuple(ctx[len(ctx) - ln:])
                cs = counts[ln - 1].get(s, 0)
                cw = counts[ln].get(s + (w,), 0)
                if cs >= min_count and cw >= min_count:
                    want_p = np.float32(cw) * (np.float32(1.0) / np.float32(cs))
                    want_m = ln
                    break
            assert m[0, j] == want_m and p[0, j] == want_p, (ctx, w)


@pytest.mark.parametrize("order", [2, 3, 4, 5, 6])
def test_random_text_exact(tmp_path: Path, order: int) -> None:
    rng = random.Random(order)
    shards = []
    for s in range(2):
        texts = random_texts(rng, 40)
        write_jsonl_zst(tmp_path / f"s{s}.jsonl.zst", texts)
        shards.append(texts)
    out = tmp_path / "t.ngt"
    build(BuildConfig(inputs=[str(tmp_path)], out=str(out), tokenizer=str(SAMPLE_TOKENIZER), order=order,
                      workers=1), progress=lambda _m: None)
    tok = load_tokenizer(str(SAMPLE_TOKENIZER))
    flat, lengths = tok.encode_to_arrays([t for texts in shards for t in texts])
    check_exact(out, brute_counts(flat, lengths, order), order)


def test_min_count_drops_rare_ngrams(tmp_path: Path) -> None:
    rng = random.Random(3)
    texts = random_texts(rng, 60)
    write_jsonl_zst(tmp_path / "a.jsonl.zst", texts)
    out = tmp_path / "t.ngt"
    build(BuildConfig(inputs=[str(tmp_path / "a.jsonl.zst")], out=str(out), tokenizer=str(SAMPLE_TOKENIZER),
                      order=3, min_count=3, workers=1), progress=lambda _m: None)
    flat, lengths = load_tokenizer(str(SAMPLE_TOKENIZER)).encode_to_arrays(texts)
    check_exact(out, brute_counts(flat, lengths, 3), 3, min_count=3)


def test_real_text_exact_with_two_workers(tmp_path: Path) -> None:
    needs_shared()
    shard = CORPUS / "rfcs-0001.jsonl.zst"
    out = tmp_path / "t.ngt"
    build(BuildConfig(inputs=[str(shard), str(CORPUS / "cc_en_head-0000.json.gz")], out=str(out),
                      tokenizer=str(QWEN), order=4, workers=2), progress=lambda _m: None)
    tok = load_tokenizer(str(QWEN))
    texts = []
    for p in (CORPUS / "cc_en_head-0000.json.gz", shard):  # the build's document order does not matter
        raw = gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else zstandard.ZstdDecompressor().stream_reader(
            io.BytesIO(p.read_bytes())).read()
        texts += [json.loads(line)["text"] for line in raw.split(b"\n") if line.strip()]
    flat, lengths = tok.encode_to_arrays(texts)
    check_exact(out, brute_counts(flat, lengths, 4), 4)


@pytest.mark.parametrize("mode", ["mmap", "ram"])
def test_golden_conditional_probs_bit_exact(corpus_trie: Path, mode: str) -> None:
    g = np.load(GOLDEN / "prob_sample.npz")
    idx = NgramIndex.open(corpus_trie, mode=mode)
    probs, matched = idx.conditional_probs(g["contexts"], g["candidates"])
    assert np.array_equal(matched, g["matched"])
    assert np.array_equal(probs.view(np.uint32), g["probs"].view(np.uint32))
    info = idx.info()
    assert info["ngrams_total"] == 6_345_725
    assert info["corpus"]["documents"] == 9_731


def run_cli(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "indexer.cli", *args], capture_output=True, text=True, **kw)


def test_same_input_gives_identical_bytes_and_compressed_variant(tmp_path: Path) -> None:
    rng = random.Random(11)
    for s in range(3):
        write_jsonl_zst(tmp_path / f"s{s}.jsonl.zst", random_texts(rng, 30))
    common = [str(tmp_path / "s*.jsonl.zst"), "--tokenizer", str(SAMPLE_TOKENIZER), "-n", "4", "-q"]
    a, b, z = tmp_path / "a.ngt", tmp_path / "b.ngt", tmp_path / "c.ngt.zst"
    assert run_cli(*common, "--out", str(a), "-j", "1").returncode == 0
    # Two workers and another memory limit (other chunks, other ranges); the
    # index name is the file's stem unless --name: same name, same bytes.
    assert run_cli(*common, "--out", str(b), "-j", "2", "--memory-limit", "300MB", "--name", "a").returncode == 0
    assert a.read_bytes() == b.read_bytes()
    r = run_cli(*common, "--out", str(z), "--compress", "--name", "a")
    assert r.returncode == 0, r.stderr
    assert z.stat().st_size < a.stat().st_size
    plain, packed = NgramIndex.open(a), NgramIndex.open(z, verify=True)
    ctx, cand = np.array([[5, 9, 11]] * 4), np.arange(40).reshape(4, 10)
    assert np.array_equal(plain.conditional_probs(ctx, cand)[0], packed.conditional_probs(ctx, cand)[0])
    assert not list(tmp_path.glob("*.build")), "work directory left behind"


def test_resume_after_killed_build(tmp_path: Path) -> None:
    rng = random.Random(5)
    for s in range(6):
        write_jsonl_zst(tmp_path / f"s{s}.jsonl.zst", random_texts(rng, 300))
    out = tmp_path / "t.ngt"
    args = [sys.executable, "-m", "indexer.cli", str(tmp_path / "s*.jsonl.zst"), "--tokenizer",
            str(SAMPLE_TOKENIZER), "-n", "3", "-j", "1", "--out", str(out)]
    p = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
    for line in p.stderr:
        if line.startswith("[map 2/6]"):
            p.kill()
            break
    p.wait()
    assert not out.exists(), "a killed build must not leave an output file"
    r = subprocess.run(args, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("(resumed)") >= 2
    fresh = tmp_path / "fresh" / "t.ngt"
    r = subprocess.run(args[:-1] + [str(fresh), "--no-resume"], capture_output=True, text=True)
    assert r.returncode == 0 and "(resumed)" not in r.stderr
    assert out.read_bytes() == fresh.read_bytes()


def _kill_at(args: list[str], prefix: str) -> None:
    """Runs the build and kills it (SIGKILL) when a progress line starts with `prefix`."""
    p = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
    assert p.stderr is not None
    for line in p.stderr:
        if line.startswith(prefix):
            p.kill()
            break
    p.wait()
    assert p.returncode < 0, f"the build ended before {prefix!r}"


def _resume_case(tmp_path: Path) -> tuple[list[str], Path, Path]:
    rng = random.Random(5)
    for s in range(6):
        write_jsonl_zst(tmp_path / f"s{s}.jsonl.zst", random_texts(rng, 300))
    out = tmp_path / "t.ngt"
    args = [sys.executable, "-m", "indexer.cli", str(tmp_path / "s*.jsonl.zst"), "--tokenizer",
            str(SAMPLE_TOKENIZER), "-n", "3", "-j", "1", "--out", str(out)]
    return args, out, tmp_path / "t.ngt.build"


def _parts(work: Path) -> dict[str, int]:
    """Finished reduce partitions: their done.json and its modification time."""
    return {str(p.relative_to(work)): p.stat().st_mtime_ns for p in work.glob("build-*/reduce/*.json")}


@pytest.mark.parametrize("phase", ["[reduce 1/", "[write]"])
def test_resume_after_kill_in_reduce_and_write(tmp_path: Path, phase: str) -> None:
    """Killed in the reduce phase (some partitions done) or while writing the trie (all done): no output
    file; the re-run reuses every finished map and partition (their files untouched) and writes the same
    bytes as a fresh build."""
    args, out, work = _resume_case(tmp_path)
    _kill_at(args, phase)
    assert not out.exists(), "a killed build must not leave an output file"
    done = _parts(work)
    assert done, "no partition had finished"
    if phase == "[write]":
        assert len(done) == len(list(work.glob("build-*/reduce/r*")))  # one output folder per range
    r = subprocess.run(args + ["--keep-tmp"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("(resumed)") == 6  # every map
    after = _parts(work)
    assert {k: after[k] for k in done} == done  # finished partitions reused, not recomputed
    fresh = tmp_path / "fresh" / "t.ngt"
    r = subprocess.run(args[:-1] + [str(fresh), "--no-resume"], capture_output=True, text=True)
    assert r.returncode == 0 and "(resumed)" not in r.stderr
    assert out.read_bytes() == fresh.read_bytes()


def test_resume_after_an_input_shard_changed(tmp_path: Path) -> None:
    """Runs of a build killed before a shard changed are stale: none is reused, and the trie is the one of
    the new input."""
    args, out, _work = _resume_case(tmp_path)
    _kill_at(args, "[map 3/6]")
    write_jsonl_zst(tmp_path / "s0.jsonl.zst", random_texts(random.Random(99), 300))
    r = subprocess.run(args, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "(resumed)" not in r.stderr
    fresh = tmp_path / "fresh" / "t.ngt"
    r = subprocess.run(args[:-1] + [str(fresh), "--no-resume"], capture_output=True, text=True)
    assert r.returncode == 0
    assert out.read_bytes() == fresh.read_bytes()


def test_cli_errors_name_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n{"text": 5}\n{"text": "fine"}\n')
    out = tmp_path / "t.ngt"
    r = run_cli(str(bad), "--tokenizer", str(SAMPLE_TOKENIZER), "--out", str(out), "-j", "1")
    assert r.returncode == 1
    assert f"{bad}:2" in r.stderr
    assert not out.exists()
    r = run_cli(str(bad), "--tokenizer", str(SAMPLE_TOKENIZER), "--out", str(out), "-j", "1", "--skip-bad")
    assert r.returncode == 0, r.stderr
    assert "1 bad documents skipped" in r.stderr
    assert NgramIndex.open(out).info()["corpus"]["skipped_documents"] == 1
    r = run_cli(str(tmp_path / "nothing*.jsonl"), "--tokenizer", str(SAMPLE_TOKENIZER), "--out", str(out))
    assert r.returncode == 1 and "nothing" in r.stderr
    r = run_cli(str(bad), "--tokenizer", str(SAMPLE_TOKENIZER), "--out", str(out), "--memory-limit", "lots")
    assert r.returncode != 0 and "lots" in r.stderr


def test_default_command_builds_bundled_sample(tmp_path: Path) -> None:
    out = tmp_path / "sample.ngt"
    r = run_cli("--out", str(out), "-q")
    assert r.returncode == 0, r.stderr
    info = NgramIndex.open(out, verify=True).info()
    assert info["order"] == 3 and info["corpus"]["documents"] == 50
