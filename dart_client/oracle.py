"""A target that follows a reference text: real compute, forced answers.

``OracleTarget(model, references)`` wraps a causal LM of any shape (random
weights will do: ``random_models.random_target``). Its forward runs the
model's whole forward, then replaces the logits so that the argmax after
every position p is the reference's token p + 1. Greedy decoding then
reproduces the reference, and a speculative step accepts exactly what
teacher forcing would accept at that position, while each step costs what
the real model's forward costs. That turns a shape-only model into an
honest speedup measurement: acceptance from real text, time from the real
forward (``bench/bench_dart.py --oracle``).

Which reference a batch row follows is read from the KV cache, not told:
the prompts are the references' first tokens, and a row's keys at its
first few positions (layer 0) identify its prompt. They are never moved by
the generator's cache compaction (which only touches positions after the
prompt) and travel with the row when finished rows are dropped, so the
generator needs no hook. Rows whose prompts share those first tokens must
follow the same reference.

Its forward can be captured in a CUDA graph (static_verify.StaticTarget):
what a step reads (the prompts' fingerprints and references, the
projection) stays at one address from call to call, and ``graph_epoch``
changes when one is replaced (a new bind, more prompts than ever before).
"""
from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch

__all__ = ["OracleDrafter", "OracleTarget"]


