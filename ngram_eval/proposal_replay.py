"""Proposals on held-out text, teacher forced: how many tokens a verification
step would accept if the draft tree came from ``NgramIndex.propose``.

At each step the context is the document so far; the step accepts the
longest path of the tree that equals the document's next tokens, plus one
(the token the target model gives anyway), and the document advances by
that much. Tokens per step is the mean over every step of every document.
Two baselines use the document alone. Prompt lookup as vLLM's ``ngram``
method does it (``lookup_chain``): one chain, the tokens that followed the
most recent earlier occurrence of the longest suffix of the context (at
least ``min_n``, at most ``max_n`` tokens). And the proposals' own document
source alone (``corpus=False``): a tree of every occurrence of the longest
suffix, best-first, at the same node budget. And, given the corpus the
tries were built from, SuffixDecoding (``suffix_baseline``): a per-request
suffix tree and a global one over that corpus, scored by raw counts, at its
two published default sets.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ngram_eval.calibration import Calibration, format_calibration
from ngram_eval.suffix_baseline import (ARCTIC_DEFAULTS, VLLM_DEFAULTS, CorpusSuffixes, SuffixSetting,
                                        accepted_draft_length, speculate)
from ngram_service import NgramIndex
from ngram_service.proposals import DEFAULTS

#: Sources of a setting: the trie and the document (the default), the trie
#: alone, the document alone (prompt lookup).
SOURCES = {"both": {}, "corpus": {"lookup": False}, "lookup": {"corpus": False}}


@dataclass(frozen=True)
class ProposeSetting:
    max_nodes: int
    sources: str = "both"
    discount: float | None = None  # None: the engine's default

    def params(self) -> dict[str, Any]:
        p: dict[str, Any] = {"max_nodes": self.max_nodes, **SOURCES[self.sources]}
        if self.discount is not None:
            p["discount"] = self.discount
        return p


@dataclass
class Replay:
    """What one setting did over the documents."""
    steps: int = 0
    tokens: int = 0
    accepted: list[int] = field(default_factory=list)  # steps by accepted draft length (without the bonus)
    propose_seconds: float = 0.0

    @property
    def tokens_per_step(self) -> float:
        return self.tokens / self.steps if self.steps else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "tokens_per_step": self.tokens_per_step,
                "trees_per_second": self.steps / self.propose_seconds if self.propose_seconds else None}


def accepted_length(tokens: list[int], parents: list[int], depths: list[int], doc: np.ndarray, at: int) -> int:
    """The depth of the deepest node whose path equals doc[at:at+depth]."""
    ok = [True] + [False] * (len(tokens) - 1)
    best = 0
    end = len(doc)
    for i in range(1, len(tokens)):
        d = depths[i]
        if ok[parents[i]] and at + d - 1 < end and tokens[i] == doc[at + d - 1]:
            ok[i] = True
            best = max(best, d)
    return best


def lookup_chain(doc: np.ndarray, at: int, k: int, min_n: int, max_n: int) -> np.ndarray:
    """Up to k tokens that followed the most recent earlier occurrence of the
    longest suffix of doc[:at] of min_n..max_n tokens (none: empty)."""
    ends = np.flatnonzero(doc[:at - 1] == doc[at - 1])  # where a match of one token ends
    n = 1
    while ends.size and n < max_n:
        ok = ends >= n
        ok[ok] = doc[ends[ok] - n] == doc[at - 1 - n]
        if not ok.any():
            break
        ends = ends[ok]
        n += 1
    if not ends.size or n < min_n:
        return doc[:0]
    i = int(ends[-1]) + 1
    return doc[i:min(i + k, at)]


#: CPU time of this thread: the machine may be shared.
_clock = time.thread_time


def _teacher_forced(docs: Sequence[np.ndarray], accepted: Callable[[np.ndarray, list[int], int], tuple[int, float]],
                    progress: Callable[[int], None] | None = None) -> Replay:
    """The replay loop of every source: at each position ``accepted(doc,
    doc_list, at)`` drafts from doc[:at] and says how many draft tokens the
    document confirms and how long drafting took (the proposing time); the
    step takes those plus one."""
    r = Replay()
    for n, doc in enumerate(docs):
        doc_list = doc.tolist()
        at = 1
        while at < len(doc):
            acc, seconds = accepted(doc, doc_list, at)
            r.propose_seconds += seconds
            step = min(acc + 1, len(doc) - at)
            while len(r.accepted) <= acc:
                r.accepted.append(0)
            r.accepted[acc] += 1
            r.steps += 1
            r.tokens += step
            at += step
        if progress:
            progress(n + 1)
    return r


def replay_lookup_chain(docs: Sequence[np.ndarray], k: int, min_n: int, max_n: int) -> Replay:
    """Teacher-forced prompt lookup (one chain of up to k tokens) over every document."""
    def accepted(doc: np.ndarray, _doc_list: list[int], at: int) -> tuple[int, float]:
        t0 = _clock()
        chain = lookup_chain(doc, at, k, min_n, max_n)
        seconds = _clock() - t0
        want = doc[at:at + len(chain)]
        same = chain[:len(want)] == want
        return (int(same.argmin()) if not same.all() else len(want)), seconds

    return _teacher_forced(docs, accepted)


def replay(index: NgramIndex, docs: Sequence[np.ndarray], params: dict[str, Any],
           progress: Callable[[int], None] | None = None, calibration: Calibration | None = None) -> Replay:
    """Teacher-forced proposals over every document (see the module's
    docstring); every tree's nodes also go to ``calibration`` when given."""
    propose = index.propose

    def accepted(doc: np.ndarray, doc_list: list[int], at: int) -> tuple[int, float]:
        t0 = _clock()
        tree = propose(doc[:at], **params)
        seconds = _clock() - t0
        tokens, parents, depths = tree.tokens.tolist(), tree.parents.tolist(), tree.depths.tolist()
        if calibration is not None:
            return calibration.add_tree(tokens, parents, depths, tree.scores, doc_list, at), seconds
        return accepted_length(tokens, parents, depths, doc_list, at), seconds

    return _teacher_forced(docs, accepted, progress)


