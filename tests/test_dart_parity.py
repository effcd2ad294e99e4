"""dart_client against DART's own behaviour, item by item (issue 15).

The drafter is checked against the only independent oracle we have: a
checkpoint made by DART's own class and that class's logits for fixed
inputs (``../shared/golden/dart_drafter``, float32 and bfloat16, a short and
a 3,000-position prefill, then incremental passes through the cache).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import SHARED, require_module

torch = require_module("torch")
require_module("transformers")
require_module("safetensors")

from dart_client import DartDrafter, DrafterCache, DrafterConfig
from tests.dart_testbed import one_torch_thread  # noqa: F401  (autouse)
from dart_client.drafter import RotaryTables

# ../shared next to the checkout, or two levels up from a git worktree (wt/NAME)
GOLDEN = SHARED / "golden" / "dart_drafter"


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
    float32: a bf16 inv_freq flips the top-1 token after 3,000 positions.
    In float32 the golden logits were computed on a CPU whose matmul
    kernels round differently from some others (AMD EPYC without AVX-512
    here): there a pass may differ by float32 rounding (within 1e-5 of
    logits of order 1), never in its top-1 token."""
    drafter = DartDrafter.from_pretrained(GOLDEN, dtype=dtype)
    emb = golden["embed_tokens"].to(dtype)
    ids, aux = golden[f"{case}.ids"], golden[f"{case}.aux"].to(dtype)
    cache = DrafterCache()
    start = 0
    for i, n in enumerate(golden[f"{case}.splits"].tolist()):
        hidden = drafter.forward(aux[:, start:start + n], emb[ids[:, start + 1:start + n + 1]], cache)
        out = drafter.compute_logits(hidden)[0].float()
        ref = golden[f"{case}.{str(dtype).removeprefix('torch.')}.step{i}"]
        if dtype == torch.float32 and not torch.equal(out, ref):
            torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5, msg=lambda m: f"pass {i}: {m}")
            assert torch.equal(out.argmax(-1), ref.argmax(-1)), f"pass {i}: another top-1 token"
        else:
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


# ---- 2. search context ---------------------------------------------------------------------------

class _Recording:
    """Delegates to a real pruner and keeps the token sequences it was given."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.seen = inner, []
        self.stats, self.timing = inner.stats, inner.timing

    def prune_batch(self, logits: Any, d2t: Any, tokens: list[list[int]]) -> Any:
        self.seen.append([list(t) for t in tokens])
        out = self.inner.prune_batch(logits, d2t, tokens)
        self.timing = self.inner.timing
        return out


@pytest.fixture(scope="module")
def tiny() -> tuple[Any, Any, list[list[int]], list[list[int]]]:
    from dart_client.random_models import random_target
    from tests.dart_testbed import encode_prompts, fitted_drafter, references

    target = random_target("tiny", family="qwen3", seed=1, eos_token_id=0, bos_token_id=0)
    prompts = encode_prompts()[:4]
    refs = references(target, prompts, 16)
    return target, fitted_drafter(target, refs), prompts, refs


@pytest.mark.parametrize("context", ["sequence", "step"])
def test_search_context(tiny: Any, sample_trie: Path, context: str) -> None:
    """'step' (DART): after the first step the search sees only the last
    step's tokens (previous root, accepted tokens, bonus); 'sequence' (the
    default): every committed token. Greedy stays lossless either way."""
    from dart_client import DartGenerator, LocalPruner

    target, drafter, prompts, refs = tiny
    rec = _Recording(LocalPruner(sample_trie, max_nodes=120, beam_width=32))
    gen = DartGenerator(target, drafter, rec, search_context=context)
    res = gen.generate(prompts[0], 16)
    assert res.output_ids == refs[0]
    seq = prompts[0] + res.output_ids
    assert rec.seen[0] == [prompts[0] + res.output_ids[:1]]  # the first tree: prompt + first token (as DART)
    at = len(prompts[0]) + 1
    for step, [tokens] in zip(res.steps, rec.seen[1:]):
        end = at + step.accepted + 1
        assert tokens == (seq[:end] if context == "sequence" else seq[at - 1:end])
        at = end
    assert any(s.accepted for s in res.steps)
    with pytest.raises(ValueError, match="search_context"):
        DartGenerator(target, drafter, rec, search_context="whole")


# ---- 3. sampling order ---------------------------------------------------------------------------

def _hf_probs(logits: Any, temperature: float, top_k: int, top_p: float, order: str) -> Any:
    from transformers.generation.logits_process import (
        LogitsProcessorList,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    warpers = [TopPLogitsWarper(top_p), TopKLogitsWarper(top_k)]
    if order == "transformers":
        warpers.reverse()
    return torch.softmax(LogitsProcessorList([TemperatureLogitsWarper(temperature), *warpers])(None, logits), -1)


@pytest.mark.parametrize("order", ["dart", "transformers"])
def test_sampling_order_matches_the_named_warper_chain(order: str) -> None:
    """'dart' (the default) is DART's prepare_logits_processor: temperature,
    top-p, top-k; 'transformers' is generate's: temperature, top-k, top-p.
    Checked against transformers' own warpers."""
    from dart_client.sampling import process_logits

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 500, generator=g) * 2
    for temperature, top_k, top_p in ((0.7, 20, 0.9), (1.3, 5, 0.5), (1.0, 50, 0.95)):
        ours = process_logits(logits, temperature, top_k, top_p, order)
        torch.testing.assert_close(ours, _hf_probs(logits, temperature, top_k, top_p, order), rtol=1e-6, atol=1e-7)


