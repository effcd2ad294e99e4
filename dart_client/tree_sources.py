"""Where a speculative generator's draft trees come from: DART's drafter
and pruner (DrafterSource), or proposals from the trie and the sequence
alone (ProposalSource); and the decoding state of one sequence they read
(SequenceState).
"""
from __future__ import annotations

import inspect
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import torch

from dart_client.draft_trees import DraftTrees
from dart_client.drafter import DartDrafter, DrafterCache
from dart_client.lattice_log import LatticeWriter
from dart_client.results import GenerationResult

if TYPE_CHECKING:
    from dart_client.generate import SpeculativeGenerator

__all__ = ["SEARCH_CONTEXTS", "DrafterSource", "ProposalSource", "SequenceState", "TreeCall", "TreeSource",
           "aux_layer_indices"]


def aux_layer_indices(num_layers: int) -> tuple[int, int, int]:
    """``output_hidden_states`` indices the drafter reads: the inputs of
    layers 2, L//2 and L-3 (index 0 is the embeddings)."""
    if num_layers < 4:
        raise ValueError(f"the target needs at least 4 layers for DART's hidden states, has {num_layers}")
    return 2, num_layers // 2, num_layers - 3


@dataclass
class SequenceState:
    """One sequence being decoded."""

    prompt: list[int]
    seq: list[int]  # committed tokens, prompt included
    res: GenerationResult
    last_step: list[int]  # the last step's tokens: previous root, accepted, bonus (after the prefill: all)
    done: bool = False
    log_id: int = -1  # its sequence id in a lattice log
    source_state: Any = None  # what the tree source keeps for this sequence

    @property
    def cached(self) -> int:
        """Cache entries of this sequence: seq[:-1]."""
        return len(self.seq) - 1


SEARCH_CONTEXTS = ("sequence", "step")


def _batch_max_nodes(link: Any, method: str) -> int | None:
    """A pruner's or proposer's own max_nodes, where its batch call takes a
    per-call ``max_nodes`` (dart_client's pruners and proposers do)."""
    fn = getattr(link, method, None)
    params = getattr(link, "params", None)
    if fn is None or not isinstance(params, dict) or "max_nodes" not in params:
        return None
    if "max_nodes" not in inspect.signature(fn).parameters:
        return None
    return int(params["max_nodes"])


class TreeCall(NamedTuple):
    """One step's trees and where they came from."""

    trees: DraftTrees  # on the generator's device
    transport_s: float  # the RPC round trip within the call (0: none)
    remote: bool  # from the trie host
    source: str  # StepRecord.source


class TreeSource:
    """Where a generator's draft trees come from (DrafterSource,
    ProposalSource). The generator calls, per ``generate``: ``start`` after
    the prefill forward; then per step ``trees``, the verification forward
    (with the target's hidden states where ``needs_hidden``), ``accepted``
    while that forward's output lives, ``select`` when sequences leave the
    batch, and ``advance`` before the next step (timed as the step's
    ``drafter_s`` where ``model_drafter``)."""

    kind = ""  # GenerationResult.mode
    # The most nodes besides the root this source's trees have, when it can be told to propose fewer per call
    # (a pruner's or proposer's *_batch(..., max_nodes=)); None: it cannot (a plain callable). Set by bind.
    max_nodes: int | None = None
    needs_hidden = False  # the verification forward returns the target's hidden states
    model_drafter = False  # advance() runs a drafter model

    def bind(self, gen: SpeculativeGenerator) -> None:
        """Checks the source against the generator's target (ValueError)."""
        self.device = gen.device

    def start(self, rows: list[SequenceState], out: Any, lens: list[int]) -> None:
        """After the prefill forward ``out`` of prompts of lengths ``lens``
        (each row's first token committed)."""

    def trees(self, rows: list[SequenceState], max_nodes: int | None = None) -> TreeCall:
        """This step's trees, at most ``max_nodes`` nodes each (None: the
        source's own bound; ignored where ``self.max_nodes`` is None)."""
        raise NotImplementedError

    def accepted(self, out: Any, paths: torch.Tensor, keep: int, counts: list[int]) -> None:
        """After acceptance: each row's accepted nodes are paths[b, :counts[b]]
        (keep = max(counts)), ``out`` the verification forward's output."""

    def select(self, keep: list[int]) -> None:
        """Only the rows ``keep`` (indices) stay in the batch."""

    def advance(self, rows: list[SequenceState]) -> None:
        """Ready for the next step's trees."""

    def stats(self) -> dict[str, Any]:
        return {}


