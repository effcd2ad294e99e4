"""What a generator returns: per step (StepRecord) and per sequence (GenerationResult)."""
from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["GenerationResult", "StepRecord"]


@dataclass
class StepRecord:
    """One draft-and-verify step."""

    accepted: int  # draft tokens accepted (the step commits accepted + 1 tokens)
    tree_nodes: int  # nodes verified, root included
    remote: bool  # the tree came from the trie host
    target_s: float = 0.0  # the tree-verification forward pass
    verify_s: float = 0.0  # acceptance, KV-cache compaction, bookkeeping
    drafter_s: float = 0.0  # embeddings + drafter forward for the next tree (0 without a drafter model)
    prune_s: float = 0.0  # building the tree on this side: pruning (top-k, copies, local search) or
    #                       proposing (local search or prompt lookup, the tree's tensors)
    transport_s: float = 0.0  # the RPC round trip (remote search included)
    batch_size: int = 1  # sequences in this step (the times are the whole batch's step)
    # What built the tree: "trie" (searched in process), "host" (the trie host), "drafter" (DART's
    # fallback: the drafter's lattice without the n-gram), "lookup" (proposals by prompt lookup
    # alone: no trie, or the host's fallback); "" for a pruner that does not say.
    source: str = ""

    @property
    def total_s(self) -> float:
        return self.target_s + self.verify_s + self.drafter_s + self.prune_s + self.transport_s


@dataclass
class GenerationResult:
    prompt_ids: list[int]
    output_ids: list[int]  # the new tokens only
    steps: list[StepRecord] = field(default_factory=list)
    prefill_s: float = 0.0  # prefill forward + first drafter pass
    wall_s: float = 0.0
    pruner: dict[str, Any] = field(default_factory=dict)  # the pruner's or proposer's stats
    mode: str = "dart"  # "dart", "proposals" or "autoregressive"
    text: str | None = None

    @property
    def mean_accepted_length(self) -> float:
        """Tokens committed per verification step (accepted drafts + the
        bonus token): DART's tau."""
        if not self.steps:
            return 1.0
        return sum(s.accepted + 1 for s in self.steps) / len(self.steps)

    @property
    def tokens_per_s(self) -> float:
        return len(self.output_ids) / self.wall_s if self.wall_s > 0 else 0.0

    def step_means(self) -> dict[str, float]:
        """Mean seconds per step of each part, and the share of pruning + transport."""
        n = max(1, len(self.steps))
        keys = ("target_s", "verify_s", "drafter_s", "prune_s", "transport_s")
        out = {k: sum(getattr(s, k) for s in self.steps) / n for k in keys}
        total = sum(out.values())
        out["total_s"] = total
        out["prune_transport_share"] = (out["prune_s"] + out["transport_s"]) / total if total > 0 else 0.0
        return out

    def summary(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "prompt_tokens": len(self.prompt_ids),
            "new_tokens": len(self.output_ids),
            "steps": len(self.steps),
            "mean_accepted_length": self.mean_accepted_length,
            "tokens_per_s": self.tokens_per_s,
            "wall_s": self.wall_s,
            "prefill_s": self.prefill_s,
            "remote_steps": sum(s.remote for s in self.steps),
            "tree_sources": dict(Counter(s.source for s in self.steps if s.source)),
            "per_step": self.step_means(),
            "pruner": self.pruner,
        }

    def as_dict(self) -> dict[str, Any]:
        d = self.summary()
        d["output_ids"] = list(self.output_ids)
        d["step_records"] = [asdict(s) for s in self.steps]
        if self.text is not None:
            d["text"] = self.text
        return d
