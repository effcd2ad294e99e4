"""Speculative decoding of draft trees on Hugging Face ``transformers`` causal LMs.

A generator verifies draft trees from a tree source; the verification and
acceptance below are the same whatever the source:

- ``DartGenerator``: DART. A drafter reads the target's hidden states and
  predicts D distributions; a pruner (``LocalPruner``, ``RemotePruner``)
  turns them into the tree (``DrafterSource``).
- ``ProposalGenerator``: no drafter model. The trie proposes the tree from
  the sequence alone, with prompt lookup merged in (``LocalProposer``,
  ``RemoteProposer``, ``LookupProposer``; ``ProposalSource``).

One step, for each of the B sequences decoded together:

1. the source gives a draft tree whose root is the last committed token;
2. the target verifies the whole tree in one forward pass (tree attention
   mask over the cached context plus the tree, positions = context length +
   node depth);
3. the longest path whose every token equals the target's choice after its
   parent is accepted (greedy), or tree speculative sampling picks it
   (temperature > 0); the target's KV cache keeps the accepted nodes only;
   the bonus token comes from the target's distribution after the path;
4. the source gets ready for the next tree: DART's drafter reads the
   target's hidden states at the inputs of layers 2, L//2 and L-3 of the
   accepted nodes with the embeddings of the tokens that follow them, and
   predicts the next D positions; proposals need nothing.

Invariants: ``seq`` holds every committed token; the target's cache covers
``seq[:-1]`` (the last token, the next tree's root, is not yet processed);
the drafter's cache covers the same positions.

Batches: sequence b's cache entries are positions 0 .. len_b - 1 of its row
(rows differ in length; what lies beyond is masked out and overwritten).
The B trees, of different sizes, are padded into one verification forward
([B, n_max] tokens, a [B, 1, n_max, T + n_max] additive mask); acceptance and
cache compaction are per row; a sequence that finishes leaves the batch (its
rows are dropped from both caches).

Greedy decoding is lossless: the output is the target's own greedy
continuation, token for token (up to floating-point differences between
one-token and tree-shaped forward passes, which do not show in float32 tests).
"""
from __future__ import annotations

import inspect
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from dart_client.drafter import DartDrafter, DrafterCache
from dart_client.lattice_log import LatticeWriter
from dart_client.pruner import DraftTree, DraftTrees
from dart_client.sampling import SAMPLING_ORDERS, accept_tree_sampling, process_logits

__all__ = ["DartGenerator", "DrafterSource", "GenerationResult", "ProposalGenerator", "ProposalSource",
           "SpeculativeGenerator", "StepRecord", "TreeCall", "TreeSource", "aux_layer_indices"]


def aux_layer_indices(num_layers: int) -> tuple[int, int, int]:
    """``output_hidden_states`` indices the drafter reads: the inputs of
    layers 2, L//2 and L-3 (index 0 is the embeddings)."""
    if num_layers < 4:
        raise ValueError(f"the target needs at least 4 layers for DART's hidden states, has {num_layers}")
    return 2, num_layers // 2, num_layers - 3


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


class _Clock:
    def __init__(self, device: torch.device, sync: bool) -> None:
        self.sync = sync and device.type == "cuda"
        self.device = device

    def __call__(self) -> float:
        if self.sync:
            torch.cuda.synchronize(self.device)
        return time.perf_counter()


# ---- the target's KV cache ----------------------------------------------------------

def _kv_tensors(cache: Any) -> list[tuple[Any, str, Any]]:
    """(holder, attribute or index, tensor [B, H, T, d]) for every key and value tensor."""
    layers = getattr(cache, "layers", None)
    if layers is not None:  # transformers >= 4.56: DynamicCache.layers[i].keys / .values
        out = []
        for layer in layers:
            if type(layer).__name__ != "DynamicLayer":
                raise NotImplementedError(f"KV-cache compaction of {type(layer).__name__} layers "
                                          "(sliding-window or other non-full attention layers)")
            out += [(layer, "keys", layer.keys), (layer, "values", layer.values)]
        return out
    return [(lst, i, t) for lst in (cache.key_cache, cache.value_cache) for i, t in enumerate(lst)]


