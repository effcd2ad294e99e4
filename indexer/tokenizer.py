"""Loading tokenizers, a fast exact backend, and a vocabulary fingerprint.

``load_tokenizer(spec)`` accepts

- a Hugging Face ``tokenizer.json`` file, or a folder holding one;
- a tiktoken rank file (lines of ``<base64 token> <rank>``, e.g.
  ``cl100k_base.tiktoken``);
- otherwise a Hugging Face hub id (``Qwen/Qwen3-8B``), fetched by
  ``tokenizers`` (needs network access or a warm HF cache).

Two backends produce the ids: ``"hf"`` (the ``tokenizers`` library, the
reference) and ``"tiktoken"`` (about 5-8x faster per core). A byte-level BPE
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

import base64
import binascii
import hashlib
import json
import logging
import os
import re
import time
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple, TypeVar

import numpy as np

from ngram_service.fingerprint import hf_fingerprint as _hf_fingerprint, tiktoken_fingerprint as _tiktoken_fingerprint

__all__ = ["TRICKY_TEXTS", "EncodedBatch", "Tokenizer", "TokenizerError", "load_tokenizer"]

logger = logging.getLogger(__name__)

Backend = Literal["auto", "hf", "tiktoken"]
NormalForm = Literal["NFC", "NFD", "NFKC", "NFKD"]
T = TypeVar("T")

# Looked up, in this order, when neither `eos` nor a tokenizer_config.json
# names the end-of-document token.
_KNOWN_EOS = ("<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>")

# The split pattern HF's ByteLevel pre-tokenizer uses when use_regex=true.
_GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"

# A rank file stores ranks only; the split pattern and special tokens of
# OpenAI's published encodings are known (copied from tiktoken_ext, whose
# constructors would download the ranks).
_R50K_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
_CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_O200K_PATTERN = "|".join(  # noqa: FLY002 (one alternative a line reads better)
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
_KNOWN_RANK_FILES: dict[str, tuple[str, dict[str, int]]] = {
    "r50k_base": (_R50K_PATTERN, {"<|endoftext|>": 50256}),
    "p50k_base": (_R50K_PATTERN, {"<|endoftext|>": 50256}),
    "cl100k_base": (
        _CL100K_PATTERN,
        {
            "<|endoftext|>": 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            "<|endofprompt|>": 100276,
        },
    ),
    "o200k_base": (_O200K_PATTERN, {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}),
}

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


class TokenizerError(ValueError):
    """A tokenizer could not be loaded or used as asked."""


# --------------------------------------------------------------------------
# GPT-2 byte-level alphabet


def _bytes_to_unicode() -> dict[int, str]:
    # GPT-2 maps every byte to a printable character so that BPE vocabularies
    # can be stored as JSON strings; printable Latin-1 bytes map to themselves.
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    mapping = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


_BYTE_OF_CHAR: dict[str, int] = {c: b for b, c in _bytes_to_unicode().items()}


# --------------------------------------------------------------------------
# Tokenizer definitions (what a spec points at)


def _parse_rank_file(path: Path, data: bytes) -> dict[bytes, int]:
    ranks: dict[bytes, int] = {}
    for lineno, line in enumerate(data.split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            token_b64, rank = line.split()
            ranks[base64.b64decode(token_b64, validate=True)] = int(rank)
        except (ValueError, binascii.Error) as e:
            raise TokenizerError(
                f"{path}:{lineno}: not a tiktoken rank line (expected '<base64 token> <rank>'): {line[:60]!r}"
            ) from e
    if not ranks:
        raise TokenizerError(f"{path}: empty tiktoken rank file")
    return ranks


def _eos_from_config(config_path: Path) -> str | None:
    try:
        cfg = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    eos = cfg.get("eos_token") if isinstance(cfg, dict) else None
    if isinstance(eos, dict):  # serialized AddedToken
        eos = eos.get("content")
    return eos if isinstance(eos, str) and eos else None


@dataclass
class _Source:
    """Where a tokenizer comes from, plus facts computed once in the parent.

    Small and picklable: a worker process gets this and rebuilds the backend
    from the file (checked against ``digest``), never the heavy objects.
    """

    kind: Literal["hf", "tiktoken"]
    spec: str
    name: str
    path: str | None  # local file to re-read
    hub_json: str | None  # tokenizer.json text when it came from the hub
    digest: str  # sha256 of the raw file bytes
    config_eos: str | None = None  # eos_token from tokenizer_config.json
    pattern: str | None = None  # rank files: split pattern
    special_tokens: dict[str, int] = field(default_factory=dict)  # rank files
    vocab_size: int = 0
    fingerprint: str = ""

    def raw(self) -> bytes:
        if self.hub_json is not None:
            return self.hub_json.encode("utf-8")
        assert self.path is not None
        data = Path(self.path).read_bytes()
        if hashlib.sha256(data).hexdigest() != self.digest:
            raise TokenizerError(f"{self.path}: tokenizer file changed since it was loaded")
        return data

    def hf_config(self) -> tuple[str, dict[str, Any]]:
        text = self.raw().decode("utf-8")
        return text, json.loads(text)

    def ranks(self) -> dict[bytes, int]:
        return _parse_rank_file(Path(self.path or self.spec), self.raw())


@dataclass
class _Loaded:
    """The parsed definition, kept only while loading (too big to pickle)."""

    json_text: str | None = None  # HF
    cfg: dict[str, Any] | None = None  # HF
    ranks: dict[bytes, int] | None = None  # rank files


def _resolve_source(
    spec: str, pattern: str | None, special_tokens: dict[str, int] | None
) -> tuple[_Source, _Loaded]:
    path = Path(spec).expanduser()
    config_eos: str | None = None
    if path.is_dir():
        tj = path / "tokenizer.json"
        rank_files = sorted(path.glob("*.tiktoken"))
        if tj.is_file():
            path = tj
        elif len(rank_files) == 1:
            path = rank_files[0]
        else:
            raise TokenizerError(f"{spec}: folder holds no tokenizer.json (nor a single *.tiktoken rank file)")
        name = Path(spec).resolve().name
    else:
        name = path.name

    if path.is_file():
        data = path.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        if data.lstrip()[:1] == b"{":
            try:
                cfg = json.loads(data)
            except ValueError as e:
                raise TokenizerError(f"{path}: not valid JSON ({e})") from e
            if not isinstance(cfg, dict) or "model" not in cfg:
                raise TokenizerError(f"{path}: not a Hugging Face tokenizer.json (no 'model')")
            config_eos = _eos_from_config(path.parent / "tokenizer_config.json")
            src = _Source("hf", spec, name, str(path), None, digest, config_eos)
            _fill_hf_facts(src, cfg)
            return src, _Loaded(json_text=data.decode("utf-8"), cfg=cfg)
        ranks = _parse_rank_file(path, data)
        known_pattern, known_special = _KNOWN_RANK_FILES.get(path.name.split(".")[0], (None, {}))
        if pattern is None and known_pattern is None:
            logger.warning(
                "%s: split pattern unknown for this rank file; assuming cl100k_base's (pass pattern= to set it)", spec
            )
        src = _Source(
            "tiktoken",
            spec,
            name,
            str(path),
            None,
            digest,
            pattern=pattern or known_pattern or _CL100K_PATTERN,
            special_tokens=dict(special_tokens if special_tokens is not None else known_special),
        )
        _fill_tiktoken_facts(src, ranks)
        return src, _Loaded(ranks=ranks)

    # Not a local path. Something that looks like one is a typo, not a hub id
    # (hub ids are "name" or "org/name"); say so instead of going online.
    if (
        spec.startswith(("/", ".", "~"))
        or spec.count("/") > 1
        or spec.endswith((".json", ".tiktoken", ".model"))
        or os.sep != "/" and os.sep in spec
    ):
        raise TokenizerError(f"{spec}: no such tokenizer file or folder")
    import tokenizers

    try:
        hub = tokenizers.Tokenizer.from_pretrained(spec)
    except Exception as e:  # the Rust side raises plain Exception
        raise TokenizerError(
            f"cannot load tokenizer {spec!r}: it is not a local file or folder, "
            f"and fetching it from the Hugging Face hub failed ({e})"
        ) from e
    text = hub.to_str()
    src = _Source("hf", spec, spec, None, text, hashlib.sha256(text.encode("utf-8")).hexdigest(), _hub_config_eos(spec))
    cfg = json.loads(text)
    _fill_hf_facts(src, cfg)
    return src, _Loaded(json_text=text, cfg=cfg)


def _hub_config_eos(repo_id: str) -> str | None:
    # Best effort: tokenizers itself never reads tokenizer_config.json.
    try:
        from huggingface_hub import hf_hub_download

        return _eos_from_config(Path(hf_hub_download(repo_id, "tokenizer_config.json")))
    except Exception:  # noqa: BLE001 (no huggingface_hub, no network, no such file: all mean "unknown")
        return None


def _hf_token_ids(cfg: dict[str, Any]) -> dict[str, int]:
    ids: dict[str, int] = {}
    vocab = (cfg.get("model") or {}).get("vocab")
    if isinstance(vocab, dict):
        ids.update(vocab)
    elif isinstance(vocab, list):  # Unigram: [[piece, score], ...], id = position
        ids.update({entry[0]: i for i, entry in enumerate(vocab)})
    for tok in cfg.get("added_tokens") or []:
        ids[tok["content"]] = tok["id"]
    return ids


def _fill_hf_facts(src: _Source, cfg: dict[str, Any]) -> None:
    ids = _hf_token_ids(cfg)
    if not ids:
        raise TokenizerError(f"{src.spec}: tokenizer has an empty vocabulary")
    src.vocab_size = max(ids.values()) + 1
    src.fingerprint = _hf_fingerprint(cfg)


def _fill_tiktoken_facts(src: _Source, ranks: dict[bytes, int]) -> None:
    src.vocab_size = max(max(ranks.values()), max(src.special_tokens.values(), default=-1)) + 1
    assert src.pattern is not None
    src.fingerprint = _tiktoken_fingerprint(ranks, src.pattern, src.special_tokens)


# --------------------------------------------------------------------------
# Backends


class _EncodeThread:
    """The one thread a backend encodes on (per process), apart from the
    caller's: encoding on the interpreter's main thread allocates from
    glibc's main arena, shared with Python and fragmented by it, where
    malloc/free took 44 % of HF's encoding time (perf, Qwen3 on the shared
    corpus); a thread of its own gets an arena of its own (about a third
    less CPU, bench/bench_tokenize.py). And the caller can read and count
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


