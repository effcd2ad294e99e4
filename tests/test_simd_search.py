"""The AVX2 search (cpp/engine/search_simd.cc) answers exactly as the portable one.

The same queries run in this process (AVX2 where the CPU has it) and in a
child process with NGRAM_ENGINE_SIMD=0 (the portable search); every
probability, matched length and pruned tree must be identical.
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


def cpu_has_avx2() -> bool:
    try:
        return " avx2" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


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
    lattice = np.stack([np.stack([rng.choice(np.unique(draw((80,))), 12, replace=False) for _ in range(4)])
                        for _ in range(40)])
    return {
        "contexts": draw((n, 2)), "candidates": candidates,
        "prefixes": draw((40, 3)), "lattice": lattice,
        "lattice_probs": rng.random(lattice.shape).astype(np.float32),
    }


@pytest.mark.parametrize("which", ["sample", "corpus"])
def test_avx2_search_equals_portable(which: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    trie = request.getfixturevalue(f"{which}_trie")
    idx = NgramIndex.open(trie)
    rng = np.random.default_rng(7)
    for k in (7, 8, 25, 64, 100):  # below the vector path, one batch, two batches of 64
        q = _queries(idx, rng, 300, k)
        np.savez(tmp_path / "q.npz", **q)
        env = {**os.environ, "NGRAM_ENGINE_SIMD": "0"}
        subprocess.run([sys.executable, "-c", CHILD, json.dumps(
            {"trie": str(trie), "queries": str(tmp_path / "q.npz"), "out": str(tmp_path / "portable.npz")})],
            env=env, check=True)
        portable = np.load(tmp_path / "portable.npz")
        assert not bool(portable["simd"])
        probs, matched = idx.conditional_probs(q["contexts"], q["candidates"])
        assert (matched > 0).any() and (matched == 0).any()
        np.testing.assert_array_equal(matched, portable["matched"])
        np.testing.assert_array_equal(probs, portable["probs"])
        trees = idx.prune_batch([(q["prefixes"][i], q["lattice"][i], q["lattice_probs"][i])
                                 for i in range(len(q["prefixes"]))], threads=1)
        np.testing.assert_array_equal(np.concatenate([t.tokens for t in trees]), portable["tokens"])
        np.testing.assert_array_equal(np.concatenate([t.parents for t in trees]), portable["parents"])


def test_simd_switch_follows_cpu_and_environment() -> None:
    out = subprocess.run([sys.executable, "-c", "from ngram_service import _engine; print(_engine.simd_search())"],
                         env={**os.environ, "NGRAM_ENGINE_SIMD": "0"}, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    if os.environ.get("NGRAM_ENGINE_SIMD") != "0":
        assert _engine.simd_search() == cpu_has_avx2()