def _set_kv(holder: Any, key: Any, t: torch.Tensor) -> None:
    if isinstance(key, str):
        setattr(holder, key, t)
    else:
        holder[key] = t


def _truncate(cache: Any, length: int) -> None:
    for holder, key, t in _kv_tensors(cache):
        if t.shape[2] > length:
            _set_kv(holder, key, t[:, :, :length])
    if hasattr(cache, "_seen_tokens"):
        cache._seen_tokens = length


def _compact_cache(cache: Any, start: int, lengths: torch.Tensor, paths: torch.Tensor, keep: int,
                   new_length: int, in_place: bool) -> None:
    """After a verification forward that appended n nodes at cache position
    ``start``: row b keeps its first lengths[b] entries followed by the
    nodes paths[b, :keep] (entries past a row's accepted nodes are scratch),
    and the cache is cut to new_length positions. in_place: the kept nodes
    are already where they belong (one row, accepted path 0, 1, 2, ...)."""
    if not in_place:
        b = paths.shape[0]
        src = start + paths[:, :keep].clamp(min=0)
        dst = lengths[:, None] + torch.arange(keep, device=paths.device)[None]
        for _holder, _key, t in _kv_tensors(cache):
            h, d = t.shape[1], t.shape[3]
            g = t.gather(2, src[:, None, :, None].expand(b, h, keep, d))
            t.scatter_(2, dst[:, None, :, None].expand(b, h, keep, d), g)
    _truncate(cache, new_length)


def _select_rows(cache: Any, rows: torch.Tensor) -> None:
    for holder, key, t in _kv_tensors(cache):
        _set_kv(holder, key, t.index_select(0, rows))


# ---- decoding state ---------------------------------------------------------------------

@dataclass
class _Seq:
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


# ---- tree sources -----------------------------------------------------------------------

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
    needs_hidden = False  # the verification forward returns the target's hidden states
    model_drafter = False  # advance() runs a drafter model

    def bind(self, gen: SpeculativeGenerator) -> None:
        """Checks the source against the generator's target (ValueError)."""
        self.device = gen.device

    def start(self, rows: list[_Seq], out: Any, lens: list[int]) -> None:
        """After the prefill forward ``out`` of prompts of lengths ``lens``
        (each row's first token committed)."""

    def trees(self, rows: list[_Seq]) -> TreeCall:
        raise NotImplementedError

    def accepted(self, out: Any, paths: torch.Tensor, keep: int, counts: list[int]) -> None:
        """After acceptance: each row's accepted nodes are paths[b, :counts[b]]
        (keep = max(counts)), ``out`` the verification forward's output."""

    def select(self, keep: list[int]) -> None:
        """Only the rows ``keep`` (indices) stay in the batch."""

    def advance(self, rows: list[_Seq]) -> None:
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
        dc = self.drafter.config
        if dc.target_hidden_size != cfg.hidden_size or dc.hidden_size != cfg.hidden_size:
            raise ValueError(f"drafter hidden sizes ({dc.hidden_size}, target {dc.target_hidden_size}) do not fit "
                             f"the target's {cfg.hidden_size}")
        top = int((torch.arange(dc.draft_vocab_size, device=self.drafter.d2t.device) + self.drafter.d2t).max())
        if top >= gen.vocab_size:
            raise ValueError(f"drafter maps to target id {top}, the target's vocabulary has {gen.vocab_size}")
        self.embed = gen.embed

    def _hidden(self, hidden_states: Sequence[torch.Tensor]) -> torch.Tensor:
        return torch.cat([hidden_states[i] for i in self.aux_layers], dim=-1)

    def start(self, rows: list[_Seq], out: Any, lens: list[int]) -> None:
        emb_ids = torch.zeros(len(rows), max(lens), dtype=torch.long)
        for i, r in enumerate(rows):
            emb_ids[i, :lens[i]] = torch.tensor(r.seq[1:])
        emb = self.embed(emb_ids.to(self.device))
        self.dcache = DrafterCache()
        self._aux = None
        self.dlogits = self.drafter.compute_logits(self.drafter(self._hidden(out.hidden_states), emb, self.dcache,
                                                                lens))

    def trees(self, rows: list[_Seq]) -> TreeCall:
        dlogits = self.dlogits
        assert dlogits is not None
        d2t = self.drafter.d2t
        tokens = [r.seq if self.search_context == "sequence" else r.last_step for r in rows]
        batch = getattr(self.pruner, "prune_batch", None)
        if batch is not None:
            trees = DraftTrees.stack(batch(dlogits, d2t, tokens))
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

    def log_step(self, lattice_log: LatticeWriter, i: int, row: _Seq, committed: list[int]) -> None:
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

    def advance(self, rows: list[_Seq]) -> None:
        """The drafter reads each row's accepted nodes (aux [B, W, 3h],
        counts[b] real) with the embeddings of the tokens that follow them."""
        aux, counts = self._aux, self._counts
        assert aux is not None
        emb_ids = torch.zeros(len(rows), aux.shape[1], dtype=torch.long)
        for i, (r, c) in enumerate(zip(rows, counts)):
            emb_ids[i, :c] = torch.tensor(r.seq[-c:])
        emb = self.embed(emb_ids.to(self.device))
        self.dlogits = self.drafter.compute_logits(self.drafter(aux, emb, self.dcache, counts))
        self._aux = None

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

    @staticmethod
    def _context(r: _Seq) -> np.ndarray:
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

    def trees(self, rows: list[_Seq]) -> TreeCall:
        contexts = [self._context(r) for r in rows]
        batch = getattr(self.proposer, "propose_batch", None)
        if batch is not None:
            trees = DraftTrees.stack(batch(contexts, self.device))
        else:
            trees = DraftTrees.stack([self.proposer(c, self.device) for c in contexts])
        tm = getattr(self.proposer, "timing", None)
        return TreeCall(trees, tm.transport if tm is not None else 0.0, bool(getattr(tm, "remote", False)),
                        str(getattr(tm, "source", "")))

    def stats(self) -> dict[str, Any]:
        st = getattr(self.proposer, "stats", None)
        return st.as_dict() if hasattr(st, "as_dict") else {}