class DrafterSource(TreeSource):
    """DART: ``drafter`` (DartDrafter) predicts D distributions from the
    target's hidden states, ``pruner`` (LocalPruner or RemotePruner: trees
    for a whole batch in one call; or any callable with tree_search's
    signature, called once per sequence) makes the tree. search_context:
    see DartGenerator; aux_layers: the hidden states the drafter reads
    (default: aux_layer_indices)."""

    kind = "dart"
    needs_hidden = True
    model_drafter = True

    def __init__(self, drafter: DartDrafter, pruner: Any, *, search_context: str = "sequence",
                 aux_layers: Sequence[int] | None = None) -> None:
        if search_context not in SEARCH_CONTEXTS:
            raise ValueError(f"search_context must be one of {SEARCH_CONTEXTS}, got {search_context!r}")
        self.drafter = drafter
        self.pruner = pruner
        self.search_context = search_context
        self._aux_layers = tuple(aux_layers) if aux_layers is not None else None
        self.dcache = DrafterCache()
        self.dlogits: torch.Tensor | None = None
        self._aux: torch.Tensor | None = None  # the accepted nodes' hidden states [B, W, 3h]
        self._counts: list[int] = []  # how many of the W are real, per row

    def bind(self, gen: SpeculativeGenerator) -> None:
        super().bind(gen)
        cfg = gen.text_config
        self.num_layers = int(cfg.num_hidden_layers)
        self.aux_layers = self._aux_layers if self._aux_layers is not None else aux_layer_indices(self.num_layers)
        n = self.num_layers
        if len(self.aux_layers) != 3 or not all(
                isinstance(i, numbers.Integral) and not isinstance(i, bool) and -(n + 1) <= i <= n
                for i in self.aux_layers):
            raise ValueError(f"aux_layers must be 3 indices of the target's {n + 1} hidden states "
                             f"(0..{n}: 0 the embeddings), got {list(self.aux_layers)}")
        dc = self.drafter.config
        if dc.target_hidden_size != cfg.hidden_size or dc.hidden_size != cfg.hidden_size:
            raise ValueError(f"drafter hidden sizes ({dc.hidden_size}, target {dc.target_hidden_size}) do not fit "
                             f"the target's {cfg.hidden_size}")
        top = int((torch.arange(dc.draft_vocab_size, device=self.drafter.d2t.device) + self.drafter.d2t).max())
        if top >= gen.vocab_size:
            raise ValueError(f"drafter maps to target id {top}, the target's vocabulary has {gen.vocab_size}")
        self.embed = gen.embed
        self.max_nodes = _batch_max_nodes(self.pruner, "prune_batch")

    def _hidden(self, hidden_states: Sequence[torch.Tensor]) -> torch.Tensor:
        return torch.cat([hidden_states[i] for i in self.aux_layers], dim=-1)

    def start(self, rows: list[SequenceState], out: Any, lens: list[int]) -> None:
        emb_ids = torch.zeros(len(rows), max(lens), dtype=torch.long)
        for i, r in enumerate(rows):
            emb_ids[i, :lens[i]] = torch.tensor(r.seq[1:])
        emb = self.embed(emb_ids.to(self.device))
        self.dcache = DrafterCache()
        self._aux = None
        self.dlogits = self._follow(rows, self.drafter.compute_logits(
            self.drafter(self._hidden(out.hidden_states), emb, self.dcache, lens)))

    def trees(self, rows: list[SequenceState], max_nodes: int | None = None) -> TreeCall:
        dlogits = self.dlogits
        assert dlogits is not None
        d2t = self.drafter.d2t
        tokens = [r.seq if self.search_context == "sequence" else r.last_step for r in rows]
        batch = getattr(self.pruner, "prune_batch", None)
        if batch is not None:
            cap = {} if max_nodes is None or self.max_nodes is None else {"max_nodes": max_nodes}
            trees = DraftTrees.stack(batch(dlogits, d2t, tokens, **cap))
        else:
            trees = DraftTrees.stack([self.pruner(dlogits[i], d2t, t) for i, t in enumerate(tokens)])
        tm = getattr(self.pruner, "timing", None)
        return TreeCall(trees, tm.transport if tm is not None else 0.0, bool(getattr(tm, "remote", False)),
                        str(getattr(tm, "source", "")))

    def accepted(self, out: Any, paths: torch.Tensor, keep: int, counts: list[int]) -> None:
        idx = paths[:, :keep].clamp(min=0)
        hs = [out.hidden_states[i] for i in self.aux_layers]
        self._aux = torch.cat([h.gather(1, idx[..., None].expand(-1, -1, h.shape[-1])) for h in hs], dim=-1)
        self._counts = counts

    def log_step(self, lattice_log: LatticeWriter, i: int, row: SequenceState, committed: list[int]) -> None:
        """Records row i's lattice (this step's drafter logits) and committed tokens."""
        assert self.dlogits is not None
        lattice_log.record_step(row.seq, len(row.res.steps), self.dlogits[i], self.drafter.d2t, committed,
                                sequence=row.log_id)

    def select(self, keep: list[int]) -> None:
        sel = torch.tensor(keep, device=self.device)
        self.dcache.select(keep)
        if self.dlogits is not None:
            self.dlogits = self.dlogits.index_select(0, sel)
        if self._aux is not None:
            self._aux = self._aux.index_select(0, sel)
            self._counts = [self._counts[i] for i in keep]

    def advance(self, rows: list[SequenceState]) -> None:
        """The drafter reads each row's accepted nodes (aux [B, W, 3h],
        counts[b] real) with the embeddings of the tokens that follow them."""
        aux, counts = self._aux, self._counts
        assert aux is not None
        emb_ids = torch.zeros(len(rows), aux.shape[1], dtype=torch.long)
        for i, (r, c) in enumerate(zip(rows, counts)):
            emb_ids[i, :c] = torch.tensor(r.seq[-c:])
        emb = self.embed(emb_ids.to(self.device))
        self.dlogits = self._follow(rows, self.drafter.compute_logits(self.drafter(aux, emb, self.dcache, counts)))
        self._aux = None

    def _follow(self, rows: list[SequenceState], logits: torch.Tensor) -> torch.Tensor:
        """A drafter that follows a text (oracle.OracleDrafter) replaces its
        logits, knowing each row's sequence; any other keeps them."""
        follow = getattr(self.drafter, "follow", None)
        return follow(logits, [r.seq for r in rows]) if follow is not None else logits

    def stats(self) -> dict[str, Any]:
        st = getattr(self.pruner, "stats", None)
        return st.as_dict() if hasattr(st, "as_dict") else {}


