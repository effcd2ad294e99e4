"""DART draft-and-verify decoding on Hugging Face ``transformers`` causal LMs.

One step (batch 1):

1. the pruner turns the drafter's logits for D positions into a draft tree
   whose root is the last committed token;
2. the target verifies the whole tree in one forward pass (tree attention
   mask over the cached context plus the tree, positions = context length +
   node depth);
3. the longest path whose every token equals the target's choice after its
   parent is accepted (greedy), or tree speculative sampling picks it
   (temperature > 0); the target's KV cache keeps the accepted nodes only;
   the bonus token comes from the target's distribution after the path;
4. the drafter reads the target's hidden states at the inputs of layers 2,
   L//2 and L-3 of the accepted nodes with the embeddings of the tokens
   that follow them, and predicts the next D positions.

Invariants: ``seq`` holds every committed token; the target's cache covers
``seq[:-1]`` (the last token, the next tree's root, is not yet processed);
the drafter's cache covers the same positions.

Greedy decoding is lossless: the output is the target's own greedy
continuation, token for token (up to floating-point differences between
one-token and tree-shaped forward passes, which do not show in float32 tests).
"""
from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from dart_client.drafter import DartDrafter, DrafterCache
from dart_client.lattice_log import LatticeWriter
from dart_client.pruner import DraftTree

__all__ = ["DartGenerator", "GenerationResult", "StepRecord", "aux_layer_indices"]


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
    drafter_s: float = 0.0  # embeddings + drafter forward for the next tree
    prune_s: float = 0.0  # pruning work on this side (top-k, copies, local search)
    transport_s: float = 0.0  # the RPC round trip (remote search included)

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
    pruner: dict[str, Any] = field(default_factory=dict)
    mode: str = "dart"  # "dart" or "autoregressive"
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


