"""Lattice logs: what a DART decoding run drafted and what the target committed, step by step.

One Parquet file, one row per verification step (``LATTICE_SCHEMA``):

| column | type | meaning |
|---|---|---|
| ``sequence_id`` | int64 | one generation (prompt) of the run; rows of one sequence share it |
| ``step`` | int32 | 0, 1, 2, ... within the sequence, without gaps |
| ``prefix_tail`` | list<int32> | the last committed tokens before the step (at most ``tail``); its last token is the tree's root |
| ``topk_tokens`` | list<list<int32>> | per draft level (depth 1..D), the drafter's top-k target ids, most probable first |
| ``topk_probs`` | list<list<float32>> | their probabilities (softmax over the k logits, as the pruner computes them) |
| ``committed`` | list<int32> | the tokens the target committed in this step: the accepted drafts, then the bonus token |

The committed tokens of a step and of the steps after it, concatenated, are
the continuation the target produced after ``prefix_tail``: under greedy
decoding the target's choice does not depend on the tree, so any other tree
for the same lattice would have been verified against that continuation
(``ngram-eval`` replays logs that way); ``read_lattices`` gives each row that
continuation, cut at the lattice depth + 1.

``LatticeWriter`` writes a log atomically (a temporary file renamed on
``close``); ``read_lattices`` reads and validates one. pyarrow only: torch is
imported only by ``LatticeWriter.record_step``, which takes the drafter's
logits as ``dart_client.pruner`` does.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ngram_service import _engine

__all__ = ["LATTICE_SCHEMA", "LatticeFormatError", "LatticeSet", "LatticeWriter", "read_lattices"]

LATTICE_SCHEMA = pa.schema([
    pa.field("sequence_id", pa.int64(), nullable=False),
    pa.field("step", pa.int32(), nullable=False),
    pa.field("prefix_tail", pa.list_(pa.int32()), nullable=False),
    pa.field("topk_tokens", pa.list_(pa.list_(pa.int32())), nullable=False),
    pa.field("topk_probs", pa.list_(pa.list_(pa.float32())), nullable=False),
    pa.field("committed", pa.list_(pa.int32()), nullable=False),
])

#: Prefix tokens kept per step by default: at least the MAX_ORDER - 1 tokens
#: of context that a trie of the engine's largest order reads.
DEFAULT_TAIL: int = _engine.MAX_ORDER
_ROWS_PER_GROUP = 4096


class LatticeFormatError(ValueError):
    """A lattice file that does not follow LATTICE_SCHEMA; the message names the file, row and column."""


@dataclass
class LatticeSet:
    """Lattices in memory, one per step, with what the target committed.

    ``topk_tokens[i]`` / ``topk_probs[i]``: int64 [D, K] and float32 [D, K]
    arrays, or lists of D 1-D arrays when K differs per level (the shapes
    ``NgramIndex.prune`` accepts). ``continuations[i]``: the tokens the
    target committed after ``prefixes[i]``, from this step on (at least one).
    """

    prefixes: list[np.ndarray]
    topk_tokens: list[Any]
    topk_probs: list[Any]
    continuations: list[np.ndarray]
    sequence_ids: np.ndarray
    steps: np.ndarray
    source: str = ""

    def __len__(self) -> int:
        return len(self.prefixes)

    @property
    def depth(self) -> int:
        """The deepest lattice (D)."""
        return max((len(t) for t in self.topk_tokens), default=0)


class LatticeWriter:
    """Writes a lattice log; ``close()`` (or leaving the ``with`` block) publishes it atomically.

    ``write_step`` takes host arrays; ``record_step`` takes the drafter's
    logits as the generator holds them and computes the lattice the pruner
    sees (top-k of each level, draft ids mapped through ``d2t``, softmax over
    the k logits divided by ``temperature``): give it the pruner's ``topk``
    and ``temperature`` so that the log holds the lattices the pruner saw.
    """

    def __init__(self, path: str | os.PathLike[str], *, topk: int = 25, temperature: float = 1.0,
                 tail: int = DEFAULT_TAIL) -> None:
        if topk < 1 or tail < 1 or temperature <= 0:
            raise ValueError(f"topk and tail must be >= 1 and temperature > 0 (got {topk}, {tail}, {temperature})")
        self.path = Path(path)
        self.topk = int(topk)
        self.temperature = float(temperature)
        self.tail = int(tail)
        self._tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        self._writer: pq.ParquetWriter | None = pq.ParquetWriter(self._tmp, LATTICE_SCHEMA, compression="zstd")
        self._rows: list[tuple[Any, ...]] = []
        self._sequence = -1
        self.rows_written = 0

    def write_step(self, sequence_id: int, step: int, prefix: Sequence[int] | np.ndarray, topk_tokens: Any,
                   topk_probs: Any, committed: Sequence[int]) -> None:
        """One step: ``prefix`` the committed tokens before it (only the last
        ``tail`` are kept), the lattice per level ([D, K] arrays or D 1-D
        arrays), the tokens committed."""
        if self._writer is None:
            raise ValueError(f"{self.path}: the lattice log is closed")
        tail = np.asarray(prefix, dtype=np.int64).reshape(-1)[-self.tail:]
        toks = [np.asarray(level, dtype=np.int64).reshape(-1) for level in topk_tokens]
        probs = [np.asarray(level, dtype=np.float32).reshape(-1) for level in topk_probs]
        done = np.asarray(committed, dtype=np.int64).reshape(-1)
        if not tail.size or not done.size or not toks or [len(x) for x in toks] != [len(x) for x in probs]:
            raise ValueError(f"{self.path}: step {step}: empty prefix or committed tokens, "
                             "or top-k tokens and probabilities of different shapes")
        self._rows.append((int(sequence_id), int(step), tail, toks, probs, done))
        if len(self._rows) >= _ROWS_PER_GROUP:
            self._flush()

    def new_sequences(self, n: int) -> int:
        """Reserves ids for ``n`` sequences decoded together (a batch);
        returns the first."""
        first = self._sequence + 1
        self._sequence += n
        return first

    def record_step(self, tokens: Sequence[int], step: int, logits: Any, d2t: Any, committed: Sequence[int],
                    sequence: int | None = None) -> None:
        """The generator's hook: ``tokens`` the sequence before the step (its
        last token is the root), ``step`` the step's index in this generation
        (0 starts a new sequence), ``logits`` the drafter's [D, V_draft]
        logits the tree was pruned from, ``d2t`` the draft-to-target id
        offsets (None: draft ids are target ids), ``sequence`` the id from
        ``new_sequences`` (None: step 0 starts the next id)."""
        import torch

        if sequence is None:
            if step == 0:
                self._sequence += 1
            sequence = self._sequence
        with torch.no_grad():
            k = min(self.topk, logits.shape[-1])
            vals, idx = torch.topk(logits.float(), k, dim=-1)
            probs = torch.softmax(vals / self.temperature if self.temperature != 1.0 else vals, dim=-1)
            if d2t is not None:
                idx = idx + d2t.to(device=idx.device, dtype=torch.int64)[idx]
        self.write_step(sequence, step, tokens[-self.tail:], idx.cpu().numpy(), probs.cpu().numpy(),
                        committed)

    def _flush(self) -> None:
        if not self._rows or self._writer is None:
            return
        seq, step, tails, toks, probs, done = zip(*self._rows)
        columns = [pa.array(seq, pa.int64()), pa.array(step, pa.int32()), _list_array(tails, pa.int32()),
                   _nested_array(toks, pa.int32()), _nested_array(probs, pa.float32()), _list_array(done, pa.int32())]
        self._writer.write_table(pa.Table.from_arrays(columns, schema=LATTICE_SCHEMA))
        self.rows_written += len(self._rows)
        self._rows = []

    def close(self) -> None:
        """Writes what is left and renames the file into place."""
        if self._writer is None:
            return
        self._flush()
        self._writer.close()
        self._writer = None
        os.replace(self._tmp, self.path)

    def abort(self) -> None:
        """Drops the log (the temporary file is removed, nothing is published)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> LatticeWriter:
        return self

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def _offsets(lengths: Sequence[int]) -> pa.Array:
    return pa.array(np.concatenate(([0], np.cumsum(lengths, dtype=np.int64))).astype(np.int32), pa.int32())


