"""Converting a Hugging Face byte-level BPE ``tokenizer.json`` (GPT-2,
Qwen2/Qwen3, Llama 3 style) into tiktoken terms: its split regex, byte-string
ranks, normal forms and added tokens (``TiktokenPlan``). A plan is necessary
for exactness, not sufficient: ``load_tokenizer`` still compares the ids with
HF's before it trusts the conversion."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

NormalForm = Literal["NFC", "NFD", "NFKC", "NFKD"]

# The split pattern HF's ByteLevel pre-tokenizer uses when use_regex=true.
GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"


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


BYTE_OF_CHAR: dict[str, int] = {c: b for b, c in _bytes_to_unicode().items()}


@dataclass
class TiktokenPlan:
    """Everything needed to encode like an HF byte-level BPE with tiktoken."""

    pattern: str
    ranks: dict[bytes, int]
    special_tokens: dict[str, int]  # for decoding only; never matched in text
    normal_forms: tuple[NormalForm, ...] = ()  # unicodedata forms applied in order
    # Non-special added tokens HF still cuts out of the text: matched on the
    # raw text (normalized=false) or on the normalized text (normalized=true).
    raw_added: dict[str, int] = field(default_factory=dict)
    normalized_added: dict[str, int] = field(default_factory=dict)


def hf_tiktoken_plan(cfg: dict[str, Any]) -> tuple[TiktokenPlan | None, str]:
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
        byte_level, pattern = steps[0], GPT2_PATTERN
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
            ranks[bytes([BYTE_OF_CHAR[c] for c in token])] = idx
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
    plan = TiktokenPlan(pattern, ranks, special, tuple(forms), raw_added, normalized_added)
    return plan, ""