# ---- the generators ---------------------------------------------------------------------

def load_target(model: str | Path, *, device: Any = None, dtype: Any = None) -> Any:
    """A transformers causal LM folder (or hub id), with sdpa attention, in eval mode."""
    from transformers import AutoModelForCausalLM

    # `dtype`, not `torch_dtype`: renamed in 4.56, the dart extra's floor.
    target = AutoModelForCausalLM.from_pretrained(str(model), attn_implementation="sdpa", dtype=_dtype(dtype))
    return target.to(device or "cpu").eval()


class SpeculativeGenerator:
    """Draft-tree speculative decoding: ``target`` (a transformers causal
    LM, sdpa or eager attention) verifies the trees of ``source`` (a
    TreeSource). DartGenerator and ProposalGenerator build their source.

    eos_token_id: one id or several that stop a sequence (default: the
    target's generation config). sync_timing: synchronize the device around
    each timed part (exact split of a step; costs a little).
    """

    def __init__(self, target: Any, source: TreeSource, *, eos_token_id: int | Sequence[int] | None = None,
                 sync_timing: bool = True, tokenizer: Any = None) -> None:
        self.target = target
        self.tokenizer = tokenizer
        cfg = target.config.get_text_config() if hasattr(target.config, "get_text_config") else target.config
        self.text_config = cfg
        attn = getattr(target.config, "_attn_implementation", "sdpa")
        if attn not in ("sdpa", "eager"):
            raise ValueError(f"the target uses {attn!r} attention, which ignores tree masks: "
                             "load it with attn_implementation='sdpa' (or 'eager')")
        if getattr(cfg, "sliding_window", None) and getattr(cfg, "use_sliding_window", True) is not False:
            layer_types = getattr(cfg, "layer_types", None) or []
            if not layer_types or any("sliding" in str(t) for t in layer_types):
                raise ValueError(f"the target has sliding-window attention (sliding_window={cfg.sliding_window}): "
                                 "its cache cannot be compacted per tree; set sliding_window=None")
        self.vocab_size = int(target.get_output_embeddings().weight.shape[0])
        self.embed = target.get_input_embeddings()
        self.device = self.embed.weight.device
        self.eos = self._eos_ids(eos_token_id)
        self.sync_timing = sync_timing
        params = inspect.signature(target.forward).parameters
        self._keep_kw = "logits_to_keep" if "logits_to_keep" in params else (
            "num_logits_to_keep" if "num_logits_to_keep" in params else None)
        # The KV cache's argument and output field: "cache" where the forward
        # takes it (there "past_key_values" is deprecated, warns on every call
        # and is to be removed), else "past_key_values".
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        source.bind(self)
        self.source = source

    def _eos_ids(self, eos: Any) -> frozenset[int]:
        if eos is None:
            gc = getattr(self.target, "generation_config", None)
            eos = getattr(gc, "eos_token_id", None) if gc is not None else None
            if eos is None:
                eos = getattr(self.target.config, "eos_token_id", None)
        if eos is None:
            return frozenset()
        if isinstance(eos, int):
            return frozenset([eos])
        return frozenset(int(e) for e in eos)

    # -- the target -------------------------------------------------------------------

    def _forward(self, ids: torch.Tensor, cache: Any, *, position_ids: torch.Tensor | None = None,
                 mask: torch.Tensor | None = None, keep: Any = None, hidden: bool = True) -> Any:
        kw: dict[str, Any] = {}
        if keep is not None and self._keep_kw:
            kw[self._keep_kw] = keep
        kw[self._cache_kw] = cache
        return self.target(input_ids=ids, use_cache=True, position_ids=position_ids, attention_mask=mask,
                           output_hidden_states=hidden, return_dict=True, **kw)

    def _cache_of(self, out: Any) -> Any:
        """The KV cache a forward returned (its field is named as the argument)."""
        return getattr(out, self._cache_kw)

    def _additive(self, allowed: torch.Tensor) -> torch.Tensor:
        dtype = self.target.dtype
        m = torch.zeros(allowed.shape, dtype=dtype, device=self.device)
        return m.masked_fill_(~allowed, torch.finfo(dtype).min)[:, None]

    # -- decoding ----------------------------------------------------------------------

    @torch.no_grad()
    def generate(
        self,
        input_ids: Any,
        max_new_tokens: int = 256,
        *,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        sampling_order: str = "dart",
        seed: int | None = None,
        stop_at_eos: bool = True,
        on_step: Callable[[int, Any], None] | None = None,
        lattice_log: LatticeWriter | None = None,
    ) -> Any:
        """Speculative decoding of one prompt (token ids: a list of ints or a
        1-D tensor) -> GenerationResult, or of several (a list of such
        prompts, of any lengths, or a 2-D tensor) decoded together as one
        batch -> a list of GenerationResult in prompt order.

        temperature 0: greedy (lossless: every sequence is the target's own
        greedy continuation); > 0: tree speculative sampling (the target's
        sampling distribution after temperature, top-p and top-k in
        ``sampling_order``, exactly). on_step(i, result) runs after every
        verification step (the list of results for a batch). lattice_log
        (DART only): records each step's lattice and committed tokens."""
        prompts, single = _prompts(input_ids)
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if sampling_order not in SAMPLING_ORDERS:
            raise ValueError(f"sampling_order must be one of {SAMPLING_ORDERS}, got {sampling_order!r}")
        if lattice_log is not None and not hasattr(self.source, "log_step"):
            raise ValueError(f"a lattice log records a drafter's lattices; {type(self.source).__name__} has none")
        sampling = temperature > 0
        gen = None
        if sampling:
            gen = torch.Generator(device=self.device)
            gen.manual_seed(seed if seed is not None else int(torch.randint(0, 2**62, ()).item()))
        pick = dict(sampling=sampling, temperature=temperature, top_k=top_k, top_p=top_p, order=sampling_order,
                    gen=gen)
        clock = _Clock(self.device, self.sync_timing)
        t_start = clock()
        rows = [_Seq(p, list(p), GenerationResult(prompt_ids=list(p), output_ids=[], mode=self.source.kind), [])
                for p in prompts]
        if lattice_log is not None:
            first = lattice_log.new_sequences(len(rows))
            for i, r in enumerate(rows):
                r.log_id = first + i
        results = [r.res for r in rows]
        cache = self._prefill(rows, pick)
        prefill_s = clock() - t_start
        for r in rows:
            r.res.prefill_s = prefill_s
            r.done = self._done(r.seq, len(r.prompt), max_new_tokens, stop_at_eos)
        rows, cache = self._drop_finished(rows, cache)

        step = 0
        while rows:
            recs = self._step(rows, cache, pick, clock, lattice_log)
            step += 1
            for r in rows:
                r.done = self._done(r.seq, len(r.prompt), max_new_tokens, stop_at_eos)
            if on_step is not None:
                on_step(step, results[0] if single else results)
            rows, cache = self._drop_finished(rows, cache)
            if rows and self.source.model_drafter:
                t3 = clock()
                self.source.advance(rows)
                dt = clock() - t3
                for rec in recs:
                    rec.drafter_s = dt
            elif rows:
                self.source.advance(rows)
        wall = clock() - t_start
        stats = self.source.stats()
        for res in results:
            res.wall_s = wall
            res.output_ids = self._trim(res.output_ids, max_new_tokens, stop_at_eos)
            res.pruner = dict(stats)
            if self.tokenizer is not None:
                res.text = self.tokenizer.decode(res.output_ids)
        return results[0] if single else results

    def _prefill(self, rows: list[_Seq], pick: dict[str, Any]) -> Any:
        """The prompts, right-padded into one forward (each row sees its own
        tokens only); the first token of each; the source's start. Returns
        the target's cache."""
        lens = [len(r.prompt) for r in rows]
        b, width = len(rows), max(lens)
        ids = torch.zeros(b, width, dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, :lens[i]] = torch.tensor(r.prompt)
        ids = ids.to(self.device)
        hidden = self.source.needs_hidden
        if b == 1:
            out = self._forward(ids, None, keep=1, hidden=hidden)
            last = out.logits[:, -1]
        else:
            ar = torch.arange(width, device=self.device)
            ln = torch.tensor(lens, device=self.device)
            allowed = (ar[None, None] <= ar[None, :, None]) & (ar[None, None] < ln[:, None, None])
            last_pos = sorted(set(n - 1 for n in lens))
            keep = torch.tensor(last_pos, device=self.device) if self._keep_kw else None
            out = self._forward(ids, None, position_ids=ar[None].expand(b, -1), mask=self._additive(allowed),
                                keep=keep, hidden=hidden)
            col = [last_pos.index(n - 1) if keep is not None else n - 1 for n in lens]
            last = out.logits[torch.arange(b, device=self.device), torch.tensor(col, device=self.device)]
        firsts = self._pick_rows(last, pick)
        for r, f in zip(rows, firsts):
            r.seq.append(f)
            r.res.output_ids.append(f)
            r.last_step = list(r.seq)
        self.source.start(rows, out, lens)
        return self._cache_of(out)

    def _step(self, rows: list[_Seq], cache: Any, pick: dict[str, Any], clock: _Clock,
              lattice_log: LatticeWriter | None = None) -> list[StepRecord]:
        """Trees, verify, accept, compact: one step for every row. Returns the
        step records. A lattice_log records each row's lattice and committed
        tokens (DrafterSource)."""
        b = len(rows)
        t0 = clock()
        call = self.source.trees(rows)
        trees = call.trees
        t1 = clock()

        # -- one verification forward for the padded trees
        start = int(_cache_length(cache))
        sizes = trees.n_nodes
        n = trees.tokens.shape[1]
        dev = self.device
        lens = torch.tensor([r.cached for r in rows], device=dev)
        # the batch's padded trees (padding nodes see only themselves), as the source built them
        ids, depth, tmask = trees.tokens.to(dev), trees.position_ids.to(dev), trees.tree_mask.to(dev)
        ctx = torch.arange(start, device=dev)[None, None] < lens[:, None, None]
        allowed = torch.cat((ctx.expand(b, n, start), tmask), dim=2)
        out = self._forward(ids, cache, position_ids=depth + lens[:, None], mask=self._additive(allowed),
                            hidden=self.source.needs_hidden)
        t2 = clock()

        # -- acceptance, per row
        if pick["sampling"]:
            accepted = [accept_tree_sampling(t, out.logits[i, :sizes[i]], pick["temperature"], pick["top_k"],
                                              pick["top_p"], pick["gen"], pick["order"])
                        for i, t in enumerate(trees)]
            w = max(len(p) for p, _, _ in accepted)
            paths = torch.full((b, w), -1, dtype=torch.long, device=dev)
            for i, (p, _, _) in enumerate(accepted):
                paths[i, :len(p)] = p
            commits = [(d, x) for _, d, x in accepted]
        else:
            paths, commits = self._accept_greedy_batch(trees, out.logits)
        keep = max(len(d) for d, _ in commits) + 1
        # one row whose accepted path is 0, 1, 2, ...: its nodes are already in place
        in_place = b == 1 and (keep == 1 or bool(torch.equal(paths[0, :keep], torch.arange(keep, device=dev))))
        new_len = max(r.cached + len(d) + 1 for r, (d, _) in zip(rows, commits))
        _compact_cache(cache, start, lens, paths, keep, new_len, in_place)
        self.source.accepted(out, paths, keep, [len(d) + 1 for d, _ in commits])
        del out
        recs = []
        for i, (r, (drafts, bonus), size) in enumerate(zip(rows, commits, sizes)):
            if lattice_log is not None:
                self.source.log_step(lattice_log, i, r, drafts + [bonus])  # type: ignore[attr-defined]
            root = r.seq[-1]
            r.seq.extend(drafts)
            r.seq.append(bonus)
            r.res.output_ids.extend(drafts)
            r.res.output_ids.append(bonus)
            r.last_step = [root, *drafts, bonus]
            rec = StepRecord(accepted=len(drafts), tree_nodes=size, remote=call.remote, batch_size=b,
                             source=call.source)
            rec.transport_s = call.transport_s
            rec.prune_s = (t1 - t0) - call.transport_s
            rec.target_s = t2 - t1
            r.res.steps.append(rec)
            recs.append(rec)
        t3 = clock()
        for rec in recs:
            rec.verify_s = t3 - t2
        return recs

    def _drop_finished(self, rows: list[_Seq], cache: Any) -> tuple[list[_Seq], Any]:
        keep = [i for i, r in enumerate(rows) if not r.done]
        if len(keep) == len(rows) or not keep:
            return ([] if not keep else rows), cache
        _select_rows(cache, torch.tensor(keep, device=self.device))
        self.source.select(keep)
        kept = [rows[i] for i in keep]
        _truncate(cache, max(r.cached for r in kept))
        return kept, cache

    @torch.no_grad()
    def autoregressive(self, input_ids: Any, max_new_tokens: int = 256, *, stop_at_eos: bool = True,
                       temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, sampling_order: str = "dart",
                       seed: int | None = None) -> GenerationResult:
        """The target alone, one token per forward (the baseline and the
        reference for losslessness)."""
        prompt = _as_list(input_ids)
        sampling = temperature > 0
        gen = None
        if sampling:
            gen = torch.Generator(device=self.device)
            gen.manual_seed(seed if seed is not None else 0)
        pick = dict(sampling=sampling, temperature=temperature, top_k=top_k, top_p=top_p, order=sampling_order,
                    gen=gen)
        clock = _Clock(self.device, self.sync_timing)
        res = GenerationResult(prompt_ids=list(prompt), output_ids=[], mode="autoregressive")
        t0 = clock()
        out = self._forward(torch.tensor([prompt], dtype=torch.long, device=self.device), None, keep=1,
                            hidden=False)
        cache = self._cache_of(out)
        seq = prompt + self._pick_rows(out.logits[:, -1], pick)
        res.prefill_s = clock() - t0
        while not self._done(seq, len(prompt), max_new_tokens, stop_at_eos):
            t1 = clock()
            out = self._forward(torch.tensor([[seq[-1]]], device=self.device), cache, hidden=False)
            seq += self._pick_rows(out.logits[:, -1], pick)
            res.steps.append(StepRecord(accepted=0, tree_nodes=1, remote=False, target_s=clock() - t1))
        res.wall_s = clock() - t0
        res.output_ids = self._trim(seq[len(prompt):], max_new_tokens, stop_at_eos)
        if self.tokenizer is not None:
            res.text = self.tokenizer.decode(res.output_ids)
        return res

    # -- acceptance -----------------------------------------------------------------------

    @staticmethod
    def _pick_rows(logits: torch.Tensor, pick: dict[str, Any]) -> list[int]:
        """One token per row of logits [B, V]."""
        if not pick["sampling"]:
            return [int(t) for t in logits.argmax(-1).tolist()]
        p = process_logits(logits, pick["temperature"], pick["top_k"], pick["top_p"], pick["order"])
        return [int(t) for t in torch.multinomial(p, 1, generator=pick["gen"])[:, 0].tolist()]

    @staticmethod
    def _accept_greedy_batch(trees: DraftTrees, logits: torch.Tensor
                             ) -> tuple[torch.Tensor, list[tuple[list[int], int]]]:
        """For each row, the longest root-to-leaf prefix on which every token
        is the target's argmax after its parent (DART's evaluate_posterior;
        ties: the first such leaf). Returns the node indices of each row's
        best path [B, W] (-1 padded; the accepted ones are its first a + 1)
        and each row's (accepted draft tokens, bonus token); one device sync."""
        b = len(trees)
        dev = logits.device
        ri, toks = trees.retrieve_indices.to(dev), trees.tokens.to(dev)
        _, leaves, w = ri.shape
        pred = logits.argmax(-1)  # [B, n]: the target's choice after each node
        safe = ri.clamp(min=0)
        cand = torch.where(ri >= 0, toks.gather(1, safe.view(b, -1)).view(b, leaves, w), torch.full_like(ri, -1))
        after = pred.gather(1, safe.view(b, -1)).view(b, leaves, w)
        if w > 1:
            acc = torch.cumprod((cand[..., 1:] == after[..., :-1]).to(torch.int32), dim=2).sum(dim=2)
        else:
            acc = torch.zeros(b, leaves, dtype=torch.int64, device=dev)
        best = torch.argmax(acc, dim=1)
        rows = torch.arange(b, device=dev)
        packed = torch.cat((acc[rows, best].view(b, 1).to(torch.int64), cand[rows, best], after[rows, best]), dim=1)
        commits = []
        for row in packed.tolist():  # one sync
            a = int(row[0])
            commits.append((row[2:2 + a], int(row[1 + w + a])))
        return ri[rows, best], commits

    # -- stopping -------------------------------------------------------------------------

    def _done(self, seq: list[int], prompt_len: int, max_new: int, stop_at_eos: bool) -> bool:
        new = len(seq) - prompt_len
        if new >= max_new:
            return True
        return stop_at_eos and bool(self.eos) and any(t in self.eos for t in seq[prompt_len:])

    def _trim(self, new: list[int], max_new: int, stop_at_eos: bool) -> list[int]:
        new = new[:max_new]
        if stop_at_eos and self.eos:
            for i, t in enumerate(new):
                if t in self.eos:
                    return new[: i + 1]
        return new