def _list_array(rows: Sequence[np.ndarray], kind: pa.DataType) -> pa.Array:
    """list<kind> from per-row 1-D arrays, without Python-level elements."""
    values = pa.array(np.concatenate(rows).astype(kind.to_pandas_dtype()), kind)
    return pa.ListArray.from_arrays(_offsets([len(r) for r in rows]), values)


def _nested_array(rows: Sequence[list[np.ndarray]], kind: pa.DataType) -> pa.Array:
    """list<list<kind>> from per-row lists of per-level 1-D arrays."""
    levels = [level for r in rows for level in r]
    return pa.ListArray.from_arrays(_offsets([len(r) for r in rows]), _list_array(levels, kind))


def read_lattices(path: str | os.PathLike[str]) -> LatticeSet:
    """Reads and checks a lattice log. Raises LatticeFormatError naming the
    file, and the row and column where a row is at fault."""
    path = Path(path)
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as e:
        raise LatticeFormatError(f"{path}: not a readable Parquet file ({e})") from e
    _check_schema(path, table.schema)
    for name in LATTICE_SCHEMA.names:
        col = table.column(name)
        if col.null_count:
            row = int(np.nonzero(col.is_null().to_numpy(zero_copy_only=False))[0][0])
            raise LatticeFormatError(f"{path}: row {row}: column {name} is null")
    seq = table.column("sequence_id").to_numpy().astype(np.int64)
    step = table.column("step").to_numpy().astype(np.int64)
    tail_off, tails = _flat(path, table, "prefix_tail", np.int64)
    done_off, done = _flat(path, table, "committed", np.int64)
    lvl_t, tok_off, tok = _flat2(path, table, "topk_tokens", np.int64)
    lvl_p, prob_off, prob = _flat2(path, table, "topk_probs", np.float32)
    _check_rows(path, tail_off, done_off, lvl_t, lvl_p, tok_off, prob_off, prob)
    order = np.lexsort((step, seq))
    prefixes, toks, probs, committed = [], [], [], []
    for i in order.tolist():
        prefixes.append(tails[tail_off[i]:tail_off[i + 1]])
        committed.append(done[done_off[i]:done_off[i + 1]])
        la, lb = lvl_t[i], lvl_t[i + 1]
        sizes = np.diff(tok_off[la:lb + 1])
        va, vb = tok_off[la], tok_off[lb]
        if (sizes == sizes[0]).all():
            toks.append(tok[va:vb].reshape(lb - la, sizes[0]))
            probs.append(prob[va:vb].reshape(lb - la, sizes[0]))
        else:
            toks.append([tok[tok_off[j]:tok_off[j + 1]] for j in range(la, lb)])
            probs.append([prob[tok_off[j]:tok_off[j + 1]] for j in range(la, lb)])
    seq, step = seq[order], step[order]
    continuations = _continuations(path, order, seq, step, prefixes, committed, [len(t) for t in toks])
    return LatticeSet(prefixes, toks, probs, continuations, seq, step, source=str(path))


