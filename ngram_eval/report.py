"""ngram-eval's results: per trie and pruning setting, the accepted-length statistics; the table and JSON.

The JSON document (``evaluate`` returns it, ``ngram-eval --json`` writes it):

    {"lattices": {"source", "steps", "depth", "mode", "model"?, "texts"?},
     "settings": [{"beam_width", "max_nodes", "ngram_weight"}, ...],   # the grid, in the order given
     "tries": [{"path", "file_bytes", "order", "vocab_size", "ngrams_total", "min_count",
                "hit_rate": {"2": ..., "N": ...},
                "headline": "default" | "best",   # which setting the figures below describe
                "setting": {...},                 # that setting
                "mean_accepted_length", "ci95", "accepted_length_histogram", "prune_us_per_tree",
                "vs_first": {"mean", "ci95"},    # paired difference from the first trie's headline
                "grid": [{"setting", "mean_accepted_length", "ci95", "accepted_length_histogram",
                          "prune_us_per_tree"}, ...],                     # in the order of "settings"
                "best": {...}}]}                                          # the grid's best entry

The *headline* of a trie is DART's default setting (the engine's defaults,
``ngram_service.tree.DEFAULTS``: what a deployment runs) when the grid holds
it, ``"headline": "default"``; otherwise the trie's best setting of the grid,
``"headline": "best"`` (then tries may be headlined at different settings,
and a best of many settings is biased upward by chance).
``ci95`` is the half width of a normal 95 % confidence interval of the mean
(1.96 standard errors, steps taken as independent: steps of one sequence
are correlated, so read it as a lower bound on the uncertainty).
``accepted_length_histogram[a]`` is the share of steps that accepted a
tokens (bonus included; index 0 is always 0). ``vs_first`` compares tries on
the same lattices: the mean of the per-step difference between this trie's
headline and the first trie's, and its 95 % half width, much tighter than
the tries' own intervals, since most of a step's variance is the lattice's,
not the trie's.
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
    """Replays ``lattices`` through every trie with every setting; a trie's
    top-level figures are its headline setting's (see the module docstring)."""
    if not settings:
        raise ValueError("no pruning setting to evaluate")
    if not len(lattices):
        raise ValueError(f"{lattices.source}: no lattices to replay")
    depth = lattices.depth
    headline = "default" if PruneSetting() in settings else "best"  # PruneSetting(): the engine's defaults
    out: dict[str, Any] = {
        "lattices": {"source": lattices.source, "steps": len(lattices), "depth": depth, **(lattice_info or {})},
        "settings": [s.as_dict() for s in settings],
        "tries": [],
    }
    reference: np.ndarray | None = None  # the first trie's accepted lengths at its headline setting
    for path in tries:
        index = NgramIndex.open(path)
        entry = _trie_facts(index, str(path))
        entry["hit_rate"] = {str(k): v for k, v in hit_rates(index, lattices).items()}
        grid, accepted = [], []
        for s in settings:
            r = replay(index, lattices, s, threads=threads)
            accepted.append(r.accepted)
            g = {"setting": s.as_dict(), **accepted_stats(r.accepted, depth),
                 "prune_us_per_tree": r.prune_us_per_tree}
            grid.append(g)
            if progress:
                progress(f"{path}: {s.label()}: {g['mean_accepted_length']:.3f}")
        best = max(range(len(grid)), key=lambda i: grid[i]["mean_accepted_length"])  # the first of equals
        head = list(settings).index(PruneSetting()) if headline == "default" else best
        reference = accepted[head] if reference is None else reference
        entry["headline"] = headline
        entry["setting"] = grid[head]["setting"]
        entry.update({k: grid[head][k] for k in ("mean_accepted_length", "ci95", "accepted_length_histogram",
                                                 "prune_us_per_tree")})
        entry["vs_first"] = _paired(accepted[head], reference)
        entry["grid"] = grid
        entry["best"] = grid[best]
        out["tries"].append(entry)
    return out


def _headline_line(result: dict[str, Any]) -> str:
    default = PruneSetting().label()
    if result["tries"] and result["tries"][0]["headline"] == "default":
        return f"headline (the rows marked default, and vs first): DART's default setting, {default}"
    return (f"headline (the rows marked best, and vs first): each trie's best setting of the grid "
            f"(DART's default, {default}, is not in the grid)")


def format_table(result: dict[str, Any]) -> str:
    """The terminal table: one line per trie and setting; the headline row
    of each trie carries its headline kind and the paired difference."""
    lat = result["lattices"]
    depth = lat["depth"]
    orders = sorted({int(k) for t in result["tries"] for k in t["hit_rate"]})
    head = (f"{'trie':<28} {'MB':>7} {'N':>2} {'beam':>4} {'nodes':>5} {'lambda':>6} {'tau':>6} {'+-95%':>6} "
            + " ".join(f"P(={a})".rjust(6) for a in range(1, depth + 2))
            + " " + " ".join(f"hit{k}".rjust(5) for k in orders)
            + f" {'us/tree':>8} {'headline':>8} {'vs first':>15}")
    lines = [f"{lat['steps']} lattices, depth {depth}, from {lat['source']}", _headline_line(result), head,
             "-" * len(head)]
    for t in result["tries"]:
        name = Path(t["path"]).name
        name = name if len(name) <= 28 else "..." + name[-25:]
        headline_done = False
        for i, g in enumerate(t["grid"]):
            s = g["setting"]
            first = i == 0
            cells = [f"{name if first else '':<28}", f"{t['file_bytes'] / 1e6:7.2f}" if first else " " * 7,
                     f"{t['order']:>2}" if first else "  ", f"{s['beam_width']:>4}", f"{s['max_nodes']:>5}",
                     f"{s['ngram_weight']:>6g}", f"{g['mean_accepted_length']:6.3f}", f"{g['ci95']:6.3f}"]
            cells += [f"{x:6.3f}" for x in g["accepted_length_histogram"][1:]]
            # A trie of order N has no hit rate for orders above N: a dash, not a number.
            cells += [(f"{t['hit_rate'][str(k)]:5.3f}" if str(k) in t["hit_rate"] else f"{'-':>5}") if first
                      else " " * 5 for k in orders]
            cells.append(f"{g['prune_us_per_tree']:8.1f}")
            if not headline_done and s == t["setting"]:  # a setting given twice: its first row
                headline_done = True
                v = t["vs_first"]
                cells += [f"{t['headline']:>8}", f"{v['mean']:+7.3f} +-{v['ci95']:.3f}"]
            lines.append(" ".join(cells))
        b = t["best"]
        if len(t["grid"]) > 1:
            lines.append(f"{'':<28} best: {PruneSetting(**b['setting']).label()}: {b['mean_accepted_length']:.3f}")
    return "\n".join(lines)
