"""The vector searches (cpp/engine/search_simd.cc) answer exactly as the portable one.

The same queries run in this process (the default search) and in
child processes with NGRAM_ENGINE_SIMD=0 (the portable search) and each other
vector search the CPU has (avx2, avx512); every probability, matched length
and pruned tree must be identical.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ngram_service import NgramIndex, _engine

CHILD = r"""
import json, sys
import numpy as np
from ngram_service import NgramIndex, _engine
args = json.loads(sys.argv[1])
idx = NgramIndex.open(args["trie"])
z = np.load(args["queries"])
probs, matched = idx.conditional_probs(z["contexts"], z["candidates"])
trees = idx.prune_batch([(z["prefixes"][i], z["lattice"][i], z["lattice_probs"][i])
                         for i in range(len(z["prefixes"]))], threads=1)
np.savez(args["out"], probs=probs, matched=matched, simd=_engine.simd_search(),
         tokens=np.concatenate([t.tokens for t in trees]), parents=np.concatenate([t.parents for t in trees]))
"""


def cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_vendor() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("vendor_id"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def expected_search() -> str:
    """AVX2, or AVX-512 on an AMD CPU that has it (cpp/engine/search_simd.cc)."""
    flags = cpu_flags()
    if "avx2" not in flags:
        return "none"
    return "avx512" if "avx512f" in flags and cpu_vendor() == "AuthenticAMD" else "avx2"


def _queries(idx: NgramIndex, rng: np.random.Generator, n: int, k: int) -> dict[str, np.ndarray]:
    """Contexts drawn from the trie's own frequent tokens (long runs) and from
    anywhere in the vocabulary (short or no runs); candidates a mix of both."""
    frequent = idx.topk([], 400).tokens
    vocab = idx.vocab_size

    def draw(shape: tuple[int, ...]) -> np.ndarray:
        common = rng.choice(frequent, shape)
        anywhere = rng.integers(0, vocab, shape)
        return np.where(rng.random(shape) < 0.7, common, anywhere)

    candidates = np.stack([rng.choice(np.unique(draw((3 * k,))), k, replace=False) for _ in range(n)])
    lattice = np.stack([np.stack([rng.choice(np.unique(draw((4 * k,))), k, replace=False) for _ in range(4)])
                        for _ in range(40)])
    return {
        "contexts": draw((n, 2)), "candidates": candidates,
        "prefixes": draw((40, 3)), "lattice": lattice,
        "lattice_probs": rng.random(lattice.shape).astype(np.float32),
    }


def _run_child(trie: Path, queries: Path, out: Path, simd: str) -> np.lib.npyio.NpzFile:
    env = {**os.environ, "NGRAM_ENGINE_SIMD": simd}
    subprocess.run([sys.executable, "-c", CHILD, json.dumps(
        {"trie": str(trie), "queries": str(queries), "out": str(out)})], env=env, check=True)
    return np.load(out)


@pytest.mark.parametrize("which", ["sample", "corpus"])
def test_vector_searches_equal_portable(which: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    if _engine.simd_search() == "none":
        pytest.skip("this CPU has no AVX2: there is only the portable search, nothing to compare it with")
    trie = request.getfixturevalue(f"{which}_trie")
    idx = NgramIndex.open(trie)
    rng = np.random.default_rng(7)
    # The other searches this CPU can run, each in a child process.
    others = {"0": "none"}
    for name in ("avx2", "avx512"):
        if _engine.simd_search() != name and (name == "avx2" or "avx512f" in cpu_flags()):
            others[name] = name
    for k in (7, 8, 17, 25, 64, 100):  # below the vector path, one to four vectors, two batches of 64
        q = _queries(idx, rng, 300, k)
        np.savez(tmp_path / "q.npz", **q)
        probs, matched = idx.conditional_probs(q["contexts"], q["candidates"])
        assert (matched > 0).any() and (matched == 0).any()
        trees = idx.prune_batch([(q["prefixes"][i], q["lattice"][i], q["lattice_probs"][i])
                                 for i in range(len(q["prefixes"]))], threads=1)
        for env, name in others.items():
            other = _run_child(trie, tmp_path / "q.npz", tmp_path / f"{name}.npz", env)
            assert str(other["simd"]) == name
            np.testing.assert_array_equal(matched, other["matched"])
            np.testing.assert_array_equal(probs, other["probs"])
            np.testing.assert_array_equal(np.concatenate([t.tokens for t in trees]), other["tokens"])
            np.testing.assert_array_equal(np.concatenate([t.parents for t in trees]), other["parents"])


def test_simd_switch_follows_cpu_and_environment() -> None:
    def child(value: str) -> str:
        out = subprocess.run([sys.executable, "-c", "from ngram_service import _engine; print(_engine.simd_search())"],
                             env={**os.environ, "NGRAM_ENGINE_SIMD": value}, capture_output=True, text=True,
                             check=True)
        return out.stdout.strip()

    assert child("0") == "none"
    assert child("avx2") == ("avx2" if "avx2" in cpu_flags() else "none")
    assert child("avx512") == ("avx512" if {"avx2", "avx512f"} <= cpu_flags() else child("avx2"))
    assert child("") == expected_search()
