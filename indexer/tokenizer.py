"""Loading tokenizers, a fast exact backend, and a vocabulary fingerprint.

``load_tokenizer(spec)`` accepts

- a Hugging Face ``tokenizer.json`` file, or a folder holding one;
- a tiktoken rank file (lines of ``<base64 token> <rank>``, e.g.
  ``cl100k_base.tiktoken``);
- otherwise a Hugging Face hub id (``Qwen/Qwen3-8B``), fetched by
  ``tokenizers`` (needs network access or a warm HF cache).

Two backends produce the ids: ``"hf"`` (the ``tokenizers`` library, the
reference) and ``"tiktoken"`` (faster per core; CHANGELOG.md has the
figures). A byte-level BPE
``tokenizer.json`` (GPT-2, Qwen2/Qwen3, Llama 3 style) is converted into a
``tiktoken.Encoding``; with ``backend="auto"`` the conversion is used only
after it produced the same ids as HF on a set of tricky strings plus any
sample texts the caller passes.

Documents are treated as plain text: a special-token string such as
``<|endoftext|>`` inside a document is encoded as ordinary characters, never
as the special token. ``encode_to_arrays`` appends one EOS id after every
document.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any, Literal, NamedTuple

import numpy as np

from indexer.eos_lookup import resolve_eos
from indexer.tiktoken_conversion import hf_tiktoken_plan
from indexer.tokenizer_backends import (
    EncodingBackend,
    HFBackend,
    TiktokenBackend,
    build_backend,
    cached_backend,
    mismatches,
    remember_backend,
)
from indexer.tokenizer_source import (
    LoadedDefinition,
    TokenizerError,
    TokenizerSource,
    resolve_source,
)

__all__ = ["TRICKY_TEXTS", "EncodedBatch", "Tokenizer", "TokenizerError", "load_tokenizer"]

logger = logging.getLogger(__name__)

Backend = Literal["auto", "hf", "tiktoken"]

#: Strings on which a converted tiktoken encoding must match HF exactly
#: before ``backend="auto"`` trusts it: Unicode classes at the edges of the
#: split regex, normalization-sensitive sequences, whitespace runs, digits,
#: contractions, code, CJK, emoji, and special-token strings.
TRICKY_TEXTS: tuple[str, ...] = (
    "",
    " ",
    "   ",
    "\n",
    "\n\n\n",
    "\r\n",
    "\r",
    "\t\t",
    " \n \n  ",
    "trailing spaces   ",
    "   leading spaces",
    "Hello world! How's it going? I'm fine, you're great, we'll see, they've gone, she'd go.",
    "DON'T SHOUT, IT'S LOUD. I'LL STOP. WE'VE 'LL 'S",
    "rock’n’roll isn’t “quoted” — dash – dash … ellipsis",
    "0 1 12 123 1234 12345 1234567890123 3.14159 1,000,000 1e-10 0x1F",
    "٣٤٥ ①②③ Ⅻ ½ ²³ ໑໒",
    "line\u2028separator\u2029paragraph\u0085nel\u000bvt\u000cff\x1c\x1d\x1e",
    "nbsp\u00a0ideographic\u3000space thin\u2009space mongolian\u180evs zwsp\u200bbom\ufeffend",
    "def f(x: int) -> int:\n    return x ** 2  # square\n\n\nclass A(B):\n\tpass\n",
    "if (a && b) { x += 1; } else { y--; } // comment /* block */ <div class=\"x\">&amp;</div>",
    '{"key": [1, 2.5, null, true], "nested": {"a": "b\\n"}}',
    "https://example.com/path?q=1&r=two#frag user@example.org",
    "中文字符测试，标点。日本語のテキスト、カタカナ。한국어 텍스트입니다.",
    "façade naïve café résumé Ünïcödé Straße Ørsted Łódź İstanbul",
    "Привет, мир! Γειά σου Κόσμε! مرحبا بالعالم שלום עולם नमस्ते दुनिया สวัสดีชาวโลก",
    "emoji 😀👍🏽 👨‍👩‍👧‍👦 🇺🇸🇯🇵 ❤️ ✈︎ 🏳️‍🌈",
    "e\u0301 A\u030a \u2126 \u212b \ufb01 \u1100\u1161\u11a8 a\u0300\u0301 \u1e9b\u0323 ǅ ǈ",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟙𝟚𝟛 \U0001f600\U00010348 \x00\x01\x7f",
    "<|endoftext|> <|im_start|>user\nhi<|im_end|> <think>reason</think> <tool_call>{}</tool_call> </s> <s> <eos>",
    "a" * 300 + " " + "ab" * 200 + " " + "\n" * 50 + " " * 100 + "x",
    "MixedCASE camelCase snake_case kebab-case SCREAMING_CASE x'S'LL 's 'T",
)


class EncodedBatch(NamedTuple):
    """Documents encoded by ``Tokenizer.encode_to_batch`` / ``encode_to_arrays_async``."""

    ids: np.ndarray  # int32, the documents back to back, each followed by the EOS id
    lengths: np.ndarray  # int64, the ids per document, EOS included
    seconds: float  # the time spent encoding this batch



# --------------------------------------------------------------------------
# The public object


class Tokenizer:
    """A loaded tokenizer. Make one with :func:`load_tokenizer`.

    Attributes: ``name``, ``vocab_size`` (ids lie in ``[0, vocab_size)``,
    special tokens included), ``eos_id``, ``fingerprint`` (hex sha256 of the
    vocabulary, merges, normalizer, pre-tokenizer and added tokens; the same
    whichever backend runs), ``backend`` (``"hf"`` or ``"tiktoken"``).

    Pickling keeps only the source and the facts above; a worker process
    rebuilds the backend on first use (a fraction of a second) without
    re-checking exactness, and fails if the tokenizer file changed.
    """

    def __init__(self, source: TokenizerSource, backend: str, eos_id: int, threads: int = 1) -> None:
        self._source = source
        self.backend = backend
        self.eos_id = eos_id
        self.threads = threads
        self._impl: EncodingBackend | None = None

    # -- facts ----------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._source.name

    @property
    def vocab_size(self) -> int:
        return self._source.vocab_size

    @property
    def fingerprint(self) -> str:
        return self._source.fingerprint

    @property
    def spec(self) -> str:
        return self._source.spec

    def __repr__(self) -> str:
        return (
            f"Tokenizer(name={self.name!r}, backend={self.backend!r}, vocab_size={self.vocab_size}, "
            f"eos_id={self.eos_id}, fingerprint={self.fingerprint[:12]}...)"
        )

    # -- pickling -------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_impl"] = None  # rebuilt lazily in the receiving process
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def make_self_contained(self) -> None:
        """Carries the tokenizer's definition when pickled (for machines
        without its file: a cluster's nodes), not just its path."""
        if self._source.hub_json is None:
            self._source.hub_json = self._source.raw().decode("utf-8")

    # -- encoding -------------------------------------------------------------

    def _backend(self) -> EncodingBackend:
        """The backend in this process, built on first use (once per process)."""
        if self._impl is None:
            self._impl = cached_backend(self._source, self.backend, self.threads)
        return self._impl

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Ids of each text, no EOS added."""
        backend = self._backend()
        return [a.tolist() for a in backend.call_and_wait(backend.encode, list(texts))]

    def encode_to_arrays(self, texts: Sequence[str], add_special_tokens: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Encode documents and append one EOS after each.

        ``add_special_tokens`` applies the HF tokenizer's post-processor first
        (a BOS per document for Llama-2-style tokenizers), as DART's build
        does; the tiktoken backend has no post-processor, so it refuses.

        Returns ``(ids, lengths)``: ``ids`` int32, all documents back to back,
        each followed by ``eos_id``; ``lengths`` int64, the ids per document,
        EOS included (so ``lengths.sum() == len(ids)``, every length >= 1).
        """
        batch = self.encode_to_batch(texts, add_special_tokens)
        return batch.ids, batch.lengths

    def encode_to_batch(self, texts: Sequence[str], add_special_tokens: bool = False) -> EncodedBatch:
        """``encode_to_arrays``, with the seconds spent, waited for: on the
        backend's own thread where that is cheaper (HF), else on the caller's."""
        backend = self._backend()
        self._check_special(backend, add_special_tokens)
        return backend.call_and_wait(self._encode_arrays_here, backend, list(texts), add_special_tokens)

    def encode_to_arrays_async(self, texts: Sequence[str], add_special_tokens: bool = False) -> Future[EncodedBatch]:
        """``encode_to_arrays`` on the backend's own encoding thread (one per
        process, batches in the order given): the caller goes on reading and
        counting other documents meanwhile. The future's ``EncodedBatch``
        also gives the seconds the thread spent on the batch."""
        backend = self._backend()
        self._check_special(backend, add_special_tokens)
        return backend.thread.submit(self._encode_arrays_here, backend, list(texts), add_special_tokens)

    def _check_special(self, backend: EncodingBackend, add_special_tokens: bool) -> None:
        if add_special_tokens and not isinstance(backend, HFBackend):
            raise TokenizerError(f"{self.name}: add_special_tokens needs the hf backend, not {self.backend}")

    def _encode_arrays_here(self, backend: EncodingBackend, texts: list[str],
                            add_special_tokens: bool) -> EncodedBatch:
        t0 = time.perf_counter()
        if add_special_tokens:
            assert isinstance(backend, HFBackend)
            per_doc = backend.encode(texts, add_special_tokens=True)
        else:
            per_doc = backend.encode(texts)
        if not per_doc:
            return EncodedBatch(np.empty(0, dtype=np.int32), np.empty(0, dtype=np.int64), time.perf_counter() - t0)
        eos = np.array([self.eos_id], dtype=np.int32)
        pieces: list[np.ndarray] = []
        for a in per_doc:
            pieces.append(a)
            pieces.append(eos)
        ids = np.concatenate(pieces).astype(np.int32, copy=False)
        lengths = np.fromiter((len(a) + 1 for a in per_doc), dtype=np.int64, count=len(per_doc))
        return EncodedBatch(ids, lengths, time.perf_counter() - t0)

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` (invalid UTF-8 at token edges becomes U+FFFD)."""
        return self._backend().decode(ids)

    def compare_backends(self, texts: Sequence[str]) -> list[int]:
        """Indices of ``texts`` whose ids differ between HF and tiktoken.

        For an HF tokenizer.json only; raises ``TokenizerError`` when no
        tiktoken conversion exists.
        """
        if self._source.kind != "hf":
            raise TokenizerError(f"{self.name}: a tiktoken rank file has no HF backend to compare with")
        hf = build_backend(self._source, "hf", self.threads)
        tt = build_backend(self._source, "tiktoken", self.threads)
        return mismatches(hf, tt, texts)


def load_tokenizer(
    spec: str | os.PathLike[str],
    backend: Backend = "auto",
    eos: int | str | None = None,
    *,
    sample_texts: Sequence[str] | None = None,
    threads: int = 1,
    pattern: str | None = None,
    special_tokens: dict[str, int] | None = None,
) -> Tokenizer:
    """Load a tokenizer from a file, a folder or a hub id (see the module doc).

    backend: ``"auto"`` uses tiktoken when the tokenizer converts to it and
      the converted encoding gives HF's ids on :data:`TRICKY_TEXTS` and on
      ``sample_texts``; otherwise HF (the reason is logged). ``"hf"`` and
      ``"tiktoken"`` force a backend (the latter fails if no conversion
      exists). A tiktoken rank file always uses tiktoken.
    eos: an id, or a token string; by default the ``eos_token`` of a
      ``tokenizer_config.json`` next to the tokenizer.json, else the first of
      ``<|endoftext|>``, ``</s>``, ``<|end_of_text|>``, ``<eos>`` in the
      vocabulary. For a rank file, ``special_tokens`` are looked up too.
    threads: encoding threads inside this process; keep 1 in process-pool
      workers.
    pattern, special_tokens: for tiktoken rank files only, which do not store
      them (known for r50k/p50k/cl100k/o200k_base; otherwise the cl100k
      pattern is assumed and no special tokens exist).
    """
    if backend not in ("auto", "hf", "tiktoken"):
        raise ValueError(f"backend must be 'auto', 'hf' or 'tiktoken', not {backend!r}")
    if threads < 1:
        raise ValueError("threads must be >= 1")
    source, loaded = resolve_source(os.fspath(spec), pattern, special_tokens)
    eos_id = resolve_eos(source, loaded, eos)
    chosen, impl = _choose_backend(source, loaded, backend, threads, sample_texts or ())
    tok = Tokenizer(source, chosen, eos_id, threads)
    tok._impl = impl
    remember_backend(source, chosen, threads, impl)
    return tok


def _choose_backend(
    source: TokenizerSource, loaded: LoadedDefinition, backend: Backend, threads: int, sample_texts: Sequence[str]
) -> tuple[str, EncodingBackend]:
    if source.kind == "tiktoken":
        if backend == "hf":
            raise TokenizerError(f"{source.name}: a tiktoken rank file cannot use the 'hf' backend")
        return "tiktoken", build_backend(source, "tiktoken", threads, loaded)

    text, cfg = loaded.json_text, loaded.cfg
    assert text is not None and cfg is not None
    if backend == "hf":
        return "hf", HFBackend(text, threads)
    plan, reason = hf_tiktoken_plan(cfg)
    if plan is None:
        if backend == "tiktoken":
            raise TokenizerError(f"{source.name}: cannot use the tiktoken backend: {reason}")
        logger.info("%s: using the hf backend: %s", source.name, reason)
        return "hf", HFBackend(text, threads)
    try:
        tt = TiktokenBackend(plan, threads, source.name)
    except Exception as e:
        if backend == "tiktoken":
            raise TokenizerError(f"{source.name}: cannot build the tiktoken backend: {e}") from e
        logger.warning("%s: using the hf backend: tiktoken rejected the conversion (%s)", source.name, e)
        return "hf", HFBackend(text, threads)
    if backend == "tiktoken":
        return "tiktoken", tt

    hf = HFBackend(text, threads)
    texts = [*TRICKY_TEXTS, *sample_texts]
    bad = mismatches(hf, tt, texts)
    if bad:
        logger.warning(
            "%s: using the hf backend: tiktoken ids differ from HF on %d of %d check texts (first: %r)",
            source.name,
            len(bad),
            len(texts),
            texts[bad[0]][:80],
        )
        return "hf", hf
    logger.info("%s: tiktoken backend matches HF on %d check texts", source.name, len(texts))
    return "tiktoken", tt
