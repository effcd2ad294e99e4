"""Draft-tree pruning for the GPU worker: the drafter's logits in, DART's tree out.

``LocalPruner(trie)`` runs the engine in process; ``RemotePruner(targets)``
asks a trie host (``ngram-serve``) over gRPC and, when the host is slow or
down, prunes locally without the n-gram. Both are called like DART's
``tree_search``, for one sequence, or for a batch::

    tree = pruner(logits, d2t, tokens)   # logits [D, V_draft] on the device
    tree.draft_tokens, tree.retrieve_indices, tree.tree_mask, tree.tree_position_ids, tree.parents
    trees = pruner.prune_batch(logits, d2t, [tokens, ...])   # logits [B, D, V_draft]

Per call: top-k of each position's logits on the device, the draft ids mapped
to target ids with ``d2t`` (target = draft + d2t[draft]), a softmax over the k
logits of each position (DART's probabilities), one device-to-host copy of
the k tokens and probabilities per level for the whole batch; the search
(one engine ``prune_batch``, or one PruneTree RPC) sees the last N-1 tokens
of each context (N: the trie's order; the last token is the tree's root).
The trees come back in one host-to-device copy, as tensors on the logits'
device, in the shapes of DART's ``tree_search``: draft_tokens int64 [n],
retrieve_indices int64 [leaves, depth + 1] (-1 padded), tree_mask bool
[n, n] (row i: node i and its ancestors), tree_position_ids int64 [n] (node
depths), plus parents int64 [n] (-1 for the root). DART's generation loop
adds the batch dimensions ([1, n], [1, 1, n, n], [1, n]) itself.

The fallback search (RemotePruner, host unreachable: the whole call's
lattices) is the engine's own search with ngram_weight 0 on an empty
order-1 trie written by the engine's writer and held in memory: with
ngram_weight 0 the engine never looks the n-gram up, so the trie serves only
to validate token ids, and each tree is exactly the one the host would
return with ngram_weight 0.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from ngram_service import NgramIndex, _engine
from ngram_service.fingerprint import tokenizer_json_fingerprint
from ngram_service.tree import DEFAULTS, PrunedTree

__all__ = [
    "DraftTree",
    "LocalPruner",
    "PruneTiming",
    "PrunerStats",
    "RemotePruner",
    "TokenizerMismatchError",
    "model_fingerprint",
]

log = logging.getLogger(__name__)

#: DART's production search parameters (tree_search_config.py); the
#: pruning ones are the engine's defaults, defined there once.
DART_TOPK = 25
DART_BEAM_WIDTH: int = DEFAULTS["beam_width"]
DART_MAX_NODES: int = DEFAULTS["max_nodes"]
DART_NGRAM_WEIGHT: float = DEFAULTS["ngram_weight"]


@dataclass(frozen=True)
class DraftTree:
    """DART's draft tree, as ``tree_search`` returns it (no batch dimension),
    plus each node's parent. Unpacks like DART's four outputs::

        draft_tokens, retrieve_indices, tree_mask, tree_position_ids = tree
    """

    draft_tokens: torch.Tensor  # int64 [n]; node 0 is the root (the last context token)
    retrieve_indices: torch.Tensor  # int64 [leaves, max depth + 1], root to leaf, -1 padded
    tree_mask: torch.Tensor  # bool [n, n]: row i marks node i and its ancestors
    tree_position_ids: torch.Tensor  # int64 [n]: depth of each node (0 for the root)
    parents: torch.Tensor | None = None  # int64 [n], -1 for the root (None: read from tree_mask)

    def __post_init__(self) -> None:
        if self.parents is None:  # a tree made by hand: the deepest ancestor of each node
            m = self.tree_mask
            n = m.shape[0]
            anc = m & ~torch.eye(n, dtype=torch.bool, device=m.device)
            idx = torch.arange(n, device=m.device)
            par = torch.where(anc.any(1), (anc.to(torch.int64) * idx).argmax(1), torch.full_like(idx, -1))
            object.__setattr__(self, "parents", par)

    def __iter__(self) -> Iterator[torch.Tensor]:
        return iter((self.draft_tokens, self.retrieve_indices, self.tree_mask, self.tree_position_ids))

    @property
    def n_nodes(self) -> int:
        """Nodes, the root included."""
        return int(self.draft_tokens.shape[0])


class TokenizerMismatchError(ValueError):
    """The trie was built with another tokenizer than the model's."""


