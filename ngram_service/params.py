"""The parameter sets of the engine's searches as the tools present them.

Each row is one parameter of the engine's own table (``kPruneFields`` in
cpp/engine/prune_params.h, ``kProposeFields`` in propose_params.h, exported
whole as ``_engine.PRUNE_FIELDS`` and ``_engine.PROPOSE_FIELDS``): its name
(the engine's keyword), type, default, range and help. ngram-query,
ngram-eval and dart-generate build their options from these rows
(``ngram_service.cli_options``), so that a row added to an engine table is
an option of every command that takes the whole set, with the engine's
name, default, range and help; the engine still checks every request itself.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ngram_service import _engine

__all__ = ["DART_TOPK", "LATTICE_TOPK", "PROPOSE_PARAMS", "PRUNE_PARAMS", "Param"]


@dataclass(frozen=True)
class Param:
    """One parameter of a search. ``type`` is int, float, bool (an on/off
    switch) or list (a weight per level: floats, each in the range);
    ``low``/``high`` bound it (inclusive; None: no bound); a default of None
    leaves the choice to the engine (``help`` says what it does then)."""

    name: str
    type: type
    default: Any
    low: float | None
    high: float | None
    help: str
    flag_name: str | None = None  # the option's name where it is not the keyword's

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Param:
        """A row of an engine table, its help written as an option's sentence."""
        text = str(row["help"])
        return cls(row["name"], row["type"], row["default"], row["low"], row["high"], text[0].upper() + text[1:] + ".")

    @property
    def flag(self) -> str:
        """The command-line option: --name-with-dashes."""
        return "--" + (self.flag_name or self.name).replace("_", "-")

    def describe_range(self) -> str:
        """'1..1024' for integers ('>= -1' with no upper bound), '[0, 1]' for
        reals and each of a list's values, '' for switches."""
        if self.type is bool:
            return ""
        if self.type is int:
            return f"{self.low:g}..{self.high:g}" if self.high is not None else f">= {self.low:g}"
        return f"[{self.low:g}, {self.high:g}]"


#: DART tree pruning: the engine's table (cpp/engine/prune_params.h, kPruneFields), in the wire's order.
PRUNE_PARAMS: tuple[Param, ...] = tuple(Param.from_row(row) for row in _engine.PRUNE_FIELDS)

#: Corpus proposals: the engine's table (cpp/engine/propose_params.h, kProposeFields), in the wire's order.
PROPOSE_PARAMS: tuple[Param, ...] = tuple(Param.from_row(row) for row in _engine.PROPOSE_FIELDS)

#: DART's drafter keeps this many candidates per lattice level (K), its production setting. The same
#: figure as dart_client.pruner.DART_TOPK, which imports torch: the commands need it before torch loads
#: (tests/test_engine_constants.py holds the two equal).
DART_TOPK = 25

#: A draft lattice's candidates per level: dart-generate's drafter, ngram-eval's synthetic lattices.
LATTICE_TOPK = Param("topk", int, DART_TOPK, 1, _engine.PruneLimits.max_candidates,
                     "Candidates per level of the draft lattice (K).", flag_name="lattice_topk")
