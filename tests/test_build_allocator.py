"""`ngram-build` starts itself again under mimalloc when the system has it
(indexer/allocator.py); the trie is the same bytes either way."""
from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

import indexer.cli as cli
from indexer.allocator import ALLOCATOR_ENV
from indexer.cli import _run_as_the_command

from conftest import SAMPLE_CORPUS, SAMPLE_TOKENIZER, missing


def build_cli(out: Path, **env: str) -> subprocess.CompletedProcess:
    args = [str(SAMPLE_CORPUS), "--tokenizer", str(SAMPLE_TOKENIZER), "-n", "3", "-j", "1", "--out", str(out)]
    clean = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", ALLOCATOR_ENV)}
    return subprocess.run([sys.executable, "-m", "indexer.cli", *args], capture_output=True, text=True,
                          env={**clean, **env}, timeout=300)


def test_the_command_runs_under_mimalloc_unless_told_not_to(tmp_path: Path) -> None:
    if ctypes.util.find_library("mimalloc") is None:
        missing("no libmimalloc on this system (infra/install-system-deps.sh installs libmimalloc2.0)")
    fast = build_cli(tmp_path / "a" / "t.ngt")
    assert fast.returncode == 0, fast.stderr
    assert "malloc mimalloc" in fast.stderr.splitlines()[0]
    plain = build_cli(tmp_path / "b" / "t.ngt", **{ALLOCATOR_ENV: "system"})
    assert plain.returncode == 0, plain.stderr
    assert "malloc system" in plain.stderr.splitlines()[0]
    assert (tmp_path / "a" / "t.ngt").read_bytes() == (tmp_path / "b" / "t.ngt").read_bytes()


def test_only_the_command_itself_restarts(monkeypatch: pytest.MonkeyPatch) -> None:
    # A program that calls main() (pytest here, through CliRunner) must go
    # on in its own process, never be replaced by itself under LD_PRELOAD.
    assert not _run_as_the_command()
    monkeypatch.setattr(sys, "argv", ["/usr/local/bin/ngram-build", "--help"])
    assert _run_as_the_command()
    monkeypatch.setattr(sys, "argv", [str(Path(cli.__file__)), "--help"])  # python -m indexer.cli
    assert _run_as_the_command()