def replay_suffix(docs: Sequence[np.ndarray], setting: SuffixSetting, corpus: CorpusSuffixes | None,
                  progress: Callable[[int], None] | None = None) -> tuple[Replay, int]:
    """Teacher-forced SuffixDecoding drafts over every document; also how
    many steps took the corpus tree's draft."""
    from_corpus = 0
    matcher: Any = None  # the corpus' matches along the current document

    def accepted(doc: np.ndarray, doc_list: list[int], at: int) -> tuple[int, float]:
        nonlocal from_corpus, matcher
        t0 = _clock()
        if corpus is not None and (matcher is None or matcher.sequence is not doc_list):
            matcher = corpus.matcher(doc_list)
        draft = speculate(doc[:at], setting, corpus, matcher)
        seconds = _clock() - t0
        from_corpus += draft.source == "corpus"
        return accepted_draft_length(draft, doc_list, at), seconds

    return _teacher_forced(docs, accepted, progress), from_corpus


def suffix_settings(budgets: Sequence[int]) -> list[tuple[SuffixSetting, int | None]]:
    """The suffix baseline's rows: each published default set as it runs
    (one chain), and as a best-first tree of each node budget (its
    ``max_spec_tokens`` the budget); (setting, budget or None)."""
    out: list[tuple[SuffixSetting, int | None]] = []
    for base in (VLLM_DEFAULTS, ARCTIC_DEFAULTS):
        out.append((base, None))
        out += [(base.with_(tree=True, max_spec_tokens=n), n) for n in budgets]
    return out


#: The one-chain baseline: up to CHAIN_TOKENS tokens after a match of
#: CHAIN_MIN_N..CHAIN_MAX_N tokens; every minimum is measured and the best
#: one is the baseline.
CHAIN_TOKENS = 8
CHAIN_MAX_N = 32
CHAIN_MIN_N = (1, 2, 3)
#: vLLM's ``ngram`` method as it runs when neither prompt_lookup_min nor
#: prompt_lookup_max is set: a match of exactly 5 tokens (also reported,
#: not the baseline: the chains above do better).
VLLM_DEFAULT_N = (5, 5)


