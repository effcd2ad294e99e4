"""A suffix-tree baseline for ``ngram-eval --proposals``: SuffixDecoding's
drafts (Oliaro et al., arXiv 2411.04975; the algorithm behind Arctic
Inference's suffix decoding and vLLM's ``suffix`` method), written here
from its published description, over the same corpus and document as the
tries' proposals.

Two trees hold every substring of at most ``max_depth`` tokens of their
sequences, each node with its count (the substring's occurrences):

- the *per-request* tree over the context (the document so far): it
  includes the context's own tail, so a suffix always matches itself once,
  and a continuation seen k times after n occurrences (the tail's among
  them) has probability k / n;
- the *global* tree over a corpus, documents kept apart (no substring
  crosses a document's end).

At each step the pattern is the context's last ``max_depth`` tokens. For
every match length m = 1, 2, ... (while the pattern's last m tokens occur
in the tree, m < the pattern's length) a draft is grown from the matched
node, of at most ``min(max_spec_tokens, floor(m * max_spec_factor +
max_spec_offset))`` tokens and never past the tree's depth (m + draft depth
<= ``max_depth``):

- a *chain* (how vLLM and Arctic Inference run it): the child with the
  largest count, again and again, the running probability multiplied by
  count(child) / count(node), while it stays at least ``min_token_prob``;
- a *tree* (Arctic Inference's ``use_tree_spec``): best first, every
  child's path probability prob(parent) * count(child) / count(node) at
  least ``min_token_prob``, the likeliest next.

A draft's score is the sum of its tokens' path probabilities; the best
score over the match lengths wins (a tie: the longer match), and the
global tree's best replaces the per-request one only when its score is
larger.

The global tree is a suffix array (``CorpusSuffixes``): the occurrences of
a substring are one range of it, the range's size is the count, and the
children are the runs of the next token within the range (sorted, since
the array is). It is sorted by the first ``max_depth`` tokens only, as the
tree holds nothing deeper. The per-request tree is the context's
occurrence lists (``_DocumentTree``): it changes every step, and a context
is short.

Arithmetic is float64 (the reference is float32: a probability exactly at
``min_token_prob`` may fall the other way); ties between children of equal
count go to the smaller token id (the reference's hash-map order).
"""
from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

__all__ = ["ARCTIC_DEFAULTS", "CorpusMatcher", "CorpusSuffixes", "Draft", "SuffixSetting", "VLLM_DEFAULTS", "accepted_draft_length",
           "load_corpus_suffixes", "speculate"]


@dataclass(frozen=True)
class SuffixSetting:
    """One parameter set of SuffixDecoding (names as Arctic Inference's)."""

    name: str
    max_depth: int  # the trees' depth; the pattern is the context's last max_depth tokens
    max_spec_tokens: int  # draft tokens at most
    max_spec_factor: float = 1.0  # draft tokens at most this times the match length ...
    min_token_prob: float = 0.1  # a draft token's path probability at least this
    max_spec_offset: float = 0.0  # ... plus this
    tree: bool = False  # best-first tree (use_tree_spec), else one chain
    corpus: bool = True  # the global tree (when a corpus is given) beside the per-request one

    def with_(self, **kw: Any) -> SuffixSetting:
        return SuffixSetting(**{**asdict(self), **kw})

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


#: vLLM's ``suffix`` method when only ``"method": "suffix"`` is given:
#: suffix_decoding_max_tree_depth 24, num_speculative_tokens defaulting to
#: the depth, max_spec_factor 1.0, min_token_prob 0.1, one chain.
VLLM_DEFAULTS = SuffixSetting("vLLM", max_depth=24, max_spec_tokens=24)
#: Arctic Inference's own defaults (docs/suffix-decoding.rst,
#: ArcticSpeculativeConfig): suffix_cache_max_depth 64, suffix_max_spec_factor
#: 1.0, suffix_max_spec_offset 0, suffix_min_token_prob 0.1, drafts of at
#: most vLLM's MAX_SPEC_LEN (32) tokens, one chain.
ARCTIC_DEFAULTS = SuffixSetting("Arctic", max_depth=64, max_spec_tokens=32)


@dataclass
class Draft:
    """A draft: tokens, each one's parent (an index into tokens, -1 for the
    context's last token), path probabilities; score = sum of probs."""

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)
    score: float = 0.0
    match_len: int = 0
    source: str = ""  # "document" or "corpus"


