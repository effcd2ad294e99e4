"""Where a tokenizer comes from: a ``tokenizer.json`` file, a folder holding
one, a tiktoken rank file, or a Hugging Face hub id; and the facts computed
once from its definition (vocabulary size, fingerprint, the EOS its
``tokenizer_config.json`` names)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ngram_service.fingerprint import hf_fingerprint as _hf_fingerprint
from ngram_service.fingerprint import tiktoken_fingerprint as _tiktoken_fingerprint

logger = logging.getLogger(__name__)


class TokenizerError(ValueError):
    """A tokenizer could not be loaded or used as asked."""


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
KNOWN_RANK_FILES: dict[str, tuple[str, dict[str, int]]] = {
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

# --------------------------------------------------------------------------
# Tokenizer definitions (what a spec points at)


def parse_rank_file(path: Path, data: bytes) -> dict[bytes, int]:
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
class TokenizerSource:
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
        return parse_rank_file(Path(self.path or self.spec), self.raw())


@dataclass
class LoadedDefinition:
    """The parsed definition, kept only while loading (too big to pickle)."""

    json_text: str | None = None  # HF
    cfg: dict[str, Any] | None = None  # HF
    ranks: dict[bytes, int] | None = None  # rank files


def resolve_source(
    spec: str, pattern: str | None, special_tokens: dict[str, int] | None
) -> tuple[TokenizerSource, LoadedDefinition]:
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
            src = TokenizerSource("hf", spec, name, str(path), None, digest, config_eos)
            _fill_hf_facts(src, cfg)
            return src, LoadedDefinition(json_text=data.decode("utf-8"), cfg=cfg)
        ranks = parse_rank_file(path, data)
        known_pattern, known_special = KNOWN_RANK_FILES.get(path.name.split(".")[0], (None, {}))
        if pattern is None and known_pattern is None:
            logger.warning(
                "%s: split pattern unknown for this rank file; assuming cl100k_base's (pass pattern= to set it)", spec
            )
        src = TokenizerSource(
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
        return src, LoadedDefinition(ranks=ranks)

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
    src = TokenizerSource("hf", spec, spec, None, text, hashlib.sha256(text.encode("utf-8")).hexdigest(), _hub_config_eos(spec))
    cfg = json.loads(text)
    _fill_hf_facts(src, cfg)
    return src, LoadedDefinition(json_text=text, cfg=cfg)


def _hub_config_eos(repo_id: str) -> str | None:
    # Best effort: tokenizers itself never reads tokenizer_config.json.
    try:
        from huggingface_hub import hf_hub_download

        return _eos_from_config(Path(hf_hub_download(repo_id, "tokenizer_config.json")))
    except Exception:  # noqa: BLE001 (no huggingface_hub, no network, no such file: all mean "unknown")
        return None


def hf_token_ids(cfg: dict[str, Any]) -> dict[str, int]:
    ids: dict[str, int] = {}
    vocab = (cfg.get("model") or {}).get("vocab")
    if isinstance(vocab, dict):
        ids.update(vocab)
    elif isinstance(vocab, list):  # Unigram: [[piece, score], ...], id = position
        ids.update({entry[0]: i for i, entry in enumerate(vocab)})
    for tok in cfg.get("added_tokens") or []:
        ids[tok["content"]] = tok["id"]
    return ids


def _fill_hf_facts(src: TokenizerSource, cfg: dict[str, Any]) -> None:
    ids = hf_token_ids(cfg)
    if not ids:
        raise TokenizerError(f"{src.spec}: tokenizer has an empty vocabulary")
    src.vocab_size = max(ids.values()) + 1
    src.fingerprint = _hf_fingerprint(cfg)


def _fill_tiktoken_facts(src: TokenizerSource, ranks: dict[bytes, int]) -> None:
    src.vocab_size = max(max(ranks.values()), max(src.special_tokens.values(), default=-1)) + 1
    assert src.pattern is not None
    src.fingerprint = _tiktoken_fingerprint(ranks, src.pattern, src.special_tokens)