class OracleTarget(torch.nn.Module):
    """``model`` answering with ``references`` (token id sequences). Each
    prompt of a generate() call follows the reference it is a prefix of
    (the one sharing its longest prefix), unless ``bind`` names them.

    fingerprint_tokens: how many first positions of a prompt identify it
    (at most the shortest prompt's length).

    graph_epoch: changes whenever a tensor the forward reads is replaced, so
    that captured CUDA graphs are captured again."""

    #: Prompt fingerprints kept (at least): a generate() call of more rows replaces the store.
    kRows = 64
    #: A free row of the store: farther from any prompt's fingerprint than another prompt's.
    kFree = 1e15

    def __init__(self, model: Any, references: Sequence[Sequence[int]] = (), *, fingerprint_tokens: int = 16) -> None:
        super().__init__()
        self.model = model
        self.config = model.config
        self.generation_config = getattr(model, "generation_config", None)
        self.fingerprint_tokens = fingerprint_tokens
        self._fp: torch.Tensor | None = None      # [kRows or more, 16]: the prefill's rows first, kFree after
        self._docs: torch.Tensor | None = None    # [as _fp]: the reference each row follows
        self._refs: torch.Tensor | None = None    # [references, longest + 1], -1 padded
        self._next_bind: list[int] | None = None
        self._proj: dict[int, torch.Tensor] = {}  # by the fingerprinted width; never replaced
        self.graph_epoch = 0
        self._cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        if references:
            self.bind(references)
        # The generator reads the forward's parameters (logits_to_keep, the
        # cache's name) from its signature: the model's.
        def forward(*args: Any, **kw: Any) -> Any:
            return self._forward(*args, **kw)

        forward.__signature__ = inspect.signature(model.forward)  # type: ignore[attr-defined]
        self.forward = forward  # type: ignore[method-assign]

    def bind(self, references: Sequence[Sequence[int]], rows: Sequence[int] | None = None) -> None:
        """The references to follow; ``rows``: which reference each prompt of
        the next generate() call follows, in prompt order (default: each
        prompt's own, by its tokens)."""
        if not references:
            raise ValueError("references: give at least one token sequence")
        longest = max(len(r) for r in references)
        refs = torch.full((len(references), longest + 1), -1, dtype=torch.long)
        for i, r in enumerate(references):
            if len(r) == 0:
                raise ValueError(f"references[{i}] is empty")
            refs[i, :len(r)] = torch.as_tensor(list(r), dtype=torch.long)
        self._refs = refs.to(self.device)
        self.graph_epoch += 1
        self._next_bind = list(rows) if rows is not None else None

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    def get_input_embeddings(self) -> Any:
        return self.model.get_input_embeddings()

    def get_output_embeddings(self) -> Any:
        return self.model.get_output_embeddings()

    def _forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor | None = None, **kw: Any) -> Any:
        cache = kw.get(self._cache_kw)
        prefill = cache is None or int(cache.get_seq_length()) == 0
        if position_ids is None:  # positions follow what the cache holds
            past = 0 if prefill else int(cache.get_seq_length())
            position_ids = torch.arange(past, past + input_ids.shape[1], device=input_ids.device)[None].expand(
                input_ids.shape[0], -1)
            given = None
        else:
            given = position_ids
        out = self.model(input_ids=input_ids, position_ids=given, **kw)
        keys = _first_layer_keys(getattr(out, self._cache_kw))
        if prefill:
            self._start(keys, input_ids)
        docs = self._docs_of(keys)
        positions = self._logit_positions(input_ids, position_ids, kw.get("logits_to_keep"),
                                          kw.get("num_logits_to_keep"), out.logits.shape[1])
        out.logits = self._forced(out.logits, docs, positions)
        return out

    # -- which reference a row follows ---------------------------------------------------

    def _fingerprints(self, keys: torch.Tensor) -> torch.Tensor:
        b, h, _, d = keys.shape
        k = min(self.fingerprint_tokens, keys.shape[2])
        flat = keys[:, :, :k].float().reshape(b, -1)
        proj = self._proj.get(flat.shape[1])
        if proj is None:
            g = torch.Generator().manual_seed(0)
            proj = self._proj[flat.shape[1]] = torch.randn(flat.shape[1], 16, generator=g).to(flat.device)
        return flat @ proj

    def _start(self, keys: torch.Tensor, ids: torch.Tensor) -> None:
        if self._refs is None:
            raise ValueError("OracleTarget: bind(references) before decoding")
        rows = ids.shape[0]
        order = self._next_bind if self._next_bind is not None else self._own_references(ids)
        self._next_bind = None
        if len(order) != rows or max(order) >= self._refs.shape[0]:
            raise ValueError(f"OracleTarget: {rows} prompts, bound to references {order} "
                             f"of {self._refs.shape[0]}")
        fp = self._fingerprints(keys)
        docs = torch.as_tensor(order, dtype=torch.long, device=keys.device)
        if self._fp is None or self._fp.shape[0] < rows or self._fp.device != fp.device:
            self._fp = torch.empty(max(rows, self.kRows), fp.shape[1], device=fp.device)
            self._docs = torch.empty(self._fp.shape[0], dtype=torch.long, device=fp.device)
            self.graph_epoch += 1
        assert self._docs is not None
        self._fp.fill_(self.kFree)[:rows] = fp
        self._docs.zero_()[:rows] = docs
        # Two prompts that look alike must follow one reference.
        same = torch.cdist(fp, fp) == 0
        if bool((same & (docs[:, None] != docs[None, :])).any()):
            raise ValueError("OracleTarget: two prompts share their first fingerprint_tokens tokens but follow "
                             "different references; lengthen the prompts or raise fingerprint_tokens")

    def _own_references(self, ids: torch.Tensor) -> list[int]:
        """Each prompt's reference: the one sharing its longest prefix (the
        prompts arrive right-padded)."""
        assert self._refs is not None
        width = min(ids.shape[1], self._refs.shape[1])
        same = (ids[:, None, :width] == self._refs[None, :, :width]).long()  # [B, R, width]
        common = same.cumprod(dim=2).sum(dim=2)  # [B, R]
        best = common.max(dim=1)
        if bool((best.values == 0).any()):
            raise ValueError("OracleTarget: a prompt is not a prefix of any reference")
        ties = (common == best.values[:, None]).sum(dim=1) > 1
        if bool(ties.any()):
            raise ValueError("OracleTarget: a prompt is a prefix of several references; name its reference "
                             "with bind(references, rows=...)")
        return best.indices.tolist()

    def _docs_of(self, keys: torch.Tensor) -> torch.Tensor:
        assert self._fp is not None and self._docs is not None
        nearest = torch.cdist(self._fingerprints(keys), self._fp,
                              compute_mode="donot_use_mm_for_euclid_dist").argmin(dim=1)
        return self._docs[nearest]

    # -- the answers ------------------------------------------------------------------------

    @staticmethod
    def _logit_positions(ids: torch.Tensor, pos: torch.Tensor, keep: Any, keep_old: Any,
                         n_logits: int) -> torch.Tensor:
        """[B, n_logits]: the position each row of logits answers (pos: every input's)."""
        t = ids.shape[1]
        keep = keep if keep is not None else keep_old
        if isinstance(keep, torch.Tensor):
            return pos[:, keep]
        if isinstance(keep, int) and keep > 0:
            return pos[:, -keep:]
        return pos[:, t - n_logits:]

    def _forced(self, logits: torch.Tensor, docs: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        assert self._refs is not None
        nxt = self._refs[docs[:, None], (positions + 1).clamp(max=self._refs.shape[1] - 1)]
        nxt = torch.where(nxt < 0, torch.zeros_like(nxt), nxt)  # past the reference's end: any token
        forced = torch.full_like(logits, -1e4)
        return forced.scatter_(2, nxt[..., None], 1e4)


def _first_layer_keys(cache: Any) -> torch.Tensor:
    """Layer 0's keys [B, H, T, d] of a transformers KV cache."""
    layers = getattr(cache, "layers", None)
    if layers is not None:
        return layers[0].keys
    return cache.key_cache[0]


class OracleDrafter:
    """A DART drafter whose lattices come from a stated model of the text:
    ``drafter``'s forward and logits are computed as always (their cost is
    real), then replaced, row by row, by ``lattice(document, t)``'s
    (tokens [D, K] as target ids, probabilities [D, K]) for the document the
    row follows and its root position t, e.g. ``ngram_eval.synthetic.
    TextLattices`` over the oracle target's references. Tokens outside the
    draft vocabulary are left out, as a real drafter could not draft them.
    The tree source hands it each row's sequence (``follow``)."""

    def __init__(self, drafter: Any, references: Sequence[Sequence[int]],
                 lattice: Callable[[int, int], tuple[Any, Any]], *, fingerprint_tokens: int = 16) -> None:
        self.inner = drafter
        self.config = drafter.config
        self.d2t = drafter.d2t
        self.lattice = lattice
        self.fingerprint_tokens = fingerprint_tokens
        self._docs = {tuple(r[:fingerprint_tokens]): i for i, r in enumerate(references)}
        if len(self._docs) != len(references):
            raise ValueError("OracleDrafter: two references share their first fingerprint_tokens tokens")
        ids = torch.arange(len(drafter.d2t), device=drafter.d2t.device) + drafter.d2t
        self._t2d = torch.full((int(ids.max()) + 1,), -1, dtype=torch.long, device=ids.device)
        self._t2d[ids] = torch.arange(len(ids), device=ids.device)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner(*args, **kwargs)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.inner.compute_logits(hidden)

    def follow(self, logits: torch.Tensor, sequences: Sequence[Sequence[int]]) -> torch.Tensor:
        """logits [B, D, draft vocab] replaced by the lattices of the rows
        whose sequences (prompt and committed tokens, the root last) are given."""
        out = torch.full_like(logits, -1e4)
        depth = logits.shape[1]
        for b, seq in enumerate(sequences):
            doc = self._docs.get(tuple(seq[:self.fingerprint_tokens]))
            if doc is None:
                raise ValueError("OracleDrafter: a sequence follows none of the references")
            toks, probs = self.lattice(doc, len(seq) - 1)
            toks = torch.as_tensor(toks[:depth], dtype=torch.long, device=logits.device)
            logp = torch.log(torch.as_tensor(probs[:depth], dtype=torch.float32, device=logits.device))
            known = (toks >= 0) & (toks < len(self._t2d))
            draft = torch.where(known, self._t2d[toks.clamp(0, len(self._t2d) - 1)], torch.full_like(toks, -1))
            level = torch.arange(toks.shape[0], device=logits.device)[:, None].expand_as(toks)
            ok = draft >= 0
            out[b, level[ok], draft[ok]] = logp[ok].to(out.dtype)
        return out
