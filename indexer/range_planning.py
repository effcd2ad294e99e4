"""Sampling and range planning: the start of a few shards -> reduce ranges.

sample: the first tokens of one shard -> unigram and bigram counts and
        distinct k-grams per order (``run_sample``, a task).
plan:   the samples -> the reduce ranges, cut before the map so that each
        map writes its runs already split by range (``plan_ranges``).

A range is an interval of *range keys*: a k-gram's key is its first token
and, for k >= 2, its second (``range_keys``). An edge ``[t, -1]`` cuts
before first token t (its unigram included); ``[t, s]`` with s >= 0 cuts
inside first token t, before second token s, so a frequent first token's
n-grams are spread over several ranges (docs/BUILD.md); its unigram is in
the range that holds key ``[t, -1]``. ``RangeLookup`` places k-grams in
ranges during the map.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import duckdb
import numpy as np

from indexer.documents import ReadSpec, open_documents
from indexer.kgrams import column_list, kgram_table, tokens_left
from indexer.storage import Store
from indexer.work_store import write_sample_ids

#: At most this many equal-mass reduce ranges (each map writes up to one file
#: per range and order; docs/BUILD.md); only a range heavier than one range's
#: share is cut again beyond it. Past that, reduce tasks spill to disk.
MAX_RANGES = 8192


@dataclass
class SampleTask:
    location: str
    spec: ReadSpec
    order: int
    max_tokens: int = 1_000_000
    # Where the ids it encoded are kept for the shard's map (work_store.sample_ids_key), if anywhere.
    store: Store | None = None
    index: int = 0  # the shard's map task

    @property
    def label(self) -> str:
        return f"sample of {self.location}"


@dataclass
class SampleResult:
    location: str
    tokens: int
    fraction: float  # of the shard the sample read
    unigrams: list[list[int]]  # [token id, count]
    distinct: list[int]  # distinct k-grams in the sample, per order
    bigrams: np.ndarray | None = None  # int64 rows [first token, second token, count]


def run_sample(task: SampleTask) -> SampleResult:
    """Counts the first ``max_tokens`` (or so: whole batches) of one shard."""
    # Nothing read ahead: the sample stops after max_tokens.
    docs = open_documents(task.location, task.spec, batch_tokens=max(task.max_tokens // 4, 1024), ahead=0)
    flats, lengths, n = [], [], 0
    for flat, lens in docs:
        flats.append(flat)
        lengths.append(lens)
        n += int(flat.size)
        if n >= task.max_tokens:
            break
    if not flats:
        return SampleResult(task.location, 0, docs.fraction_read(), [], [0] * task.order)
    flat, lens = np.concatenate(flats), np.concatenate(lengths)
    if task.store is not None and not docs.pretokenized:
        # The shard's map starts after these documents instead of encoding them again.
        write_sample_ids(task.store, task.index, flat, lens)
    left = tokens_left(lens)
    ids, counts = np.unique(flat, return_counts=True)
    pairs = kgram_table(flat, left, 2)
    pair_keys = (pairs.column("w0").to_numpy().astype(np.int64) << 32) | pairs.column("w1").to_numpy().astype(np.int64)
    pair_keys, pair_counts = np.unique(pair_keys, return_counts=True)
    bigrams = np.stack([pair_keys >> 32, pair_keys & 0xFFFFFFFF, pair_counts], axis=1)
    con = duckdb.connect(":memory:")
    con.execute("SET threads = 1")
    distinct = []
    for k in range(1, task.order + 1):
        con.register("grams", kgram_table(flat, left, k))
        distinct.append(con.execute(f"SELECT count(*) FROM (SELECT DISTINCT {column_list(k)} FROM grams)").fetchall()[0][0])
        con.unregister("grams")
    con.close()
    return SampleResult(task.location, n, max(docs.fraction_read(), 1e-9),
                        [[int(i), int(c)] for i, c in zip(ids, counts)], distinct, bigrams)


# --------------------------------------------------------------------------
# Range keys


def range_keys(first: np.ndarray, second: np.ndarray | None, vocab_size: int) -> np.ndarray:
    """k-grams' range keys as int64, ordered like ``[first, second]`` pairs:
    ``second`` None (unigrams) sorts as -1, before every second token."""
    keys = first.astype(np.int64) * (vocab_size + 1)
    if second is not None:
        keys += second.astype(np.int64) + 1
    return keys


def edge_keys(edges: list[list[int]], vocab_size: int) -> np.ndarray:
    """Range edges ``[first, second or -1]`` as range keys."""
    pairs = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    return pairs[:, 0] * (vocab_size + 1) + pairs[:, 1] + 1


class RangeLookup:
    """The reduce range of each k-gram, from ``edges`` (``MapTask.edges``).

    A first token that no edge splits by its second token lies in one range
    whatever follows it: a table over first tokens answers those with one
    read each. Only the k-grams of split first tokens (a few frequent ones)
    are placed by searching their range keys among the edges, which costs
    too much for every k-gram (CHANGELOG.md)."""

    def __init__(self, edges: list[list[int]], vocab_size: int) -> None:
        self._vocab_size = vocab_size
        self._inner = edge_keys(edges[1:-1], vocab_size)
        firsts = range_keys(np.arange(vocab_size, dtype=np.int64), None, vocab_size)
        self._by_first = np.searchsorted(self._inner, firsts, side="right").astype(np.int32)
        self._split = np.zeros(vocab_size, dtype=bool)
        self._split[[e[0] for e in edges[1:-1] if e[1] >= 0]] = True

    def ranges(self, first: np.ndarray, second: np.ndarray | None) -> np.ndarray:
        """int32 range index of each k-gram (``second`` None: unigrams);
        token ids must lie in ``[0, vocab_size)``."""
        if first.size and not 0 <= int(first.min()) <= int(first.max()) < self._vocab_size:
            bad = first[(first < 0) | (first >= self._vocab_size)][0]
            raise ValueError(f"token id {int(bad)} is outside [0, {self._vocab_size})")
        part = self._by_first[first]
        if second is not None:
            rows = np.flatnonzero(self._split[first])
            if rows.size:
                keys = range_keys(first[rows], second[rows], self._vocab_size)
                part[rows] = np.searchsorted(self._inner, keys, side="right")
        return part




@dataclass
class RangePlan:
    """The reduce ranges: range r holds range keys [edges[r], edges[r+1]),
    each edge ``[first token, second token or -1]`` (``range_keys``)."""

    edges: list[list[int]]
    estimated_tokens: int
    estimated_run_rows: int
    estimated_reduce_bytes: int  # DuckDB memory all ranges together would want
    largest_range_bytes: int = 0  # the largest range's share of that, estimated
    split_tokens: list[int] = field(default_factory=list)  # first tokens cut by their second token

    def __post_init__(self) -> None:
        # plan.json of a build started before ranges had second tokens: plain first-token edges
        self.edges = [[int(e), -1] if isinstance(e, int) else [int(e[0]), int(e[1])] for e in self.edges]

    @property
    def ranges(self) -> int:
        return len(self.edges) - 1


def plan_ranges(samples: list[SampleResult], sampled_bytes: int, total_bytes: int, *, vocab_size: int,
                order: int, workers: int, reduce_memory_bytes: int) -> RangePlan:
    """Cuts the range-key space into ranges before the map.

    The corpus' tokens are estimated from the samples (tokens per input byte,
    scaled to all shards); a reduce task's input rows from the distinct
    k-grams per token of a sample (a map run holds each distinct k-gram of its
    chunk once; the ratio only falls as chunks grow, so this overestimates);
    each row held by DuckDB costs about 8k + 32 bytes. Enough ranges that
    each reduce's share fits its memory, at least 4 per worker for balance;
    cut where the sampled unigram mass (a proxy for the n-grams starting
    there) is equal. A first token heavier than one range's share is cut by
    its second token (its mass spread as its sampled bigrams are), and a
    range still over the memory budget is cut again, so only a single
    (first, second) pair heavier than the budget makes a range exceed it.
    The trie does not depend on the cuts.
    """
    sample_tokens = sum(s.tokens for s in samples)
    shard_tokens = sum(s.tokens / s.fraction for s in samples)
    tokens = int(shard_tokens * total_bytes / max(sampled_bytes, 1))
    rows_per_token = [sum(s.distinct[k] for s in samples) / max(sample_tokens, 1) for k in range(order)]
    rows = int(tokens * sum(rows_per_token))
    need = int(tokens * sum(r * (8 * (k + 1) + 32) for k, r in enumerate(rows_per_token)))
    mass: dict[int, int] = {}
    for s in samples:
        for t, c in s.unigrams:
            mass[t] = mass.get(t, 0) + c
    whole = [[0, -1], [vocab_size, -1]]
    parts = max(4 * workers, -(-need // max(reduce_memory_bytes, 1)))
    parts = int(min(parts, MAX_RANGES))
    if parts <= 1 or not mass:
        return RangePlan(whole, tokens, rows, need, need)
    first = np.array(sorted(mass), dtype=np.int64)
    weight = np.array([mass[t] for t in first], dtype=np.float64)
    total = float(weight.sum())
    target = total / parts
    bigrams = [s.bigrams for s in samples if s.bigrams is not None] if order >= 2 else []
    a0, a1, am = _range_atoms(first, weight, bigrams, target)
    cum = np.cumsum(am)
    cuts = np.searchsorted(cum, total * np.arange(1, parts) / parts, side="right")
    cuts = sorted({int(min(c, len(am) - 1)) for c in cuts} - {0})
    # A range heavier than a task's memory (or than one range's share when
    # MAX_RANGES binds) is cut again at its atoms.
    cap = max(target, total * reduce_memory_bytes / max(need, 1))
    cuts = _cut_heavy_ranges(am, cuts, cap)
    bounds = [0] + cuts + [len(am)]
    heaviest = max(float(am[a:b].sum()) for a, b in zip(bounds, bounds[1:]))
    edges = [[0, -1]] + [[int(a0[c]), int(a1[c])] for c in cuts] + [[vocab_size, -1]]
    split = sorted({e[0] for e in edges if e[1] >= 0})
    return RangePlan(edges, tokens, rows, need, int(need * heaviest / total), split)


def _range_atoms(first: np.ndarray, weight: np.ndarray, bigrams: list[np.ndarray],
                 target: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pieces ranges are cut from, in range-key order: (first token,
    second token or -1, sampled mass). A first token is one piece, unless its
    mass exceeds ``target`` and the sample saw it followed by other tokens:
    then one piece per second token, its mass shared out as the bigram
    counts are, the first piece keyed [t, -1] so that it holds the unigram."""
    hot = first[weight > target]
    pairs = np.concatenate(bigrams) if bigrams else np.zeros((0, 3), np.int64)
    pairs = pairs[np.isin(pairs[:, 0], hot)]
    if not len(pairs):
        return first, np.full(len(first), -1, np.int64), weight
    keys, where = np.unique((pairs[:, 0] << 32) | pairs[:, 1], return_inverse=True)
    counts = np.bincount(where, weights=pairs[:, 2].astype(np.float64))
    p0, p1 = keys >> 32, keys & 0xFFFFFFFF
    split = np.unique(p0)
    keep = ~np.isin(first, split)
    # each split token's mass, shared out over its second tokens
    token_of = np.searchsorted(first, p0)
    per_token = np.bincount(np.searchsorted(split, p0), weights=counts)
    share = weight[token_of] * counts / per_token[np.searchsorted(split, p0)]
    head = np.r_[True, p0[1:] != p0[:-1]]  # each split token's first piece holds its unigram
    a0 = np.concatenate([first[keep], p0])
    a1 = np.concatenate([np.full(int(keep.sum()), -1, np.int64), np.where(head, -1, p1)])
    am = np.concatenate([weight[keep], share])
    order = np.lexsort((a1, a0))
    return a0[order], a1[order], am[order]


def _cut_heavy_ranges(mass: np.ndarray, cuts: list[int], cap: float) -> list[int]:
    """Cuts (piece indices) with every range heavier than ``cap`` cut again,
    greedily, so each holds at most ``cap`` unless it is a single piece."""
    bounds = [0] + cuts + [len(mass)]
    out: list[int] = []
    for a, b in zip(bounds, bounds[1:]):
        if a > 0:
            out.append(a)
        if float(mass[a:b].sum()) <= cap:
            continue
        held = 0.0
        for i in range(a, b):
            if i > a and held + mass[i] > cap:
                out.append(i)
                held = 0.0
            held += float(mass[i])
    return out