class DartGenerator(SpeculativeGenerator):
    """DART decoding: ``target`` (a transformers causal LM, sdpa or eager
    attention), ``drafter`` (DartDrafter), ``pruner`` (LocalPruner or
    RemotePruner: trees for a whole batch in one call; or any callable with
    tree_search's signature, called once per sequence).

    eos_token_id: one id or several that stop a sequence (default: the
    target's generation config; DART stops at its tokenizer's
    ``eos_token_id``). The search's EOS is the pruner's (``eos_token_id=``
    there; default the trie header's). search_context: what the pruner sees
    as the sequence: "sequence" (default: every committed token, so the
    search reads the true last N-1 tokens) or "step" (DART: after the first
    step only the last step's tokens, i.e. the previous root, the accepted
    tokens and the bonus token; with tries of order 5 or more the trees then
    differ, because fewer context tokens reach the n-gram). sync_timing:
    synchronize the device around each timed part (exact split of a step;
    costs a little).
    """

    source: DrafterSource

    def __init__(
        self,
        target: Any,
        drafter: DartDrafter,
        pruner: Callable[[torch.Tensor, torch.Tensor | None, Any], DraftTree],
        *,
        eos_token_id: int | Sequence[int] | None = None,
        aux_layers: Sequence[int] | None = None,
        sync_timing: bool = True,
        tokenizer: Any = None,
        search_context: str = "sequence",
    ) -> None:
        source = DrafterSource(drafter, pruner, search_context=search_context, aux_layers=aux_layers)
        super().__init__(target, source, eos_token_id=eos_token_id, sync_timing=sync_timing, tokenizer=tokenizer)

    @property
    def drafter(self) -> DartDrafter:
        return self.source.drafter

    @property
    def pruner(self) -> Any:
        return self.source.pruner

    @property
    def search_context(self) -> str:
        return self.source.search_context

    @property
    def aux_layers(self) -> tuple[int, ...]:
        return self.source.aux_layers

    @property
    def num_layers(self) -> int:
        return self.source.num_layers

    @classmethod
    def from_pretrained(cls, model: str | Path, drafter: str | Path, pruner: Any, *, device: Any = None,
                        dtype: Any = None, **kwargs: Any) -> DartGenerator:
        """Loads the target (transformers, sdpa attention) and a DART drafter folder."""
        target = load_target(model, device=device, dtype=dtype)
        d = DartDrafter.from_pretrained(drafter, device=target.device, dtype=target.dtype)
        return cls(target, d, pruner, **kwargs)


