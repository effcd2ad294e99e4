"""NgramIndex: the in-process Python API over the C++ engine.

Arrays in, arrays out; the GIL is released inside every query.
"""
from __future__ import annotations

import json
import os
import urllib.parse
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple, Protocol

import numpy as np

from ngram_service import _engine
from ngram_service._engine import TrieFormatError
from ngram_service.proposals import DEFAULTS as PROPOSE_DEFAULTS
from ngram_service.proposals import propose_keywords
from ngram_service.tree import FIELD_DEFAULTS, DraftTree, prune_keywords

#: A zstd-compressed trie's first bytes (``ngram-build --compress``): the engine's definition.
ZSTD_MAGIC: bytes = _engine.ZSTD_MAGIC


def index_name(location: str) -> str:
    """The name a trie goes by when none is given: its file or object name less
    a ``.zst`` and the last extension (``dir/corpus.v2.ngt.zst``: ``corpus.v2``).
    The build stores it in the header and the native server names the index by
    it (server's file_stem), so that a fetched or decompressed copy keeps the
    name of what it was copied from."""
    path = urllib.parse.urlsplit(location).path if "://" in location else location
    base = path.rstrip("/").rsplit("/", 1)[-1].removesuffix(".zst")
    dot = base.rfind(".")
    return base[:dot] if dot > 0 else base


class TopK(NamedTuple):
    """The k most frequent continuations of a context."""

    tokens: np.ndarray  # int32 [k'], most frequent first
    probs: np.ndarray  # float32 [k'], count(s+w) / count(s)
    counts: np.ndarray  # uint64 [k']
    matched: int  # length of the context suffix s used; 0: unigram distribution


class ConditionalProbs(Protocol):
    """``NgramIndex.conditional_probs``'s signature (the engine's method)."""

    def __call__(self, contexts: Any, candidates: Any, *,
                 timeout: float | None = None) -> tuple[np.ndarray, np.ndarray]: ...


class Prune(Protocol):
    """``NgramIndex.prune``'s signature (the engine's method, whose own
    signature text is the engine table's: ``help(idx.prune)``)."""

    def __call__(self, prefix: Any, topk_tokens: Any, topk_probs: Any, *, beam_width: int = FIELD_DEFAULTS["beam_width"],
                 max_nodes: int = FIELD_DEFAULTS["max_nodes"], ngram_weight: float = FIELD_DEFAULTS["ngram_weight"],
                 level_weights: Any = FIELD_DEFAULTS["level_weights"], logit_weights: Any = FIELD_DEFAULTS["logit_weights"],
                 eos_token_id: int | None = FIELD_DEFAULTS["eos_token_id"],
                 ngram_on_first_level: bool = FIELD_DEFAULTS["ngram_on_first_level"],
                 timeout: float | None = None) -> DraftTree: ...


class Propose(Protocol):
    """``NgramIndex.propose``'s signature (the engine's method, whose own
    signature text is the engine table's: ``help(idx.propose)``)."""

    def __call__(self, context: Any, *, max_nodes: int = PROPOSE_DEFAULTS["max_nodes"],
                 max_depth: int = PROPOSE_DEFAULTS["max_depth"], max_branch: int = PROPOSE_DEFAULTS["max_branch"],
                 min_prob: float = PROPOSE_DEFAULTS["min_prob"], corpus: bool = PROPOSE_DEFAULTS["corpus"],
                 lookup: bool = PROPOSE_DEFAULTS["lookup"], lookup_weight: float = PROPOSE_DEFAULTS["lookup_weight"],
                 lookup_min_match: int = PROPOSE_DEFAULTS["lookup_min_match"],
                 discount: float = PROPOSE_DEFAULTS["discount"], lookup_decay: float = PROPOSE_DEFAULTS["lookup_decay"],
                 lookup_prior: float = PROPOSE_DEFAULTS["lookup_prior"],
                 order_weight: float = PROPOSE_DEFAULTS["order_weight"],
                 root_branch: int = PROPOSE_DEFAULTS["root_branch"], timeout: float | None = None) -> DraftTree: ...


