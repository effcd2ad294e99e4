"""Shared fixtures: the bundled sample tokenizer, the shared corpus, built tries."""
from __future__ import annotations

import fcntl
import importlib
import os
from pathlib import Path
from types import ModuleType
from typing import Callable

import pytest

from indexer.cli import SAMPLE_DIR
from indexer.pipeline import BuildConfig, build

REPO = Path(__file__).resolve().parents[1]
# ../shared beside the checkout; NGRAM_SHARED points elsewhere (a git worktree, a CI cache).
SHARED = Path(os.environ.get("NGRAM_SHARED") or REPO.parent / "shared")
CORPUS = SHARED / "data" / "corpus"
QWEN = SHARED / "data" / "qwen3-tokenizer.json"
GOLDEN = SHARED / "golden"
SAMPLE_TOKENIZER = SAMPLE_DIR / "tokenizer.json"
SAMPLE_CORPUS = SAMPLE_DIR / "corpus"


# Under CI a missing part of the README's install (the native server, torch,
# the test extras) fails the run instead of skipping its tests silently.
IN_CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def missing(reason: str) -> None:
    """Skip here (a partial developer install); fail under CI (the install is the test)."""
    if IN_CI:
        pytest.fail(f"CI=true and {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def require_module(name: str) -> ModuleType:
    """importorskip that fails under CI."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        missing(f"{name} is not installed ({e})")
        raise


def server_binary() -> Path | None:
    from ngram_service.serve import find_native_binary

    return find_native_binary()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "needs_server: runs the native gRPC server (ngram-serve-native)")
    config.addinivalue_line("markers", "cuda: needs a GPU torch can use (skipped elsewhere, CI included: "
                                       "run `python -m pytest -m cuda` on a GPU machine)")


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("cuda"):
        torch = require_module("torch")
        if not torch.cuda.is_available():  # a machine without a GPU: not a missing install, even under CI
            pytest.skip("needs a GPU (torch sees none); run `python -m pytest -m cuda` where one is")
    if item.get_closest_marker("needs_server") and server_binary() is None:
        missing("ngram-serve-native was not built (grpc++/protobuf missing: run infra/install-system-deps.sh "
                "and reinstall, or set NGRAM_SERVE_NATIVE)")


def needs_shared() -> None:
    if not (CORPUS.is_dir() and QWEN.is_file()):
        pytest.skip("../shared (corpus, Qwen3 tokenizer) is not present")


def made_once(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], object]) -> Path:
    """The file ``name``, made by ``make(path)`` once per test run. Under pytest-xdist every worker
    asks for it: the first makes it while the others wait on a lock, then all read the same file."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # this run's folder, shared by its workers
    folder = root / "made-once"
    folder.mkdir(exist_ok=True)
    out = folder / name
    with open(folder / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not out.is_file():
            make(out)
    return out


def _build(**kw: object) -> Callable[[Path], object]:
    return lambda out: build(BuildConfig(out=str(out), **kw), progress=lambda _m: None)


@pytest.fixture(scope="session")
def corpus_trie(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The whole shared corpus, Qwen3 tokenizer, N = 3: the golden answers' trie."""
    needs_shared()
    return made_once(tmp_path_factory, "corpus3.ngt",
                     _build(inputs=[str(CORPUS)], tokenizer=str(QWEN), order=3, workers=2))


@pytest.fixture(scope="session")
def sample_trie(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled sample corpus, N = 3."""
    return made_once(tmp_path_factory, "sample.ngt",
                     _build(inputs=[str(SAMPLE_CORPUS)], tokenizer=str(SAMPLE_TOKENIZER), order=3))


@pytest.fixture(scope="session")
def sample_trie_v2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """sample_trie in file format version 2 (sample_trie has the default, version 1)."""
    return made_once(tmp_path_factory, "sample_v2.ngt",
                     _build(inputs=[str(SAMPLE_CORPUS)], tokenizer=str(SAMPLE_TOKENIZER), order=3, format_version=2))


@pytest.fixture(params=[1, 2], ids=["format1", "format2"])
def sample_trie_each_format(request: pytest.FixtureRequest) -> Path:
    """The sample trie in each file format version, in turn."""
    return request.getfixturevalue("sample_trie" if request.param == 1 else "sample_trie_v2")


# The suite runs on two pytest-xdist workers (pyproject.toml: -n 2 --dist loadfile --no-loadscope-reorder):
# each file on one worker (its module fixtures, servers and models made once), files handed out in
# collection order. The slowest files go first so that none of them starts last and runs alone:
# test_fuzz_smoke.py compiles the sanitized fuzz targets (minutes on 2 cores) while the other worker
# runs the rest; test_kgrams.py (one quick test) is the file xdist queues behind it on the same worker.
SLOW_FIRST = ["test_fuzz_smoke.py", "test_dart_client.py", "test_kgrams.py", "test_build.py", "test_eval.py",
              "test_build_options.py", "test_build_ray.py", "test_dart_batch.py", "test_build_shuffle.py",
              "test_tokenizer.py", "test_object_storage.py"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOW_FIRST)))  # stable: the rest as collected
