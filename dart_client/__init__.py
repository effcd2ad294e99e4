"""dart_client: the GPU-worker side of DART speculative decoding.

- ``RemotePruner(targets)`` / ``LocalPruner(trie)``: the drafter's logits in,
  DART's draft tree (tensors on the same device) out, for one sequence or a
  batch (``prune_batch``); remote pruning falls back to a local n-gram-free
  search when the trie host is slow or down.
- ``LocalProposer(trie)`` / ``RemoteProposer(targets)`` / ``LookupProposer()``:
  no drafter; the sequence so far in, the trie's proposed draft tree (prompt
  lookup merged in) out; remote proposals fall back to prompt lookup alone
  when the trie host is slow or down.
- ``DartDrafter``: DART's one-layer drafter, loaded from DART checkpoints.
- ``DartGenerator`` (a drafter and a pruner) and ``ProposalGenerator`` (a
  proposer, no drafter model): draft-and-verify decoding on ``transformers``
  causal LMs, one prompt or a batch (greedy: lossless; sampling: tree
  speculative sampling), one loop (``SpeculativeGenerator``) for both.

torch, transformers and safetensors are needed (install the torch build for
the machine first, then ``pip install 'ngram-trie-host[dart]'``; see the
README). Names are imported on first use, so that ``dart-generate --help``
works, and says what to install, without them.
"""
from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "DartDrafter": "dart_client.drafter",
    "DrafterCache": "dart_client.drafter",
    "DrafterConfig": "dart_client.drafter",
    "DartGenerator": "dart_client.generate",
    "GenerationResult": "dart_client.results",
    "ProposalGenerator": "dart_client.generate",
    "SpeculativeGenerator": "dart_client.generate",
    "StepRecord": "dart_client.results",
    "aux_layer_indices": "dart_client.tree_sources",
    "LocalProposer": "dart_client.proposer",
    "LookupProposer": "dart_client.proposer",
    "RemoteProposer": "dart_client.proposer",
    "DraftTree": "dart_client.draft_trees",
    "DraftTrees": "dart_client.draft_trees",
    "LocalPruner": "dart_client.pruner",
    "PrunerStats": "dart_client.host_link",
    "RemotePruner": "dart_client.pruner",
    "TokenizerMismatchError": "dart_client.host_link",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'dart_client' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
