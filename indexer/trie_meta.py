"""The trie file's meta section: one JSON object (docs/FORMAT.md, "meta"),
its schema defined here for every writer (``ngram-build`` and
``--from-dart-trie``). Readers: ``NgramIndex.info()`` and ``ngram-info``
show it, ``ngram_service.fingerprint.trie_fingerprint`` and the server
(cpp/server/meta_json.cc) read the tokenizer fingerprint from it."""
from __future__ import annotations

from typing import Any

from indexer.trie_assembly import FORMAT_VERSION

__all__ = ["tokenizer_meta", "trie_meta"]


def tokenizer_meta(name: str, fingerprint: str, vocab_size: int) -> dict[str, Any]:
    """The tokenizer a trie was built with: its spec's name, its fingerprint
    (ngram_service/fingerprint.py), its vocabulary size."""
    return {"name": name, "fingerprint": fingerprint, "vocab_size": vocab_size}


def trie_meta(*, name: str, tokenizer: dict[str, Any] | None, corpus: dict[str, Any],
              build: dict[str, Any]) -> dict[str, Any]:
    """The meta object: the format version, the index name, the tokenizer
    (``tokenizer_meta``, or None when unknown), the corpus manifest (shards,
    documents, tokens; or what a conversion started from) and the build's
    parameters."""
    return {"format_version": FORMAT_VERSION, "name": name, "tokenizer": tokenizer, "corpus": corpus,
            "build": build}
