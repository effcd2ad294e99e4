"""ngram-eval's results: per trie and pruning setting, the accepted-length statistics; the table and JSON.

The JSON document (``evaluate`` returns it, ``ngram-eval --json`` writes it):

    {"lattices": {"source", "steps", "depth", "mode", "model"?},
     "settings": [{"beam_width", "max_nodes", "ngram_weight"}, ...],   # the grid, base first
     "tries": [{"path", "file_bytes", "order", "vocab_size", "ngrams_total", "min_count",
                "mean_accepted_length", "ci95", "accepted_length_histogram", "prune_us_per_tree",
                "hit_rate": {"2": ..., "N": ...}, "setting": {...},       # the base setting
                "vs_first": {"mean", "ci95"},    # paired difference from the first trie, base setting
                "grid": [{"setting", "mean_accepted_length", "ci95", "accepted_length_histogram",
                          "prune_us_per_tree"}, ...],
                "best": {...}}]}                                          # the grid's best entry

``ci95`` is the half width of a normal 95 % confidence interval of the mean
(1.96 standard errors, steps taken as independent: steps of one sequence
are correlated, so read it as a lower bound on the uncertainty).
``accepted_length_histogram[a]`` is the share of steps that accepted a
tokens (bonus included; index 0 is always 0). ``vs_first`` compares tries on
the same lattices: the mean of the per-step difference from the first trie
(base setting) and its 95 % half width, much tighter than the tries' own
intervals, since most of a step's variance is the lattice's, not the trie's.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dart_client.lattice_log import LatticeSet
from ngram_eval.replay import PruneSetting, hit_rates, replay
from ngram_service import NgramIndex

__all__ = ["accepted_stats", "evaluate", "format_table"]


def accepted_stats(accepted: np.ndarray, depth: int) -> dict[str, Any]:
    """Mean, 95 % interval half width and histogram (0..depth + 1) of accepted lengths."""
    n = len(accepted)
    mean = float(accepted.mean()) if n else 0.0
    sd = float(accepted.std(ddof=1)) if n > 1 else 0.0
    hist = np.bincount(accepted, minlength=depth + 2)[:depth + 2] / max(1, n)
    return {"mean_accepted_length": mean, "ci95": 1.96 * sd / math.sqrt(n) if n > 1 else 0.0,
            "accepted_length_histogram": [float(x) for x in hist]}


def _paired(accepted: np.ndarray, reference: np.ndarray) -> dict[str, float]:
    d = accepted.astype(np.float64) - reference
    n = len(d)
    return {"mean": float(d.mean()), "ci95": 1.96 * float(d.std(ddof=1)) / math.sqrt(n) if n > 1 else 0.0}


def _trie_facts(index: NgramIndex, path: str) -> dict[str, Any]:
    info = index.info()
    build = info.get("build") or info.get("build_parameters") or {}
    return {"path": path, "file_bytes": int(info["file_bytes"]), "order": index.order,
            "vocab_size": index.vocab_size, "ngrams_total": int(info["ngrams_total"]),
            "min_count": build.get("min_count") if isinstance(build, dict) else None}


def evaluate(tries: Sequence[str], lattices: LatticeSet, settings: Sequence[PruneSetting], *, threads: int = 1,
             lattice_info: dict[str, Any] | None = None,
             progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Replays ``lattices`` through every trie with every setting (the first
    is the base setting the trie's top-level figures describe)."""
    if not settings:
        raise ValueError("no pruning setting to evaluate")
    if not len(lattices):
        raise ValueError(f"{lattices.source}: no lattices to replay")
    depth = lattices.depth
    out: dict[str, Any] = {
        "lattices": {"source": lattices.source, "steps": len(lattices), "depth": depth, **(lattice_info or {})},
        "settings": [s.as_dict() for s in settings],
        "tries": [],
    }
    reference: np.ndarray | None = None  # the first trie's accepted lengths, base setting
    for path in tries:
        index = NgramIndex.open(path)
        entry = _trie_facts(index, str(path))
        entry["hit_rate"] = {str(k): v for k, v in hit_rates(index, lattices).items()}
        grid = []
        for s in settings:
            r = replay(index, lattices, s, threads=threads)
            if s is settings[0]:
                reference = r.accepted if reference is None else reference
                entry["vs_first"] = _paired(r.accepted, reference)
            g = {"setting": s.as_dict(), **accepted_stats(r.accepted, depth),
                 "prune_us_per_tree": r.prune_us_per_tree}
            grid.append(g)
            if progress:
                progress(f"{path}: {s.label()}: {g['mean_accepted_length']:.3f}")
        base = grid[0]
        entry.update({k: base[k] for k in ("mean_accepted_length", "ci95", "accepted_length_histogram",
                                           "prune_us_per_tree")})
        entry["setting"] = base["setting"]
        entry["grid"] = grid
        entry["best"] = max(grid, key=lambda g: g["mean_accepted_length"])
        out["tries"].append(entry)
    return out


def format_table(result: dict[str, Any]) -> str:
    """The terminal table: one line per trie and setting."""
    lat = result["lattices"]
    depth = lat["depth"]
    orders = sorted({int(k) for t in result["tries"] for k in t["hit_rate"]})
    head = (f"{'trie':<28} {'MB':>7} {'N':>2} {'beam':>4} {'nodes':>5} {'lambda':>6} {'tau':>6} {'+-95%':>6} "
            + " ".join(f"P(={a})".rjust(6) for a in range(1, depth + 2))
            + " " + " ".join(f"hit{k}".rjust(5) for k in orders) + f" {'us/tree':>8} {'vs first':>15}")
    lines = [f"{lat['steps']} lattices, depth {depth}, from {lat['source']}", head, "-" * len(head)]
    for t in result["tries"]:
        name = Path(t["path"]).name
        name = name if len(name) <= 28 else "..." + name[-25:]
        for i, g in enumerate(t["grid"]):
            s = g["setting"]
            first = i == 0
            cells = [f"{name if first else '':<28}", f"{t['file_bytes'] / 1e6:7.2f}" if first else " " * 7,
                     f"{t['order']:>2}" if first else "  ", f"{s['beam_width']:>4}", f"{s['max_nodes']:>5}",
                     f"{s['ngram_weight']:>6g}", f"{g['mean_accepted_length']:6.3f}", f"{g['ci95']:6.3f}"]
            cells += [f"{x:6.3f}" for x in g["accepted_length_histogram"][1:]]
            cells += [f"{t['hit_rate'].get(str(k), float('nan')):5.3f}" if first else " " * 5 for k in orders]
            cells.append(f"{g['prune_us_per_tree']:8.1f}")
            if first:
                v = t["vs_first"]
                cells.append(f"{v['mean']:+7.3f} +-{v['ci95']:.3f}")
            lines.append(" ".join(cells))
        b = t["best"]
        if len(t["grid"]) > 1:
            lines.append(f"{'':<28} best: {PruneSetting(**b['setting']).label()}: {b['mean_accepted_length']:.3f}")
    return "\n".join(lines)
