"""ngram-build: corpus shards -> k-gram counts -> one trie file."""
__version__ = "0.1.0"