@dataclass
class PruneTiming:
    """Seconds spent in the last call, by part."""

    topk: float = 0.0  # top-k, softmax and d2t on the device, the copy to the host
    search: float = 0.0  # the local engine's search (LocalPruner, or RemotePruner's fallback)
    transport: float = 0.0  # the RPC round trip, remote search included (RemotePruner)
    tensors: float = 0.0  # the tree's tensors built on the device
    remote: bool = False  # the tree came from the host

    @property
    def prune(self) -> float:
        """Client-side pruning work: everything but the RPC."""
        return self.topk + self.search + self.tensors


@dataclass
class PrunerStats:
    calls: int = 0
    remote_ok: int = 0
    fallbacks: int = 0  # calls pruned locally without the n-gram
    errors: dict[str, int] = field(default_factory=dict)  # failed RPCs by gRPC status code
    skipped_backoff: int = 0  # fallbacks without an RPC (waiting out a back-off)
    last_error: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"calls": self.calls, "remote_ok": self.remote_ok, "fallbacks": self.fallbacks,
                "errors": dict(self.errors), "skipped_backoff": self.skipped_backoff, "last_error": self.last_error}


def model_fingerprint(tokenizer: Any) -> str:
    """The tokenizer fingerprint the trie header carries, for the model's
    tokenizer.json (the file, or a folder holding one). For a trie built
    from a tiktoken rank file, pass ``tokenizer_fingerprint=`` (``ngram-info``
    prints it)."""
    return tokenizer_json_fingerprint(tokenizer)


def _check_fingerprint(info: dict[str, Any], expected: str | None, where: str) -> None:
    if not expected:
        return
    have = (info.get("tokenizer") or {}).get("fingerprint") or info.get("tokenizer_fingerprint") or ""
    if not have:
        log.warning("%s: the trie records no tokenizer fingerprint; cannot check it against the model's", where)
        return
    if have != expected:
        raise TokenizerMismatchError(
            f"{where}: the trie was built with tokenizer {have[:16]}..., the model's is {expected[:16]}...: "
            "draft trees would be scored with the wrong n-grams")


# ---- the fallback engine trie ------------------------------------------------

_fallback_lock = threading.Lock()
_fallback: dict[int, NgramIndex] = {}


