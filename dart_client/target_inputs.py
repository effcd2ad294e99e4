"""The target model and the generators' inputs: loading a causal LM, dtype
names, prompts as lists of token ids."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

__all__ = ["load_target", "prompt_lists", "token_list", "torch_dtype"]


def load_target(model: str | Path, *, device: Any = None, dtype: Any = None) -> Any:
    """A transformers causal LM folder (or hub id), with sdpa attention, in eval mode."""
    from transformers import AutoModelForCausalLM

    # `dtype`, not `torch_dtype`: renamed in 4.56, the dart extra's floor.
    target = AutoModelForCausalLM.from_pretrained(str(model), attn_implementation="sdpa", dtype=torch_dtype(dtype))
    return target.to(device or "cpu").eval()


def prompt_lists(x: Any) -> tuple[list[list[int]], bool]:
    """(prompts, single): one prompt (ints, a 1-D tensor) or several (a list
    of prompts, a 2-D tensor)."""
    if isinstance(x, torch.Tensor) or hasattr(x, "ndim"):
        if x.ndim == 2:
            out = [token_list(r) for r in x]
            single = False
        else:
            out, single = [token_list(x)], True
    else:
        items = list(x)
        if items and hasattr(items[0], "__len__"):  # a list of prompts
            out, single = [token_list(p) for p in items], False
        else:
            out, single = [token_list(items)], True
    if not out:
        raise ValueError("no prompts")
    for i, p in enumerate(out):
        if not p:
            raise ValueError("input_ids is empty" if single else f"prompt {i} is empty")
    return out, single


def token_list(x: Any) -> list[int]:
    """One prompt (ints, an array, a tensor of any shape) as a list of ints."""
    if isinstance(x, torch.Tensor):
        return [int(t) for t in x.reshape(-1).tolist()]
    if hasattr(x, "tolist"):
        return [int(t) for t in x.reshape(-1).tolist()]
    return [int(t) for t in x]


def torch_dtype(d: Any) -> Any:
    """A dtype or its name (float32, bf16, ...), "auto", or None (the model's own)."""
    if d is None or d == "auto":
        return "auto" if d == "auto" else None
    if isinstance(d, torch.dtype):
        return d
    return {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
            "float16": torch.float16, "fp16": torch.float16, "float64": torch.float64}[str(d)]
