"""The local process pool's retries: a worker killed mid-task (the OOM
killer, SIGKILL) or a task that raised an OSError is run again and the build
gives the same bytes; a task whose worker dies on every attempt fails the
build with a message naming it, and its finished neighbours resume."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.random_corpus import write_shards
from indexer.cli import SAMPLE_DIR
from indexer.executor import MAX_RETRIES, TaskDiedError
from indexer.pipeline import BuildConfig, build

TOKENIZER = SAMPLE_DIR / "tokenizer.json"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_shards(tmp_path_factory.mktemp("fault-corpus"), seed=21, shards=4, docs=80, max_words=60)


def config(corpus: Path, out: Path, **kw) -> BuildConfig:
    return BuildConfig(inputs=[str(corpus)], out=str(out), tokenizer=str(TOKENIZER), order=3, name="t", **kw)


@pytest.fixture(scope="module")
def clean_bytes(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> bytes:
    out = tmp_path_factory.mktemp("clean") / "t.ngt"
    build(config(corpus, out, workers=1), progress=lambda _m: None)
    return out.read_bytes()


@pytest.mark.parametrize("workers", [2, 1])
def test_killed_worker_and_transient_errors_are_retried(corpus: Path, clean_bytes: bytes, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch, workers: int) -> None:
    # In process (-j 1) a killed task would take the test with it: only the OSError there.
    faults = "map:1:kill,reduce:0:raise,reduce:3:raise" if workers > 1 else "map:2:raise,reduce:0:raise"
    monkeypatch.setenv("NGRAM_BUILD_FAULT", faults)
    out, work = tmp_path / "t.ngt", tmp_path / "work"
    report = build(config(corpus, out, workers=workers, tmp_dir=str(work), keep_tmp=True), progress=lambda _m: None)
    assert out.read_bytes() == clean_bytes
    fired = sorted(p.name for p in work.glob("build-*/faults/*"))
    assert fired == sorted(f"{f.split(':')[0]}-{int(f.split(':')[1]):05d}" for f in faults.split(","))
    assert report.shards_resumed == 0


def test_a_task_that_always_kills_its_worker_is_named_and_the_rest_resumes(
        corpus: Path, clean_bytes: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NGRAM_BUILD_FAULT", "map:2:kill-always")
    out = tmp_path / "t.ngt"
    lines: list[str] = []
    with pytest.raises(TaskDiedError) as e:
        build(config(corpus, out, workers=2), progress=lines.append)
    assert f"map 2 (part-2.jsonl.zst): its worker process died on each of {MAX_RETRIES + 1} attempts" in str(e.value)
    assert not out.exists() and any("was kept" in line for line in lines)
    # The other maps finished (none was blamed for map 2's deaths); a re-run resumes them.
    monkeypatch.delenv("NGRAM_BUILD_FAULT")
    report = build(config(corpus, out, workers=2), progress=lambda _m: None)
    assert report.shards_resumed == 3
    assert out.read_bytes() == clean_bytes
