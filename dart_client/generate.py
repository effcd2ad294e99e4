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
rows are dropped from both caches). ``tree_budget`` bounds the tokens of one
verification forward, trees and roots of every row: at B rows each tree
gets at most budget // B tokens (rounded down to a CUDA-graph bucket), so
that a batch's forward stays near the cost of a one-token step instead of
growing with B x tree size.

Greedy decoding is lossless: the output is the target's own greedy
continuation, token for token (up to floating-point differences between
one-token and tree-shaped forward passes, which do not show in float32 tests).
"""
from __future__ import annotations

import inspect
import math
import numbers
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from dart_client.draft_trees import DraftTree
from dart_client.drafter import DartDrafter
from dart_client.kv_cache import cache_length, compact, select_rows, truncate
from dart_client.lattice_log import LatticeWriter
from dart_client.results import GenerationResult, StepRecord
from dart_client.sampling import SAMPLING_ORDERS, accept_greedy_batch, accept_tree_sampling, pick_tokens
from dart_client.static_verify import KV_CACHES, StaticTarget
from dart_client.target_inputs import load_target, prompt_lists
from dart_client.tree_budget import TREE_BUDGET, tree_nodes
from dart_client.tree_sources import (
    DrafterSource,
    ProposalSource,
    SequenceState,
    TreeCall,
    TreeSource,
    aux_layer_indices,
)
from ngram_service.arg_checks import is_real, whole_number

__all__ = ["TREE_BUDGET", "DartGenerator", "DrafterSource", "GenerationResult", "ProposalGenerator",
           "ProposalSource", "SpeculativeGenerator", "StepRecord", "TreeCall", "TreeSource", "aux_layer_indices"]





def _check_call(max_new_tokens: int, sampling_order: str, temperature: float, top_k: int, top_p: float,
                seed: int | None) -> None:
    """A decoding call's arguments, checked before anything runs, in the
    ranges dart-generate's options take (a NaN max_new_tokens decoded
    forever; a NaN or negative temperature decoded greedily)."""
    if whole_number(max_new_tokens, "max_new_tokens") < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if sampling_order not in SAMPLING_ORDERS:
        raise ValueError(f"sampling_order must be one of {SAMPLING_ORDERS}, got {sampling_order!r}")
    if not is_real(temperature) or not 0 <= temperature < math.inf:
        raise ValueError(f"temperature must be a finite number >= 0 (0: greedy), got {temperature!r}")
    if whole_number(top_k, "top_k") < 0:
        raise ValueError(f"top_k must be >= 0 (0: off), got {top_k}")
    if not is_real(top_p) or not 0 <= top_p <= 1:
        raise ValueError(f"top_p must be in [0, 1], got {top_p!r}")
    if seed is not None and not -(1 << 63) <= whole_number(seed, "seed") < 1 << 64:
        raise ValueError(f"seed must be in [-2**63, 2**64) (torch's seeds) or None, got {seed}")


class _Clock:
    def __init__(self, device: torch.device, sync: bool) -> None:
        self.sync = sync and device.type == "cuda"
        self.device = device

    def __call__(self) -> float:
        if self.sync:
            torch.cuda.synchronize(self.device)
        return time.perf_counter()


# ---- the generators ---------------------------------------------------------------------

class SpeculativeGenerator:
    """Draft-tree speculative decoding: ``target`` (a transformers causal
    LM, sdpa or eager attention) verifies the trees of ``source`` (a
    TreeSource). DartGenerator and ProposalGenerator build their source.

    eos_token_id: one id or several that stop a sequence (default: the
    target's generation config). sync_timing: synchronize the device around
    each timed part (exact split of a step; costs a little).

    kv_cache: "static" (the default: static_verify.StaticTarget, one
    preallocated cache and mask, entries written in place, compaction in
    one gather and one scatter) or "dynamic" (transformers' DynamicCache,
    grown by every forward); the autoregressive baseline uses the same. kv_capacity
    (static): the cache's positions (None: sized per call, grown when
    needed; an int: fixed, a forward past it raises
    kv_cache.CacheOverflowError). cuda_graphs (static, CUDA only): each
    forward padded to a bucket and replayed from a CUDA graph captured once
    per (rows, bucket). fixed_shapes (static; default: cuda_graphs): those
    padded forwards over the whole capacity, run eagerly where cuda_graphs
    is off (on a CPU: the graphs' path, checked without a GPU).

    tree_budget: the most tokens of one verification forward, all rows'
    trees with their roots (default TREE_BUDGET; None: no bound). With B
    rows a tree gets at most budget // B tokens, rounded down to a bucket
    of tree_budget.TREE_BUCKETS, and at least its root and one node; a
    source that cannot be told (a plain callable) keeps its own size.
    """

    def __init__(self, target: Any, source: TreeSource, *, eos_token_id: int | Sequence[int] | None = None,
                 sync_timing: bool = True, tokenizer: Any = None, kv_cache: str = "static",
                 kv_capacity: int | None = None, cuda_graphs: bool = False, fixed_shapes: bool | None = None,
                 tree_budget: int | None = TREE_BUDGET) -> None:
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
        if kv_capacity is not None:
            whole_number(kv_capacity, "kv_capacity")
        if kv_cache not in KV_CACHES:
            raise ValueError(f"kv_cache must be one of {KV_CACHES}, got {kv_cache!r}")
        if kv_cache != "static" and (cuda_graphs or kv_capacity is not None or fixed_shapes):
            raise ValueError("cuda_graphs, fixed_shapes and kv_capacity need kv_cache='static'")
        self.kv_cache = kv_cache
        self._static = StaticTarget(target, self._forward, cfg, dtype=self.embed.weight.dtype, device=self.device,
                                    cache_kw=self._cache_kw, capacity=kv_capacity,
                                    cuda_graphs=cuda_graphs, fixed_shapes=fixed_shapes) if kv_cache == "static" else None
        if tree_budget is not None and whole_number(tree_budget, "tree_budget") < 2:
            raise ValueError(f"tree_budget must be >= 2 (a root and a node) or None, got {tree_budget}")
        self.tree_budget = tree_budget
        source.bind(self)
        self.source = source

    def tree_nodes(self, rows: int) -> int | None:
        """The most nodes besides the root a tree may have in a step of
        ``rows`` rows under tree_budget; None: the source's own bound."""
        return tree_nodes(self.tree_budget, rows, self.source.max_nodes)

    def _eos_ids(self, eos: Any) -> frozenset[int]:
        if eos is None:
            gc = getattr(self.target, "generation_config", None)
            eos = getattr(gc, "eos_token_id", None) if gc is not None else None
            if eos is None:
                eos = getattr(self.target.config, "eos_token_id", None)
        if eos is None:
            return frozenset()
        if isinstance(eos, numbers.Integral):
            return frozenset([whole_number(eos, "eos_token_id")])
        if isinstance(eos, (str, bytes)) or not hasattr(eos, "__iter__"):
            raise ValueError(f"eos_token_id must be a token id or a sequence of them, got {eos!r}")
        return frozenset(whole_number(e, "eos_token_id") for e in eos)

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
        _check_call(max_new_tokens, sampling_order, temperature, top_k, top_p, seed)
        if lattice_log is not None and not hasattr(self.source, "log_step"):
            raise ValueError(f"a lattice log records a drafter's lattices; {type(self.source).__name__} has none")
        rows, single, pick = self._call(input_ids, self.source.kind, temperature, top_k, top_p,
                                        sampling_order, seed, random_seed=True)
        clock = _Clock(self.device, self.sync_timing)
        t_start = clock()
        if lattice_log is not None:
            first = lattice_log.new_sequences(len(rows))
            for i, r in enumerate(rows):
                r.log_id = first + i
        results = [r.res for r in rows]
        if self._static is not None:
            self._static.begin(len(rows), max(len(r.prompt) for r in rows) + max_new_tokens + 1)
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
        self._finish(results, clock() - t_start, max_new_tokens, stop_at_eos)
        stats = self.source.stats()
        for res in results:
            res.pruner = dict(stats)
        return results[0] if single else results

    def _call(self, input_ids: Any, mode: str, temperature: float, top_k: int, top_p: float,
              sampling_order: str, seed: int | None, random_seed: bool
              ) -> tuple[list[SequenceState], bool, dict[str, Any]]:
        """A decoding call's rows (one per prompt), whether one prompt was
        given (not a list), and how a token is picked (``seed`` None: a random
        seed, or 0 without ``random_seed``)."""
        prompts, single = prompt_lists(input_ids, int(self.embed.weight.shape[0]))
        sampling = temperature > 0
        gen = None
        if sampling:
            if seed is None:
                seed = int(torch.randint(0, 2**62, ()).item()) if random_seed else 0
            gen = torch.Generator(device=self.device)
            gen.manual_seed(seed)
        pick = dict(sampling=sampling, temperature=temperature, top_k=top_k, top_p=top_p, order=sampling_order,
                    gen=gen)
        rows = [SequenceState(p, list(p), GenerationResult(prompt_ids=list(p), output_ids=[], mode=mode), [])
                for p in prompts]
        return rows, single, pick

    def _finish(self, results: list[GenerationResult], wall: float, max_new_tokens: int, stop_at_eos: bool) -> None:
        """A call's results completed: the wall time, the new tokens cut at
        max_new_tokens (and the first EOS), their text."""
        for res in results:
            res.wall_s = wall
            res.output_ids = self._trim(res.output_ids, max_new_tokens, stop_at_eos)
            if self.tokenizer is not None:
                res.text = self.tokenizer.decode(res.output_ids)

    def _prefill(self, rows: list[SequenceState], pick: dict[str, Any]) -> Any:
        """The prompts' forward and first tokens (_prefill_rows), then the
        source's start. Returns the target's cache."""
        out = self._prefill_rows(rows, pick, self.source.needs_hidden)
        self.source.start(rows, out, [len(r.prompt) for r in rows])
        return self._static.cache if self._static is not None else self._cache_of(out)

    def _prefill_rows(self, rows: list[SequenceState], pick: dict[str, Any], hidden: bool) -> Any:
        """The prompts, right-padded into one forward (each row sees its own
        tokens only); the first token of each appended to its row. Returns
        the forward's output."""
        lens = [len(r.prompt) for r in rows]
        b, width = len(rows), max(lens)
        ids = torch.zeros(b, width, dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, :lens[i]] = torch.tensor(r.prompt)
        ids = ids.to(self.device)
        if b == 1 and self._static is not None:
            out = self._static.prefill(ids, lens, keep=1, hidden=hidden)
            last = out.logits[:, -1]
        elif b == 1:
            out = self._forward(ids, None, keep=1, hidden=hidden)
            last = out.logits[:, -1]
        else:
            ar = torch.arange(width, device=self.device)
            ln = torch.tensor(lens, device=self.device)
            allowed = (ar[None, None] <= ar[None, :, None]) & (ar[None, None] < ln[:, None, None])
            last_pos = sorted(set(n - 1 for n in lens))
            keep = torch.tensor(last_pos, device=self.device) if self._keep_kw else None
            if self._static is not None:
                out = self._static.prefill(ids, lens, keep=keep, hidden=hidden)
            else:
                out = self._forward(ids, None, position_ids=ar[None].expand(b, -1), mask=self._additive(allowed),
                                    keep=keep, hidden=hidden)
            col = [last_pos.index(n - 1) if keep is not None else n - 1 for n in lens]
            last = out.logits[torch.arange(b, device=self.device), torch.tensor(col, device=self.device)]
        firsts = pick_tokens(last, pick)
        for r, f in zip(rows, firsts):
            r.seq.append(f)
            r.res.output_ids.append(f)
            r.last_step = list(r.seq)
        return out

    def _step(self, rows: list[SequenceState], cache: Any, pick: dict[str, Any], clock: _Clock,
              lattice_log: LatticeWriter | None = None) -> list[StepRecord]:
        """Trees, verify, accept, compact: one step for every row. Returns the
        step records. A lattice_log records each row's lattice and committed
        tokens (DrafterSource)."""
        b = len(rows)
        t0 = clock()
        cap = self.tree_nodes(b)
        call = self.source.trees(rows) if cap is None else self.source.trees(rows, cap)
        trees = call.trees
        t1 = clock()

        # -- one verification forward for the padded trees
        start = int(cache_length(cache))
        sizes = trees.n_nodes
        n = trees.tokens.shape[1]
        dev = self.device
        lens = torch.tensor([r.cached for r in rows], device=dev)
        # the batch's padded trees (padding nodes see only themselves), as the source built them
        ids, depth, tmask = trees.tokens.to(dev), trees.position_ids.to(dev), trees.tree_mask.to(dev)
        if self._static is not None:
            out = self._static.forward(ids, depth + lens[:, None], tmask, lens, start, self.source.needs_hidden)
        else:
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
            paths, commits = accept_greedy_batch(trees, out.logits)
        keep = max(len(d) for d, _ in commits) + 1
        # one row whose accepted path is 0, 1, 2, ...: its nodes are already in place
        in_place = b == 1 and (keep == 1 or bool(torch.equal(paths[0, :keep], torch.arange(keep, device=dev))))
        new_len = max(r.cached + len(d) + 1 for r, (d, _) in zip(rows, commits))
        compact(cache, start, lens, paths, keep, new_len, in_place)
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

    def _drop_finished(self, rows: list[SequenceState], cache: Any,
                       source: bool = True) -> tuple[list[SequenceState], Any]:
        """The rows not done, their cache rows (and, with ``source``, the tree source's)."""
        keep = [i for i, r in enumerate(rows) if not r.done]
        if len(keep) == len(rows) or not keep:
            return ([] if not keep else rows), cache
        select_rows(cache, torch.tensor(keep, device=self.device))
        if source:
            self.source.select(keep)
        kept = [rows[i] for i in keep]
        truncate(cache, max(r.cached for r in kept))
        return kept, cache

    @torch.no_grad()
    def autoregressive(self, input_ids: Any, max_new_tokens: int = 256, *, stop_at_eos: bool = True,
                       temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, sampling_order: str = "dart",
                       seed: int | None = None) -> Any:
        """The target alone, one token per row per forward (the baseline and
        the reference for losslessness), with the generator's KV cache: one
        prompt -> GenerationResult, several (as generate takes them) decoded
        together as one batch -> a list of GenerationResult in prompt order.
        Each step record's target_s is the whole step (forward and pick)."""
        _check_call(max_new_tokens, sampling_order, temperature, top_k, top_p, seed)
        rows, single, pick = self._call(input_ids, "autoregressive", temperature, top_k, top_p,
                                        sampling_order, seed, random_seed=False)
        clock = _Clock(self.device, self.sync_timing)
        results = [r.res for r in rows]
        t0 = clock()
        if self._static is not None:
            self._static.begin(len(rows), max(len(r.prompt) for r in rows) + max_new_tokens + 1)
        out = self._prefill_rows(rows, pick, hidden=False)
        cache = self._static.cache if self._static is not None else self._cache_of(out)
        del out
        prefill_s = clock() - t0
        for r in rows:
            r.res.prefill_s = prefill_s
            r.done = self._done(r.seq, len(r.prompt), max_new_tokens, stop_at_eos)
        rows, cache = self._drop_finished(rows, cache, source=False)
        tree = torch.ones(len(rows), 1, 1, dtype=torch.bool, device=self.device)  # each row's one-token "tree"
        path = torch.zeros(len(rows), 1, dtype=torch.long, device=self.device)  # ... and its accepted path
        while rows:
            t1 = clock()
            self._one_token_step(rows, cache, pick, tree[:len(rows)], path[:len(rows)])
            dt = clock() - t1
            for r in rows:
                r.res.steps.append(StepRecord(accepted=0, tree_nodes=1, remote=False, target_s=dt,
                                              batch_size=len(rows)))
                r.done = self._done(r.seq, len(r.prompt), max_new_tokens, stop_at_eos)
            rows, cache = self._drop_finished(rows, cache, source=False)
        self._finish(results, clock() - t0, max_new_tokens, stop_at_eos)
        return results[0] if single else results

    def _one_token_step(self, rows: list[SequenceState], cache: Any, pick: dict[str, Any], tree: torch.Tensor,
                        path: torch.Tensor) -> None:
        """Every row's last token through the target at the cache's end, seen
        by that row alone (tree: [rows, 1, 1] True) and moved behind the
        row's context (path: [rows, 1] zeros; rows of a ragged batch hold
        different lengths); one token appended to each."""
        b = len(rows)
        dev = self.device
        start = int(cache_length(cache))
        cached = [r.cached for r in rows]
        packed = torch.tensor([[r.seq[-1], n] for r, n in zip(rows, cached)], device=dev)  # one copy to the device
        last, pos, lens = packed[:, :1], packed[:, 1:], packed[:, 1]
        if self._static is not None:
            out = self._static.forward(last, pos, tree, lens, start, False)
        elif b == 1:  # the row's entries are the whole cache: no mask, positions follow it
            out = self._forward(last, cache, hidden=False)
        else:
            ctx = torch.arange(start, device=dev)[None, None] < lens[:, None, None]
            allowed = torch.cat((ctx, tree), dim=2)
            out = self._forward(last, cache, position_ids=pos, mask=self._additive(allowed), hidden=False)
        tokens = pick_tokens(out.logits[:, -1], pick)
        del out
        if any(n != start for n in cached):  # else every entry is behind its row already, the length set
            compact(cache, start, lens, path, 1, max(cached) + 1, in_place=False)
        for r, t in zip(rows, tokens):
            r.seq.append(t)
            r.res.output_ids.append(t)

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
    costs a little). kv_cache, kv_capacity, cuda_graphs, fixed_shapes, tree_budget: as
    SpeculativeGenerator's.
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
        kv_cache: str = "static",
        kv_capacity: int | None = None,
        cuda_graphs: bool = False,
        fixed_shapes: bool | None = None,
        tree_budget: int | None = TREE_BUDGET,
    ) -> None:
        source = DrafterSource(drafter, pruner, search_context=search_context, aux_layers=aux_layers)
        super().__init__(target, source, eos_token_id=eos_token_id, sync_timing=sync_timing, tokenizer=tokenizer,
                         kv_cache=kv_cache, kv_capacity=kv_capacity, cuda_graphs=cuda_graphs,
                         fixed_shapes=fixed_shapes, tree_budget=tree_budget)

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
    target's generation config). sync_timing, kv_cache, kv_capacity,
    cuda_graphs, fixed_shapes, tree_budget: as DartGenerator's.
    """

    source: ProposalSource

    def __init__(self, target: Any, proposer: Any, *, eos_token_id: int | Sequence[int] | None = None,
                 sync_timing: bool = True, tokenizer: Any = None, kv_cache: str = "static",
                 kv_capacity: int | None = None, cuda_graphs: bool = False, fixed_shapes: bool | None = None,
                 tree_budget: int | None = TREE_BUDGET) -> None:
        super().__init__(target, ProposalSource(proposer), eos_token_id=eos_token_id, sync_timing=sync_timing,
                         tokenizer=tokenizer, kv_cache=kv_cache, kv_capacity=kv_capacity, cuda_graphs=cuda_graphs,
                         fixed_shapes=fixed_shapes, tree_budget=tree_budget)

    @property
    def proposer(self) -> Any:
        return self.source.proposer

    @classmethod
    def from_pretrained(cls, model: str | Path, proposer: Any, *, device: Any = None, dtype: Any = None,
                        **kwargs: Any) -> ProposalGenerator:
        """Loads the target (transformers, sdpa attention)."""
        return cls(load_target(model, device=device, dtype=dtype), proposer, **kwargs)
