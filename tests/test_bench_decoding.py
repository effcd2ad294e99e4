"""The decoding benchmarks a GPU session runs (bench/gpu_verify_check.sh) work on a CPU first: every mode
of bench_dart.py --oracle follows the text, the proposal modes' accepted lengths equal the replay's, and
bench_verify.py times every cache. A device's minutes are too few to find a broken benchmark there."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, SAMPLE_CORPUS, require_module

pytestmark = pytest.mark.needs_server  # the remote modes run on a host started by the benchmark


def run_bench(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(REPO / "bench" / script), *args], capture_output=True, text=True,
                          timeout=600, cwd=REPO)


def test_bench_dart_oracle_every_mode(tmp_path: Path) -> None:
    require_module("torch")
    out = tmp_path / "dart.json"
    # A deadline no loaded CI machine misses (the default, 5 ms, is a GPU step's): every remote step is remote.
    res = run_bench("bench_dart.py", "--oracle", str(SAMPLE_CORPUS), "--modes", "all", "--prompts", "2",
                    "--new-tokens", "24", "--batch-sizes", "1,2", "--rounds", "2", "--deadline-ms", "10000",
                    "--out", str(out))
    assert res.returncode == 0, res.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["rounds_done"] == 2
    rows = {r["mode"]: r for r in result["modes"]}
    assert list(rows) == ["autoregressive", "dart-local", "dart-remote", "propose-local", "propose-remote",
                          "lookup", "dart-host-down"]
    for mode in result["modes_run"]:
        assert rows[mode]["follows_the_text"], mode
        assert rows[mode]["new_tokens"] == 2 * 2 * 24, mode
    for mode in ("propose-local", "lookup"):  # decoding accepts what teacher forcing accepts
        assert rows[mode]["mean_accepted_length"] == pytest.approx(rows[mode]["replay_tau"]), mode
    assert rows["propose-remote"]["mean_accepted_length"] == rows["propose-local"]["mean_accepted_length"]
    assert rows["dart-remote"]["remote_steps"] == rows["dart-remote"]["steps"] > 0
    assert rows["dart-host-down"]["remote_steps"] == 0
    batches = {(b["mode"], b["batch"]) for b in result["batches"]}
    assert batches == {(m, b) for m in result["modes_run"] for b in (1, 2)}
    assert "WARNING" not in res.stderr


def test_bench_dart_modes_are_checked(tmp_path: Path) -> None:
    require_module("torch")
    res = run_bench("bench_dart.py", "--modes", "dart-local,remote", "--out", str(tmp_path / "x.json"))
    assert res.returncode == 2
    assert "--modes: unknown mode 'remote'" in res.stderr
    assert not (tmp_path / "x.json").exists()


def test_bench_verify_times_every_cache(tmp_path: Path) -> None:
    require_module("torch")
    out = tmp_path / "verify.json"
    res = run_bench("bench_verify.py", "--context", "32", "--tree", "8,160", "--reps", "2", "--out", str(out))
    assert res.returncode == 0, res.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]  # 160: past the last bucket, at its own length
    assert [(r["kv_cache"], r["tree"]) for r in rows] == [(k, n) for n in (8, 160)
                                                          for k in ("dynamic", "static", "static-fixed")]
    for r in rows:
        assert 0 < r["AR_fwd_ms"] and 0 < r["tree_fwd_ms"], r
        assert r["tree_over_ar"] == pytest.approx((r["tree_fwd_ms"] + r["compact_ms"]) / r["AR_fwd_ms"]), r