class _Tree(Protocol):
    """What a draft is grown from. Nodes are opaque; ``children(node,
    min_count, first)`` lists (token, count, child) of the children with at
    least ``min_count`` occurrences in decreasing count, ties by token id
    (``first``: only the first of them)."""

    max_depth: int

    def matches(self, pattern: np.ndarray) -> Iterator[tuple[int, Any]]: ...

    def count(self, node: Any) -> int: ...

    def children(self, node: Any, min_count: float = 0.0, first: bool = False) -> list[tuple[int, int, Any]]: ...


def _chosen(tokens: np.ndarray, counts: np.ndarray, min_count: float, first: bool) -> list[int]:
    """Indices of the children ``children`` lists: counts of at least
    min_count, in decreasing count, ties by the smaller token."""
    if first:
        i = int(np.argmax(counts - tokens / (2.0 * (int(tokens.max()) + 1))))  # the largest count, then smallest token
        return [i] if counts[i] >= min_count else []
    keep = np.flatnonzero(counts >= min_count)
    return keep[np.lexsort((tokens[keep], -counts[keep]))].tolist()


class _DocumentTree:
    """The per-request tree over ``context``: a node is (start positions of
    the path's occurrences, depth)."""

    def __init__(self, context: np.ndarray, max_depth: int) -> None:
        self.ctx = context
        self.max_depth = max_depth

    def matches(self, pattern: np.ndarray) -> Iterator[tuple[int, Any]]:
        ctx = self.ctx
        # the pattern is the context's tail: its occurrences include the tail itself
        starts = np.flatnonzero(ctx == pattern[-1])
        for m in range(1, len(pattern)):
            if m > 1:
                starts = starts[starts > 0] - 1
                starts = starts[ctx[starts] == pattern[-m]]
            if not starts.size:
                return
            yield m, (starts, m)

    def count(self, node: Any) -> int:
        return len(node[0])

    def children(self, node: Any, min_count: float = 0.0, first: bool = False) -> list[tuple[int, int, Any]]:
        starts, d = node
        if d >= self.max_depth:
            return []
        nxt = starts + d
        ok = nxt < len(self.ctx)
        starts, nxt = starts[ok], nxt[ok]
        if not starts.size:
            return []
        toks = self.ctx[nxt]
        uniq, inverse, counts = np.unique(toks, return_inverse=True, return_counts=True)
        return [(int(uniq[i]), int(counts[i]), (starts[inverse == i], d + 1))
                for i in _chosen(uniq, counts, min_count, first)]