class _HFBackend:
    name = "hf"
    # A synchronous encode runs on the backend's thread too: its own malloc
    # arena (_EncodeThread).
    encodes_apart = True

    def __init__(self, json_text: str, threads: int) -> None:
        import tokenizers

        self.tok = tokenizers.Tokenizer.from_str(json_text)
        # Special-token strings in a document are text, not control tokens.
        self.tok.encode_special_tokens = True
        self.threads = threads
        self.thread = _EncodeThread("hf-encode")

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


@dataclass
class _TiktokenPlan:
    """Everything needed to encode like an HF byte-level BPE with tiktoken."""

    pattern: str
    ranks: dict[bytes, int]
    special_tokens: dict[str, int]  # for decoding only; never matched in text
    normal_forms: tuple[NormalForm, ...] = ()  # unicodedata forms applied in order
    # Non-special added tokens HF still cuts out of the text: matched on the
    # raw text (normalized=false) or on the normalized text (normalized=true).
    raw_added: dict[str, int] = field(default_factory=dict)
    normalized_added: dict[str, int] = field(default_factory=dict)


def _alternation(tokens: Iterable[str]) -> re.Pattern[str] | None:
    # Longest first: Python's re takes the first alternative that matches,
    # which then equals HF's leftmost-longest matching of added tokens.
    toks = sorted(tokens, key=len, reverse=True)
    return re.compile("|".join(map(re.escape, toks))) if toks else None


