"""Query n-gram tries: in process (NgramIndex)."""
from ngram_service.index import NgramIndex, TrieFormatError

__all__ = ["NgramIndex", "TrieFormatError"]
