"""Shared fixtures: the bundled sample tokenizer, the shared corpus, built tries."""
from __future__ import annotations

from pathlib import Path

import pytest

from indexer.cli import SAMPLE_DIR
from indexer.pipeline import BuildConfig, build

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
CORPUS = SHARED / "data" / "corpus"
QWEN = SHARED / "data" / "qwen3-tokenizer.json"
GOLDEN = SHARED / "golden"
SAMPLE_TOKENIZER = SAMPLE_DIR / "tokenizer.json"
SAMPLE_CORPUS = SAMPLE_DIR / "corpus"


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
