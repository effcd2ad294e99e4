"""What the build needs of its tokenizer, or of --vocab-size and --eos for
pre-tokenized input: loaded once, in a worker, before the sample."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from indexer.build_config import BuildConfig, BuildError
from indexer.executor import Executor, LocalExecutor

if TYPE_CHECKING:
    from indexer.tokenizer import Tokenizer


@dataclass
class TokenizerRequest:
    """The tokenizer a build asked for (picklable: loaded in a worker)."""

    spec: str
    backend: str
    eos: int | str | None


@dataclass
class Vocabulary:
    """The tokenizer (None: pre-tokenized input) and the facts the trie records."""

    tokenizer: Tokenizer | None
    name: str
    fingerprint: str
    vocab_size: int
    eos_id: int
    describe: str  # for the build's first progress line


def load_vocabulary(cfg: BuildConfig, executor: Executor) -> Vocabulary:
    """The build's vocabulary; a tokenizer is loaded in one worker (the
    driver keeps only the picklable facts, not the vocabulary) while the
    other workers start, one load at a time keeping the peak memory down
    (the exactness check builds both backends); the other workers build
    just the chosen backend with their first shard."""
    if cfg.tokenizer is None:
        if not 0 <= int(cfg.eos) < int(cfg.vocab_size):  # type: ignore[arg-type]
            raise BuildError(f"--eos {cfg.eos} is outside [0, --vocab-size {cfg.vocab_size})")
        return Vocabulary(None, "", "", int(cfg.vocab_size), int(cfg.eos),  # type: ignore[arg-type]
                          f"no tokenizer (pre-tokenized; vocab {cfg.vocab_size}, eos {cfg.eos})")
    # The post-processor that adds a BOS exists only in the HF backend.
    backend = "hf" if cfg.add_special_tokens and cfg.tokenizer_backend == "auto" else cfg.tokenizer_backend
    request = TokenizerRequest(cfg.tokenizer, backend, cfg.eos)
    warmups = executor.workers - 1 if isinstance(executor, LocalExecutor) else 0
    loaded = executor.map_unordered(load_tokenizer_in_worker, [request] + [None] * warmups)
    tok = next(t for t in loaded if t is not None)
    if cfg.vocab_size is not None and cfg.vocab_size != tok.vocab_size:
        raise BuildError(f"--vocab-size {cfg.vocab_size} differs from the tokenizer's {tok.vocab_size}")
    return Vocabulary(tok, tok.name, tok.fingerprint, tok.vocab_size, tok.eos_id,
                      f"tokenizer {tok.name} ({tok.backend}, vocab {tok.vocab_size}, eos {tok.eos_id})")


def load_tokenizer_in_worker(request: TokenizerRequest | None) -> Tokenizer | None:
    """Loads the tokenizer (and picks its fastest exact backend); with None,
    only warms a worker up (its imports), so that one worker's load does
    not wait for another's start."""
    import indexer.map_task
    import indexer.reduce_task  # noqa: F401

    if request is None:
        return None
    from indexer.tokenizer import load_tokenizer

    tok = load_tokenizer(request.spec, backend=request.backend, eos=request.eos)  # type: ignore[arg-type]
    _release_freed_memory()
    return tok


def _release_freed_memory() -> None:
    """Loading a tokenizer parses its JSON and builds a second backend to
    check the first: hundreds of MB freed again, but held by the C heap
    unless trimmed (glibc only)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
