"""The two encoding backends, ``"hf"`` (the ``tokenizers`` library, the
reference) and ``"tiktoken"`` (about 5-8x faster per core, from a
``TiktokenPlan``), the one thread each encodes on, and the backends built in
this process (a pool worker builds each once, not once per shard)."""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np

from indexer.tiktoken_conversion import TiktokenPlan, hf_tiktoken_plan
from indexer.tokenizer_source import LoadedDefinition, TokenizerError, TokenizerSource

T = TypeVar("T")


class EncodeThread:
    """The one thread a backend encodes on (per process), apart from the
    caller's: encoding on the interpreter's main thread allocates from
    glibc's main arena, shared with Python and fragmented by it, where
    malloc and free dominate HF's encoding; a thread of its own gets an
    arena of its own (bench/bench_tokenize.py measures it; CHANGELOG.md has
    the figures). And the caller can read and count
    other documents meanwhile (``Tokenizer.encode_to_arrays_async``)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._executor: ThreadPoolExecutor | None = None
        self._pid = 0

    def submit(self, fn: Any, *args: Any) -> Future[Any]:
        if self._executor is None or self._pid != os.getpid():
            # (A forked child inherits the executor object but not its thread.)
            self._executor = ThreadPoolExecutor(1, thread_name_prefix=self._name)
            self._pid = os.getpid()
        return self._executor.submit(fn, *args)


class _ThreadedBackend:
    """What both backends share: their encoding thread, and where a
    synchronous encode runs."""

    #: Whether a synchronous encode runs on the backend's own thread (its own
    #: malloc arena) rather than the caller's.
    sync_encode_on_own_thread: bool
    thread: EncodeThread

    def call_and_wait(self, fn: Callable[..., T], *args: Any) -> T:
        """fn(*args), waited for, where this backend encodes best: on its
        own thread when ``sync_encode_on_own_thread``, else on the caller's."""
        return self.thread.submit(fn, *args).result() if self.sync_encode_on_own_thread else fn(*args)


class HFBackend(_ThreadedBackend):
    name = "hf"
    # A synchronous encode runs on the backend's thread too: its own malloc
    # arena (EncodeThread).
    sync_encode_on_own_thread = True

    def __init__(self, json_text: str, threads: int) -> None:
        import tokenizers

        self.tok = tokenizers.Tokenizer.from_str(json_text)
        # Special-token strings in a document are text, not control tokens.
        self.tok.encode_special_tokens = True
        self.threads = threads
        self.thread = EncodeThread("hf-encode")

    def encode(self, texts: Sequence[str], add_special_tokens: bool = False) -> list[np.ndarray]:
        """Ids of each text, on the calling thread. add_special_tokens: apply
        the tokenizer's post-processor (a BOS per text for Llama-2-style
        tokenizers), as ``tokenizer(text)`` does."""
        if not texts:
            return []
        texts = list(texts)
        # encode_batch_fast: the ids of encode(), without the character
        # offsets (a hash map per document) that nobody here reads.
        if self.threads == 1:
            # One document a call keeps to one core whatever
            # TOKENIZERS_PARALLELISM says (what a process-pool worker wants),
            # and frees each Encoding (token strings, offsets) at once.
            return [np.array(self.tok.encode_batch_fast([t], add_special_tokens=add_special_tokens)[0].ids,
                             dtype=np.int32) for t in texts]
        # threads > 1: the tokenizers Rayon pool (sized by RAYON_NUM_THREADS).
        encs = self.tok.encode_batch_fast(texts, add_special_tokens=add_special_tokens)
        return [np.array(e.ids, dtype=np.int32) for e in encs]

    def decode(self, ids: Sequence[int]) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=False)


def _alternation(tokens: Iterable[str]) -> re.Pattern[str] | None:
    # Longest first: Python's re takes the first alternative that matches,
    # which then equals HF's leftmost-longest matching of added tokens.
    toks = sorted(tokens, key=len, reverse=True)
    return re.compile("|".join(map(re.escape, toks))) if toks else None


