"""DART's drafter: one decoder layer that predicts D future tokens in one pass.

Architecture (as DART's published inference code runs it; written from its
description, not copied):

- ``fc``: the target's hidden states at the inputs of three layers (low, mid,
  high; ``3 * target_hidden_size``) projected to ``hidden_size``;
- ``midlayer``: one Llama-style layer whose attention reads
  ``[input_layernorm(embedding of the next token), hidden_norm(fc output)]``
  (``2 * hidden_size`` wide). ``draft_length`` mask positions are appended
  after the real positions: their attention input is the learned
  ``mask_rep`` (``2 * hidden_size``) and their residual ``mask_rep[:hidden]``.
  Plain causal attention with RoPE over the cached real positions, the new
  real positions and the mask positions; only the last real position and the
  mask positions (``D = draft_length + 1``) go through the MLP;
- ``norm`` then ``lm_head`` over the draft vocabulary; ``d2t`` maps a draft
  id to a target id (``target = draft + d2t[draft]``), ``t2d`` marks the
  target ids present in the draft vocabulary.

DART's inference applies ``norm`` twice before ``lm_head`` (the layer's
forward ends with ``norm`` and ``compute_logits`` normalizes again); so does
this module by default (``final_norm_passes=2``).

The token embeddings are the target's: the caller passes embedded tokens.

Checkpoint format (a folder): ``config.json`` (``LlamaConfig``-style keys
plus ``draft_length``, ``draft_vocab_size``, optional ``target_hidden_size``
and ``head_dim``) and ``model.safetensors`` with ``fc.weight``,
``midlayer.*``, ``norm.weight``, ``lm_head.weight``, ``d2t``, ``t2d``
(an ``embed_tokens.weight`` in the file is ignored).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

__all__ = ["DartDrafter", "DrafterCache", "DrafterConfig"]

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
IGNORED_KEYS = ("embed_tokens.weight",)

# The keys DrafterConfig reads; everything else in config.json is kept and written back.
_KNOWN = (
    "vocab_size", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
    "head_dim", "draft_length", "draft_vocab_size", "target_hidden_size", "rms_norm_eps", "rope_theta",
    "rope_scaling", "max_position_embeddings", "hidden_act",
)


@dataclass
class DrafterConfig:
    """The drafter's shape. Defaults are DART's (``DartConfig``/``LlamaConfig``)
    for keys a checkpoint may leave out; ``draft_length`` is required."""

    draft_length: int  # mask positions appended: D - 1
    vocab_size: int = 32000  # the target's vocabulary (t2d's length)
    hidden_size: int = 4096
    intermediate_size: int = 11008
    num_attention_heads: int = 32
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    draft_vocab_size: int | None = None
    target_hidden_size: int | None = None
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: dict[str, Any] | None = None
    max_position_embeddings: int = 2048
    hidden_act: str = "silu"
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.num_key_value_heads is None:
            self.num_key_value_heads = self.num_attention_heads
        if self.head_dim is None:
            self.head_dim = self.hidden_size // self.num_attention_heads
        if self.draft_vocab_size is None:
            self.draft_vocab_size = self.vocab_size
        if self.target_hidden_size is None:
            self.target_hidden_size = self.hidden_size
        if self.draft_length < 0:
            raise ValueError(f"draft_length must be >= 0, got {self.draft_length}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")

    @property
    def num_levels(self) -> int:
        """D: the positions predicted by one forward pass (draft_length + 1)."""
        return self.draft_length + 1

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DrafterConfig:
        if "draft_length" not in d:
            raise ValueError("drafter config.json has no draft_length: not a DART drafter checkpoint")
        known = {k: d[k] for k in _KNOWN if k in d}
        extra = {k: v for k, v in d.items() if k not in _KNOWN}
        return cls(**known, extra=extra)

    def to_dict(self) -> dict[str, Any]:
        out = {"architectures": ["LlamaForCausalLMDart"], "model_type": "llama", **self.extra}
        for k in _KNOWN:
            out[k] = getattr(self, k)
        return out


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)


def _default_inv_freq(dim: int, base: float) -> torch.Tensor:
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))


class RotaryTables:
    """RoPE cos/sin for the drafter, always computed in float32 and only then
    cast to the activations' dtype (DART builds its tables in float32 too; a
    bf16 ``inv_freq`` is off by up to 0.4 %, an error that grows with the
    position). Plain attributes, not module buffers, so that
    ``module.to(torch.bfloat16)`` cannot cast them.

    rope_scaling: none/``default``; ``linear`` (positions divided by
    ``factor``; DART's own linear branch builds its table with base 10,000
    whatever ``rope_theta`` says, this one uses ``rope_theta``); ``llama3``;
    ``dynamic`` (NTK: the base grows with the table length; as in DART, the
    table covers at least ``max_position_embeddings + 20`` positions, so the
    base is scaled from the first position, and a longer pass widens it)."""

    def __init__(self, cfg: DrafterConfig) -> None:
        self.dim = int(cfg.head_dim)
        self.theta = float(cfg.rope_theta)
        self.max_positions = int(cfg.max_position_embeddings)
        rs = cfg.rope_scaling or {}
        self.kind = rs.get("rope_type", rs.get("type")) or "default"
        self.factor = rs.get("factor")
        self.divisor = 1.0
        if self.kind in ("linear", "dynamic") and self.factor is None:
            raise ValueError(f"rope_scaling {self.kind!r} needs a 'factor'")
        inv = _default_inv_freq(self.dim, self.theta)
        if self.kind == "default":
            pass
        elif self.kind == "linear":
            self.divisor = float(self.factor)
        elif self.kind == "llama3":
            inv = _llama3_inv_freq(inv, rs)
        elif self.kind == "dynamic":
            self.factor = float(self.factor)
        else:
            raise NotImplementedError(f"rope_scaling type {self.kind!r} is not supported by the drafter "
                                      "(supported: default, linear, dynamic, llama3)")
        self.inv_freq = inv  # float32, CPU; copied per device on use
        self._on_device: dict[tuple[torch.device, int], torch.Tensor] = {}

    def table_length(self, end: int) -> int:
        """dynamic: the length the NTK base is scaled for when positions up to ``end`` are needed."""
        return max(self.max_positions + 20, end)

    def dynamic_base(self, length: int) -> float:
        f, m, d = self.factor, self.max_positions, self.dim
        return self.theta * ((f * length / m) - (f - 1)) ** (d / (d - 2))

    def _inv(self, device: torch.device, end: int) -> torch.Tensor:
        key = (device, self.table_length(end) if self.kind == "dynamic" else 0)
        inv = self._on_device.get(key)
        if inv is None:
            inv = (_default_inv_freq(self.dim, self.dynamic_base(key[1])) if self.kind == "dynamic"
                   else self.inv_freq).to(device)
            if len(self._on_device) > 64:
                self._on_device.clear()
            self._on_device[key] = inv
        return inv

    def cos_sin_at(self, positions: torch.Tensor, ends: list[int], dtype: torch.dtype
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [B, 1, t, head_dim] in ``dtype`` for int64 positions [B, t];
        ends[b]: the cache length row b's pass reaches (the dynamic base)."""
        device = positions.device
        pos = positions.to(torch.float32)
        if self.divisor != 1.0:
            pos = pos / self.divisor
        if self.kind == "dynamic":
            inv = torch.stack([self._inv(device, e) for e in ends])[:, None, :]
        else:
            inv = self._inv(device, 0)
        freqs = pos[..., None] * inv
        emb = torch.cat((freqs, freqs), dim=-1)[:, None]
        return emb.cos().to(dtype), emb.sin().to(dtype)

    def cos_sin(self, past: int, t: int, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [t, head_dim] for positions past .. past + t - 1, in ``dtype``."""
        pos = torch.arange(past, past + t, device=device, dtype=torch.int64)[None]
        cos, sin = self.cos_sin_at(pos, [past + t], dtype)
        return cos[0, 0], sin[0, 0]


def _llama3_inv_freq(inv: torch.Tensor, rs: dict[str, Any]) -> torch.Tensor:
    factor = rs["factor"]
    low, high = rs["low_freq_factor"], rs["high_freq_factor"]
    orig = rs["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv
    low_wl, high_wl = orig / low, orig / high
    smooth = (orig / wavelen - low) / (high - low) if low != high else torch.zeros_like(inv)
    mid = (1 - smooth) * inv / factor + smooth * inv
    return torch.where(wavelen < high_wl, inv, torch.where(wavelen > low_wl, inv / factor, mid))


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class DrafterCache:
    """Keys and values of the drafter's real positions, [B, kv_heads, capacity, head_dim].

    Row b holds ``lengths[b]`` positions, contiguous from 0 (rows of a batch
    differ in length; what lies beyond a row's length is never read). Only
    real positions are stored: the mask positions of a pass are attended to
    and dropped, as DART does. Grows by doubling."""

    def __init__(self) -> None:
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None
        self.lengths: list[int] = []

    @property
    def length(self) -> int:
        """The longest row's length (a single sequence's length)."""
        return max(self.lengths, default=0)

    def append(self, k: torch.Tensor, v: torch.Tensor, counts: list[int]) -> None:
        """Row b's first counts[b] positions of k, v [B, kv, S, hd] go after its cached ones."""
        b, h, s, d = k.shape
        if not self.lengths:
            self.lengths = [0] * b
        if len(self.lengths) != b:
            raise ValueError(f"the cache holds {len(self.lengths)} rows, the pass has {b}")
        ends = [n + c for n, c in zip(self.lengths, counts)]
        need = max(ends)
        if self.k is None or need > self.k.shape[2]:
            cap = max(need, 2 * (self.k.shape[2] if self.k is not None else 0), 64)
            nk, nv = k.new_zeros(b, h, cap, d), v.new_zeros(b, h, cap, d)
            if self.k is not None:
                old = self.k.shape[2]
                nk[:, :, :old] = self.k
                nv[:, :, :old] = self.v
            self.k, self.v = nk, nv
        assert self.v is not None
        if len(set(self.lengths)) == 1 and all(c == s for c in counts):  # one slice for the whole batch
            n = self.lengths[0]
            self.k[:, :, n:n + s] = k
            self.v[:, :, n:n + s] = v
        else:
            for r, (n, c) in enumerate(zip(self.lengths, counts)):
                self.k[r, :, n:n + c] = k[r, :, :c]
                self.v[r, :, n:n + c] = v[r, :, :c]
        self.lengths = ends

    def select(self, rows: list[int]) -> None:
        """Keeps the given rows, in that order (sequences that finished leave the batch)."""
        if self.k is not None:
            idx = torch.tensor(rows, device=self.k.device)
            self.k, self.v = self.k.index_select(0, idx), self.v.index_select(0, idx)  # type: ignore[union-attr]
        self.lengths = [self.lengths[r] for r in rows]


class DrafterAttention(nn.Module):
    def __init__(self, cfg: DrafterConfig) -> None:
        super().__init__()
        self.nh, self.nkv, self.hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        h2 = 2 * cfg.hidden_size
        self.q_proj = nn.Linear(h2, self.nh * self.hd, bias=False)
        self.k_proj = nn.Linear(h2, self.nkv * self.hd, bias=False)
        self.v_proj = nn.Linear(h2, self.nkv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.nh * self.hd, cfg.hidden_size, bias=False)
        self.rotary = RotaryTables(cfg)

    def forward(self, x: torch.Tensor, past: list[int], counts: list[int], cache: DrafterCache | None) -> torch.Tensor:
        """x [B, S + m, 2 hidden]: S new real positions (row b's first
        counts[b] are real, the rest padding) then m mask positions. Row b's
        real position i sits at past[b] + i, its mask position j at
        past[b] + counts[b] + j. Real positions see the cached ones and the
        real ones up to themselves; mask position j sees every real position
        of its row and mask positions 0 .. j."""
        b, t, _ = x.shape
        m = t - max(counts) if counts else 0
        s = t - m
        dev = x.device
        q = self.q_proj(x).view(b, t, self.nh, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.nkv, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.nkv, self.hd).transpose(1, 2)
        ar = torch.arange(t, device=dev)
        past_t = torch.tensor(past, device=dev)[:, None]
        cnt_t = torch.tensor(counts, device=dev)[:, None]
        # real slot i: past + i; mask slot s + j: past + counts + j
        positions = past_t + torch.where(ar[None] < s, ar[None], cnt_t + ar[None] - s)
        cos, sin = self.rotary.cos_sin_at(positions, [p + c + m for p, c in zip(past, counts)], x.dtype)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        if cache is not None:
            cache.append(k[:, :, :s], v[:, :, :s], counts)
            assert cache.k is not None and cache.v is not None
            total = cache.length
            keys = torch.cat((cache.k[:, :, :total], k[:, :, s:]), dim=2)
            values = torch.cat((cache.v[:, :, :total], v[:, :, s:]), dim=2)
        else:  # no cache: the pass's own real positions are all there is
            if any(past):
                raise ValueError("past positions need a cache")
            keys, values, total = k, v, s
        if self.nkv != self.nh:
            rep = self.nh // self.nkv
            keys = keys.repeat_interleave(rep, dim=1)
            values = values.repeat_interleave(rep, dim=1)
        # which keys each query sees: [B, t, total + m]
        kpos = torch.arange(total + m, device=dev)[None, None]
        real_end = past_t + cnt_t  # exclusive end of each row's real keys in the cache region
        is_real_q = ar[None, :, None] < s
        real_key = kpos < total
        limit = torch.where(is_real_q, (past_t + ar[None] + 1)[..., None], real_end[..., None])
        allowed = real_key & (kpos < limit)
        mask_key_ok = (~real_key) & (~is_real_q) & (kpos - total <= ar[None, :, None] - s)
        allowed = allowed | mask_key_ok
        # padded real slots (i >= counts[b]) see key 0 only: finite, and never read
        pad_q = is_real_q & (ar[None, :, None] >= cnt_t[..., None])
        allowed = torch.where(pad_q, kpos == 0, allowed)
        scores = torch.matmul(q, keys.transpose(2, 3)) / math.sqrt(self.hd)
        scores = scores.masked_fill(~allowed[:, None], float("-inf"))
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        out = torch.matmul(probs, values).transpose(1, 2).reshape(b, t, self.nh * self.hd)
        return self.o_proj(out)


class DrafterMLP(nn.Module):
    def __init__(self, cfg: DrafterConfig) -> None:
        super().__init__()
        from transformers.activations import ACT2FN

        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)
        self.act = ACT2FN[cfg.hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class DrafterLayer(nn.Module):
    """DART's ``midlayer``."""

    def __init__(self, cfg: DrafterConfig) -> None:
        super().__init__()
        self.hidden_size = cfg.hidden_size
        self.draft_length = cfg.draft_length
        self.mask_rep = nn.Parameter(torch.randn(2 * cfg.hidden_size))
        self.self_attn = DrafterAttention(cfg)
        self.mlp = DrafterMLP(cfg)
        self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, emb: torch.Tensor, hidden: torch.Tensor, past: list[int], counts: list[int],
                cache: DrafterCache | None) -> torch.Tensor:
        b, s, _ = hidden.shape
        m = self.draft_length
        x = torch.cat((self.input_layernorm(emb), self.hidden_norm(hidden)), dim=-1)
        mask = self.mask_rep.to(x.dtype)
        x = torch.cat((x, mask.view(1, 1, -1).expand(b, m, -1)), dim=1)
        residual = torch.cat((hidden, mask[: self.hidden_size].view(1, 1, -1).expand(b, m, -1)), dim=1)
        h = residual + self.self_attn(x, past, counts, cache)
        # each row's last real position, then the mask positions
        if all(c == s for c in counts):
            h = h[:, -(m + 1):]
        else:
            idx = torch.tensor([[c - 1] + list(range(s, s + m)) for c in counts], device=h.device)
            h = h.gather(1, idx[..., None].expand(-1, -1, h.shape[-1]))
        return h + self.mlp(self.post_attention_layernorm(h))


