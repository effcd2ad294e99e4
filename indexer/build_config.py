"""What a build is asked to do (``BuildConfig``, from ``ngram-build``'s
options), the checks on it, and the error a build that cannot go on raises."""
from __future__ import annotations

from dataclasses import dataclass

from indexer.trie_assembly import FORMAT_VERSION
from ngram_service import _engine


class BuildError(Exception):
    """A build that cannot go on; the message says why."""


class OutIsInputError(BuildError):
    """--out names one of the input shards: the trie would overwrite it."""


class NothingToCountError(BuildError):
    """The input holds no documents: running again cannot help, so no work is kept."""


@dataclass
class BuildConfig:
    inputs: list[str]
    out: str
    tokenizer: str | None
    order: int = 3
    min_count: int = 1
    workers: int = 1
    memory_limit_bytes: int = 2 << 30
    tmp_dir: str | None = None
    text_field: str = "text"
    eos: int | str | None = None
    skip_bad: bool = False
    compress: bool = False
    keep_tmp: bool = False
    tokenizer_backend: str = "auto"
    name: str | None = None
    token_field: str = "input_ids"
    token_dtype: str | None = None
    vocab_size: int | None = None
    executor: str = "local"
    ray_address: str | None = None
    add_special_tokens: bool = False
    format_version: int = FORMAT_VERSION  # of the trie file written (docs/FORMAT.md)


def check_config(cfg: BuildConfig) -> None:
    """Raises BuildError for options no build can run with."""
    if cfg.order < 1 or cfg.order > _engine.MAX_ORDER:
        raise BuildError(f"--order must be in 1..{_engine.MAX_ORDER}, got {cfg.order}")
    if cfg.min_count < 1:
        raise BuildError(f"--min-count must be >= 1, got {cfg.min_count}")
    if cfg.tokenizer is None and (cfg.vocab_size is None or not isinstance(cfg.eos, int)):
        raise BuildError("without --tokenizer (pre-tokenized input), give --vocab-size and --eos as a token id")


def work_dir(cfg: BuildConfig) -> str:
    """Where a build keeps its work: --tmp-dir, else OUT.build beside OUT
    (a local path or a URI)."""
    return cfg.tmp_dir if cfg.tmp_dir else cfg.out.rstrip("/") + ".build"