def fallback_index(vocab_size: int) -> NgramIndex:
    """An empty order-1 trie over ``vocab_size`` ids, in memory (about 20 KB
    for 152k ids), cached per size: the engine's search with ngram_weight 0
    needs a trie only to validate ids."""
    size = max(4096, -(-int(vocab_size) // 4096) * 4096)
    with _fallback_lock:
        idx = _fallback.get(size)
        if idx is None:
            idx = _fallback[size] = NgramIndex(_empty_trie(size))
        return idx


def _empty_trie(vocab_size: int) -> Any:
    """An order-1 trie over vocab_size ids, every count 0, written by the
    engine's writer to a temporary file and loaded into memory."""
    import tempfile

    meta = json.dumps({"name": "dart-client-fallback"}, sort_keys=True).encode()
    with tempfile.TemporaryDirectory(prefix="dart-fallback-") as d:
        f = Path(d) / "empty.ngt"
        w = _engine.TrieWriter(str(f), 1, vocab_size, -1, meta, [vocab_size], [[0]], [[vocab_size]])
        w.append(1, None, np.zeros(vocab_size, dtype=np.uint64), None)
        w.finish()
        data = f.read_bytes()
    return _engine.Trie.from_bytes(data, "<dart-client fallback>", False)


# ---- shared machinery ----------------------------------------------------------

class _Lattice(NamedTuple):
    tokens: np.ndarray  # int64 [D, K] target ids
    probs: np.ndarray  # float32 [D, K]


class _Job(NamedTuple):
    """One lattice ready for a search: the index that serves it and the request."""

    index: Any  # NgramIndex, or None for "the host"
    prefix: np.ndarray
    tokens: Any
    probs: Any
    params: dict[str, Any]


class _PrunerBase:
    """Top-k on the device, the search (subclasses), the trees back as tensors."""

    def __init__(
        self,
        *,
        topk: int = DART_TOPK,
        beam_width: int = DART_BEAM_WIDTH,
        max_nodes: int = DART_MAX_NODES,
        ngram_weight: float = DART_NGRAM_WEIGHT,
        level_weights: Sequence[float] | None = None,
        logit_weights: Sequence[float] | None = None,
        eos_token_id: int | None = None,
        ngram_on_first_level: bool = False,
        temperature: float = 1.0,
    ) -> None:
        if topk < 1:
            raise ValueError(f"topk must be >= 1, got {topk}")
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.topk = int(topk)
        self.temperature = float(temperature)
        self.params: dict[str, Any] = {
            "beam_width": int(beam_width),
            "max_nodes": int(max_nodes),
            "ngram_weight": float(ngram_weight),
            "level_weights": None if level_weights is None else list(map(float, level_weights)),
            "logit_weights": None if logit_weights is None else list(map(float, logit_weights)),
            "ngram_on_first_level": bool(ngram_on_first_level),
        }
        self._eos_param = eos_token_id
        self.stats = PrunerStats()
        self.timing = PruneTiming()
        self._d2t_cache: tuple[Any, torch.Tensor] | None = None

    # -- subclasses --------------------------------------------------------------

    order: int = 1
    vocab_size: int = 0

    def _search(self, prefixes: list[np.ndarray], lats: list[_Lattice], tm: PruneTiming) -> list[PrunedTree]:
        raise NotImplementedError

    # -- the calls -----------------------------------------------------------------

    def __call__(self, logits: torch.Tensor, d2t: torch.Tensor | None, tokens: Any) -> DraftTree:
        """logits [D, V_draft] (any device); d2t int [V_draft] or None (draft
        ids are target ids); tokens: the sequence so far (list, array or
        tensor; its last token is the root). Returns the DraftTree on
        logits.device."""
        if logits.ndim != 2:
            raise ValueError(f"logits must be [D, V_draft], got shape {tuple(logits.shape)}")
        return self.prune_batch(logits[None], d2t, [tokens])[0]

    def prune_batch(self, logits: torch.Tensor, d2t: torch.Tensor | None, tokens: Sequence[Any]) -> list[DraftTree]:
        """B sequences at once: logits [B, D, V_draft], tokens: B sequences
        (each as in ``__call__``). One device-to-host copy, one search call
        for the batch (the engine's prune_batch, or one PruneTree RPC), one
        host-to-device copy; the B trees come back in order."""
        if logits.ndim != 3:
            raise ValueError(f"logits must be [B, D, V_draft], got shape {tuple(logits.shape)}")
        if len(tokens) != logits.shape[0]:
            raise ValueError(f"{logits.shape[0]} lattices but {len(tokens)} token sequences")
        tm = PruneTiming()
        self.timing = tm
        self.stats.calls += len(tokens)
        t0 = time.perf_counter()
        lats = self._lattices(logits, d2t)
        prefixes = [self._prefix(t) for t in tokens]
        t1 = time.perf_counter()
        tm.topk = t1 - t0
        trees = self._search(prefixes, lats, tm)
        t2 = time.perf_counter()
        out = self._tensors(trees, logits.device)
        tm.tensors = time.perf_counter() - t2
        return out

    def _d2t(self, d2t: torch.Tensor, device: torch.device) -> torch.Tensor:
        c = self._d2t_cache
        if c is not None and c[0] is d2t and c[1].device == device:
            return c[1]
        m = d2t.to(device=device, dtype=torch.int64)
        self._d2t_cache = (d2t, m)
        return m

    def _lattices(self, logits: torch.Tensor, d2t: torch.Tensor | None) -> list[_Lattice]:
        k = min(self.topk, logits.shape[-1])
        with torch.no_grad():
            vals, idx = torch.topk(logits.float(), k, dim=-1)
            probs = torch.softmax(vals / self.temperature if self.temperature != 1.0 else vals, dim=-1)
            if d2t is not None:
                idx = idx + self._d2t(d2t, logits.device)[idx]
            # One copy to the host: ids as int32 and the probabilities' bits side by side.
            packed = torch.cat((idx.to(torch.int32), probs.contiguous().view(torch.int32)), dim=-1).cpu().numpy()
        toks = packed[..., :k].astype(np.int64)
        pr = np.ascontiguousarray(packed[..., k:]).view(np.float32)
        return [_Lattice(toks[b], pr[b]) for b in range(packed.shape[0])]

    def _prefix(self, tokens: Any) -> np.ndarray:
        n = max(1, self.order - 1)
        if isinstance(tokens, torch.Tensor):
            tail = tokens.reshape(-1)[-n:].cpu().numpy()
        elif isinstance(tokens, (list, tuple)):
            tail = np.asarray(tokens[-n:], dtype=np.int64)
        else:
            tail = np.asarray(tokens).reshape(-1)[-n:]
        if tail.size == 0:
            raise ValueError("tokens is empty: need at least the root token")
        return tail.astype(np.int64)

    def _eos(self, trie_eos: int | None, vocab: int) -> int:
        e = self._eos_param if self._eos_param is not None else trie_eos
        if e is None or e < 0 or e >= vocab:
            return -1
        return int(e)

    @staticmethod
    def _fit(prefix: np.ndarray, lat: _Lattice, vocab: int) -> tuple[np.ndarray, Any, Any] | None:
        """The request restricted to ids the trie knows: candidates outside
        [0, vocab) are dropped (levels after the first emptied one too); the
        context is cut after its last unknown token. None when the root
        itself is unknown."""
        if prefix[-1] >= vocab or prefix[-1] < 0:
            return None
        bad = np.nonzero((prefix < 0) | (prefix >= vocab))[0]
        if bad.size:
            prefix = prefix[bad[-1] + 1:]
        ok = (lat.tokens >= 0) & (lat.tokens < vocab)
        if ok.all():
            return prefix, lat.tokens, lat.probs
        toks, probs = [], []
        for l in range(lat.tokens.shape[0]):
            if not ok[l].any():
                break
            toks.append(lat.tokens[l][ok[l]])
            probs.append(lat.probs[l][ok[l]])
        if not toks:
            return None
        return prefix, toks, probs

    def _job(self, index: Any, prefix: np.ndarray, lat: _Lattice, ngram_weight: float, eos: int,
             vocab: int | None = None) -> _Job | None:
        """The search request for one lattice on ``index`` (None: the host, of
        the order and vocab_size it reported); ids are fitted to ``vocab``
        (default the index's). None when the trie cannot serve it."""
        if vocab is None:
            vocab = self.vocab_size if index is None else index.vocab_size
        order = self.order if index is None else index.order
        fitted = self._fit(prefix[-max(1, order - 1):], lat, vocab)
        if fitted is None:
            return None
        pre, toks, probs = fitted
        params = dict(self.params, ngram_weight=ngram_weight, eos_token_id=eos)
        depth = len(toks)
        for key in ("level_weights", "logit_weights"):
            if params.get(key) is not None:
                params[key] = params[key][:depth]
        return _Job(index, pre, toks, probs, params)

    def _no_ngram_job(self, prefix: np.ndarray, lat: _Lattice, eos: int) -> _Job:
        """The n-gram-free search on an empty trie large enough for every id of the request."""
        need = int(max(lat.tokens.max(initial=0), prefix.max(initial=0), self.vocab_size - 1)) + 1
        index = fallback_index(need)
        job = self._job(index, prefix, lat, 0.0, eos if eos < index.vocab_size else -1)
        assert job is not None
        return job

    @staticmethod
    def _run_local(jobs: list[_Job]) -> list[PrunedTree]:
        """Runs the jobs, one engine prune_batch per (index, parameters) group."""
        return _run_grouped(jobs, lambda index, reqs, params: index.prune_batch(reqs, **params))

    @staticmethod
    def _tensors(trees: list[PrunedTree], device: torch.device) -> list[DraftTree]:
        # One host-to-device copy for the batch: per tree tokens, depths, parents, retrieve rows, mask.
        parts, shapes = [], []
        for t in trees:
            ri = t.retrieve_indices
            parts += [t.tokens.astype(np.int64), t.depths.astype(np.int64), t.parents.astype(np.int64),
                      ri.astype(np.int64).ravel(), t.tree_mask.astype(np.int64).ravel()]
            shapes.append((len(t.tokens), ri.shape))
        buf = torch.from_numpy(np.concatenate(parts)).to(device)
        out, at = [], 0
        for n, rs in shapes:
            r = rs[0] * rs[1]
            out.append(DraftTree(
                draft_tokens=buf[at:at + n],
                tree_position_ids=buf[at + n:at + 2 * n],
                parents=buf[at + 2 * n:at + 3 * n],
                retrieve_indices=buf[at + 3 * n:at + 3 * n + r].view(rs),
                tree_mask=buf[at + 3 * n + r:at + 3 * n + r + n * n].view(n, n).bool(),
            ))
            at += 3 * n + r + n * n
        return out


def _run_grouped(jobs: list[_Job], run: Any) -> list[PrunedTree]:
    """Groups jobs that share an index and parameters (almost always one group)
    and calls run(index, requests, params) once per group; trees in job order."""
    groups: dict[Any, list[int]] = {}
    for i, j in enumerate(jobs):
        key = (id(j.index), repr(sorted(j.params.items())))
        groups.setdefault(key, []).append(i)
    out: list[Any] = [None] * len(jobs)
    for idx in groups.values():
        first = jobs[idx[0]]
        trees = run(first.index, [(jobs[i].prefix, jobs[i].tokens, jobs[i].probs) for i in idx], first.params)
        for i, t in zip(idx, trees):
            out[i] = t
    return out


# ---- in process ----------------------------------------------------------------

class LocalPruner(_PrunerBase):
    """Prunes with a trie in this process (``NgramIndex``).

    trie: a trie file path or an open NgramIndex. tokenizer /
    tokenizer_fingerprint: the model's tokenizer (spec) or its fingerprint;
    checked once against the trie's header (TokenizerMismatchError).
    Other keywords: the search parameters of ``NgramIndex.prune`` plus topk
    (candidates per level, DART: 25) and temperature (of the softmax over
    the k logits, DART: 1).
    """

    def __init__(self, trie: str | Path | NgramIndex, *, tokenizer: Any = None,
                 tokenizer_fingerprint: str | None = None, **params: Any) -> None:
        super().__init__(**params)
        self.index = trie if isinstance(trie, NgramIndex) else NgramIndex.open(trie)
        self.info = self.index.info()
        fp = tokenizer_fingerprint or (model_fingerprint(tokenizer) if tokenizer is not None else None)
        _check_fingerprint(self.info, fp, str(self.info.get("path", trie)))
        self.order = self.index.order
        self.vocab_size = self.index.vocab_size
        self.eos_token_id = self._eos(self.index.eos_id, self.vocab_size)

    def _search(self, prefixes: list[np.ndarray], lats: list[_Lattice], tm: PruneTiming) -> list[PrunedTree]:
        t0 = time.perf_counter()
        jobs = []
        for pre, lat in zip(prefixes, lats):
            job = self._job(self.index, pre, lat, self.params["ngram_weight"], self.eos_token_id)
            jobs.append(job if job is not None else self._no_ngram_job(pre, lat, self.eos_token_id))
        trees = self._run_local(jobs)
        tm.search = time.perf_counter() - t0
        return trees


# ---- over gRPC -----------------------------------------------------------------

class RemotePruner(_PrunerBase):
    """Prunes on a trie host (``ngram-serve``), with a local fallback.

    targets: "host:port" or several (balanced by ngram_service.NgramClient).
    deadline: seconds per call (default 5 ms). On a timeout or any RPC
    error the call prunes locally without the n-gram (the same search with
    ngram_weight 0), counts the event in ``stats`` and leaves the host alone
    for a back-off (backoff_initial, doubling up to backoff_max seconds;
    reset by a success) before trying it again. Decoding never waits on a
    dead host longer than one deadline per back-off.

    The host's tokenizer fingerprint is checked once against the model's
    (tokenizer spec or tokenizer_fingerprint): at construction when the host
    answers, else on the first contact. A mismatch raises
    TokenizerMismatchError at construction; found later it switches the
    pruner to the fallback for good (``stats.last_error`` says why). The
    fingerprint also travels with every request (the host refuses a
    mismatch with FAILED_PRECONDITION).
    """

    def __init__(
        self,
        targets: str | Sequence[str],
        *,
        deadline: float = 0.005,
        tokenizer: Any = None,
        tokenizer_fingerprint: str | None = None,
        index: str = "",
        connect_timeout: float = 2.0,
        backoff_initial: float = 0.05,
        backoff_max: float = 5.0,
        client_options: dict[str, Any] | None = None,
        **params: Any,
    ) -> None:
        super().__init__(**params)
        from ngram_service.client import NgramClient

        self.deadline = float(deadline)
        self.connect_timeout = float(connect_timeout)
        self.backoff_initial = float(backoff_initial)
        self.backoff_max = float(backoff_max)
        self.fingerprint = tokenizer_fingerprint or (model_fingerprint(tokenizer) if tokenizer is not None else None)
        # One attempt: the local fallback is the retry.
        opts = {"retry_attempts": 1, **(client_options or {})}
        channel_opts = list(opts.pop("options", ()))
        # Reconnect soon after the host comes back (gRPC's default waits 1 s, then up to 120 s).
        channel_opts += [("grpc.initial_reconnect_backoff_ms", 100), ("grpc.min_reconnect_backoff_ms", 100),
                         ("grpc.max_reconnect_backoff_ms", int(max(1.0, backoff_max) * 1000))]
        self.client = NgramClient(targets, index=index, tokenizer_fingerprint=self.fingerprint, timeout=self.deadline,
                                  with_scores=False, options=channel_opts, **opts)
        self.info: dict[str, Any] | None = None
        self._backoff = 0.0
        self._retry_at = 0.0
        self._disabled = ""
        try:
            self._contact(self.connect_timeout)
        except TokenizerMismatchError:
            self.client.close()
            raise
        except Exception as e:  # noqa: BLE001 (host down at start: decode without it for now)
            self._failed(e)

    @property
    def remote_available(self) -> bool:
        return self.info is not None and not self._disabled

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> RemotePruner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _contact(self, timeout: float) -> None:
        info = self.client.info(timeout=timeout)
        _check_fingerprint(info, self.fingerprint, f"trie host {self.client.targets}")
        self.info = info
        self.order = int(info["order"])
        self.vocab_size = int(info["vocab_size"])
        self.eos_token_id = self._eos(info.get("eos_id"), self.vocab_size)

    def _failed(self, e: BaseException) -> None:
        code = _status_name(e)
        self.stats.errors[code] = self.stats.errors.get(code, 0) + 1
        self.stats.last_error = f"{code}: {_details(e)}"
        was_up = self._backoff == 0
        self._backoff = self.backoff_initial if was_up else min(self.backoff_max, 2 * self._backoff)
        self._retry_at = time.monotonic() + self._backoff
        # One warning per outage; the retries that fail again are debug lines.
        (log.warning if was_up else log.debug)(
            "trie host %s: %s; pruning locally without the n-gram, retrying in %.3f s",
            self.client.targets, self.stats.last_error, self._backoff)

    def _search(self, prefixes: list[np.ndarray], lats: list[_Lattice], tm: PruneTiming) -> list[PrunedTree]:
        n = len(lats)
        if not self._disabled and time.monotonic() >= self._retry_at:
            t0 = time.perf_counter()
            try:
                if self.info is None:  # first contact after a failed start: order, vocab, fingerprint
                    self._contact(max(self.deadline, 0.02))
                trees = self._remote(prefixes, lats, tm)
                tm.transport = time.perf_counter() - t0 - tm.search
                tm.remote = True
                if self._backoff:
                    log.warning("trie host %s: back (after %s)", self.client.targets, self.stats.last_error)
                self._backoff = 0.0
                return trees
            except TokenizerMismatchError as e:
                self._disabled = str(e)
                self.stats.last_error = self._disabled
                log.error("%s; the n-gram is off for this pruner", e)
            except Exception as e:  # noqa: BLE001 (any failure: fall back, never stop decoding)
                self._failed(e)
            tm.transport = time.perf_counter() - t0 - tm.search
        else:
            self.stats.skipped_backoff += n
        self.stats.fallbacks += n
        t1 = time.perf_counter()
        trees = self._run_local([self._fallback_job(p, l) for p, l in zip(prefixes, lats)])
        tm.search += time.perf_counter() - t1
        return trees

    def _remote(self, prefixes: list[np.ndarray], lats: list[_Lattice], tm: PruneTiming) -> list[PrunedTree]:
        """One PruneTree RPC for every lattice the host can serve (one per
        distinct depth when level weights are given); a lattice whose root
        the host does not know is pruned here without the n-gram."""
        jobs = [self._job(None, p, l, self.params["ngram_weight"], self.eos_token_id) for p, l in zip(prefixes, lats)]
        served = [j for j in jobs if j is not None]
        trees = _run_grouped(served, lambda _i, reqs, params: self.client.prune_batch(
            reqs, timeout=self.deadline, **params))
        self.stats.remote_ok += len(served)
        out, it = [], iter(trees)
        for p, l, j in zip(prefixes, lats, jobs):
            if j is not None:
                out.append(next(it))
                continue
            self.stats.errors["OUT_OF_VOCAB"] = self.stats.errors.get("OUT_OF_VOCAB", 0) + 1
            self.stats.last_error = "the root token is outside the host's vocabulary"
            self.stats.fallbacks += 1
            t0 = time.perf_counter()
            out.append(self._run_local([self._no_ngram_job(p, l, self.eos_token_id)])[0])
            tm.search += time.perf_counter() - t0
        return out

    def _fallback_job(self, prefix: np.ndarray, lat: _Lattice) -> _Job:
        if self.info is not None:  # the host's request without the n-gram: the tree it would return
            job = self._job(fallback_index(self.vocab_size), prefix[-max(1, self.order - 1):], lat, 0.0,
                            self.eos_token_id, vocab=self.vocab_size)
            if job is not None:
                return job
            return self._no_ngram_job(prefix, lat, self.eos_token_id)
        return self._no_ngram_job(prefix, lat, self._eos(None, 1 << 31))

    def _prefix(self, tokens: Any) -> np.ndarray:
        # Before the first contact the order is unknown: keep enough context for any host.
        if self.info is None:
            saved = self.order
            self.order = _engine.MAX_ORDER
            try:
                return super()._prefix(tokens)
            finally:
                self.order = saved
        return super()._prefix(tokens)


def _status_name(e: BaseException) -> str:
    code = getattr(e, "code", None)
    if callable(code):
        try:
            c = code()
            return getattr(c, "name", str(c))
        except Exception:  # noqa: BLE001
            pass
    return type(e).__name__


def _details(e: BaseException) -> str:
    d = getattr(e, "details", None)
    if callable(d):
        try:
            return str(d())
        except Exception:  # noqa: BLE001
            pass
    return str(e)