class DartDrafter(nn.Module):
    """DART's one-layer drafter. ``draft(aux_hidden, input_embeds, cache)``
    returns the logits of the D next-but-one positions, [D, draft_vocab_size]."""

    def __init__(self, cfg: DrafterConfig, final_norm_passes: int = 2) -> None:
        super().__init__()
        self.config = cfg
        self.final_norm_passes = final_norm_passes
        self.fc = nn.Linear(3 * cfg.target_hidden_size, cfg.hidden_size, bias=False)
        self.midlayer = DrafterLayer(cfg)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(cfg.draft_vocab_size, dtype=torch.int64))
        self.register_buffer("t2d", torch.zeros(cfg.vocab_size, dtype=torch.bool))

    @property
    def num_levels(self) -> int:
        return self.config.num_levels

    # -- inference ------------------------------------------------------------

    def forward(self, aux_hidden: torch.Tensor, input_embeds: torch.Tensor,
                cache: DrafterCache | None = None, counts: list[int] | None = None) -> torch.Tensor:
        """aux_hidden [B, S, 3 * target_hidden]: the target's low/mid/high hidden
        states of S new positions per row; input_embeds [B, S, hidden]: the
        embeddings of the tokens that follow them. counts[b]: how many of row
        b's S positions are real (default all; the rest is padding). Returns
        the normalized hidden states of each row's last real position and
        the draft_length mask positions [B, D, hidden]. The cache gains the
        real positions only."""
        b, s = aux_hidden.shape[:2]
        counts = [s] * b if counts is None else [int(c) for c in counts]
        if len(counts) != b or min(counts) < 1 or max(counts) > s:
            raise ValueError(f"counts must give 1..{s} real positions for each of {b} rows, got {counts}")
        past = list(cache.lengths) if cache is not None and cache.lengths else [0] * b
        h = self.midlayer(input_embeds, self.fc(aux_hidden), past, counts, cache)
        return self.norm(h)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        for _ in range(self.final_norm_passes - 1):
            hidden = self.norm(hidden)
        return self.lm_head(hidden)

    @torch.no_grad()
    def draft(self, aux_hidden: torch.Tensor, input_embeds: torch.Tensor, cache: DrafterCache | None,
              counts: list[int] | None = None) -> torch.Tensor:
        """Logits [D, draft_vocab_size] for one sequence (a batch of one row),
        [B, D, draft_vocab_size] for several."""
        out = self.compute_logits(self.forward(aux_hidden, input_embeds, cache, counts))
        return out[0] if out.shape[0] == 1 else out

    # -- checkpoints ----------------------------------------------------------

    @classmethod
    def from_pretrained(cls, path: str | Path, *, device: Any = None, dtype: torch.dtype | None = None,
                        final_norm_passes: int = 2) -> DartDrafter:
        """Loads a DART checkpoint folder (config.json + model.safetensors).
        Every weight of the module must be in the file (a missing one would
        stay random); ``embed_tokens.weight`` is ignored. d2t/t2d may be left
        out only when the draft vocabulary is the target's."""
        from safetensors.torch import load_file

        path = Path(path)
        cfg_file, weights = path / CONFIG_NAME, path / WEIGHTS_NAME
        for f in (cfg_file, weights):
            if not f.is_file():
                raise FileNotFoundError(f"{f}: missing; a DART drafter folder holds {CONFIG_NAME} and {WEIGHTS_NAME}")
        cfg = DrafterConfig.from_dict(json.loads(cfg_file.read_text()))
        state = {k: v for k, v in load_file(str(weights)).items() if k not in IGNORED_KEYS}
        with torch.device("meta"):
            probe = cls(cfg)
        expected = set(probe.state_dict())
        optional = set()
        if cfg.draft_vocab_size == cfg.vocab_size:
            optional = {"d2t", "t2d"}
        missing = sorted(expected - set(state) - optional)
        unexpected = sorted(set(state) - expected)
        if missing or unexpected:
            raise ValueError(f"{weights}: not a DART drafter for this config: missing {missing}, unexpected {unexpected}")
        model = cls(cfg, final_norm_passes=final_norm_passes)
        model.load_state_dict(state, strict=False)
        model.check_vocab_map()
        model.eval()
        model.to(device=device)
        if dtype is not None:
            model.to(dtype=dtype)  # buffers d2t/t2d keep their integer/bool dtypes
        return model

    def save_pretrained(self, path: str | Path) -> None:
        """Writes a DART checkpoint folder (no embeddings: they are the target's)."""
        from safetensors.torch import save_file

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        (path / CONFIG_NAME).write_text(json.dumps(self.config.to_dict(), indent=2) + "\n")
        state = {k: v.detach().contiguous().cpu() for k, v in self.state_dict().items()}
        save_file(state, str(path / WEIGHTS_NAME), metadata={"format": "pt"})

    def check_vocab_map(self) -> None:
        """d2t must map draft ids to distinct target ids inside the target vocabulary."""
        tgt = torch.arange(self.config.draft_vocab_size, device=self.d2t.device) + self.d2t
        if len(tgt) and (int(tgt.min()) < 0 or int(tgt.max()) >= self.config.vocab_size):
            raise ValueError(f"d2t maps draft ids outside the target vocabulary [0, {self.config.vocab_size})")
        if len(torch.unique(tgt)) != len(tgt):
            raise ValueError("d2t maps two draft ids to the same target id")

    @classmethod
    def random(cls, cfg: DrafterConfig, draft_to_target: torch.Tensor | None = None, *, seed: int = 0,
               std: float = 0.02) -> DartDrafter:
        """A randomly initialized drafter (tests, benchmarks). draft_to_target:
        the target id of each draft id (distinct; default: the first
        draft_vocab_size ids), from which d2t and t2d are set."""
        g = torch.Generator().manual_seed(seed)
        m = cls(cfg)
        with torch.no_grad():
            for name, p in m.named_parameters():
                if name.endswith("mask_rep"):
                    p.copy_(torch.randn(p.shape, generator=g))
                elif p.ndim == 2:
                    p.copy_(torch.randn(p.shape, generator=g) * std)
            ids = (torch.arange(cfg.draft_vocab_size) if draft_to_target is None
                   else torch.as_tensor(draft_to_target, dtype=torch.int64))
            if ids.shape != (cfg.draft_vocab_size,):
                raise ValueError(f"draft_to_target needs {cfg.draft_vocab_size} ids, got shape {tuple(ids.shape)}")
            m.d2t.copy_(ids - torch.arange(cfg.draft_vocab_size))
            m.t2d.zero_()
            m.t2d[ids] = True
        m.check_vocab_map()
        return m.eval()
