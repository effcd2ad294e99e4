"""Shared fixtures: the bundled sample tokenizer, the shared corpus, built tries."""
from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType

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


@pytest.fixture(scope="session")
def corpus_trie(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The whole shared corpus, Qwen3 tokenizer, N = 3: the golden answers' trie."""
    needs_shared()
    out = tmp_path_factory.mktemp("corpus") / "corpus3.ngt"
    build(BuildConfig(inputs=[str(CORPUS)], out=str(out), tokenizer=str(QWEN), order=3, workers=2),
          progress=lambda _m: None)
    return out


@pytest.fixture(scope="session")
def sample_trie(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled sample corpus, N = 3."""
    out = tmp_path_factory.mktemp("sample") / "sample.ngt"
    build(BuildConfig(inputs=[str(SAMPLE_CORPUS)], out=str(out), tokenizer=str(SAMPLE_TOKENIZER), order=3),
          progress=lambda _m: None)
    return out


@pytest.fixture(scope="session")
def sample_trie_v2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """sample_trie in file format version 2 (sample_trie has the default, version 1)."""
    out = tmp_path_factory.mktemp("sample_v2") / "sample_v2.ngt"
    build(BuildConfig(inputs=[str(SAMPLE_CORPUS)], out=str(out), tokenizer=str(SAMPLE_TOKENIZER), order=3,
                      format_version=2), progress=lambda _m: None)
    return out


@pytest.fixture(params=[1, 2], ids=["format1", "format2"])
def sample_trie_each_format(request: pytest.FixtureRequest) -> Path:
    """The sample trie in each file format version, in turn."""
    return request.getfixturevalue("sample_trie" if request.param == 1 else "sample_trie_v2")