class TiktokenBackend(_ThreadedBackend):
    # A synchronous encode runs on the caller's thread: tiktoken gains
    # nothing from an arena of its own, and the hand-off costs.
    sync_encode_on_own_thread = False
    name = "tiktoken"

    def __init__(self, plan: TiktokenPlan, threads: int, label: str) -> None:
        import tiktoken

        self.enc = tiktoken.Encoding(
            f"ngram-{label}", pat_str=plan.pattern, mergeable_ranks=plan.ranks, special_tokens=plan.special_tokens
        )
        self.forms = plan.normal_forms
        self.raw_re = _alternation(plan.raw_added)
        self.norm_re = _alternation(plan.normalized_added)
        self.added = {**plan.raw_added, **plan.normalized_added}
        self.threads = threads
        self.thread = EncodeThread("tiktoken-encode")
        self._pool: ThreadPoolExecutor | None = None
        self._pool_pid = 0
        self._nothing: frozenset[str] = frozenset()

    def _normalize(self, text: str) -> str:
        for form in self.forms:
            if not unicodedata.is_normalized(form, text):  # cheap for ASCII
                text = unicodedata.normalize(form, text)
        return text

    def _ordinary(self, text: str) -> np.ndarray:
        # encode_to_numpy with nothing allowed and nothing disallowed is
        # encode_ordinary, but returns the Rust buffer as a uint32 array
        # instead of a Python list.
        ids = self.enc.encode_to_numpy(text, allowed_special=self._nothing, disallowed_special=())
        return ids.view(np.int32)

    def _split(self, text: str, pattern: re.Pattern[str] | None) -> list[str | int]:
        if pattern is None or not pattern.search(text):
            return [text]
        out: list[str | int] = []
        pos = 0
        for m in pattern.finditer(text):
            if m.start() > pos:
                out.append(text[pos : m.start()])
            out.append(self.added[m.group()])
            pos = m.end()
        if pos < len(text):
            out.append(text[pos:])
        return out

    def encode_one(self, text: str) -> np.ndarray:
        if self.raw_re is None and self.norm_re is None:
            return self._ordinary(self._normalize(text))
        # Same order as HF: cut raw-matched added tokens, normalize each
        # remaining piece, cut normalized-matched ones, BPE the rest.
        parts: list[np.ndarray] = []
        for piece in self._split(text, self.raw_re):
            if isinstance(piece, int):
                parts.append(np.array([piece], dtype=np.int32))
                continue
            for sub in self._split(self._normalize(piece), self.norm_re):
                parts.append(np.array([sub], dtype=np.int32) if isinstance(sub, int) else self._ordinary(sub))
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int32)

    def encode(self, texts: Sequence[str]) -> list[np.ndarray]:
        if self.threads == 1 or len(texts) < 2:
            return [self.encode_one(t) for t in texts]
        # tiktoken releases the GIL inside its BPE, not in the per-document
        # Python around it:
        # bench_core's tokenizer-alone rows measure what threads buy here.
        if self._pool is None or self._pool_pid != os.getpid():
            # (A forked child inherits the pool object but not its threads.)
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="tiktoken")
            self._pool_pid = os.getpid()
        return list(self._pool.map(self.encode_one, texts, chunksize=16))

    def decode(self, ids: Sequence[int]) -> str:
        return self.enc.decode(list(ids), errors="replace")


EncodingBackend = HFBackend | TiktokenBackend

# Backends built in this process. A pool worker receives the tokenizer
# pickled inside every task; this makes it build the backend once per
# process, not once per shard. Keyed by the file digest, so an entry always
# matches what the driver loaded.
_BUILT_BACKENDS: dict[tuple[Any, ...], EncodingBackend] = {}
_MAX_CACHED_BACKENDS = 4


def _cache_key(source: TokenizerSource, backend: str, threads: int) -> tuple[Any, ...]:
    return (source.digest, source.kind, backend, threads, source.pattern, tuple(sorted(source.special_tokens.items())))


def remember_backend(source: TokenizerSource, backend: str, threads: int, impl: EncodingBackend) -> None:
    if len(_BUILT_BACKENDS) >= _MAX_CACHED_BACKENDS:
        _BUILT_BACKENDS.pop(next(iter(_BUILT_BACKENDS)))
    _BUILT_BACKENDS[_cache_key(source, backend, threads)] = impl


def cached_backend(source: TokenizerSource, backend: str, threads: int) -> EncodingBackend:
    """The backend built in this process for ``source``, built now if none is."""
    impl = _BUILT_BACKENDS.get(_cache_key(source, backend, threads))
    if impl is None:
        impl = build_backend(source, backend, threads)
        remember_backend(source, backend, threads, impl)
    return impl


def build_backend(
    source: TokenizerSource, backend: str, threads: int, loaded: LoadedDefinition | None = None
) -> EncodingBackend:
    if source.kind == "tiktoken":
        assert source.pattern is not None
        ranks = loaded.ranks if loaded and loaded.ranks is not None else source.ranks()
        return TiktokenBackend(TiktokenPlan(source.pattern, ranks, source.special_tokens), threads, source.name)
    if loaded and loaded.json_text is not None and loaded.cfg is not None:
        text, cfg = loaded.json_text, loaded.cfg
    else:
        text, cfg = source.hf_config()
    if backend == "hf":
        return HFBackend(text, threads)
    plan, reason = hf_tiktoken_plan(cfg)
    if plan is None:
        raise TokenizerError(f"{source.name}: cannot use the tiktoken backend: {reason}")
    return TiktokenBackend(plan, threads, source.name)


def mismatches(a: EncodingBackend, b: EncodingBackend, texts: Sequence[str]) -> list[int]:
    """Indices of ``texts`` whose ids differ between two backends."""
    bad = []
    for start in range(0, len(texts), 256):  # bounded memory on big samples
        chunk = texts[start : start + 256]
        for i, (x, y) in enumerate(zip(a.encode(chunk), b.encode(chunk))):
            if not np.array_equal(x, y):
                bad.append(start + i)
    return bad