class CorpusSuffixes:
    """The global tree over a corpus' documents: a suffix array of their
    concatenation, each document followed by a separator (-1) that no
    pattern holds, sorted by each suffix's first ``max_depth`` tokens. A
    node is (lo, hi, depth): the array's range of the suffixes that start
    with the node's path."""

    #: Nodes with at least this many occurrences keep their children (a
    #: frequent short context is asked for at most steps; the rest are
    #: cheap to scan again).
    CACHE_MIN = 256
    #: Entries the children cache holds at most before it is emptied.
    CACHE_ENTRIES = 4_000_000

    def __init__(self, tokens: np.ndarray, suffix_array: np.ndarray, max_depth: int, documents: int) -> None:
        self.tokens = tokens  # int32, separators -1, padded with max_depth + 1 separators
        self.sa = suffix_array
        self.max_depth = max_depth
        self.documents = documents
        self._cache: dict[tuple[int, int, int], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._cached_entries = 0
        self._root = self._runs(0, len(self.sa), 0)

    @classmethod
    def build(cls, docs: Iterable[np.ndarray], max_depth: int) -> CorpusSuffixes:
        """From token arrays (one per document; ids >= 0)."""
        pieces, n_docs = [], 0
        for d in docs:
            pieces.append(np.asarray(d, np.int32))
            pieces.append(np.array([-1], np.int32))
            n_docs += 1
        tokens = np.concatenate(pieces + [np.full(max_depth + 1, -1, np.int32)]) if pieces else \
            np.full(max_depth + 1, -1, np.int32)
        return cls(tokens, suffix_array(tokens, max_depth), max_depth, n_docs)

    def matcher(self, sequence: Sequence[int]) -> CorpusMatcher:
        """A CorpusMatcher for drafts along ``sequence`` (speculate's ``matcher``)."""
        return CorpusMatcher(self, sequence)

    @property
    def corpus_tokens(self) -> int:
        """Tokens of the documents (separators and padding not counted)."""
        return int((self.tokens >= 0).sum())

    @property
    def nbytes(self) -> int:
        return int(self.tokens.nbytes + self.sa.nbytes)

    def _runs(self, lo: int, hi: int, d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The children of (lo, hi, d): tokens, and their ranges' starts and
        ends (absolute), in token order, separators left out."""
        key = (lo, hi, d)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        vals = self.tokens[self.sa[lo:hi].astype(np.int64) + d]  # sorted: the range shares its first d tokens
        cut = np.flatnonzero(vals[1:] != vals[:-1]) + 1
        starts = np.concatenate(([0], cut))
        ends = np.concatenate((cut, [len(vals)]))
        toks = vals[starts]
        keep = toks >= 0
        out = (toks[keep], starts[keep] + lo, ends[keep] + lo)
        if hi - lo >= self.CACHE_MIN:
            if self._cached_entries > self.CACHE_ENTRIES:
                self._cache.clear()
                self._cached_entries = 0
            self._cache[key] = out
            self._cached_entries += len(out[0]) + 3
        return out

    def _child(self, node: tuple[int, int, int], token: int) -> tuple[int, int, int] | None:
        lo, hi, d = node
        if hi - lo >= self.CACHE_MIN or d == 0:
            toks, starts, ends = self._root if d == 0 else self._runs(lo, hi, d)
            i = int(np.searchsorted(toks, token))
            if i == len(toks) or toks[i] != token:
                return None
            return int(starts[i]), int(ends[i]), d + 1
        vals = self.tokens[self.sa[lo:hi].astype(np.int64) + d]
        a, b = np.searchsorted(vals, [token, token + 1])
        return (lo + int(a), lo + int(b), d + 1) if b > a else None

    def descend(self, node: tuple[int, int, int], tokens: Sequence[int]) -> tuple[int, int, int] | None:
        """The node of node's path followed by ``tokens`` (None: it does not
        occur): token by token while the range is large (cached runs), then
        all the rest at once over the range's rows."""
        i = 0
        while i < len(tokens) and (node[1] - node[0] >= self.CACHE_MIN or node[2] == 0):
            child = self._child(node, tokens[i])
            if child is None:
                return None
            node, i = child, i + 1
        if i == len(tokens):
            return node
        lo, hi, d = node
        want = np.asarray(tokens[i:], np.int32)
        rows = self.tokens[(self.sa[lo:hi].astype(np.int64) + d)[:, None] + np.arange(len(want))]
        same = np.flatnonzero((rows == want).all(axis=1))  # contiguous: the range is sorted
        return (lo + int(same[0]), lo + int(same[-1]) + 1, d + len(want)) if same.size else None

    def matches(self, pattern: np.ndarray) -> Iterator[tuple[int, Any]]:
        for m in range(1, min(len(pattern), self.max_depth + 1)):
            node = self.descend((0, len(self.sa), 0), pattern[len(pattern) - m:].tolist())
            if node is None:
                return
            yield m, node

    def count(self, node: Any) -> int:
        return node[1] - node[0]

    def children(self, node: Any, min_count: float = 0.0, first: bool = False) -> list[tuple[int, int, Any]]:
        lo, hi, d = node
        if d >= self.max_depth:
            return []
        toks, starts, ends = self._runs(lo, hi, d)
        if not len(toks):
            return []
        counts = ends - starts
        return [(int(toks[i]), int(counts[i]), (int(starts[i]), int(ends[i]), d + 1))
                for i in _chosen(toks, counts, min_count, first)]


def suffix_array(tokens: np.ndarray, depth: int) -> np.ndarray:
    """The start positions of ``tokens``' suffixes sorted by their first
    ``depth`` tokens (prefix doubling, numpy sorts; int32 positions). Ties
    beyond ``depth`` are in position order."""
    n = len(tokens)
    rank = tokens.astype(np.int64) + 1  # separators (-1) rank 0, below every token
    sa = np.argsort(rank, kind="stable")
    h = 1
    while h < depth:
        top = int(rank.max()) + 1
        second = np.zeros(n, np.int64)
        second[:n - h] = rank[h:]
        key = rank * top + second  # fits: ranks < n + 1 (a 12 M corpus: 1.6e14)
        sa = np.argsort(key, kind="stable")
        sorted_key = key[sa]
        new = np.empty(n, np.int64)
        new[sa] = np.concatenate(([0], np.cumsum(sorted_key[1:] != sorted_key[:-1])))
        rank = new
        del key, sorted_key, second
        if int(rank[sa[-1]]) == n - 1:  # every suffix told apart already
            break
        h *= 2
    return sa.astype(np.int32 if n < 2**31 else np.int64)


#: Children are fetched by a count bound a little below the exact one
#: (rounding), then checked by the probability itself.
_SLACK = 1 - 1e-9


def _grow_chain(tree: _Tree, node: Any, max_tokens: int, min_prob: float) -> Draft:
    d = Draft()
    prob = 1.0
    while len(d.tokens) < max_tokens:
        total = tree.count(node)
        kids = tree.children(node, _SLACK * min_prob * total / prob, first=True)
        if not kids:
            break
        token, count, child = kids[0]
        prob *= count / total
        if prob < min_prob:
            break
        d.parents.append(len(d.tokens) - 1)
        d.tokens.append(token)
        d.probs.append(prob)
        d.score += prob
        node = child
    return d


def _grow_tree(tree: _Tree, node: Any, max_tokens: int, min_prob: float) -> Draft:
    d = Draft()
    heap: list[tuple[float, int, Any, int, int]] = []  # (-prob, order, node, token, parent)
    order = 0

    def offer(parent_node: Any, prob: float, parent: int) -> None:
        nonlocal order
        total = tree.count(parent_node)
        for token, count, child in tree.children(parent_node, _SLACK * min_prob * total / prob):
            p = prob * count / total
            if p < min_prob:
                break  # children come in decreasing count
            heapq.heappush(heap, (-p, order, child, token, parent))
            order += 1

    if max_tokens > 0:
        offer(node, 1.0, -1)
    while heap and len(d.tokens) < max_tokens:
        neg, _, child, token, parent = heapq.heappop(heap)
        d.parents.append(parent)
        d.tokens.append(token)
        d.probs.append(-neg)
        d.score += -neg
        if len(d.tokens) < max_tokens:
            offer(child, -neg, len(d.tokens) - 1)
    return d


def _best_draft(tree: _Tree, pattern: np.ndarray, s: SuffixSetting, source: str) -> Draft:
    grow = _grow_tree if s.tree else _grow_chain
    best: Draft | None = None
    # The best score over the match lengths, a tie going to the longer match, found from the longest
    # down: a draft scores at most its token limit, which shrinks with the match, so once the best
    # reaches a length's limit no shorter match can beat it (the same draft as trying every length).
    for m, node in reversed(list(tree.matches(pattern))):
        limit = max(0, min(s.max_spec_tokens, int(m * s.max_spec_factor + s.max_spec_offset + 1e-6)))
        if best is not None and best.score >= limit:
            break
        d = grow(tree, node, limit, s.min_token_prob)
        if best is None or d.score > best.score:
            d.match_len, d.source = m, source
            best = d
    return best if best is not None else Draft(source=source)


def speculate(context: np.ndarray, setting: SuffixSetting, corpus: CorpusSuffixes | None = None,
              matcher: CorpusMatcher | None = None) -> Draft:
    """SuffixDecoding's draft after ``context`` (the module's docstring):
    the per-request tree's, or the corpus tree's where it scores higher.
    ``matcher``: the corpus' matches of this sequence's substrings kept from
    earlier calls (``CorpusSuffixes.matcher``; the contexts of those calls
    and this one are prefixes of its sequence)."""
    pattern = context[-setting.max_depth:]
    best = _best_draft(_DocumentTree(context, setting.max_depth), pattern, setting, "document")
    if corpus is not None and setting.corpus:
        if corpus.max_depth < setting.max_depth:
            raise ValueError(f"the corpus suffix array is sorted to depth {corpus.max_depth}, "
                             f"not {setting.max_depth}")
        if matcher is not None and matcher.corpus is not corpus:
            raise ValueError("the matcher is another corpus'")
        g = _best_draft(_CorpusView(corpus, setting.max_depth, matcher, len(context)), pattern, setting, "corpus")
        if g.score > best.score:
            best = g
    return best


class CorpusMatcher:
    """The corpus tree's nodes of one growing sequence's substrings, kept by
    (start, end) position: the suffix of length m of the sequence's first n
    tokens is found from the longest of its prefixes an earlier step
    matched, narrowed by the tokens since, not from the root. Entries that no later pattern can
    reach (start before the last ``max_depth`` tokens) are dropped now and
    then."""

    #: Entries kept before the unreachable ones are dropped.
    PRUNE_AT = 200_000

    def __init__(self, corpus: CorpusSuffixes, sequence: Sequence[int]) -> None:
        self.corpus = corpus
        self.sequence = sequence
        self._memo: dict[tuple[int, int], tuple[int, int, int] | None] = {}

    def _node(self, start: int, end: int) -> tuple[int, int, int] | None:
        memo = self._memo
        e = end
        while e > start and (start, e) not in memo:
            e -= 1
        node = memo[(start, e)] if e > start else (0, len(self.corpus.sa), 0)
        if node is not None and e < end:
            node = self.corpus.descend(node, self.sequence[e:end])
            memo[(start, end)] = node
        return node

    def matches(self, n: int, pattern_len: int) -> Iterator[tuple[int, Any]]:
        """(m, node) for the suffixes of the sequence's first n tokens, m = 1 .. pattern_len - 1, while they occur."""
        if len(self._memo) > self.PRUNE_AT:
            keep = n - self.corpus.max_depth - 1
            self._memo = {k: v for k, v in self._memo.items() if k[0] >= keep}
        for m in range(1, pattern_len):
            node = self._node(n - m, n)
            if node is None:
                return
            yield m, node


class _CorpusView:
    """A corpus' tree seen to a smaller depth (one suffix array serves every
    setting), matched through a CorpusMatcher when there is one."""

    def __init__(self, corpus: CorpusSuffixes, max_depth: int, matcher: CorpusMatcher | None = None,
                 n: int = 0) -> None:
        self.corpus = corpus
        self.max_depth = max_depth
        self.matcher = matcher
        self.n = n  # the context's length: where its suffixes end in the matcher's sequence

    def matches(self, pattern: np.ndarray) -> Iterator[tuple[int, Any]]:
        if self.matcher is not None:
            return self.matcher.matches(self.n, len(pattern))
        return self.corpus.matches(pattern)  # m < len(pattern) <= max_depth

    def count(self, node: Any) -> int:
        return node[1] - node[0]

    def children(self, node: Any, min_count: float = 0.0, first: bool = False) -> list[tuple[int, int, Any]]:
        return [] if node[2] >= self.max_depth else self.corpus.children(node, min_count, first)


def accepted_draft_length(draft: Draft, doc: Sequence[int], at: int) -> int:
    """The depth of the deepest draft token whose path equals doc[at:]
    (parents come before their children)."""
    depth = [0] * len(draft.tokens)
    ok = [False] * len(draft.tokens)
    best = 0
    end = len(doc)
    for i, (t, p) in enumerate(zip(draft.tokens, draft.parents)):
        if p >= 0 and not ok[p]:
            continue
        d = 1 if p < 0 else depth[p] + 1
        depth[i] = d
        if at + d - 1 < end and t == doc[at + d - 1]:
            ok[i] = True
            best = max(best, d)
    return best


def load_corpus_suffixes(paths: Sequence[str], tokenizer: Any, max_depth: int, *, text_field: str = "text",
                         progress: Callable[[str], None] = lambda m: None) -> tuple[CorpusSuffixes, dict[str, Any]]:
    """The global tree over shard files or folders, read and tokenized as
    ngram-build reads them (text shards with ``tokenizer``, an EOS after
    every document; pre-tokenized shards as they are). Returns it and what
    making it took (tokens, documents, seconds)."""
    from indexer.documents import ReadSpec, open_documents
    from indexer.shard_discovery import expand_inputs

    spec = ReadSpec(tokenizer=tokenizer, vocab_size=tokenizer.vocab_size, eos_id=tokenizer.eos_id,
                    text_field=text_field)
    t0 = time.perf_counter()
    docs: list[np.ndarray] = []
    for f in expand_inputs(paths):
        for ids, lengths in open_documents(str(f), spec):
            docs.extend(np.split(ids, np.cumsum(lengths)[:-1]))
    t1 = time.perf_counter()
    progress(f"suffix baseline: {sum(len(d) for d in docs):,} corpus tokens of {len(docs):,} documents read in "
             f"{t1 - t0:.0f} s; sorting their suffixes to depth {max_depth}")
    corpus = CorpusSuffixes.build(docs, max_depth)
    t2 = time.perf_counter()
    return corpus, {"paths": [str(p) for p in paths], "tokens": corpus.corpus_tokens, "documents": corpus.documents,
                    "read_seconds": t1 - t0, "sort_seconds": t2 - t1, "bytes": corpus.nbytes}


def corpus_path_note(paths: Sequence[str]) -> str:
    return ", ".join(Path(p).name or str(p) for p in paths)
