"""Randomly initialized targets and drafters of a given shape (tests,
benchmarks, ``dart-generate --random-models``).

No weights are downloaded: ``random_target("qwen3-0.6b")`` has Qwen3-0.6B's
shape with random weights, enough to time a decoding step.
"""
from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from dart_client.drafter import DartDrafter, DrafterConfig

__all__ = ["SAMPLE_EOS", "SHAPES", "random_drafter", "random_sample_models", "random_sample_target", "random_target",
           "sample_tokenizer"]

#: Target shapes: transformers config keys.
SHAPES: dict[str, dict[str, Any]] = {
    # A few layers (8, so that 2, L//2 and L-3 differ), small hidden size.
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=8, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, max_position_embeddings=4096, vocab_size=4096,
                 tie_word_embeddings=False, rope_theta=10000.0),
    "small": dict(hidden_size=256, intermediate_size=768, num_hidden_layers=8, num_attention_heads=8,
                  num_key_value_heads=4, head_dim=32, max_position_embeddings=4096, vocab_size=151936,
                  tie_word_embeddings=True, rope_theta=1000000.0),
    # Qwen/Qwen3-0.6B's config.json
    "qwen3-0.6b": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                       num_key_value_heads=8, head_dim=128, max_position_embeddings=40960, vocab_size=151936,
                       tie_word_embeddings=True, rope_theta=1000000.0, rms_norm_eps=1e-6),
    # Qwen/Qwen3-8B's config.json
    "qwen3-8b": dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
                     num_key_value_heads=8, head_dim=128, max_position_embeddings=40960, vocab_size=151936,
                     tie_word_embeddings=False, rope_theta=1000000.0, rms_norm_eps=1e-6),
}


#: Mixture-of-experts settings added to a shape for the MoE families (4 experts, 2 per token).
MOE = {
    "qwen3_moe": dict(num_experts=4, num_experts_per_tok=2, decoder_sparse_step=1, mlp_only_layers=[],
                      norm_topk_prob=True),
    "mixtral": dict(num_local_experts=4, num_experts_per_tok=2, sliding_window=None),
}

FAMILIES = ("qwen3", "llama", "qwen3_moe", "mixtral")


def random_target(shape: str | dict[str, Any] = "tiny", *, family: str = "qwen3", seed: int = 0,
                  dtype: torch.dtype = torch.float32, device: Any = "cpu", **overrides: Any) -> Any:
    """A random causal LM of a named shape: family qwen3, llama, or the
    mixture-of-experts qwen3_moe and mixtral (the shape's intermediate size
    per expert)."""
    import transformers

    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    kw = dict(SHAPES[shape] if isinstance(shape, str) else shape)
    if family == "qwen3_moe":
        kw["moe_intermediate_size"] = kw["intermediate_size"]
    kw.update(MOE.get(family, {}))
    kw.update(overrides)
    torch.manual_seed(seed)
    name = {"qwen3": "Qwen3", "llama": "Llama", "qwen3_moe": "Qwen3Moe", "mixtral": "Mixtral"}[family]
    cfg = getattr(transformers, f"{name}Config")(**kw)
    cls = getattr(transformers, f"{name}ForCausalLM")
    cfg._attn_implementation = "sdpa"
    with torch.device(device):
        model = cls(cfg)
    return model.to(dtype).eval()


def random_drafter(target: Any, *, draft_length: int = 3, draft_ids: Sequence[int] | torch.Tensor | None = None,
                   draft_vocab_size: int | None = None, intermediate_size: int | None = None, seed: int = 0,
                   std: float = 0.02) -> DartDrafter:
    """A random DART drafter fitted to ``target``'s shape (same heads as the
    target's layers, as DART's drafters have). draft_ids: the target id of
    each draft id (default: the first draft_vocab_size ids)."""
    tc = target.config
    vocab = tc.vocab_size
    if draft_ids is not None:
        dv = len(draft_ids)
    else:
        dv = draft_vocab_size or min(vocab, 32000)
    cfg = DrafterConfig(
        draft_length=draft_length, vocab_size=vocab, hidden_size=tc.hidden_size,
        intermediate_size=intermediate_size or tc.intermediate_size,
        num_attention_heads=tc.num_attention_heads, num_key_value_heads=tc.num_key_value_heads,
        head_dim=getattr(tc, "head_dim", None) or tc.hidden_size // tc.num_attention_heads,
        draft_vocab_size=dv, rms_norm_eps=getattr(tc, "rms_norm_eps", 1e-6),
        rope_theta=_rope_theta(tc),
        max_position_embeddings=tc.max_position_embeddings,
    )
    d = DartDrafter.random(cfg, draft_ids, seed=seed, std=std)
    p = next(target.parameters())
    return d.to(device=p.device, dtype=p.dtype)


def _rope_theta(cfg: Any) -> float:
    theta = getattr(cfg, "rope_theta", None)  # transformers < 5
    if theta is None:
        theta = (getattr(cfg, "rope_parameters", None) or {}).get("rope_theta")
    return float(theta or 10000.0)


#: The bundled sample tokenizer's EOS id (``<|endoftext|>``).
SAMPLE_EOS = 0


def sample_tokenizer() -> Path:
    """The bundled sample tokenizer (``indexer/sample/tokenizer.json``: 4,096
    ids, the "tiny" shape's vocabulary). The file is located, the indexer
    package is not imported: what runs next to a GPU does not load the build."""
    spec = importlib.util.find_spec("indexer")
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    for root in roots:
        path = Path(root) / "sample" / "tokenizer.json"
        if path.is_file():
            return path
    raise FileNotFoundError("the bundled sample tokenizer (indexer/sample/tokenizer.json) is not installed "
                            f"(searched: {', '.join(roots) or 'no indexer package'})")


def random_sample_target(*, dtype: torch.dtype = torch.float32, device: Any = "cpu", seed: int = 0) -> Any:
    """A random "tiny" target over the sample tokenizer's ids, stopping at
    its EOS: decoding with proposals (no drafter) end to end without a
    checkpoint."""
    return random_target("tiny", seed=seed, dtype=dtype, device=device, eos_token_id=SAMPLE_EOS,
                         bos_token_id=SAMPLE_EOS)


def random_sample_models(*, dtype: torch.dtype = torch.float32, device: Any = "cpu", draft_length: int = 3,
                         seed: int = 0) -> tuple[Any, DartDrafter]:
    """``random_sample_target`` and a random drafter for it: DART decoding
    end to end without checkpoints. Random weights accept few drafts; the
    time split is real."""
    target = random_sample_target(dtype=dtype, device=device, seed=seed)
    return target, random_drafter(target, draft_length=draft_length, seed=seed + 1)