def _flat(path: Path, table: pa.Table, name: str, dtype: Any) -> tuple[np.ndarray, np.ndarray]:
    """A list column as (row offsets [n + 1], values)."""
    col = table.column(name).combine_chunks()
    if isinstance(col, pa.ChunkedArray):  # no chunk at all: an empty table
        col = pa.array([], col.type)
    if col.values.null_count:
        raise LatticeFormatError(f"{path}: column {name} holds a null token")
    return col.offsets.to_numpy().astype(np.int64), col.values.to_numpy().astype(dtype)


def _flat2(path: Path, table: pa.Table, name: str, dtype: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A list<list> column as (row offsets into levels, level offsets into values, values)."""
    col = table.column(name).combine_chunks()
    if isinstance(col, pa.ChunkedArray):
        col = pa.array([], col.type)
    inner = col.values
    if inner.null_count or inner.values.null_count:
        raise LatticeFormatError(f"{path}: column {name} holds a null level or value")
    return (col.offsets.to_numpy().astype(np.int64), inner.offsets.to_numpy().astype(np.int64),
            inner.values.to_numpy().astype(dtype))


def _check_rows(path: Path, tail_off: np.ndarray, done_off: np.ndarray, lvl_t: np.ndarray, lvl_p: np.ndarray,
                tok_off: np.ndarray, prob_off: np.ndarray, prob: np.ndarray) -> None:
    """Shapes and ranges of every row at once; the first bad row is named."""
    def fail(mask: np.ndarray, what: Any) -> None:
        bad = np.nonzero(mask)[0]
        if bad.size:
            raise LatticeFormatError(f"{path}: row {int(bad[0])}: {what(int(bad[0]))}")

    fail(np.diff(tail_off) == 0, lambda i: "prefix_tail is empty (it must end with the tree's root)")
    fail(np.diff(done_off) == 0, lambda i: "committed is empty (a step commits at least the bonus token)")
    fail(np.diff(lvl_t) == 0, lambda i: "topk_tokens has no level")
    fail(np.diff(lvl_t) != np.diff(lvl_p),
         lambda i: f"topk_tokens has {lvl_t[i + 1] - lvl_t[i]} levels, topk_probs {lvl_p[i + 1] - lvl_p[i]}")
    nt, np_ = np.diff(tok_off), np.diff(prob_off)
    bad_level = (nt != np_) | (nt == 0)
    if bad_level.any():
        j = int(np.nonzero(bad_level)[0][0])
        i = int(np.searchsorted(lvl_t, j, side="right") - 1)
        raise LatticeFormatError(f"{path}: row {i}: level {j - lvl_t[i]}: {nt[j]} top-k tokens, {np_[j]} "
                                 "probabilities (need the same number, at least one)")
    out = ~((prob >= 0) & (prob <= 1))
    if out.any():
        v = int(np.nonzero(out)[0][0])
        j = int(np.searchsorted(prob_off, v, side="right") - 1)
        i = int(np.searchsorted(lvl_p, j, side="right") - 1)
        raise LatticeFormatError(f"{path}: row {i}: level {j - lvl_p[i]}: probability {prob[v]} outside [0, 1]")


def _check_schema(path: Path, schema: pa.Schema) -> None:
    for field in LATTICE_SCHEMA:
        if field.name not in schema.names:
            raise LatticeFormatError(f"{path}: missing column {field.name} ({field.type}); "
                                     f"a lattice log has {', '.join(LATTICE_SCHEMA.names)}")
        have = schema.field(field.name).type
        if not _compatible(have, field.type):
            raise LatticeFormatError(f"{path}: column {field.name} is {have}, expected {field.type}")


def _compatible(have: pa.DataType, want: pa.DataType) -> bool:
    """Integer and float widths may differ (a log written by other tools); nesting may not."""
    if pa.types.is_list(want) or pa.types.is_large_list(want):
        return (pa.types.is_list(have) or pa.types.is_large_list(have)) and _compatible(have.value_type,
                                                                                       want.value_type)
    if pa.types.is_integer(want):
        return pa.types.is_integer(have)
    if pa.types.is_floating(want):
        return pa.types.is_floating(have)
    return have == want


def _continuations(path: Path, order: np.ndarray, seq: np.ndarray, step: np.ndarray, prefixes: list[np.ndarray],
                   committed: list[np.ndarray], depths: list[int]) -> list[np.ndarray]:
    """Per row (sorted by sequence and step), its committed tokens followed by
    those of the later steps of its sequence, cut at the row's depth + 1 (no
    tree can accept more)."""
    n = len(committed)
    for i in range(n):
        if i == 0 or seq[i - 1] != seq[i]:
            if step[i] != 0:
                raise LatticeFormatError(f"{path}: row {int(order[i])}: sequence {int(seq[i])} starts at step "
                                         f"{int(step[i])}, not 0")
            continue
        c, pre = committed[i - 1], prefixes[i]
        m = min(len(c), len(pre))
        if step[i] != step[i - 1] + 1 or not np.array_equal(pre[len(pre) - m:], c[len(c) - m:]):
            raise LatticeFormatError(
                f"{path}: row {int(order[i])}: sequence {int(seq[i])} step {int(step[i])} does not follow step "
                f"{int(step[i - 1])} (steps must run 0, 1, 2, ... and each prefix_tail end with the previous "
                "step's committed tokens)")
    out: list[np.ndarray] = []
    i = 0
    while i < n:
        j = i
        while j < n and seq[j] == seq[i]:
            j += 1
        flat = np.concatenate(committed[i:j])
        starts = np.cumsum([0] + [len(c) for c in committed[i:j - 1]])
        out.extend(flat[s:s + depths[r] + 1] for r, s in zip(range(i, j), starts.tolist()))
        i = j
    return out
