"""dart_client against DART's own behaviour, item by item (issue 15).

The drafter is checked against the only independent oracle we have: a
checkpoint made by DART's own class and that class's logits for fixed
inputs (``../shared/golden/dart_drafter``, float32 and bfloat16, a short and
a 3,000-position prefill, then incremental passes through the cache).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("safetensors")

from dart_client import DartDrafter, DrafterCache, DrafterConfig
from dart_client.drafter import RotaryTables

REPO = Path(__file__).resolve().parents[1]
# ../shared next to the checkout, or two levels up from a git worktree (wt/NAME)
SHARED = next((p for p in (REPO.parent / "shared", REPO.parent.parent / "shared") if p.is_dir()), REPO.parent / "shared")
GOLDEN = SHARED / "golden" / "dart_drafter"


@pytest.fixture(scope="module", autouse=True)
def _threads():
    old = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: threads only add contention on a shared machine
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="module")
def golden() -> dict[str, Any]:
    if not (GOLDEN / "golden_io.safetensors").is_file():
        pytest.skip("../shared/golden/dart_drafter is not present")
    from safetensors.torch import load_file

    return load_file(str(GOLDEN / "golden_io.safetensors"))


# ---- 1. the drafter against DART's class, float32 and bfloat16 --------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("case", ["short", "long"])
def test_drafter_equals_darts_class_bit_for_bit(golden: dict[str, Any], dtype: Any, case: str) -> None:
    """Every pass's logits (last real position + 4 mask positions) equal
    DART's exactly. In bfloat16 this needs the rotary tables computed in
    float32: a bf16 inv_freq flips the top-1 token after 3,000 positions."""
    drafter = DartDrafter.from_pretrained(GOLDEN, dtype=dtype)
    emb = golden["embed_tokens"].to(dtype)
    ids, aux = golden[f"{case}.ids"], golden[f"{case}.aux"].to(dtype)
    cache = DrafterCache()
    start = 0
    for i, n in enumerate(golden[f"{case}.splits"].tolist()):
        hidden = drafter.forward(aux[:, start:start + n], emb[ids[:, start + 1:start + n + 1]], cache)
        out = drafter.compute_logits(hidden)[0].float()
        ref = golden[f"{case}.{str(dtype).removeprefix('torch.')}.step{i}"]
        assert torch.equal(out, ref), f"pass {i}: max |diff| {float((out - ref).abs().max())}"
        start += n
    assert cache.length == start


def test_rotary_tables_stay_float32_when_the_drafter_is_cast() -> None:
    cfg = DrafterConfig(draft_length=2, vocab_size=64, hidden_size=32, intermediate_size=64, num_attention_heads=2,
                        rope_theta=1e6)
    d = DartDrafter.random(cfg).to(torch.bfloat16)
    rot = d.midlayer.self_attn.rotary
    assert rot.inv_freq.dtype == torch.float32
    cos, _sin = rot.cos_sin(2990, 10, torch.device("cpu"), torch.bfloat16)
    pos = torch.arange(2990, 3000, dtype=torch.float64)
    inv = 1.0 / (1e6 ** (torch.arange(0, 16, 2, dtype=torch.float64) / 16))
    exact = torch.cos(torch.outer(pos, inv)).repeat(1, 2)
    # bf16 rounding of a float32 value: within half a bf16 ulp (2**-9 relative) of the exact cosine
    assert float((cos.double() - exact).abs().max()) < 2 ** -8


# ---- 5. RoPE types -------------------------------------------------------------------------------

def _cfg(rope_scaling: dict[str, Any] | None, theta: float = 10000.0, max_pos: int = 64) -> DrafterConfig:
    return DrafterConfig(draft_length=2, vocab_size=64, hidden_size=32, intermediate_size=64, num_attention_heads=2,
                         rope_theta=theta, rope_scaling=rope_scaling, max_position_embeddings=max_pos)


def _expected_cos(positions: torch.Tensor, base: float, dim: int = 16, divisor: float = 1.0) -> torch.Tensor:
    inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    f = torch.outer(positions.float() / divisor if divisor != 1.0 else positions.float(), inv)
    return torch.cat((f, f), -1).cos()


def test_dynamic_rope_is_supported_with_darts_ntk_base() -> None:
    """rope_scaling {type: dynamic, factor: f}: NTK scaling of the base,
    base * (f * L / max_pos - (f - 1)) ** (dim / (dim - 2)), L the table
    length: at least max_pos + 20 (DART builds its table that long at
    start), longer when the pass needs it."""
    rot = RotaryTables(_cfg({"type": "dynamic", "factor": 2.0}))
    for past, t in ((0, 5), (80, 4), (200, 7)):
        length = max(64 + 20, past + t)
        base = 10000.0 * ((2.0 * length / 64) - 1.0) ** (16 / 14)
        cos, _ = rot.cos_sin(past, t, torch.device("cpu"), torch.float32)
        torch.testing.assert_close(cos, _expected_cos(torch.arange(past, past + t), base), rtol=0, atol=1e-6)
    # and the drafter runs with it (it raised NotImplementedError before)
    d = DartDrafter.random(_cfg({"rope_type": "dynamic", "factor": 4.0}))
    assert d.draft(torch.randn(1, 3, 96), torch.randn(1, 3, 32), DrafterCache()).shape == (3, 64)


def test_linear_rope_uses_rope_theta() -> None:
    """DART's linear branch builds its table with base 10,000 whatever
    rope_theta says; ours keeps rope_theta (documented)."""
    rot = RotaryTables(_cfg({"type": "linear", "factor": 4.0}, theta=1e6))
    cos, _ = rot.cos_sin(10, 6, torch.device("cpu"), torch.float32)
    torch.testing.assert_close(cos, _expected_cos(torch.arange(10, 16), 1e6, divisor=4.0), rtol=0, atol=1e-6)


def test_unknown_rope_type_is_refused_by_name() -> None:
    with pytest.raises(NotImplementedError, match="'yarn'"):
        RotaryTables(_cfg({"type": "yarn", "factor": 2.0}))
    with pytest.raises(ValueError, match="factor"):
        RotaryTables(_cfg({"type": "dynamic"}))
