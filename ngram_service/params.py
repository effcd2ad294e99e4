"""The parameter sets of the engine's searches, one table each, as the tools present them.

A row is one parameter: its name (the engine's keyword), type, default (the
engine's own, exported as PRUNE_DEFAULTS and PROPOSE_DEFAULTS), range (the
engine's limits where it exports them) and help. ngram-query, ngram-eval and
dart-generate build their options from these rows
(``ngram_service.cli_options``), so that a flag's name, default, range and
help are written here once; the engine still checks every request itself.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ngram_service.proposals import DEFAULTS as PROPOSE_DEFAULTS
from ngram_service.proposals import LIMITS as PROPOSE_LIMITS
from ngram_service.tree import DEFAULTS as PRUNE_DEFAULTS
from ngram_service.tree import LIMITS as PRUNE_LIMITS

__all__ = ["DART_TOPK", "LATTICE_TOPK", "PROPOSE_PARAMS", "PRUNE_PARAMS", "Param"]


@dataclass(frozen=True)
class Param:
    """One parameter of a search. ``low``/``high`` bound it (inclusive; None:
    no bound); a bool is an on/off switch."""

    name: str
    type: type
    default: Any
    low: float | None
    high: float | None
    help: str
    flag_name: str | None = None  # the option's name where it is not the keyword's

    @property
    def flag(self) -> str:
        """The command-line option: --name-with-dashes."""
        return "--" + (self.flag_name or self.name).replace("_", "-")

    def describe_range(self) -> str:
        """'1..1024' for integers, '[0, 1]' for reals, '' for switches."""
        if self.type is bool:
            return ""
        if self.type is int:
            return f"{self.low:g}..{self.high:g}"
        return f"[{self.low:g}, {self.high:g}]"


# The engine checks these reals in [0, 1] (cpp/engine/propose.cc, check_unit); it exports no constant for it.
_UNIT = (0.0, 1.0)

#: DART tree pruning (cpp/engine/prune_tree.h: PruneParams, PruneLimits).
PRUNE_PARAMS: tuple[Param, ...] = (
    Param("beam_width", int, PRUNE_DEFAULTS["beam_width"], 1, PRUNE_LIMITS["max_beam_width"],
          "The search's beam (extensions kept per level)."),
    Param("max_nodes", int, PRUNE_DEFAULTS["max_nodes"], 0, PRUNE_LIMITS["max_nodes"],
          "Nodes kept in a tree, the root excluded."),
    Param("ngram_weight", float, PRUNE_DEFAULTS["ngram_weight"], 0.0, PRUNE_LIMITS["max_weight"],
          "The n-gram term's weight in a node's score (0: the drafter alone)."),
)

#: Corpus proposals (cpp/engine/propose.h: ProposeParams, ProposeLimits).
PROPOSE_PARAMS: tuple[Param, ...] = (
    Param("max_nodes", int, PROPOSE_DEFAULTS["max_nodes"], 0, PROPOSE_LIMITS["max_nodes"],
          "Nodes kept in a tree, the root excluded."),
    Param("max_depth", int, PROPOSE_DEFAULTS["max_depth"], 0, PROPOSE_LIMITS["max_depth"],
          "The deepest node."),
    Param("max_branch", int, PROPOSE_DEFAULTS["max_branch"], 1, PROPOSE_LIMITS["max_branch"],
          "Continuations considered per node."),
    Param("min_prob", float, PROPOSE_DEFAULTS["min_prob"], *_UNIT,
          "Nodes whose path probability is below this are not kept."),
    Param("corpus", bool, PROPOSE_DEFAULTS["corpus"], None, None,
          "Continuations from the trie."),
    Param("lookup", bool, PROPOSE_DEFAULTS["lookup"], None, None,
          "Continuations from the sequence's own earlier occurrences (prompt lookup)."),
    Param("lookup_weight", float, PROPOSE_DEFAULTS["lookup_weight"], *_UNIT,
          "Prompt lookup's probabilities are scaled by this."),
    Param("lookup_min_match", int, PROPOSE_DEFAULTS["lookup_min_match"], 1, PROPOSE_LIMITS["max_match"],
          "The shortest suffix prompt lookup matches."),
    Param("discount", float, PROPOSE_DEFAULTS["discount"], *_UNIT,
          "Taken from each corpus count and given to the next shorter suffix."),
    Param("lookup_decay", float, PROPOSE_DEFAULTS["lookup_decay"], *_UNIT,
          "A prompt-lookup match of m tokens weighs 1 - lookup_decay^m."),
    Param("lookup_prior", float, PROPOSE_DEFAULTS["lookup_prior"], *_UNIT,
          "n prompt-lookup occurrences weigh n / (n + lookup_prior)."),
)

#: DART's drafter keeps this many candidates per lattice level (K), its production setting. The same
#: figure as dart_client.pruner.DART_TOPK, which imports torch: the commands need it before torch loads
#: (tests/test_engine_constants.py holds the two equal).
DART_TOPK = 25

#: A draft lattice's candidates per level: dart-generate's drafter, ngram-eval's synthetic lattices.
LATTICE_TOPK = Param("topk", int, DART_TOPK, 1, PRUNE_LIMITS["max_candidates"],
                     "Candidates per level of the draft lattice (K).", flag_name="lattice_topk")