class ProposalSource(TreeSource):
    """No drafter model: ``proposer`` (LocalProposer, RemoteProposer or
    LookupProposer: ``propose_batch(sequences, device)`` -> DraftTrees; or
    any callable ``(tokens, device)`` -> DraftTree, called once per
    sequence) proposes each tree from the whole sequence so far."""

    kind = "proposals"

    def __init__(self, proposer: Any) -> None:
        self.proposer = proposer

    def bind(self, gen: SpeculativeGenerator) -> None:
        super().bind(gen)
        known = int(getattr(self.proposer, "vocab_size", 0) or 0)
        if known > gen.vocab_size:
            raise ValueError(f"the trie has {known} ids, the target's vocabulary {gen.vocab_size}: its proposals "
                             "could hold ids the target has no embedding for")
        self.max_nodes = _batch_max_nodes(self.proposer, "propose_batch")

    @staticmethod
    def _context(r: SequenceState) -> np.ndarray:
        """The row's committed tokens as int64, kept in a buffer that grows
        with the sequence (each step copies only its new tokens)."""
        buf, n = r.source_state if r.source_state is not None else (None, 0)
        m = len(r.seq)
        if buf is None or buf.size < m:
            grown = np.empty(max(2 * m, 256), dtype=np.int64)
            if buf is not None:
                grown[:n] = buf[:n]
            buf = grown
        buf[n:m] = r.seq[n:m]
        r.source_state = (buf, m)
        return buf[:m]

    def trees(self, rows: list[SequenceState], max_nodes: int | None = None) -> TreeCall:
        contexts = [self._context(r) for r in rows]
        batch = getattr(self.proposer, "propose_batch", None)
        if batch is not None:
            cap = {} if max_nodes is None or self.max_nodes is None else {"max_nodes": max_nodes}
            trees = DraftTrees.stack(batch(contexts, self.device, **cap))
        else:
            trees = DraftTrees.stack([self.proposer(c, self.device) for c in contexts])
        tm = getattr(self.proposer, "timing", None)
        return TreeCall(trees, tm.transport if tm is not None else 0.0, bool(getattr(tm, "remote", False)),
                        str(getattr(tm, "source", "")))

    def stats(self) -> dict[str, Any]:
        st = getattr(self.proposer, "stats", None)
        return st.as_dict() if hasattr(st, "as_dict") else {}