class NgramIndex:
    """A trie file opened for queries.

    ``NgramIndex.open(path)`` maps a plain trie file (opening costs the same
    whatever the file's size); ``mode="ram"`` reads it into memory instead.
    A zstd-compressed trie (``ngram-build --compress``) is always
    decompressed into RAM.

    The per-query methods are the engine's own, bound to each instance at
    open, so that a call runs no Python frame (``prune``'s overhead is part
    of every draft step). Each, and each batch method, takes ``timeout``
    (seconds, None: no limit; anything but a number > 0 and finite raises
    ValueError): the engine stops the call soon after it passes and raises
    TimeoutError, returning nothing, not even part of a batch.

    ``conditional_probs(contexts, candidates, *, timeout=None)``:
    DART-compatible conditional probabilities. contexts: int [B, C] (C >=
    1); candidates: int [B, K].
    Returns (probs float32 [B, K], matched int32 [B, K]): for each query, the
    longest suffix s of the context (at most order-1 tokens) that occurs and
    is followed by the candidate w gives p = float32(count(s+w)) * (1 /
    float32(count(s))) and matched = len(s); a candidate never seen after any
    suffix gets 0 and 0.

    ``prune(prefix, topk_tokens, topk_probs, *, beam_width=20, ...,
    timeout=None)``: DART tree pruning of one draft lattice, a DraftTree;
    parameters (the engine's table, kPruneFields) and errors as
    ``ngram_service.tree.prune``.

    ``propose(context, *, max_nodes=64, ..., timeout=None)``: a draft tree
    grown from the trie and the context alone (no drafter), a DraftTree
    whose scores are path probabilities; parameters (the engine's table,
    kProposeFields) and errors as ``ngram_service.proposals.propose``.
    """

    conditional_probs: ConditionalProbs
    prune: Prune
    propose: Propose

    def __init__(self, engine: "_engine.Trie", compressed_bytes: int | None = None) -> None:
        """engine: an opened ``_engine.Trie``; compressed_bytes: the size of
        the zstd file it was decompressed from, if it was."""
        self._t = engine
        self._compressed_bytes = compressed_bytes
        self.prune = engine.prune  # the engine's methods: see the class docstring
        self.conditional_probs = engine.conditional_probs
        self.propose = engine.propose
        try:
            self._meta: dict[str, Any] = json.loads(engine.meta_json.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise TrieFormatError(f"{engine.path}: section meta: not valid UTF-8 JSON ({e})") from e

    @property
    def engine(self) -> "_engine.Trie":
        """The engine's trie, for the bindings that take one (``_engine.LatticeBatch.prune``)."""
        return self._t

    @classmethod
    def open(cls, path: str | Path, mode: str = "mmap", verify: bool = False) -> "NgramIndex":
        """Opens a trie file.

        path: a str, bytes or os.PathLike (anything else: TypeError). mode:
        "mmap" (default) or "ram". verify: True to also check every
        section's checksum (reads the whole file; None is False). Raises TrieFormatError (a
        ValueError) for a missing, truncated, corrupted or foreign file, and
        at once for a path that is not a regular file (a FIFO, a directory, a
        device).
        """
        if not isinstance(mode, str) or mode not in ("mmap", "ram"):
            raise ValueError(f"mode must be 'mmap' or 'ram', got {mode!r}")
        if verify is None:  # what pybind's conversion made of it before the check
            verify = False
        if not isinstance(verify, (bool, np.bool_)):  # the engine's rule for a switch
            raise ValueError(f"verify must be True or False, got {verify!r}")
        if not isinstance(path, (str, bytes, os.PathLike)):
            raise TypeError(f"path must be a str, bytes or os.PathLike, got {path!r}")
        path = os.fsdecode(path)
        # Read as the engine opens a trie: a FIFO or a directory is refused at once, never waited on.
        magic = _engine.file_head(path, len(ZSTD_MAGIC))
        if magic == ZSTD_MAGIC:
            return cls(_engine.Trie.from_bytes(_decompress(path), path, verify), Path(path).stat().st_size)
        return cls(_engine.Trie.open(path, in_ram=(mode == "ram"), verify=verify))

    @property
    def order(self) -> int:
        """N: the longest n-gram stored."""
        return self._t.order

    @property
    def vocab_size(self) -> int:
        return self._t.vocab_size

    @property
    def eos_id(self) -> int | None:
        e = self._t.eos_id
        return None if e < 0 else e

    def count(self, ngram: Any) -> int:
        """Occurrences of an n-gram of 1..order tokens in the corpus (0 if absent)."""
        return self._t.count(ngram)

    def topk(self, context: Any, k: int) -> TopK:
        """The k most frequent continuations of the longest suffix of
        ``context`` (at most order-1 tokens) that has any continuation; with
        none, the k most frequent tokens (matched = 0)."""
        tokens, probs, counts, matched = self._t.topk(context, k)
        return TopK(tokens, probs, counts, matched)

    def prune_batch(self, requests: Any, *, threads: int | None = None, timeout: float | None = None,
                    beam_width: int = FIELD_DEFAULTS["beam_width"], max_nodes: int = FIELD_DEFAULTS["max_nodes"],
                    ngram_weight: float = FIELD_DEFAULTS["ngram_weight"], level_weights: Any = FIELD_DEFAULTS["level_weights"],
                    logit_weights: Any = FIELD_DEFAULTS["logit_weights"], eos_token_id: int | None = FIELD_DEFAULTS["eos_token_id"],
                    ngram_on_first_level: bool = FIELD_DEFAULTS["ngram_on_first_level"]) -> list[DraftTree]:
        """Many prune requests on all cores, GIL released; see ngram_service.tree.prune_batch.
        timeout: seconds (None: no limit); TimeoutError, and no trees, once it passes."""
        return _engine.prune_batch(self._t, requests, threads=threads, timeout=timeout, **prune_keywords(locals()))

    def propose_batch(self, contexts: Any, *, threads: int | None = None, timeout: float | None = None,
                      max_nodes: int = PROPOSE_DEFAULTS["max_nodes"], max_depth: int = PROPOSE_DEFAULTS["max_depth"],
                      max_branch: int = PROPOSE_DEFAULTS["max_branch"], min_prob: float = PROPOSE_DEFAULTS["min_prob"],
                      corpus: bool = PROPOSE_DEFAULTS["corpus"], lookup: bool = PROPOSE_DEFAULTS["lookup"],
                      lookup_weight: float = PROPOSE_DEFAULTS["lookup_weight"],
                      lookup_min_match: int = PROPOSE_DEFAULTS["lookup_min_match"],
                      discount: float = PROPOSE_DEFAULTS["discount"],
                      lookup_decay: float = PROPOSE_DEFAULTS["lookup_decay"],
                      lookup_prior: float = PROPOSE_DEFAULTS["lookup_prior"],
                      order_weight: float = PROPOSE_DEFAULTS["order_weight"],
                      root_branch: int = PROPOSE_DEFAULTS["root_branch"]) -> list[DraftTree]:
        """Many proposals on all cores, GIL released; see ngram_service.proposals.propose_batch.
        timeout: seconds (None: no limit); TimeoutError, and no trees, once it passes."""
        return _engine.propose_batch(self._t, contexts, threads=threads, timeout=timeout, **propose_keywords(locals()))

    def info(self) -> dict[str, Any]:
        """Header, metadata (tokenizer, corpus manifest, build parameters) and
        sizes: file_bytes is the file's size; a zstd-compressed trie also has
        image_bytes (the plain trie held in RAM) and compressed = True.
        ram_bytes is what the trie takes read into RAM (mode="ram", or
        compressed): its image plus, for format version 1, the token words
        (with their count ranks) and child offsets decoded at open for speed
        (docs/FORMAT.md, "In RAM")."""
        counts = [self._t.ngram_count(k) for k in range(1, self.order + 1)]
        sizes: dict[str, Any] = {"file_bytes": self._t.file_size}
        if self._compressed_bytes is not None:  # file_bytes is the file's; image_bytes what it holds
            sizes = {"file_bytes": self._compressed_bytes, "image_bytes": self._t.file_size, "compressed": True}
        sizes["ram_bytes"] = self._t.ram_bytes
        return info_dict(path=self._t.path, order=self.order, vocab_size=self.vocab_size, eos_id=self.eos_id,
                         sizes=sizes, mapped=self._t.mapped, ngrams=counts, tokens=self._t.total_tokens,
                         meta=self._meta)

    def sections(self) -> list[dict[str, Any]]:
        """The section table: kind, level, offset, length, count, width, crc32c."""
        return self._t.sections()

    def verify(self) -> None:
        """Recomputes every section's checksum; raises TrieFormatError on a mismatch."""
        self._t.verify_checksums()

    def __repr__(self) -> str:
        return f"NgramIndex({self._t.path!r}, order={self.order}, vocab_size={self.vocab_size})"


def info_dict(*, path: str, order: int, vocab_size: int, eos_id: int | None, sizes: dict[str, Any], mapped: bool,
              ngrams: list[int], tokens: int, meta: dict[str, Any]) -> dict[str, Any]:
    """The info dictionary of a trie, one definition for NgramIndex.info()
    and NgramClient.info() (from GetInfo): header fields, sizes (file_bytes,
    ram_bytes, and for a compressed trie image_bytes and compressed), n-gram
    counts per order and their total, corpus tokens, then the trie's meta
    section (tokenizer, corpus, build)."""
    return {"path": path, "order": order, "vocab_size": vocab_size, "eos_id": eos_id, **sizes, "mapped": mapped,
            "ngrams": ngrams, "ngrams_total": sum(ngrams), "tokens": tokens, **meta}


def decompress_trie(src: BinaryIO, dest: BinaryIO) -> None:
    """A zstd-compressed trie's plain bytes, every frame, from ``src`` into
    ``dest``; ZstdStreamError for a cut or corrupted stream, TrieFormatError
    when its first bytes are not a trie's (checked before the rest is
    decompressed: a large compressed file that is no trie costs nothing)."""
    from ngram_service.zstd_stream import zstd_chunks  # zstandard only when a compressed trie is read

    head = b""
    for chunk in zstd_chunks(src, 1 << 20):
        if len(head) < len(_engine.TRIE_MAGIC):
            head += chunk[:len(_engine.TRIE_MAGIC) - len(head)]
            if len(head) == len(_engine.TRIE_MAGIC) and head != _engine.TRIE_MAGIC:
                raise TrieFormatError("not a trie file (bad magic)")  # the engine's words for a plain file
        dest.write(chunk)
    if head != _engine.TRIE_MAGIC:  # a stream shorter than a trie's magic
        raise TrieFormatError("not a trie file (bad magic)")


def decompress_trie_file(src: str | Path, dest: BinaryIO, location: str,
                         error: type[Exception] = TrieFormatError) -> None:
    """decompress_trie from the file ``src``: a cut or corrupted stream or a
    file that is no trie raised as ``error``, its message naming ``location``."""
    from ngram_service.zstd_stream import ZstdStreamError

    try:
        with open(src, "rb") as f:
            decompress_trie(f, dest)
    except ZstdStreamError as e:
        raise error(f"{location}: zstd-compressed trie: {e}") from e
    except TrieFormatError as e:
        raise error(f"{location}: {e}") from None


def _decompress(path: str) -> bytes:
    import io

    out = io.BytesIO()
    decompress_trie_file(path, out, path)
    return out.getvalue()
