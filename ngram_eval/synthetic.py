"""Synthetic lattices from held-out text: a stand-in drafter for comparing tries without a model.

The held-out text plays the target: at a position t of a document, the
continuation is the document's next D + 1 tokens. The drafter is a stated
logit model (``LogitModel``); at level l (0-based, the token at depth l + 1):

- the true token x = doc[t + l + 1] is among the K candidates with
  probability ``hit * decay**l`` (a real drafter's top-k misses more the
  deeper it looks); the other candidates are distinct draws from the
  unigram distribution u of the held-out text (without x);
- each candidate w gets the logit ``log u(w) + noise * e_w``, e_w ~ N(0, 1),
  and the true token also ``true_bonus * decay**l``; the probabilities are
  the softmax over the K logits (as DART's pruner computes them), listed
  most probable first.

So the drafter prefers frequent tokens, knows the truth less the deeper it
looks, and the n-gram term has to pick the true token out of plausible
distractors. The numbers mean "accepted length under this drafter", useful
to rank tries and tune parameters against each other, not to predict a real
model's tau (log real lattices with ``dart-generate --log-lattices``).
Positions are drawn uniformly from all those with D + 1 tokens after them,
with a seeded generator: the same text and model give the same lattices.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dart_client.lattice_log import DEFAULT_TAIL, LatticeSet
from ngram_service.tree import LIMITS

__all__ = ["LogitModel", "TextLattices", "lattice_at", "load_documents", "synthetic_lattices", "unigram"]


@dataclass(frozen=True)
class LogitModel:
    depth: int = 8  # D, levels per lattice (DART: 8)
    topk: int = 25  # K, candidates per level (DART: 25)
    hit: float = 0.9  # probability that the true token is a level-0 candidate
    decay: float = 0.85  # per level factor on hit and true_bonus
    true_bonus: float = 4.0  # logit added to the true token at level 0
    noise: float = 1.0  # standard deviation of the logit noise
    tail: int = DEFAULT_TAIL  # prefix tokens kept per lattice

    def __post_init__(self) -> None:
        depth, topk = LIMITS["max_depth"], LIMITS["max_candidates"]
        if not (1 <= self.depth <= depth and 1 <= self.topk <= topk and 0 <= self.hit <= 1 and 0 <= self.decay <= 1
                and self.noise >= 0 and self.tail >= 1):
            raise ValueError(f"bad synthetic lattice model {self}: need depth 1..{depth}, topk 1..{topk}, "
                             "hit and decay in [0, 1], noise >= 0, tail >= 1")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def load_documents(paths: Sequence[str], tokenizer: str, text_field: str = "text") -> tuple[list[np.ndarray], int]:
    """Tokenizes the documents of shard files or folders (the formats
    ngram-build reads), each followed by the tokenizer's EOS as in a build.
    Returns the token arrays and the texts' total UTF-8 bytes."""
    from indexer.shard_discovery import expand_inputs
    from indexer.shards import ShardReader
    from indexer.tokenizer import load_tokenizer

    tok = load_tokenizer(tokenizer)
    files = expand_inputs(paths)
    docs: list[np.ndarray] = []
    nbytes = 0
    for f in files:
        for texts in ShardReader(Path(f), text_field):
            nbytes += sum(len(t.encode("utf-8")) for t in texts)
            docs += tokenize_documents(tok, texts)
    return docs, nbytes


def tokenize_documents(tok: Any, texts: Sequence[str]) -> list[np.ndarray]:
    """Texts as a build tokenizes documents: each followed by the tokenizer's EOS."""
    return [np.asarray(list(ids) + [tok.eos_id], np.int64) for ids in tok.encode_batch(list(texts))]


def _distinct_draws(rng: np.random.Generator, cdf: np.ndarray, n: int, exclude: int) -> np.ndarray:
    """n distinct ids drawn from the unigram distribution (its cdf), never ``exclude``."""
    got: list[int] = []
    seen = {exclude}
    size = 4 * n + 16
    while len(got) < n:
        draws = np.searchsorted(cdf, rng.random(size) * cdf[-1], side="right")
        for t in draws.tolist():
            if t not in seen:
                seen.add(t)
                got.append(t)
                if len(got) == n:
                    break
        size *= 2
    return np.asarray(got, np.int64)


