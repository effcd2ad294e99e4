"""Do proposal scores mean probabilities? Predicted path probability against
the share of nodes accepted, teacher forced.

A proposal tree's node score is a path probability: the engine's estimate
that the text continues with the node's whole path. Under teacher forcing
a node is *accepted* when its path equals the document's next tokens. If
the scores are calibrated, the nodes scored about p are accepted about a
share p of the time. ``Calibration`` gathers (score, accepted) over every
node of every tree (the root left out; a node whose path runs past the
document's end is not judged) into fixed bins, finer towards 0 where most
nodes lie; it reads nothing but the tree's scores, so it holds for any
scoring the engine uses.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["BIN_EDGES", "Calibration", "format_calibration", "path_matches", "pool_calibrations"]

#: Bin edges of predicted path probability; the last bin holds 1.0.
BIN_EDGES = (0.0, 0.001, 0.003, 0.01, 0.03, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
#: A bin's figures are printed only from this many nodes (the JSON has them all).
MIN_NODES_SHOWN = 30


def path_matches(tokens: Sequence[int], parents: Sequence[int], depths: Sequence[int], doc: Sequence[int],
                 at: int) -> tuple[list[bool], int]:
    """Per node (index 0 is the root, which context ends): whether its path
    equals doc[at:at + depth]; and how many nodes can be judged (their path
    ends within the document: depth <= len(doc) - at)."""
    ok = [True] + [False] * (len(tokens) - 1)
    end = len(doc)
    for i in range(1, len(tokens)):
        d = depths[i]
        if ok[parents[i]] and at + d - 1 < end and tokens[i] == doc[at + d - 1]:
            ok[i] = True
    room = end - at
    judged = sum(1 for d in depths[1:] if d <= room)
    return ok, judged


class Calibration:
    """Per bin of predicted path probability: nodes, their summed score, and
    how many were accepted."""

    def __init__(self, edges: Sequence[float] = BIN_EDGES) -> None:
        self.edges = np.asarray(edges, np.float64)
        k = len(self.edges) - 1
        self.nodes = np.zeros(k, np.int64)
        self.predicted = np.zeros(k, np.float64)
        self.accepted = np.zeros(k, np.int64)
        # the same sums by node depth (index 0 unused): where overconfidence starts, and how it compounds
        self.depth_nodes = np.zeros(1, np.int64)
        self.depth_predicted = np.zeros(1, np.float64)
        self.depth_accepted = np.zeros(1, np.int64)

    def add(self, scores: np.ndarray, accepted: np.ndarray, depths: np.ndarray | None = None) -> None:
        """One tree's nodes (root excluded, judged ones only): scores,
        accepted flags, and (optionally) depths."""
        if not len(scores):
            return
        b = np.searchsorted(self.edges[1:-1], scores, side="right")  # 1.0 falls in the last bin
        k = len(self.nodes)
        self.nodes += np.bincount(b, minlength=k)
        self.predicted += np.bincount(b, weights=scores, minlength=k)
        self.accepted += np.bincount(b, weights=accepted, minlength=k).astype(np.int64)
        if depths is not None:
            m = max(len(self.depth_nodes), int(depths.max()) + 1)
            if m > len(self.depth_nodes):
                grow = m - len(self.depth_nodes)
                self.depth_nodes = np.concatenate((self.depth_nodes, np.zeros(grow, np.int64)))
                self.depth_predicted = np.concatenate((self.depth_predicted, np.zeros(grow, np.float64)))
                self.depth_accepted = np.concatenate((self.depth_accepted, np.zeros(grow, np.int64)))
            self.depth_nodes += np.bincount(depths, minlength=m)
            self.depth_predicted += np.bincount(depths, weights=scores, minlength=m)
            self.depth_accepted += np.bincount(depths, weights=accepted, minlength=m).astype(np.int64)

    def add_tree(self, tokens: Sequence[int], parents: Sequence[int], depths: Sequence[int], scores: np.ndarray,
                 doc: Sequence[int], at: int) -> int:
        """Adds a tree's judged nodes; returns its accepted length (the
        deepest accepted node's depth)."""
        ok, _ = path_matches(tokens, parents, depths, doc, at)
        d = np.asarray(depths[1:], np.int64)
        judged = d <= len(doc) - at
        acc = np.asarray(ok[1:], np.float64)
        self.add(np.asarray(scores[1:], np.float64)[judged], acc[judged], d[judged])
        return int(d[acc > 0].max()) if acc.any() else 0

    def as_dict(self) -> dict[str, Any]:
        """The JSON: per bin lo, hi, nodes, mean_predicted, accepted_share
        and ci95 (a binomial normal interval's half width; nodes of one tree
        are not independent, so read it as a lower bound); and over all
        nodes: expected (the summed scores) against accepted nodes, and the
        calibration error (the nodes-weighted mean |predicted - accepted|);
        ``by_depth``: nodes, expected and accepted per node depth."""
        bins = []
        for i in range(len(self.nodes)):
            n = int(self.nodes[i])
            pred = float(self.predicted[i] / n) if n else None
            share = float(self.accepted[i] / n) if n else None
            ci = 1.96 * math.sqrt(share * (1 - share) / n) if n else None
            bins.append({"lo": float(self.edges[i]), "hi": float(self.edges[i + 1]), "nodes": n,
                         "mean_predicted": pred, "accepted_share": share, "ci95": ci})
        total = int(self.nodes.sum())
        err = float(np.abs(self.predicted - self.accepted).sum() / total) if total else None
        by_depth = [{"depth": d, "nodes": int(self.depth_nodes[d]), "expected_accepted": float(self.depth_predicted[d]),
                     "accepted": int(self.depth_accepted[d])}
                    for d in range(1, len(self.depth_nodes)) if self.depth_nodes[d]]
        return {"nodes": total, "expected_accepted": float(self.predicted.sum()),
                "accepted": int(self.accepted.sum()), "calibration_error": err, "bins": bins, "by_depth": by_depth}