class _TiktokenBackend:
    # A synchronous encode runs on the caller's thread: tiktoken gains
    # nothing from an arena of its own, and the hand-off costs.
    encodes_apart = False
    name = "tiktoken"

    def __init__(self, plan: _TiktokenPlan, threads: int, label: str) -> None:
        import tiktoken

        self.enc = tiktoken.Encoding(
            f"ngram-{label}", pat_str=plan.pattern, mergeable_ranks=plan.ranks, special_tokens=plan.special_tokens
        )
        self.forms = plan.normal_forms
        self.raw_re = _alternation(plan.raw_added)
        self.norm_re = _alternation(plan.normalized_added)
        self.added = {**plan.raw_added, **plan.normalized_added}
        self.threads = threads
        self.thread = _EncodeThread("tiktoken-encode")
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
        # instead of a Python list (about 1.5x faster end to end).
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
        # tiktoken releases the GIL inside its BPE (two threads of bare
        # encode_to_numpy: 1.44x), not in the per-document Python around it:
        # bench_core's tokenizer-alone rows measure what threads buy here.
        if self._pool is None or self._pool_pid != os.getpid():
            # (A forked child inherits the pool object but not its threads.)
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="tiktoken")
            self._pool_pid = os.getpid()
        return list(self._pool.map(self.encode_one, texts, chunksize=16))

    def decode(self, ids: Sequence[int]) -> str:
        return self.enc.decode(list(ids), errors="replace")


