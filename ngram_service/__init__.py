"""Query n-gram tries: in process (NgramIndex) or over gRPC (NgramClient)."""
from typing import Any

from ngram_service.index import NgramIndex, TrieFormatError

__all__ = ["NgramIndex", "TrieFormatError", "NgramClient", "AsyncNgramClient"]


def __getattr__(name: str) -> Any:
    # The gRPC client loads grpc lazily: in-process users never import it.
    if name in ("NgramClient", "AsyncNgramClient"):
        from ngram_service import client

        return getattr(client, name)
    raise AttributeError(f"module 'ngram_service' has no attribute {name!r}")