def evaluate_proposals(tries: Sequence[str], docs: Sequence[np.ndarray], settings: Sequence[ProposeSetting],
                       progress: Callable[[str], None] = lambda m: None,
                       suffix_corpus: CorpusSuffixes | None = None,
                       suffix_corpus_info: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every setting on every trie, and prompt lookup alone at each node
    budget (once: it does not depend on the trie); with ``suffix_corpus``
    (the global tree over the tries' corpus) SuffixDecoding's rows too. The
    JSON ngram-eval --proposals writes."""
    budgets = sorted({s.max_nodes for s in settings})
    first = NgramIndex.open(tries[0])
    chains = {}
    for min_n in CHAIN_MIN_N:
        progress(f"prompt lookup, one chain (min {min_n} tokens)")
        chains[min_n] = replay_lookup_chain(docs, CHAIN_TOKENS, min_n, CHAIN_MAX_N).as_dict()
    best_chain = max(chains.values(), key=lambda r: r["tokens_per_step"])
    progress("prompt lookup, one chain (vLLM's defaults)")
    vllm_default = {"min_n": VLLM_DEFAULT_N[0], "max_n": VLLM_DEFAULT_N[1],
                    **replay_lookup_chain(docs, CHAIN_TOKENS, *VLLM_DEFAULT_N).as_dict()}
    lookup = {}
    for nodes in budgets:
        progress(f"prompt lookup alone, {nodes} nodes")
        lookup[nodes] = replay(first, docs, ProposeSetting(nodes, "lookup").params()).as_dict()
    out_tries = []
    for path in tries:
        index = NgramIndex.open(path)
        rows = []
        for s in settings:
            progress(f"{path}: {s.max_nodes} nodes, {s.sources}" + (f", discount {s.discount}" if s.discount is not None else ""))
            cal = Calibration()
            rep = replay(index, docs, s.params(), calibration=cal).as_dict()
            base = lookup[s.max_nodes]["tokens_per_step"]
            rows.append({"max_nodes": s.max_nodes, "sources": s.sources, "discount": s.discount, **rep,
                         "vs_lookup": rep["tokens_per_step"] / base if base else None,
                         "vs_lookup_chain": rep["tokens_per_step"] / best_chain["tokens_per_step"]
                         if best_chain["tokens_per_step"] else None,
                         "calibration": cal.as_dict()})
        out_tries.append({"path": path, "order": index.order, "ngrams": index.info().get("ngrams"), "rows": rows,
                          "calibration_row": calibration_row(settings)})
    suffix = None
    if suffix_corpus is not None:
        rows_s = []
        for st, nodes in suffix_settings(budgets):
            progress(f"SuffixDecoding, {st.name}'s defaults, " + (f"a tree of {nodes} nodes" if nodes else "one chain"))
            rep, from_corpus = replay_suffix(docs, st, suffix_corpus)
            r = rep.as_dict()
            rows_s.append({"setting": st.as_dict(), "max_nodes": nodes, **r, "corpus_steps": from_corpus,
                           "vs_lookup_chain": r["tokens_per_step"] / best_chain["tokens_per_step"]
                           if best_chain["tokens_per_step"] else None})
        suffix = {"corpus": suffix_corpus_info or {"tokens": suffix_corpus.corpus_tokens,
                                                   "documents": suffix_corpus.documents},
                  "rows": rows_s}
    return {"mode": "proposals", "documents": len(docs), "tokens": int(sum(len(d) for d in docs)),
            "lookup_chain": {"tokens": CHAIN_TOKENS, "max_n": CHAIN_MAX_N,
                             "by_min_n": {str(k): v for k, v in chains.items()}, "best": best_chain,
                             "vllm_default": vllm_default},
            "lookup_alone": {str(k): v for k, v in lookup.items()}, "tries": out_tries,
            **({"suffix_baseline": suffix} if suffix is not None else {})}


def calibration_row(settings: Sequence[ProposeSetting]) -> int:
    """The row a trie's calibration is shown for (table, plot): the default
    proposals (both sources, the engine's discount) at the engine's node
    budget when the grid holds them, else at the grid's largest budget
    with both sources, else the first row."""
    def rank(i: int) -> tuple[bool, bool, bool, int]:
        s = settings[i]
        return (s.sources == "both", s.discount is None, s.max_nodes == DEFAULTS["max_nodes"], s.max_nodes)

    return max(range(len(settings)), key=lambda i: (rank(i), -i)) if settings else 0


def format_proposals(result: dict[str, Any]) -> str:
    """The table ngram-eval --proposals prints."""
    chain = result["lookup_chain"]
    lines = [f"{result['documents']} held-out documents, {result['tokens']:,} tokens, teacher forced",
             "prompt lookup, one chain of up to {} tokens after the most recent match of the longest suffix: "
             "{} tokens/step by minimum match ({}); the best is the 'vs chain' baseline; "
             "with vLLM's defaults (a match of {} to {} tokens) {:.3f}".format(
                 chain["tokens"], ", ".join(f"{r['tokens_per_step']:.3f}" for r in chain["by_min_n"].values()),
                 ", ".join(chain["by_min_n"]), chain["vllm_default"]["min_n"], chain["vllm_default"]["max_n"],
                 chain["vllm_default"]["tokens_per_step"]),
             "", f"{'trie':<28} {'order':>5} {'nodes':>5} {'sources':<7} {'discount':>7} {'tok/step':>8} "
                 f"{'vs chain':>8} {'vs tree':>7} {'trees/s':>8}"]
    best = chain["best"]["tokens_per_step"]
    for nodes, rep in result["lookup_alone"].items():
        lines.append(f"{'(document alone, a tree)':<28} {'-':>5} {nodes:>5} {'lookup':<7} {'-':>7} "
                     f"{rep['tokens_per_step']:>8.3f} {rep['tokens_per_step'] / best:>8.2f} {1.0:>7.2f} "
                     f"{rep['trees_per_second'] or 0:>8.0f}")
    for t in result["tries"]:
        name = t["path"] if len(t["path"]) <= 28 else "..." + t["path"][-25:]
        for r in t["rows"]:
            discount = f"{r['discount'] if r['discount'] is not None else DEFAULTS['discount']:g}"
            lines.append(f"{name:<28} {t['order']:>5} {r['max_nodes']:>5} {r['sources']:<7} {discount:>7} "
                         f"{r['tokens_per_step']:>8.3f} {r['vs_lookup_chain'] or 0:>8.2f} {r['vs_lookup'] or 0:>7.2f} "
                         f"{r['trees_per_second'] or 0:>8.0f}")
    lines += _format_suffix(result.get("suffix_baseline"), best)
    cal = []
    for t in result["tries"]:
        r = t["rows"][t.get("calibration_row", 0)]
        if "calibration" in r:
            cal.append((f"{Path(t['path']).name} ({r['max_nodes']} nodes)", r["calibration"]))
    if cal:
        lines += ["", "Calibration: nodes by predicted path probability (their score), the mean score and the share "
                      "accepted (the whole path is the text's continuation)"]
        lines += format_calibration(cal)
    return "\n".join(lines)


def _format_suffix(suffix: dict[str, Any] | None, best_chain: float) -> list[str]:
    if suffix is None:
        return ["", "SuffixDecoding (a suffix tree over the document and one over the corpus): give --suffix-corpus, "
                    "the shards the tries were built from"]
    c = suffix["corpus"]
    lines = ["", f"SuffixDecoding: a tree over the document so far and one over the corpus "
                 f"({c['tokens']:,} tokens, {c['documents']:,} documents), raw counts; 'trees/s' is drafts a second, "
                 f"'corpus' the share of steps the corpus' draft won",
             f"{'setting':<52} {'nodes':>5} {'tok/step':>8} {'vs chain':>8} {'corpus':>6} {'trees/s':>8}"]
    for r in suffix["rows"]:
        s = r["setting"]
        what = (f"{s['name']}'s defaults (depth {s['max_depth']}, factor {s['max_spec_factor']:g}, "
                f"min prob {s['min_token_prob']:g})")
        nodes = f"{r['max_nodes']}" if r["max_nodes"] else f"c{s['max_spec_tokens']}"
        lines.append(f"{what:<52} {nodes:>5} {r['tokens_per_step']:>8.3f} {r['tokens_per_step'] / best_chain:>8.2f} "
                     f"{r['corpus_steps'] / max(1, r['steps']):>6.2f} {r['trees_per_second'] or 0:>8.0f}")
    lines.append("(nodes cN: one chain of at most N tokens, as vLLM and Arctic Inference run it; "
                 "a number: a best-first tree of that many nodes)")
    return lines