def _process_logits(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """Probabilities [..., V] after temperature, top-k and top-p (nucleus)."""
    x = logits.float() / temperature
    if top_k and top_k < x.shape[-1]:
        kth = torch.topk(x, top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    if 0.0 < top_p < 1.0:
        sorted_x, order = torch.sort(x, dim=-1, descending=True)
        cum = torch.softmax(sorted_x, dim=-1).cumsum(-1)
        drop = cum - torch.softmax(sorted_x, dim=-1) > top_p  # keep the smallest set reaching top_p
        sorted_x = sorted_x.masked_fill(drop, float("-inf"))
        x = torch.full_like(x, float("-inf")).scatter(-1, order, sorted_x)
    return torch.softmax(x, dim=-1)


def _compact_cache(cache: Any, start: int, nodes: torch.Tensor, n_keep: int, contiguous: bool) -> None:
    """Keeps cache positions [0, start) followed by start + nodes (n_keep entries)."""
    layers = getattr(cache, "layers", None)
    if layers is not None:  # transformers >= 4.56: DynamicCache.layers[i].keys / .values
        pairs = [(layer, "keys", "values") for layer in layers]
        for layer in layers:
            if type(layer).__name__ not in ("DynamicLayer",):
                raise NotImplementedError(f"KV-cache compaction of {type(layer).__name__} layers")
    else:  # older DynamicCache: key_cache / value_cache lists
        pairs = None
    end = start + n_keep
    if pairs is not None:
        for layer, kn, vn in pairs:
            for name in (kn, vn):
                t = getattr(layer, name)
                if not contiguous:
                    t[:, :, start:end] = t.index_select(2, nodes + start)
                setattr(layer, name, t[:, :, :end])
        return
    for lst in (cache.key_cache, cache.value_cache):
        for i, t in enumerate(lst):
            if not contiguous:
                t[:, :, start:end] = t.index_select(2, nodes + start)
            lst[i] = t[:, :, :end]
    if hasattr(cache, "_seen_tokens"):
        cache._seen_tokens = end


class DartGenerator:
    """DART decoding: ``target`` (a transformers causal LM, sdpa or eager
    attention), ``drafter`` (DartDrafter), ``pruner`` (LocalPruner or
    RemotePruner, or any callable with tree_search's signature).

    eos_token_id: one id or several (default: the target's generation
    config); generation stops after the first. sync_timing: synchronize the
    device around each timed part (exact split of a step; costs a little).
    """

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
    ) -> None:
        self.target = target
        self.drafter = drafter
        self.pruner = pruner
        self.tokenizer = tokenizer
        cfg = target.config.get_text_config() if hasattr(target.config, "get_text_config") else target.config
        self.num_layers = int(cfg.num_hidden_layers)
        self.aux_layers = tuple(aux_layers) if aux_layers is not None else aux_layer_indices(self.num_layers)
        attn = getattr(target.config, "_attn_implementation", "sdpa")
        if attn not in ("sdpa", "eager"):
            raise ValueError(f"the target uses {attn!r} attention, which ignores tree masks: "
                             "load it with attn_implementation='sdpa' (or 'eager')")
        dc = drafter.config
        if dc.target_hidden_size != cfg.hidden_size or dc.hidden_size != cfg.hidden_size:
            raise ValueError(f"drafter hidden sizes ({dc.hidden_size}, target {dc.target_hidden_size}) do not fit "
                             f"the target's {cfg.hidden_size}")
        vocab = target.get_output_embeddings().weight.shape[0]
        top = int((torch.arange(dc.draft_vocab_size, device=drafter.d2t.device) + drafter.d2t).max())
        if top >= vocab:
            raise ValueError(f"drafter maps to target id {top}, the target's vocabulary has {vocab}")
        self.embed = target.get_input_embeddings()
        self.device = self.embed.weight.device
        self.eos = self._eos_ids(eos_token_id)
        self.sync_timing = sync_timing
        params = inspect.signature(target.forward).parameters
        self._keep_kw = "logits_to_keep" if "logits_to_keep" in params else (
            "num_logits_to_keep" if "num_logits_to_keep" in params else None)

    @classmethod
    def from_pretrained(cls, model: str | Path, drafter: str | Path, pruner: Any, *, device: Any = None,
                        dtype: Any = None, **kwargs: Any) -> DartGenerator:
        """Loads the target (transformers, sdpa attention) and a DART drafter folder."""
        import transformers
        from transformers import AutoModelForCausalLM

        dt = _dtype(dtype)
        major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
        key = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"  # renamed in 4.56
        target = AutoModelForCausalLM.from_pretrained(str(model), attn_implementation="sdpa", **{key: dt})
        target.to(device or "cpu").eval()
        d = DartDrafter.from_pretrained(drafter, device=target.device, dtype=target.dtype)
        return cls(target, d, pruner, **kwargs)

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
                 mask: torch.Tensor | None = None, last_only: bool = False, hidden: bool = True) -> Any:
        kw: dict[str, Any] = {}
        if last_only and self._keep_kw:
            kw[self._keep_kw] = 1
        return self.target(input_ids=ids, past_key_values=cache, use_cache=True, position_ids=position_ids,
                           attention_mask=mask, output_hidden_states=hidden, return_dict=True, **kw)

    def _aux(self, hidden_states: Sequence[torch.Tensor]) -> torch.Tensor:
        return torch.cat([hidden_states[i] for i in self.aux_layers], dim=-1)

    def _tree_mask(self, tree_mask: torch.Tensor, ctx: int) -> torch.Tensor:
        n = tree_mask.shape[0]
        dtype = self.target.dtype
        m = torch.zeros(1, 1, n, ctx + n, dtype=dtype, device=self.device)
        m[0, 0, :, ctx:].masked_fill_(~tree_mask, torch.finfo(dtype).min)
        return m

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
        seed: int | None = None,
        stop_at_eos: bool = True,
        on_step: Callable[[int, GenerationResult], None] | None = None,
        lattice_log: LatticeWriter | None = None,
    ) -> GenerationResult:
        """DART decoding of one prompt (token ids). temperature 0: greedy
        (lossless); > 0: tree speculative sampling (the target's sampling
        distribution after temperature/top-k/top-p, exactly). on_step(i,
        result) runs after every verification step. lattice_log records each
        step's lattice and committed tokens (one sequence per call; ngram-eval
        replays the file)."""
        prompt = _as_list(input_ids)
        if not prompt:
            raise ValueError("input_ids is empty")
        sampling = temperature > 0
        gen = None
        if sampling:
            gen = torch.Generator(device=self.device)
            gen.manual_seed(seed if seed is not None else int(torch.randint(0, 2**62, ()).item()))
        clock = _Clock(self.device, self.sync_timing)
        res = GenerationResult(prompt_ids=list(prompt), output_ids=[])
        t_start = clock()
        d2t = self.drafter.d2t

        ids = torch.tensor([prompt], dtype=torch.long, device=self.device)
        out = self._forward(ids, None, last_only=True)
        cache = out.past_key_values
        first = self._pick(out.logits[0, -1], sampling, temperature, top_k, top_p, gen)
        seq = prompt + [first]
        dcache = DrafterCache()
        emb = self.embed(torch.tensor([seq[1:]], dtype=torch.long, device=self.device))
        dlogits = self.drafter.draft(self._aux(out.hidden_states), emb, dcache)
        del out
        res.prefill_s = clock() - t_start

        step = 0
        while not self._done(seq, len(prompt), max_new_tokens, stop_at_eos):
            rec = StepRecord(accepted=0, tree_nodes=0, remote=False)
            t0 = clock()
            tree = self.pruner(dlogits, d2t, seq)
            t1 = clock()
            tm = getattr(self.pruner, "timing", None)
            rec.transport_s = tm.transport if tm is not None else 0.0
            rec.prune_s = (t1 - t0) - rec.transport_s
            rec.remote = bool(getattr(tm, "remote", False))

            ctx = len(seq) - 1
            n = tree.draft_tokens.shape[0]
            rec.tree_nodes = n
            out = self._forward(tree.draft_tokens[None], cache, position_ids=(tree.tree_position_ids + ctx)[None],
                                mask=self._tree_mask(tree.tree_mask, ctx))
            t2 = clock()
            rec.target_s = t2 - t1

            logits = out.logits[0]
            if sampling:
                path, drafts, bonus = self._accept_sampling(tree, logits, temperature, top_k, top_p, gen)
            else:
                path, drafts, bonus = self._accept_greedy(tree, logits)
            a = len(drafts)
            contiguous = a == 0 or bool(torch.equal(path, torch.arange(a + 1, device=path.device)))
            _compact_cache(cache, ctx, path, a + 1, contiguous)
            aux = torch.cat([out.hidden_states[i][0].index_select(0, path) for i in self.aux_layers], dim=-1)[None]
            del out
            if lattice_log is not None:
                lattice_log.record_step(seq, step, dlogits, d2t, drafts + [bonus])
            seq.extend(drafts)
            seq.append(bonus)
            rec.accepted = a
            t3 = clock()
            rec.verify_s = t3 - t2
            res.steps.append(rec)
            step += 1
            if on_step is not None:
                on_step(step, res)
            if self._done(seq, len(prompt), max_new_tokens, stop_at_eos):
                break
            emb = self.embed(torch.tensor([seq[-(a + 1):]], dtype=torch.long, device=self.device))
            dlogits = self.drafter.draft(aux, emb, dcache)
            rec.drafter_s = clock() - t3

        res.wall_s = clock() - t_start
        res.output_ids = self._trim(seq[len(prompt):], max_new_tokens, stop_at_eos)
        stats = getattr(self.pruner, "stats", None)
        res.pruner = stats.as_dict() if hasattr(stats, "as_dict") else {}
        if self.tokenizer is not None:
            res.text = self.tokenizer.decode(res.output_ids)
        return res

    @torch.no_grad()
    def autoregressive(self, input_ids: Any, max_new_tokens: int = 256, *, stop_at_eos: bool = True,
                       temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
                       seed: int | None = None) -> GenerationResult:
        """The target alone, one token per forward (the baseline and the
        reference for losslessness)."""
        prompt = _as_list(input_ids)
        sampling = temperature > 0
        gen = None
        if sampling:
            gen = torch.Generator(device=self.device)
            gen.manual_seed(seed if seed is not None else 0)
        clock = _Clock(self.device, self.sync_timing)
        res = GenerationResult(prompt_ids=list(prompt), output_ids=[], mode="autoregressive")
        t0 = clock()
        out = self._forward(torch.tensor([prompt], dtype=torch.long, device=self.device), None, last_only=True,
                            hidden=False)
        cache = out.past_key_values
        seq = prompt + [self._pick(out.logits[0, -1], sampling, temperature, top_k, top_p, gen)]
        res.prefill_s = clock() - t0
        while not self._done(seq, len(prompt), max_new_tokens, stop_at_eos):
            t1 = clock()
            out = self._forward(torch.tensor([[seq[-1]]], device=self.device), cache, hidden=False)
            seq.append(self._pick(out.logits[0, -1], sampling, temperature, top_k, top_p, gen))
            res.steps.append(StepRecord(accepted=0, tree_nodes=1, remote=False, target_s=clock() - t1))
        res.wall_s = clock() - t0
        res.output_ids = self._trim(seq[len(prompt):], max_new_tokens, stop_at_eos)
        if self.tokenizer is not None:
            res.text = self.tokenizer.decode(res.output_ids)
        return res

    # -- acceptance -----------------------------------------------------------------------

    def _pick(self, logits: torch.Tensor, sampling: bool, temperature: float, top_k: int, top_p: float,
              gen: torch.Generator | None) -> int:
        if not sampling:
            return int(logits.argmax())
        p = _process_logits(logits, temperature, top_k, top_p)
        return int(torch.multinomial(p, 1, generator=gen))

    @staticmethod
    def _accept_greedy(tree: DraftTree, logits: torch.Tensor) -> tuple[torch.Tensor, list[int], int]:
        """The longest root-to-leaf prefix on which every token is the target's
        argmax after its parent (DART's evaluate_posterior). Returns the
        accepted node indices (root first), the accepted draft tokens and the
        bonus token."""
        pred = logits.argmax(-1)  # the target's choice after each node
        ri = tree.retrieve_indices
        safe = ri.clamp(min=0)
        cand = torch.where(ri >= 0, tree.draft_tokens[safe], torch.full_like(ri, -1))
        after = pred[safe]
        if ri.shape[1] > 1:
            ok = (cand[:, 1:] == after[:, :-1]).to(torch.int32)
            acc = torch.cumprod(ok, dim=1).sum(dim=1)
        else:
            acc = torch.zeros(ri.shape[0], dtype=torch.int64, device=ri.device)
        best = torch.argmax(acc)
        row = torch.cat((acc[best].view(1).to(torch.int64), cand[best], after[best])).tolist()  # one sync
        a = int(row[0])
        w = ri.shape[1]
        drafts = row[2:2 + a]
        bonus = int(row[1 + w + a])
        return ri[best, : a + 1], drafts, bonus

    @staticmethod
    def _accept_sampling(tree: DraftTree, logits: torch.Tensor, temperature: float, top_k: int, top_p: float,
                         gen: torch.Generator | None) -> tuple[torch.Tensor, list[int], int]:
        """Tree speculative sampling with deterministic drafts: at each node,
        try its children in order; a child x is accepted with probability
        p(x) under the current distribution, else p(x) is zeroed and p
        renormalized; when no child is accepted the bonus token is drawn from
        what remains (at a leaf: from the target's distribution). Every
        committed token is distributed exactly as the target samples it."""
        n = tree.draft_tokens.shape[0]
        anc = tree.tree_mask & ~torch.eye(n, dtype=torch.bool, device=tree.tree_mask.device)
        idx = torch.arange(n, device=anc.device)
        parents = torch.where(anc.any(1), (anc.to(torch.int64) * idx).argmax(1), torch.full_like(idx, -1))
        toks = tree.draft_tokens.tolist()
        par = parents.tolist()
        children: list[list[int]] = [[] for _ in range(n)]
        for i in range(1, n):
            children[par[i]].append(i)
        cur, path, drafts = 0, [0], []
        while True:
            p = _process_logits(logits[cur], temperature, top_k, top_p)
            nxt = -1
            for c in children[cur]:
                x = toks[c]
                r = float(torch.rand((), generator=gen, device=p.device))
                px = float(p[x])
                if px > 0 and r < px:
                    nxt = c
                    break
                p[x] = 0.0
                s = p.sum()
                if float(s) <= 0:
                    break
                p = p / s
            if nxt < 0:
                bonus = int(torch.multinomial(p, 1, generator=gen))
                break
            cur = nxt
            path.append(nxt)
            drafts.append(toks[nxt])
        return torch.tensor(path, dtype=torch.long, device=logits.device), drafts, bonus

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
