"""A short libFuzzer run of every target in fuzz/ under AddressSanitizer +
UndefinedBehaviorSanitizer (clang, -DNGRAM_SANITIZE=address,undefined), and
every corrupted copy of a trie (format versions 1 and 2) read by the sanitized reader.

Builds into build/fuzz (incremental after the first time). Seconds per
target: $NGRAM_FUZZ_SECONDS (default 5: each target gets thousands of
inputs past its seeds, well over what the test asks to show it ran, and
reaches nearly the edges 10 s reach; CHANGELOG.md has the figures);
fuzz/run_fuzz.py runs longer campaigns. Skipped only where clang is not installed
(infra/install-system-deps.sh installs it).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SECONDS = int(os.environ.get("NGRAM_FUZZ_SECONDS", "5"))

pytestmark = pytest.mark.skipif(shutil.which("clang++") is None,
                                reason="clang++ is not installed (infra/install-system-deps.sh)")


def _run(*args: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "fuzz" / "run_fuzz.py"), *args], cwd=REPO, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)


def test_fuzz_targets_run_clean(tmp_path: Path) -> None:
    out = tmp_path / "fuzz.json"
    p = _run("--seconds", str(SECONDS), "--json", str(out), timeout=1800 + 6 * SECONDS)
    assert p.returncode == 0, p.stderr[-6000:]
    results = json.loads(out.read_text())["targets"]
    assert [r["target"] for r in results] == ["fuzz_trie_reader", "fuzz_engine_api", "fuzz_server_requests"]
    for r in results:
        assert r["crashes"] == [] and r["exit_code"] == 0, r
        assert r["inputs"] > 100, r  # it really ran
        assert r["coverage_edges"] and r["coverage_edges"] > 50, r


def test_corrupted_tries_under_asan(tmp_path: Path) -> None:
    """Every corrupted copy (fuzz/corrupt_trie.py) of a trie, and every input that
    once found a bug, through the sanitized reader: opened with and without
    verification and queried; no read outside the file, no UB."""
    out = tmp_path / "corrupted.json"
    p = _run("--corrupted", "--json", str(out), timeout=1800)
    assert p.returncode == 0, p.stderr[-6000:]
    r = json.loads(out.read_text())["targets"][0]
    assert r["exit_code"] == 0 and r["inputs"] > 50, r