def _hf_tiktoken_plan(cfg: dict[str, Any]) -> tuple[_TiktokenPlan | None, str]:
    """Convert a byte-level BPE tokenizer.json into tiktoken terms.

    Returns ``(plan, "")`` or ``(None, reason)``. A plan is necessary for
    exactness, not sufficient: callers still compare ids with HF.
    """
    model = cfg.get("model") or {}
    if model.get("type") != "BPE":
        return None, f"model type is {model.get('type')!r}, not BPE"
    for key in ("dropout", "continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(key):
            return None, f"BPE option {key}={model[key]!r} has no tiktoken equivalent"
    if model.get("byte_fallback"):
        return None, "BPE uses byte_fallback (SentencePiece style), not byte-level BPE"

    # Pre-tokenizer -> one split regex.
    pre = cfg.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    if len(steps) == 1 and steps[0].get("type") == "ByteLevel" and steps[0].get("use_regex", True):
        byte_level, pattern = steps[0], _GPT2_PATTERN
    elif (
        len(steps) == 2
        and steps[0].get("type") == "Split"
        and steps[1].get("type") == "ByteLevel"
        and not steps[1].get("use_regex", True)
    ):
        split, byte_level = steps
        if split.get("behavior") != "Isolated" or split.get("invert"):
            return None, f"Split behavior {split.get('behavior')!r} (invert={split.get('invert')}) is not Isolated"
        regex = (split.get("pattern") or {}).get("Regex")
        if regex is None:
            return None, "Split pattern is a literal string, not a regex"
        # tokenizers uses Oniguruma, tiktoken fancy-regex; the patterns in
        # practice (\p{L}, possessive and lookahead) mean the same in both,
        # and the exactness check catches the rest.
        pattern = regex
    else:
        return None, "pre-tokenizer is not ByteLevel, nor Split(regex) + ByteLevel"
    if byte_level.get("add_prefix_space"):
        return None, "ByteLevel add_prefix_space=true"

    # Normalizer -> unicodedata forms.
    norm = cfg.get("normalizer")
    norms = [] if norm is None else norm.get("normalizers", []) if norm.get("type") == "Sequence" else [norm]
    forms: list[NormalForm] = []
    for n in norms:
        if n.get("type") not in ("NFC", "NFD", "NFKC", "NFKD"):
            return None, f"normalizer {n.get('type')!r} is not a Unicode normal form"
        forms.append(n["type"])

    # Vocabulary -> byte strings (undo GPT-2's byte-to-character mapping).
    vocab = model.get("vocab") or {}
    ranks: dict[bytes, int] = {}
    try:
        for token, idx in vocab.items():
            ranks[bytes([_BYTE_OF_CHAR[c] for c in token])] = idx
    except KeyError:
        return None, f"vocabulary token {token!r} is not in the byte-level alphabet"
    if len(ranks) != len(vocab):
        return None, "two vocabulary tokens map to the same bytes"
    if any(bytes([b]) not in ranks for b in range(256)):
        return None, "not all 256 single bytes are in the vocabulary"

    # tiktoken merges the adjacent pair whose *result* has the lowest id; HF
    # the pair listed first in `merges`. They agree when results' ids never
    # decrease along the merges list.
    last = -1
    for merge in model.get("merges") or []:
        a, b = merge.split(" ", 1) if isinstance(merge, str) else merge
        rid = vocab.get(a + b)
        if rid is None:
            return None, f"merge {a!r} + {b!r} yields a token outside the vocabulary"
        if rid < last:
            return None, "merge order differs from token id order"
        last = rid

    special: dict[str, int] = {}
    raw_added: dict[str, int] = {}
    normalized_added: dict[str, int] = {}
    used_ids = set(ranks.values())
    for tok in cfg.get("added_tokens") or []:
        if tok.get("special"):
            if tok["id"] not in used_ids:
                special[tok["content"]] = tok["id"]
            continue
        if tok.get("lstrip") or tok.get("rstrip") or tok.get("single_word"):
            return None, f"added token {tok['content']!r} uses lstrip/rstrip/single_word"
        (normalized_added if tok.get("normalized") else raw_added)[tok["content"]] = tok["id"]
    plan = _TiktokenPlan(pattern, ranks, special, tuple(forms), raw_added, normalized_added)
    return plan, ""


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

    def __init__(self, source: _Source, backend: str, eos_id: int, threads: int = 1) -> None:
        self._source = source
        self.backend = backend
        self.eos_id = eos_id
        self.threads = threads
        self._impl: _HFBackend | _TiktokenBackend | None = None

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

    def _backend(self) -> _HFBackend | _TiktokenBackend:
        if self._impl is None:
            self._impl = _cached_backend(self._source, self.backend, self.threads)
        return self._impl

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Ids of each text, no EOS added."""
        backend = self._backend()
        return [a.tolist() for a in self._now(backend, backend.encode, list(texts))]

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
        """``encode_to_arrays``, with the seconds spent, now: on the backend's
        own thread where that is cheaper (HF), else on the caller's."""
        backend = self._backend()
        self._check_special(backend, add_special_tokens)
        return self._now(backend, self._encode_arrays_here, backend, list(texts), add_special_tokens)

    def encode_to_arrays_async(self, texts: Sequence[str], add_special_tokens: bool = False) -> Future[EncodedBatch]:
        """``encode_to_arrays`` on the backend's own encoding thread (one per
        process, batches in the order given): the caller goes on reading and
        counting other documents meanwhile. The future's ``EncodedBatch``
        also gives the seconds the thread spent on the batch."""
        backend = self._backend()
        self._check_special(backend, add_special_tokens)
        return backend.thread.submit(self._encode_arrays_here, backend, list(texts), add_special_tokens)

    @staticmethod
    def _now(backend: _HFBackend | _TiktokenBackend, fn: Callable[..., T], *args: Any) -> T:
        """fn(*args), waited for, where the backend encodes best (encodes_apart):
        on its own thread, or on the caller's."""
        return backend.thread.submit(fn, *args).result() if backend.encodes_apart else fn(*args)

    def _check_special(self, backend: _HFBackend | _TiktokenBackend, add_special_tokens: bool) -> None:
        if add_special_tokens and not isinstance(backend, _HFBackend):
            raise TokenizerError(f"{self.name}: add_special_tokens needs the hf backend, not {self.backend}")

    def _encode_arrays_here(self, backend: _HFBackend | _TiktokenBackend, texts: list[str],
                            add_special_tokens: bool) -> EncodedBatch:
        t0 = time.perf_counter()
        if add_special_tokens:
            assert isinstance(backend, _HFBackend)
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
        hf = _build_backend(self._source, "hf", self.threads)
        tt = _build_backend(self._source, "tiktoken", self.threads)
        return _mismatches(hf, tt, texts)


# Backends built in this process. A pool worker receives the tokenizer
# pickled inside every task; this makes it build the backend once per
# process, not once per shard. Keyed by the file digest, so an entry always
# matches what the driver loaded.
_BACKENDS: dict[tuple[Any, ...], _HFBackend | _TiktokenBackend] = {}
_MAX_CACHED_BACKENDS = 4


def _cache_key(source: _Source, backend: str, threads: int) -> tuple[Any, ...]:
    return (source.digest, source.kind, backend, threads, source.pattern, tuple(sorted(source.special_tokens.items())))


def _remember(source: _Source, backend: str, threads: int, impl: _HFBackend | _TiktokenBackend) -> None:
    if len(_BACKENDS) >= _MAX_CACHED_BACKENDS:
        _BACKENDS.pop(next(iter(_BACKENDS)))
    _BACKENDS[_cache_key(source, backend, threads)] = impl


def _cached_backend(source: _Source, backend: str, threads: int) -> _HFBackend | _TiktokenBackend:
    impl = _BACKENDS.get(_cache_key(source, backend, threads))
    if impl is None:
        impl = _build_backend(source, backend, threads)
        _remember(source, backend, threads, impl)
    return impl


def _build_backend(
    source: _Source, backend: str, threads: int, loaded: _Loaded | None = None
) -> _HFBackend | _TiktokenBackend:
    if source.kind == "tiktoken":
        assert source.pattern is not None
        ranks = loaded.ranks if loaded and loaded.ranks is not None else source.ranks()
        return _TiktokenBackend(_TiktokenPlan(source.pattern, ranks, source.special_tokens), threads, source.name)
    if loaded and loaded.json_text is not None and loaded.cfg is not None:
        text, cfg = loaded.json_text, loaded.cfg
    else:
        text, cfg = source.hf_config()
    if backend == "hf":
        return _HFBackend(text, threads)
    plan, reason = _hf_tiktoken_plan(cfg)
    if plan is None:
        raise TokenizerError(f"{source.name}: cannot use the tiktoken backend: {reason}")
    return _TiktokenBackend(plan, threads, source.name)


def _mismatches(a: _HFBackend | _TiktokenBackend, b: _HFBackend | _TiktokenBackend, texts: Sequence[str]) -> list[int]:
    bad = []
    for start in range(0, len(texts), 256):  # bounded memory on big samples
        chunk = texts[start : start + 256]
        for i, (x, y) in enumerate(zip(a.encode(chunk), b.encode(chunk))):
            if not np.array_equal(x, y):
                bad.append(start + i)
    return bad


def _resolve_eos(source: _Source, loaded: _Loaded, eos: int | str | None) -> int:
    if isinstance(eos, (int, np.integer)) and not isinstance(eos, bool):
        if not 0 <= int(eos) < source.vocab_size:
            raise TokenizerError(f"{source.name}: eos id {eos} is outside [0, {source.vocab_size})")
        return int(eos)
    if eos is not None and not isinstance(eos, str):
        raise TokenizerError(f"eos must be an int id or a token string, not {type(eos).__name__}")

    if source.kind == "hf":
        assert loaded.cfg is not None
        hf_ids = _hf_token_ids(loaded.cfg)

        def lookup(tok: str) -> int | None:
            return hf_ids.get(tok)

    else:
        assert loaded.ranks is not None
        ranks = loaded.ranks

        def lookup(tok: str) -> int | None:
            return source.special_tokens.get(tok, ranks.get(tok.encode("utf-8")))

    if isinstance(eos, str):
        found = lookup(eos)
        if found is None:
            raise TokenizerError(f"{source.name}: eos token {eos!r} is not in the vocabulary")
        return found
    candidates = ([source.config_eos] if source.config_eos else []) + list(_KNOWN_EOS)
    for tok in candidates:
        found = lookup(tok)
        if found is not None:
            return found
    raise TokenizerError(
        f"{source.name}: no end-of-document token found (looked for {', '.join(candidates)}); pass eos=ID or eos=TOKEN"
    )


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
    source, loaded = _resolve_source(os.fspath(spec), pattern, special_tokens)
    eos_id = _resolve_eos(source, loaded, eos)
    chosen, impl = _choose_backend(source, loaded, backend, threads, sample_texts or ())
    tok = Tokenizer(source, chosen, eos_id, threads)
    tok._impl = impl
    _remember(source, chosen, threads, impl)
    return tok


def _choose_backend(
    source: _Source, loaded: _Loaded, backend: Backend, threads: int, sample_texts: Sequence[str]
) -> tuple[str, _HFBackend | _TiktokenBackend]:
    if source.kind == "tiktoken":
        if backend == "hf":
            raise TokenizerError(f"{source.name}: a tiktoken rank file cannot use the 'hf' backend")
        return "tiktoken", _build_backend(source, "tiktoken", threads, loaded)

    text, cfg = loaded.json_text, loaded.cfg
    assert text is not None and cfg is not None
    if backend == "hf":
        return "hf", _HFBackend(text, threads)
    plan, reason = _hf_tiktoken_plan(cfg)
    if plan is None:
        if backend == "tiktoken":
            raise TokenizerError(f"{source.name}: cannot use the tiktoken backend: {reason}")
        logger.info("%s: using the hf backend: %s", source.name, reason)
        return "hf", _HFBackend(text, threads)
    try:
        tt = _TiktokenBackend(plan, threads, source.name)
    except Exception as e:
        if backend == "tiktoken":
            raise TokenizerError(f"{source.name}: cannot build the tiktoken backend: {e}") from e
        logger.warning("%s: using the hf backend: tiktoken rejected the conversion (%s)", source.name, e)
        return "hf", _HFBackend(text, threads)
    if backend == "tiktoken":
        return "tiktoken", tt

    hf = _HFBackend(text, threads)
    texts = [*TRICKY_TEXTS, *sample_texts]
    bad = _mismatches(hf, tt, texts)
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
