"""ngram-build on a Ray cluster: same bytes as the local executor, retried
faults, a restarted driver resumes. One small local cluster (2 CPUs) for the
whole module: Ray's start-up is the slow part."""
from __future__ import annotations

from pathlib import Path

import pytest

from conftest import require_module

from tests.random_corpus import write_shards
from indexer.fault_injection import PermanentFault
from indexer.executor import TaskDiedError
from indexer.pipeline import BuildConfig, build
from indexer.cli import SAMPLE_DIR

ray = require_module("ray")

TOKENIZER = SAMPLE_DIR / "tokenizer.json"


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False,
             object_store_memory=80 << 20)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_shards(tmp_path_factory.mktemp("ray-corpus"), seed=10, shards=4, docs=120)


def config(corpus: Path, out: Path, **kw) -> BuildConfig:
    return BuildConfig(inputs=[str(corpus)], out=str(out), tokenizer=str(TOKENIZER), order=4, name="t", **kw)


@pytest.fixture(scope="module")
def local_bytes(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> bytes:
    out = tmp_path_factory.mktemp("local") / "t.ngt"
    build(config(corpus, out, workers=1), progress=lambda _m: None)
    return out.read_bytes()


def test_ray_builds_the_local_executors_bytes(cluster, corpus: Path, local_bytes: bytes, tmp_path: Path) -> None:
    out = tmp_path / "t.ngt"
    lines: list[str] = []
    report = build(config(corpus, out, executor="ray"), progress=lines.append)
    assert out.read_bytes() == local_bytes
    assert "2 worker(s)" in lines[0]  # the cluster's CPUs
    assert report.ranges >= 8  # at least 4 ranges per worker
    assert any(line.startswith("[reduce 1/") for line in lines)


def test_killed_and_failing_tasks_are_retried(cluster, corpus: Path, local_bytes: bytes, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # map 1's worker process dies on its first attempt; reduce 0 raises an OSError once.
    monkeypatch.setenv("NGRAM_BUILD_FAULT", "map:1:kill,reduce:0:raise")
    out, work = tmp_path / "t.ngt", tmp_path / "work"
    build(config(corpus, out, executor="ray", tmp_dir=str(work), keep_tmp=True), progress=lambda _m: None)
    assert out.read_bytes() == local_bytes
    markers = sorted(p.name for p in work.glob("build-*/faults/*"))
    assert markers == ["map-00001", "reduce-00000"], "the faults did not fire"


def test_a_task_whose_worker_always_dies_is_named(cluster, corpus: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NGRAM_BUILD_FAULT", "reduce:1:kill-always")
    with pytest.raises(TaskDiedError, match=r"reduce 1 \(range keys .*\): its worker died on each of 4 attempts"):
        build(config(corpus, tmp_path / "t.ngt", executor="ray"), progress=lambda _m: None)


def test_restarted_driver_resumes_from_finished_tasks(cluster, corpus: Path, local_bytes: bytes, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "t.ngt"
    monkeypatch.setenv("NGRAM_BUILD_FAULT", "reduce:2:fail")
    lines: list[str] = []
    with pytest.raises(PermanentFault):
        build(config(corpus, out, executor="ray"), progress=lines.append)
    assert not out.exists()
    assert any("was kept" in line for line in lines)
    monkeypatch.delenv("NGRAM_BUILD_FAULT")
    lines = []
    report = build(config(corpus, out, executor="ray"), progress=lines.append)
    assert report.shards_resumed == 4
    assert sum("(resumed)" in line for line in lines) == 4
    assert out.read_bytes() == local_bytes
    assert not (tmp_path / "t.ngt.build").exists()
