"""The build's shuffle (runs split by range before the reduce), its range plan,
location-free manifests, temporary bytes, and the command's guard rails."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import indexer.pipeline as pipeline
import indexer.range_planning as range_planning
from tests.random_corpus import write_shards
from indexer.cli import SAMPLE_DIR
from indexer.pipeline import BuildConfig, build
from indexer.range_planning import RangeLookup, RangePlan, SampleResult, edge_keys, plan_ranges, range_keys
from ngram_service import NgramIndex

TOKENIZER = SAMPLE_DIR / "tokenizer.json"


def make_corpus(root: Path, shards: int = 3, docs: int = 150, seed: int = 4) -> Path:
    return write_shards(root, seed=seed, shards=shards, docs=docs, first_in_sub=True)


def cfg(corpus: Path, out: Path, **kw) -> BuildConfig:
    return BuildConfig(inputs=[str(corpus)], out=str(out), tokenizer=str(TOKENIZER), order=3, name="t", **kw)


def quiet(_m: str) -> None:
    pass


def test_same_bytes_whatever_the_ranges(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    corpus = make_corpus(tmp_path / "c")
    reports, files = [], []
    for i, (workers, max_ranges) in enumerate([(1, 1), (1, 8192), (3, 8192)]):
        monkeypatch.setattr(range_planning, "MAX_RANGES", max_ranges)
        out = tmp_path / str(i) / "t.ngt"
        reports.append(build(cfg(corpus, out, workers=workers), progress=quiet))
        files.append(out.read_bytes())
    assert [r.ranges for r in reports] == [1, 4, 12]
    assert files[0] == files[1] == files[2]


def test_each_reduce_reads_only_its_ranges_runs(tmp_path: Path) -> None:
    corpus = make_corpus(tmp_path / "c")
    work = tmp_path / "work"
    report = build(cfg(corpus, tmp_path / "t.ngt", workers=2, tmp_dir=str(work), keep_tmp=True), progress=quiet)
    read = report.reduce_input_bytes
    assert report.ranges == len(read) == 8
    # Every run file is read by exactly one reduce (a scan would read all of them in each).
    maps = [json.loads(p.read_text()) for p in work.glob("build-*/map/*.json")]
    assert sum(read) == sum(sum(m["range_bytes"]) for m in maps) > 0
    assert max(read) < sum(read) / 2
    # Runs are deleted once merged; the reduce outputs stay until the work folder goes.
    assert not [p for p in work.glob("build-*/shuffle/**/*") if p.is_file()]
    assert len(list(work.glob("build-*/reduce/r*/level*.parquet"))) == 8 * 3
    assert report.peak_work_bytes >= sum(read)
    assert report.peak_tmp_bytes >= report.peak_work_bytes + report.peak_task_scratch_bytes > 0


def sample(tokens: int, distinct: list[int], first_tokens: int = 1000) -> SampleResult:
    return SampleResult("s", tokens, 1.0, [[t, 1 + t % 7] for t in range(first_tokens)], distinct)


def test_range_lookup_places_k_grams_as_the_range_keys_do() -> None:
    """The map's table over first tokens answers as searching every k-gram's
    range key among the edges, split first tokens and edge tokens included."""
    rng = np.random.default_rng(7)
    vocab = 500
    for _ in range(100):
        cuts = np.unique(rng.integers(1, vocab * (vocab + 1), size=int(rng.integers(1, 25))))
        edges = [[0, -1]] + [[int(c // (vocab + 1)), int(c % (vocab + 1)) - 1] for c in cuts] + [[vocab, -1]]
        split = [e[0] for e in edges[1:-1] if e[1] >= 0]
        lookup, inner = RangeLookup(edges, vocab), edge_keys(edges[1:-1], vocab)
        first = rng.integers(0, vocab, 4000).astype(np.int32)
        first[:1500] = rng.choice(split or [0], 1500)
        first[1500:1600] = rng.choice([e[0] for e in edges[1:-1]], 100)
        second = rng.integers(0, vocab, 4000).astype(np.int32)
        for s in (None, second):
            want = np.searchsorted(inner, range_keys(first, s, vocab), side="right")
            assert np.array_equal(lookup.ranges(first, s), want)
    with pytest.raises(ValueError, match=r"token id -1 is outside \[0, 500\)"):
        lookup.ranges(np.array([3, -1], np.int32), None)


def test_range_count_follows_data_and_memory() -> None:
    s = [sample(1_000_000, [30_000, 400_000, 800_000])]

    def ranges(total_bytes: int, memory: int, workers: int = 2) -> int:
        return plan_ranges(s, 10 << 20, total_bytes, vocab_size=5000, order=3, workers=workers,
                           reduce_memory_bytes=memory).ranges

    small = ranges(10 << 20, 512 << 20)
    assert small == 8  # 4 per worker when everything fits
    assert ranges(10 << 30, 512 << 20) > ranges(1 << 30, 512 << 20) > small  # more data, more ranges
    assert ranges(10 << 30, 128 << 20) > ranges(10 << 30, 512 << 20)  # less memory, more ranges
    assert 500 < ranges(10 << 40, 64 << 20) <= 1000  # never finer than the first tokens seen
    plan = plan_ranges(s, 10 << 20, 10 << 30, vocab_size=5000, order=3, workers=2, reduce_memory_bytes=512 << 20)
    edges = [tuple(e) for e in plan.edges]
    assert edges[0] == (0, -1) and edges[-1] == (5000, -1) and edges == sorted(set(edges))
    # each range's share of what a reduce would hold fits the memory it has
    assert plan.largest_range_bytes <= 512 << 20 and not plan.split_tokens


def test_a_hot_first_token_is_split_by_its_second_token() -> None:
    # token 7 starts 40 % of the sample; the sample saw it followed by 300 different tokens
    unigrams = [[t, 6000 if t == 7 else 10] for t in range(1000)]
    bigrams = np.array([[7, s, 20] for s in range(100, 400)] + [[3, 4, 10]], dtype=np.int64)
    with_pairs = SampleResult("s", 16_000, 1.0, unigrams, [1000, 8000, 12000], bigrams)
    without = SampleResult("s", 16_000, 1.0, unigrams, [1000, 8000, 12000])
    budget = 64 << 20

    def plan(s: SampleResult) -> RangePlan:
        return plan_ranges([s], 1 << 20, 1 << 30, vocab_size=1000, order=3, workers=2, reduce_memory_bytes=budget)

    floor, split = plan(without), plan(with_pairs)
    assert floor.split_tokens == [] and floor.largest_range_bytes > 0.35 * floor.estimated_reduce_bytes > budget
    assert split.split_tokens == [7]
    assert split.largest_range_bytes <= budget < floor.largest_range_bytes
    edges = [tuple(e) for e in split.edges]
    assert edges == sorted(set(edges))
    # Token 7's n-grams (37.5 % of the mass) over enough ranges: the one holding its unigram,
    # key (7, -1), and those starting inside it, at second tokens it was seen followed by.
    inside = [s for t, s in edges if t == 7 and s >= 0]
    assert len(inside) + 1 >= 0.375 * split.estimated_reduce_bytes / budget
    assert all(100 < s < 400 for s in inside)


def hot_token_corpus(path: Path, seed: int = 3) -> Path:
    """Pre-tokenized documents (vocab 64, EOS 0) in which every other token is 5,
    followed by a random one."""
    rng = np.random.default_rng(seed)
    docs = []
    for _ in range(300):
        n = int(rng.integers(10, 40))
        docs.append(np.stack([np.full(n, 5), rng.integers(1, 64, n)], axis=1).ravel())
        docs.append([0])
    path.mkdir(parents=True)
    np.concatenate(docs).astype("<u2").tofile(path / "tokens.npy")
    return path


def test_hot_token_split_gives_the_unsplit_bytes_and_resumes_the_same_way(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    corpus = hot_token_corpus(tmp_path / "c")

    def config(out: Path, **kw) -> BuildConfig:
        return BuildConfig(inputs=[str(corpus)], out=str(out), tokenizer=None, vocab_size=64, eos=0, order=3,
                           name="h", workers=1, **kw)

    monkeypatch.setattr(range_planning, "MAX_RANGES", 1)
    unsplit = build(config(tmp_path / "1.ngt"), progress=quiet)
    assert unsplit.ranges == 1
    monkeypatch.setattr(range_planning, "MAX_RANGES", 8192)
    # A tiny per-task budget: the estimated reduce memory needs several ranges, token 5 alone many.
    monkeypatch.setattr(pipeline, "MIN_TASK_MEMORY", 1)
    work = tmp_path / "work"
    small = config(tmp_path / "2.ngt", memory_limit_bytes=100_000, tmp_dir=str(work), keep_tmp=True)
    monkeypatch.setenv("NGRAM_BUILD_FAULT", "reduce:2:fail")
    with pytest.raises(RuntimeError, match="injected permanent fault"):
        build(small, progress=quiet)
    [plan_file] = work.glob("build-*/plan.json")
    plan = json.loads(plan_file.read_text())
    assert plan["split_tokens"] == [5]
    assert sum(1 for t, s in plan["edges"] if t == 5 and s >= 0) >= 2
    assert plan["largest_range_bytes"] <= 50_000 < 0.4 * plan["estimated_reduce_bytes"]  # budget: half the task's
    monkeypatch.delenv("NGRAM_BUILD_FAULT")
    lines: list[str] = []
    resumed = build(small, progress=lines.append)
    assert json.loads(plan_file.read_text()) == plan  # the resumed build cut its ranges as stored
    assert resumed.shards_resumed == 1 and resumed.ranges == len(plan["edges"]) - 1
    assert (tmp_path / "2.ngt").read_bytes() == (tmp_path / "1.ngt").read_bytes()
    # the ranges inside token 5 really held its n-grams
    inside = [i for i, (t, s) in enumerate(plan["edges"][:-1]) if t == 5 and s >= 0]
    assert all(resumed.reduce_input_bytes[i] > 0 for i in inside)


def test_manifest_names_shards_relative_to_the_input(tmp_path: Path) -> None:
    a = make_corpus(tmp_path / "a")
    b = tmp_path / "elsewhere" / "copy"
    shutil.copytree(a, b)
    build(cfg(a, tmp_path / "1" / "t.ngt", workers=1), progress=quiet)
    build(cfg(b, tmp_path / "2" / "t.ngt", workers=1), progress=quiet)
    assert (tmp_path / "1" / "t.ngt").read_bytes() == (tmp_path / "2" / "t.ngt").read_bytes()
    shards = NgramIndex.open(tmp_path / "1" / "t.ngt").info()["corpus"]["shards"]
    assert sorted(s["path"] for s in shards) == ["part-1.jsonl.zst", "part-2.jsonl.zst", "sub/part-0.jsonl.zst"]
    # a glob is relative to its folder, a file to its own folder
    glob_cfg = BuildConfig(inputs=[f"{a}/part-*.jsonl.zst", str(a / "sub" / "part-0.jsonl.zst")],
                           out=str(tmp_path / "3.ngt"), tokenizer=str(TOKENIZER), workers=1)
    build(glob_cfg, progress=quiet)
    shards = NgramIndex.open(tmp_path / "3.ngt").info()["corpus"]["shards"]
    assert sorted(s["path"] for s in shards) == ["part-0.jsonl.zst", "part-1.jsonl.zst", "part-2.jsonl.zst"]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "indexer.cli", *args], capture_output=True, text=True)


def test_cli_guard_rails(tmp_path: Path) -> None:
    corpus = make_corpus(tmp_path / "c", shards=2, docs=20)
    out = tmp_path / "t.ngt"
    common = [str(corpus), "--tokenizer", str(TOKENIZER), "--out", str(out), "-j", "1"]
    r = run_cli(*common, "--memory-limit", "2XB")
    assert r.returncode == 2 and "--memory-limit" in r.stderr and "2XB" in r.stderr
    r = run_cli(*common, "--memory-limit", "1MB")
    assert r.returncode == 2 and "--memory-limit" in r.stderr and "minimum" in r.stderr
    help_text = run_cli("--help").stdout
    assert ".json," in help_text and ".npy" in help_text and "s3://" in help_text
    # A failed build says where its finished work waits.
    r = subprocess.run([sys.executable, "-m", "indexer.cli", *common], capture_output=True, text=True,
                       env={**__import__("os").environ, "NGRAM_BUILD_FAULT": "reduce:1:fail"})
    assert r.returncode == 1 and "PermanentFault" in r.stderr
    assert f"{out}.build/build-" in r.stderr and "was kept" in r.stderr and "resume" in r.stderr
    r = run_cli(*common)
    assert r.returncode == 0 and r.stderr.count("(resumed)") == 2
    assert "end to end" in r.stderr and "map " in r.stderr and "M tokens/s" in r.stderr
    assert not (tmp_path / "t.ngt.build").exists()


def test_progress_lines_eta_and_terminal_bar() -> None:
    import io

    from indexer.progress import PhaseProgress, ProgressPrinter

    lines: list[str] = []
    phase = PhaseProgress("map", 4, lines.append, total_work=400)
    phase.task_done("a (resumed)", work=100, documents=10, tokens=1000, resumed=True)
    phase.task_done("b", work=100, documents=5, tokens=500)
    assert lines[0].startswith("[map 1/4] a (resumed) | total 10 docs, 1,000 tokens, map ")
    assert "ETA" not in lines[0]  # nothing measured yet: resumed work says nothing of the rate
    assert lines[1].startswith("[map 2/4] b | total 15 docs, 1,500 tokens, map ") and "ETA" in lines[1]
    out = io.StringIO()
    printer = ProgressPrinter(out, tty=True)
    for line in ["ngram-build: 4 shard(s)", lines[0], lines[1], "[map 4/4] c", "done: x"]:
        printer(line)
    text = out.getvalue()
    assert text.startswith("ngram-build: 4 shard(s)\n")
    assert "\r\x1b[Kmap [#####...............] 1/4 a (resumed)" in text
    assert "\r\x1b[Kmap [####################] 4/4 c\ndone: x\n" in text
    plain = io.StringIO()
    ProgressPrinter(plain, tty=False)(lines[1])
    assert plain.getvalue() == lines[1] + "\n"  # logs get plain lines


def test_eta_counts_the_tasks_running_at_once() -> None:
    from indexer.progress import PhaseProgress

    # A cluster of 10 workers: the first of 100 equal tasks took 60 s of its own,
    # the 9 others started with it are nearly done; 99 tasks of 60 s on 10 workers are left.
    lines: list[str] = []
    phase = PhaseProgress("reduce", 100, lines.append, workers=10)
    phase.task_done("part 0", seconds=60.0)
    assert lines[-1].endswith("ETA 9 min 54 s")
    for i in range(1, 96):
        phase.task_done(f"part {i}", seconds=60.0)
    assert lines[-1].endswith("ETA 1 min 00 s")  # the last 4 run at once
