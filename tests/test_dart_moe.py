"""Mixture-of-experts targets (DART ships KV targets for Qwen3-MoE and
Mixtral): the same lossless checks as for Qwen3 and Llama, on tiny random
configurations (4 experts, 2 per token), one prompt at a time and batched."""
from __future__ import annotations

from pathlib import Path

import pytest

from conftest import require_module

torch = require_module("torch")
require_module("transformers")

from dart_client import DartDrafter, DartGenerator, LocalPruner
from dart_client.random_models import random_target
from tests.dart_testbed import one_torch_thread  # noqa: F401  (autouse)
from tests.dart_testbed import encode_prompts, fitted_drafter, references

MAX_NEW = 16


@pytest.mark.parametrize("family,cls", [("qwen3_moe", "Qwen3MoeForCausalLM"), ("mixtral", "MixtralForCausalLM")])
def test_moe_target_lossless(family: str, cls: str, sample_trie: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    random_target("tiny", family=family, seed=7, eos_token_id=0, bos_token_id=0).save_pretrained(tmp_path / "t")
    target = AutoModelForCausalLM.from_pretrained(str(tmp_path / "t"), attn_implementation="sdpa").eval()
    assert type(target).__name__ == cls
    prompts = encode_prompts()[:5]
    refs = references(target, prompts, MAX_NEW)
    fitted_drafter(target, refs, seed=8).save_pretrained(tmp_path / "d")
    gen = DartGenerator(target, DartDrafter.from_pretrained(tmp_path / "d"),
                        LocalPruner(sample_trie, max_nodes=120, beam_width=32))
    singles = [gen.generate(p, MAX_NEW) for p in prompts]
    assert [r.output_ids for r in singles] == refs
    assert any(s.accepted >= 1 for r in singles for s in r.steps)  # trees had accepted paths
    batched = gen.generate(prompts, MAX_NEW)
    assert [r.output_ids for r in batched] == refs
