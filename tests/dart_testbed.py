"""Shared pieces of the dart_client tests (parity, batches, MoE targets): a
real trie host on 127.0.0.1 and tiny random targets with drafters whose
draft vocabulary holds the tokens the target actually produces (a random
drafter then proposes accepted paths, which exercises acceptance and cache
compaction)."""
from __future__ import annotations

import collections
from collections import Counter
import json
import queue
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from dart_client import DartGenerator
from dart_client.pruner import model_fingerprint
from dart_client.random_models import random_drafter
from indexer.trie_assembly import levels_from_ngrams, plans_from_ngrams, write_trie
from indexer.cli import SAMPLE_DIR

SAMPLE_TOKENIZER = SAMPLE_DIR / "tokenizer.json"


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """Imported by a test module: its tiny models run on one torch thread
    (more only add contention on a shared 2-core machine)."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)
PROMPTS = [
    "PEP 8 -- Style Guide for Python Code",
    "The Zen of Python, by Tim Peters",
    "Abstract: This PEP proposes a new syntax for",
    "def fibonacci(n):\n    ",
    "Rationale\n=========\n\nThe current implementation",
    "import sys\nimport os\n\n",
    "Copyright",
    "This document has been placed in the public domain. The Python Software Foundation "
    "licenses it under the terms of the PSF license; see the file LICENSE for details.",
]


def encode_prompts(texts: list[str] = PROMPTS) -> list[list[int]]:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(SAMPLE_TOKENIZER))
    return [tok.encode(p, add_special_tokens=False).ids for p in texts]


class NoPruner:
    def __call__(self, *a: Any) -> Any:
        raise AssertionError("not used")


def references(target: Any, prompts: list[list[int]], max_new: int) -> list[list[int]]:
    """The target's own greedy continuations, one prompt at a time."""
    probe = DartGenerator(target, random_drafter(target, draft_vocab_size=8), NoPruner())
    return [probe.autoregressive(p, max_new).output_ids for p in prompts]


def fitted_drafter(target: Any, refs: list[list[int]], *, n_ids: int = 16, draft_length: int = 3,
                   seed: int = 2) -> Any:
    """A random drafter whose draft vocabulary is the n_ids tokens the target produces most."""
    counts = collections.Counter(t for r in refs for t in r)
    ids = [t for t, _ in counts.most_common(n_ids)]
    vocab = target.config.vocab_size
    ids += [i for i in range(vocab) if i not in set(ids)][: n_ids - len(ids)]
    return random_drafter(target, draft_length=draft_length, draft_ids=ids, seed=seed)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TrieHost:
    """``ngram-serve FILE`` on 127.0.0.1 (a free port), stopped by kill()."""

    def __init__(self, trie: Path, port: int = 0) -> None:
        cmd = [sys.executable, "-m", "ngram_service.serve", str(trie), "--host", "127.0.0.1", "--port", str(port),
               "--threads", "2"]
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        lines: queue.Queue = queue.Queue()

        def read() -> None:
            assert self.proc.stderr is not None
            for line in self.proc.stderr:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + 20
        while True:
            line = lines.get(timeout=max(0.01, deadline - time.monotonic()))
            if line is None:
                raise RuntimeError("ngram-serve exited at start")
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if ev.get("event") == "listening":
                self.port = int(ev["port"])
                return

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def same_tree(a: Any, b: Any) -> bool:
    return all(x.dtype == y.dtype and torch.equal(x, y) for x, y in zip(a, b)) and torch.equal(a.parents, b.parents)


def write_count_trie(path: Path, docs: list[list[int]], name: str, order: int = 3, vocab: int = 4096) -> Path:
    """A trie of the documents' n-gram counts, fingerprinted as the sample tokenizer (ids below vocab)."""
    counts = Counter(tuple(d[i:i + k]) for d in docs for k in range(1, order + 1) for i in range(len(d) - k + 1))
    levels = []
    for k in range(1, order + 1):
        grams = sorted(g for g in counts if len(g) == k)
        levels.append((np.array(grams, dtype=np.int64).reshape(-1, k),
                       np.array([counts[g] for g in grams], dtype=np.uint64)))
    meta = {"name": name, "tokenizer": {"fingerprint": model_fingerprint(SAMPLE_TOKENIZER)}}
    write_trie(path, order=order, vocab_size=vocab, eos_id=0, meta=meta, plans=plans_from_ngrams(levels),
               chunks=levels_from_ngrams(levels))
    return path
