"""`ngram-build` starts itself again under mimalloc when the system has it
(indexer/allocator.py); the trie is the same bytes either way."""
from __future__ import annotations

import ctypes.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner
from conftest import SAMPLE_CORPUS, SAMPLE_TOKENIZER, missing

import indexer.cli as cli
from indexer.allocator import ALLOCATOR_ENV


def build_cli(out: Path, *command: str, **env: str) -> subprocess.CompletedProcess:
    """Builds the sample with ``command`` (python -m indexer.cli by default)."""
    args = [str(SAMPLE_CORPUS), "--tokenizer", str(SAMPLE_TOKENIZER), "-n", "3", "-j", "1", "--out", str(out)]
    clean = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", ALLOCATOR_ENV)}
    return subprocess.run([*(command or (sys.executable, "-m", "indexer.cli")), *args], capture_output=True, text=True,
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
    # The installed command, as well as python -m indexer.cli.
    command = shutil.which("ngram-build", path=str(Path(sys.executable).parent)) or shutil.which("ngram-build")
    if command is None:
        missing("no ngram-build command beside this Python (pip install -e .)")
    installed = build_cli(tmp_path / "c" / "t.ngt", command)
    assert installed.returncode == 0, installed.stderr
    assert "malloc mimalloc" in installed.stderr.splitlines()[0]


def test_a_program_calling_main_goes_on_in_its_own_process(tmp_path: Path) -> None:
    # A program that calls main() (pytest here, through CliRunner) must go
    # on in its own process, never be replaced by itself under LD_PRELOAD.
    out = tmp_path / "t.ngt"
    pid = os.getpid()
    r = CliRunner().invoke(cli.main, [str(SAMPLE_CORPUS), "--tokenizer", str(SAMPLE_TOKENIZER), "-n", "2", "-j", "1",
                                      "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert os.getpid() == pid and out.is_file()