class ProposalGenerator(SpeculativeGenerator):
    """Speculative decoding without a drafter model: ``target`` (any
    transformers causal LM, sdpa or eager attention) verifies the trees of
    ``proposer`` (LocalProposer: a trie in process; RemoteProposer: a trie
    host, prompt lookup alone when it is down; LookupProposer: prompt lookup
    alone), each proposed from the whole sequence so far. Greedy decoding is
    lossless, sampling is tree speculative sampling, batches as DartGenerator.

    eos_token_id: one id or several that stop a sequence (default: the
    target's generation config). sync_timing: as DartGenerator's.
    """

    source: ProposalSource

    def __init__(self, target: Any, proposer: Any, *, eos_token_id: int | Sequence[int] | None = None,
                 sync_timing: bool = True, tokenizer: Any = None) -> None:
        super().__init__(target, ProposalSource(proposer), eos_token_id=eos_token_id, sync_timing=sync_timing,
                         tokenizer=tokenizer)

    @property
    def proposer(self) -> Any:
        return self.source.proposer

    @classmethod
    def from_pretrained(cls, model: str | Path, proposer: Any, *, device: Any = None, dtype: Any = None,
                        **kwargs: Any) -> ProposalGenerator:
        """Loads the target (transformers, sdpa attention)."""
        return cls(load_target(model, device=device, dtype=dtype), proposer, **kwargs)