def test_the_two_orders_differ_and_dart_is_the_default() -> None:
    """p = (0.5, 0.2, 0.15, 0.15), top-k 2, top-p 0.6. DART: top-p drops the
    two 0.15 (0.3 <= 0.4 of mass), top-k keeps the other two. transformers:
    top-k keeps (0.5, 0.2) = (5/7, 2/7), then top-p drops 2/7 <= 0.4."""
    import inspect

    from dart_client import DartGenerator
    from dart_client.sampling import process_logits

    logits = torch.log(torch.tensor([0.5, 0.2, 0.15, 0.15]))
    assert (process_logits(logits, 1.0, 2, 0.6, "dart") > 0).tolist() == [True, True, False, False]
    assert (process_logits(logits, 1.0, 2, 0.6, "transformers") > 0).tolist() == [True, False, False, False]
    assert inspect.signature(DartGenerator.generate).parameters["sampling_order"].default == "dart"
    with pytest.raises(ValueError, match="sampling_order"):
        DartGenerator.generate(None, [1], 2, sampling_order="hf")  # type: ignore[arg-type]


# ---- 4. EOS: which one, and the caller's choice ----------------------------------------------------

def test_cli_eos_choice(tiny: Any, sample_trie: Path, tmp_path: Path) -> None:
    """--eos model (default): stop at the target's generation-config EOS,
    search with the trie header's; --eos tokenizer (DART): the tokenizer's
    eos_token_id for both; --eos ID: that id for both."""
    import json

    from click.testing import CliRunner

    from dart_client.cli import main
    from ngram_service import NgramIndex
    from tests.dart_testbed import SAMPLE_TOKENIZER

    target, drafter, _prompts, _refs = tiny
    target.save_pretrained(tmp_path / "model")
    drafter.save_pretrained(tmp_path / "drafter")
    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "tokenizer.json").write_bytes(SAMPLE_TOKENIZER.read_bytes())
    from tokenizers import Tokenizer

    eos_text = Tokenizer.from_file(str(SAMPLE_TOKENIZER)).id_to_token(5)
    (tok / "tokenizer_config.json").write_text(json.dumps({"eos_token": eos_text}))
    base = [str(tmp_path / "model"), str(tmp_path / "drafter"), "--trie", str(sample_trie), "--tokenizer",
            str(tok / "tokenizer.json"), "--max-new-tokens", "4", "-p", "def f(x):", "--json"]
    trie_eos = NgramIndex.open(sample_trie).eos_id
    runner = CliRunner()
    for extra, want in (([], {"stop": [0], "search": trie_eos}), (["--eos", "tokenizer"], {"stop": [5], "search": 5}),
                        (["--eos", "7"], {"stop": [7], "search": 7})):
        res = runner.invoke(main, base + extra)
        assert res.exit_code == 0, res.output
        assert json.loads(res.stdout)["eos"] == want
    res = runner.invoke(main, base + ["--eos", "nope"])
    assert res.exit_code != 0 and "--eos" in res.output


# ---- what a new user meets ---------------------------------------------------------------------

_NO_TORCH = ("import sys\n"
             "for m in ('torch', 'transformers', 'safetensors'):\n"
             "    sys.modules[m] = None  # as if not installed\n"
             "from dart_client.cli import main\n"
             "main(sys.argv[1:])\n")


def test_dart_generate_without_torch_says_what_to_install(tmp_path: Path) -> None:
    import subprocess
    import sys

    run = lambda *a: subprocess.run([sys.executable, "-c", _NO_TORCH, *a], capture_output=True, text=True,
                                    timeout=120)
    h = run("--help")
    assert h.returncode == 0 and "Usage:" in h.stdout and "torch" in h.stdout, h.stderr
    (tmp_path / "m").mkdir()
    (tmp_path / "d").mkdir()
    r = run(str(tmp_path / "m"), str(tmp_path / "d"), "--target", "127.0.0.1:1", "-p", "x")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "missing torch, transformers, safetensors" in r.stderr and "pip install torch==2.13.0" in r.stderr
    assert "CPU" in r.stderr and "CUDA" in r.stderr
