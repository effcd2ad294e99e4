"""Which id ends a document: the one asked for (an id or a token string),
else the ``eos_token`` of the tokenizer's ``tokenizer_config.json``, else
the first well-known end-of-text token in the vocabulary."""

from __future__ import annotations

import numpy as np

from indexer.tokenizer_source import (
    LoadedDefinition,
    TokenizerError,
    TokenizerSource,
    hf_token_ids,
)

# Looked up, in this order, when neither `eos` nor a tokenizer_config.json
# names the end-of-document token.
KNOWN_EOS = ("<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>")


class NoEosError(TokenizerError):
    """No end-of-document token found; ``message(hint)`` says how to name one
    in the caller's own terms (the API's eos=, the command line's --eos)."""

    def __init__(self, name: str, candidates: list[str]) -> None:
        super().__init__(name, candidates)  # both args: the error is pickled back from a pool worker
        self.name, self.candidates = name, candidates

    def message(self, hint: str = "pass eos=ID or eos=TOKEN") -> str:
        return f"{self.name}: no end-of-document token found (looked for {', '.join(self.candidates)}); {hint}"

    def __str__(self) -> str:
        return self.message()


def resolve_eos(source: TokenizerSource, loaded: LoadedDefinition, eos: int | str | None) -> int:
    if isinstance(eos, (int, np.integer)) and not isinstance(eos, bool):
        if not 0 <= int(eos) < source.vocab_size:
            raise TokenizerError(f"{source.name}: eos id {eos} is outside [0, {source.vocab_size})")
        return int(eos)
    if eos is not None and not isinstance(eos, str):
        raise TokenizerError(f"eos must be an int id or a token string, not {type(eos).__name__}")

    if source.kind == "hf":
        assert loaded.cfg is not None
        hf_ids = hf_token_ids(loaded.cfg)

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
    candidates = ([source.config_eos] if source.config_eos else []) + list(KNOWN_EOS)
    for tok in candidates:
        found = lookup(tok)
        if found is not None:
            return found
    raise NoEosError(source.name, candidates)

