"""PNG plots of ngram-eval results (matplotlib, optional: ``pip install matplotlib``).

``plot_grid``: mean accepted length per pruning setting, one series per trie,
95 % confidence intervals as error bars. ``plot_proposals``: tokens per step
of each trie's proposals per node budget, beside prompt lookup alone and
SuffixDecoding, and each trie's calibration (``plot_calibration``:
predicted path probability against the share accepted). ``plot_against_bytes``: accepted
length against trie size, for studies over many tries (bench/eval_study.py).
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["plot_against_bytes", "plot_calibration", "plot_grid", "plot_proposals", "require_matplotlib"]


def require_matplotlib() -> None:
    """Raises RuntimeError, saying how to install it, when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as e:
        raise RuntimeError("plots need matplotlib, which is not installed: pip install matplotlib") from e


def _pyplot() -> Any:
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, out: str | os.PathLike[str]) -> None:
    """Atomically: a temporary file renamed into place."""
    out = Path(out)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp.png")
    fig.savefig(tmp, dpi=100)
    os.replace(tmp, out)


def source_label(lattices: dict[str, Any], width: int = 60) -> str:
    """The lattices' source for a title: the file names of all --text inputs
    (the first and how many more when they do not fit ``width``), else the
    source's file name."""
    inputs = [str(x) for x in lattices.get("texts") or [lattices["source"]]]
    names = [Path(x).name or x for x in inputs]
    joined = ", ".join(names)
    if len(names) == 1 or len(joined) <= width:
        return joined
    return f"{names[0]} and {len(names) - 1} more"


def _setting_label(s: dict[str, Any]) -> str:
    return f"b{s['beam_width']} n{s['max_nodes']}\nλ={s['ngram_weight']:g}"


def plot_grid(result: dict[str, Any], out: str | os.PathLike[str], title: str | None = None) -> None:
    """Accepted length per setting (x) and trie (series), with 95 % intervals."""
    plt = _pyplot()
    tries = result["tries"]
    settings = result["settings"]
    fig, ax = plt.subplots(figsize=(max(5.0, 1.1 * len(settings) + 2.5), 3.8))
    width = 0.8 / max(1, len(tries))
    for i, t in enumerate(tries):
        xs = [j - 0.4 + width * (i + 0.5) for j in range(len(settings))]
        ys = [g["mean_accepted_length"] for g in t["grid"]]
        es = [g["ci95"] for g in t["grid"]]
        ax.errorbar(xs, ys, yerr=es, fmt="o", capsize=3, label=Path(t["path"]).name)
    ax.set_xticks(range(len(settings)), [_setting_label(s) for s in settings], fontsize=8)
    ax.set_ylabel("mean accepted length (tokens/step)")
    lat = result["lattices"]
    ax.set_title(title or f"{lat['steps']} lattices from {source_label(lat)}", fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    _save(fig, out)
    plt.close(fig)


def plot_against_bytes(series: Sequence[dict[str, Any]], out: str | os.PathLike[str], title: str,
                       baseline: float | None = None) -> None:
    """series: [{"label", "points": [{"file_bytes", "mean_accepted_length", "ci95", "note"?}]}];
    accepted length against trie bytes (log scale), one line per series.
    baseline: a horizontal line (e.g. the tree without the n-gram)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for s in series:
        pts = sorted(s["points"], key=lambda p: p["file_bytes"])
        xs = [p["file_bytes"] / 1e6 for p in pts]
        ax.errorbar(xs, [p["mean_accepted_length"] for p in pts], yerr=[p["ci95"] for p in pts], fmt="-o",
                    capsize=3, markersize=4, label=s["label"])
        for p, x in zip(pts, xs):
            if p.get("note"):
                ax.annotate(p["note"], (x, p["mean_accepted_length"]), textcoords="offset points", xytext=(3, 4),
                            fontsize=6)
    if baseline is not None:
        ax.axhline(baseline, color="grey", linestyle="--", linewidth=1, label="no n-gram (λ = 0)")
    ax.set_xscale("log")
    ax.set_xlabel("trie file size (MB, log scale)")
    ax.set_ylabel("mean accepted length (tokens/step)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    _save(fig, out)
    plt.close(fig)


def plot_proposals(result: dict[str, Any], out: str | os.PathLike[str]) -> None:
    """Two panels: tokens per step (teacher forced) against the node budget,
    one line per trie and setting, prompt lookup alone dashed, SuffixDecoding's
    trees dotted; and each trie's calibration (``plot_calibration``)."""
    plt = _pyplot()
    fig, (ax, cax) = plt.subplots(1, 2, figsize=(12.0, 4.4))
    look = sorted((int(k), v["tokens_per_step"]) for k, v in result["lookup_alone"].items())
    ax.plot([k for k, _ in look], [v for _, v in look], "k--o", markersize=4, label="prompt lookup alone")
    for t in result["tries"]:
        series: dict[tuple[str, Any], list[tuple[int, float]]] = {}
        for r in t["rows"]:
            series.setdefault((r["sources"], r["discount"]), []).append((r["max_nodes"], r["tokens_per_step"]))
        for (sources, discount), pts in series.items():
            pts.sort()
            label = f"{Path(t['path']).name} (order {t['order']}), {sources}"
            if discount is not None:
                label += f", discount {discount:g}"
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "-o", markersize=4, label=label)
    suffix = result.get("suffix_baseline")
    if suffix:
        trees: dict[str, list[tuple[int, float]]] = {}
        for r in suffix["rows"]:
            if r["max_nodes"]:
                trees.setdefault(r["setting"]["name"], []).append((r["max_nodes"], r["tokens_per_step"]))
        for name, pts in trees.items():
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], ":s", markersize=4,
                    label=f"SuffixDecoding, {name}'s defaults, a tree")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("nodes per tree (root excluded)")
    ax.set_ylabel("tokens per step (teacher forced)")
    ax.set_title(f"{result['documents']} held-out documents from {source_label(result)}", fontsize=9)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="best")
    plot_calibration(result, cax)
    fig.tight_layout()
    _save(fig, out)
    plt.close(fig)


def plot_calibration(result: dict[str, Any], ax: Any) -> None:
    """Predicted path probability (a bin's mean score) against the share of
    its nodes accepted, one line per trie at its calibration row, bins of at
    least MIN_NODES_SHOWN nodes, log scales; the diagonal is a calibrated
    score."""
    from ngram_eval.calibration import MIN_NODES_SHOWN

    ax.plot([1e-3, 1], [1e-3, 1], color="grey", linestyle="--", linewidth=1, label="calibrated")
    for t in result["tries"]:
        r = t["rows"][t.get("calibration_row", 0)]
        cal = r.get("calibration")
        if not cal:
            continue
        pts = [(b["mean_predicted"], b["accepted_share"]) for b in cal["bins"]
               if b["nodes"] >= MIN_NODES_SHOWN and b["accepted_share"] > 0]
        ax.plot([p for p, _ in pts], [a for _, a in pts], "-o", markersize=4,
                label=f"{Path(t['path']).name} (order {t['order']}), {r['max_nodes']} nodes, {r['sources']}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("predicted path probability (node score, bin mean)")
    ax.set_ylabel("share of nodes accepted (teacher forced)")
    ax.set_title("calibration: does a score mean a probability?", fontsize=9)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="best")