def pool_calibrations(cals: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Several ``Calibration.as_dict()`` reports (the same bins) as one:
    their nodes, scores and accepted nodes summed per bin and per depth."""
    pooled = Calibration([cals[0]["bins"][0]["lo"], *(b["hi"] for b in cals[0]["bins"])])
    depth = max((d["depth"] for c in cals for d in c["by_depth"]), default=0) + 1
    pooled.depth_nodes = np.zeros(depth, np.int64)
    pooled.depth_predicted = np.zeros(depth, np.float64)
    pooled.depth_accepted = np.zeros(depth, np.int64)
    for c in cals:
        for i, b in enumerate(c["bins"]):
            if b["nodes"]:
                pooled.nodes[i] += b["nodes"]
                pooled.predicted[i] += b["mean_predicted"] * b["nodes"]
                pooled.accepted[i] += round(b["accepted_share"] * b["nodes"])
        for d in c["by_depth"]:
            pooled.depth_nodes[d["depth"]] += d["nodes"]
            pooled.depth_predicted[d["depth"]] += d["expected_accepted"]
            pooled.depth_accepted[d["depth"]] += d["accepted"]
    return pooled.as_dict()


def format_calibration(entries: Sequence[tuple[str, dict[str, Any]]]) -> list[str]:
    """Table lines: a row per bin, per entry (a label and ``as_dict()``) the
    mean predicted probability, the share accepted and the nodes; bins of
    fewer than MIN_NODES_SHOWN nodes left blank."""
    if not entries:
        return []
    width, first = 26, 15
    head = f"{'predicted':<{first}}" + "".join(f" {label[-width:]:>{width}}" for label, _ in entries)
    sub = f"{'bin':<{first}}" + "".join(f" {'mean  accepted      nodes':>{width}}" for _ in entries)
    lines = [head, sub]
    k = len(entries[0][1]["bins"])
    for i in range(k):
        b0 = entries[0][1]["bins"][i]
        cells = []
        for _, cal in entries:
            b = cal["bins"][i]
            if b["nodes"] >= MIN_NODES_SHOWN:
                cells.append(f" {b['mean_predicted']:>6.3f} {b['accepted_share']:>9.3f} {b['nodes']:>9,}")
            else:
                cells.append(f" {'':>6} {'':>9} {b['nodes']:>9,}")
        lines.append(f"[{b0['lo']:.3g}, {b0['hi']:.3g}{']' if i == k - 1 else ')'}".ljust(first) + "".join(cells))
    lines.append(f"{'all nodes':<{first}}" + "".join(
        f" {cal['expected_accepted'] / max(1, cal['nodes']):>6.3f} {cal['accepted'] / max(1, cal['nodes']):>9.3f} "
        f"{cal['nodes']:>9,}" for _, cal in entries))
    lines.append(f"{'error':<{first}}" + "".join(
        f" {format(cal['calibration_error'] or 0, '.4f'):>{width}}" for _, cal in entries))
    for label, cal in entries:
        ratios = ", ".join(f"{d['depth']}: {d['expected_accepted'] / d['accepted']:.2f}" if d["accepted"] else
                           f"{d['depth']}: -" for d in cal.get("by_depth", []))
        if ratios:
            lines.append(f"expected / accepted nodes by depth, {label}: {ratios}")
    lines.append(f"(error: the nodes-weighted mean |predicted - accepted| over the bins; bins of fewer than "
                 f"{MIN_NODES_SHOWN} nodes show only their count; expected: the sum of the nodes' scores)")
    return lines