def _cache_length(cache: Any) -> int:
    return int(_kv_tensors(cache)[0][2].shape[2])


def _prompts(x: Any) -> tuple[list[list[int]], bool]:
    """(prompts, single): one prompt (ints, a 1-D tensor) or several (a list
    of prompts, a 2-D tensor)."""
    if isinstance(x, torch.Tensor) or hasattr(x, "ndim"):
        if x.ndim == 2:
            out = [_as_list(r) for r in x]
            single = False
        else:
            out, single = [_as_list(x)], True
    else:
        items = list(x)
        if items and hasattr(items[0], "__len__"):  # a list of prompts
            out, single = [_as_list(p) for p in items], False
        else:
            out, single = [_as_list(items)], True
    if not out:
        raise ValueError("no prompts")
    for i, p in enumerate(out):
        if not p:
            raise ValueError("input_ids is empty" if single else f"prompt {i} is empty")
    return out, single


def _as_list(x: Any) -> list[int]:
    if isinstance(x, torch.Tensor):
        return [int(t) for t in x.reshape(-1).tolist()]
    if hasattr(x, "tolist"):
        return [int(t) for t in x.reshape(-1).tolist()]
    return [int(t) for t in x]


def _dtype(d: Any) -> Any:
    if d is None or d == "auto":
        return "auto" if d == "auto" else None
    if isinstance(d, torch.dtype):
        return d
    return {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
            "float16": torch.float16, "fp16": torch.float16, "float64": torch.float64}[str(d)]
