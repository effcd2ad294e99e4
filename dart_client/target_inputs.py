"""The target model and the generators' inputs: loading a causal LM, dtype
names, prompts as lists of token ids."""
from __future__ import annotations

import operator
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = ["load_target", "prompt_lists", "token_list", "torch_dtype"]


def load_target(model: str | Path, *, device: Any = None, dtype: Any = None) -> Any:
    """A transformers causal LM folder (or hub id), with sdpa attention, in eval mode."""
    from transformers import AutoModelForCausalLM

    # `dtype`, not `torch_dtype`: renamed in 4.56, the dart extra's floor.
    target = AutoModelForCausalLM.from_pretrained(str(model), attn_implementation="sdpa", dtype=torch_dtype(dtype))
    return target.to(device or "cpu").eval()


def prompt_lists(x: Any, vocab_size: int | None = None) -> tuple[list[list[int]], bool]:
    """(prompts, single): one prompt (ints, a 1-D tensor) or several (a list
    of prompts, a 2-D tensor). Ids that are not integers (6.7 was cut to 6),
    or, given ``vocab_size``, outside [0, vocab_size) (torch's embedding
    raised "index out of range in self"): ValueError naming the prompt."""
    if x is None or isinstance(x, (str, bytes)):
        raise TypeError(f"input_ids must be token ids (a list, an array or a tensor), got {x!r}")
    if isinstance(x, torch.Tensor) or hasattr(x, "ndim"):
        if x.ndim == 2:
            out = [token_list(r, f"prompt {i}") for i, r in enumerate(x)]
            single = False
        else:
            out, single = [token_list(x, "input_ids")], True
    else:
        items = list(x)
        if items and hasattr(items[0], "__len__"):  # a list of prompts
            out, single = [token_list(p, f"prompt {i}") for i, p in enumerate(items)], False
        else:
            out, single = [token_list(items, "input_ids")], True
    if not out:
        raise ValueError("no prompts")
    for i, p in enumerate(out):
        what = "input_ids" if single else f"prompt {i}"
        if not p:
            raise ValueError(f"{what} is empty")
        if vocab_size is not None and not 0 <= min(p) <= max(p) < vocab_size:
            bad = next(t for t in p if not 0 <= t < vocab_size)
            raise ValueError(f"{what}: token id {bad} is not in the target's vocabulary [0, {vocab_size})")
    return out, single


def token_list(x: Any, what: str = "input_ids") -> list[int]:
    """One prompt (ints, an array, a tensor of any shape) as a list of ints;
    anything but integers: ValueError naming ``what``."""
    if isinstance(x, (torch.Tensor, np.ndarray)):
        integral = (not x.is_floating_point() and not x.is_complex() and x.dtype != torch.bool
                    if isinstance(x, torch.Tensor) else x.dtype.kind in "iu")
        if not integral:
            raise ValueError(f"{what}: token ids must be integers, got dtype {x.dtype}")
        return [int(t) for t in x.reshape(-1).tolist()]
    out = []
    for t in x:
        if isinstance(t, bool):
            raise ValueError(f"{what}: token ids must be integers, got {t!r}")
        try:
            out.append(operator.index(t))
        except TypeError:
            raise ValueError(f"{what}: token ids must be integers, got {t!r}") from None
    return out


def torch_dtype(d: Any) -> Any:
    """A dtype or its name (float32, bf16, ...), "auto", or None (the model's own)."""
    if d is None or d == "auto":
        return "auto" if d == "auto" else None
    if isinstance(d, torch.dtype):
        return d
    return {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
            "float16": torch.float16, "fp16": torch.float16, "float64": torch.float64}[str(d)]