def lattice_at(doc: np.ndarray, t: int, model: LogitModel, rng: np.random.Generator, cdf: np.ndarray,
               log_u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The lattice [D, K] (tokens, probabilities, most probable first) the
    model drafts after doc[:t + 1]: level l's true token is doc[t + 1 + l]
    (the module's doc). cdf and log_u: the text's unigram counts' cumulative
    sum and log frequencies (``unigram``). Levels past the document's end
    have no true token."""
    lt = np.empty((model.depth, model.topk), np.int64)
    lp = np.empty((model.depth, model.topk), np.float32)
    k = model.topk
    for level in range(model.depth):
        true = int(doc[t + 1 + level]) if t + 1 + level < len(doc) else -1
        fade = model.decay ** level
        has_true = true >= 0 and rng.random() < model.hit * fade
        others = _distinct_draws(rng, cdf, k - 1 if has_true else k, true)
        cand = np.concatenate(([true], others)) if has_true else others
        logits = log_u[cand] + model.noise * rng.standard_normal(len(cand))
        if has_true:
            logits[0] += model.true_bonus * fade
        e = np.exp(logits - logits.max())
        pr = (e / e.sum()).astype(np.float32)
        order = np.argsort(-pr, kind="stable")
        lt[level], lp[level] = cand[order], pr[order]
    return lt, lp


def unigram(docs: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(cdf, log_u) of the documents' token counts, as lattice_at takes them."""
    counts = np.bincount(np.concatenate(docs))
    return np.cumsum(counts.astype(np.float64)), np.log(np.maximum(counts, 1) / counts.sum())


class TextLattices:
    """The model's lattice at any position of the documents, the same each
    time it is asked (its random draws seeded by seed, document and
    position): a drafter's stand-in during decoding
    (``dart_client.oracle.OracleDrafter``)."""

    def __init__(self, docs: Sequence[np.ndarray], model: LogitModel, seed: int = 0) -> None:
        self.docs = [np.asarray(d, np.int64) for d in docs]
        self.model = model
        self.seed = seed
        distinct = int((np.bincount(np.concatenate(self.docs)) > 0).sum())
        if distinct < model.topk:
            raise ValueError(f"the text has {distinct} distinct tokens, fewer than topk = {model.topk}")
        self.cdf, self.log_u = unigram(self.docs)

    def __call__(self, doc: int, t: int) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng((self.seed, doc, t))
        return lattice_at(self.docs[doc], t, self.model, rng, self.cdf, self.log_u)


def synthetic_lattices(docs: Sequence[np.ndarray], model: LogitModel, steps: int, seed: int = 0,
                       source: str = "synthetic") -> LatticeSet:
    """``steps`` lattices (fewer if the text has fewer positions) under ``model``."""
    depth, k = model.depth, model.topk
    lengths = np.array([len(d) for d in docs], np.int64)
    usable = np.maximum(0, lengths - depth - 1)  # positions t with t + D + 1 < len: t = 0 .. len - D - 2
    total = int(usable.sum())
    if total == 0:
        raise ValueError(f"{source}: no document has more than {depth + 1} tokens")
    distinct = int((np.bincount(np.concatenate(docs)) > 0).sum())
    if distinct < k:
        raise ValueError(f"{source}: the text has {distinct} distinct tokens, fewer than topk = {k}")
    cdf, log_u = unigram(docs)
    rng = np.random.default_rng(seed)
    picks = np.sort(rng.choice(total, size=min(steps, total), replace=False))
    doc_of = np.searchsorted(np.cumsum(usable), picks, side="right")
    starts = np.concatenate(([0], np.cumsum(usable)[:-1]))
    prefixes, toks, probs, conts = [], [], [], []
    for p, d in zip(picks.tolist(), doc_of.tolist()):
        t = p - int(starts[d])  # the prefix is doc[:t + 1]; its last token is the root
        doc = docs[d]
        prefixes.append(doc[max(0, t + 1 - model.tail):t + 1])
        conts.append(doc[t + 1:t + 2 + depth])
        lt, lp = lattice_at(doc, t, model, rng, cdf, log_u)
        toks.append(lt)
        probs.append(lp)
    n = len(prefixes)
    return LatticeSet(prefixes, toks, probs, conts, np.asarray(doc_of, np.int64), np.zeros(n, np.int64),
                      source=source)
