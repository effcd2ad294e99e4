"""Checks of the Python APIs' plain arguments, in the engine's words: a
count must be an integer (2.5 nodes was cut to 2, NaN ignored) and a
number a real one (a bool is neither). Dependency-free, so that any module
can use them without loading torch or the engine."""
from __future__ import annotations

import numbers
import operator

__all__ = ["is_real", "whole_number"]


def whole_number(value: object, name: str) -> int:
    """``value`` as an int when it is one (a Python, numpy or torch
    integer, not a bool), else ValueError naming ``name``."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise ValueError(f"{name} must be an integer, got {value!r}") from None


def is_real(value: object) -> bool:
    """A real number (int, float, numpy's), not a bool; its range is the caller's to check."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)
