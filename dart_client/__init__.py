"""dart_client: the GPU-worker side of DART speculative decoding.

- ``RemotePruner(targets)`` / ``LocalPruner(trie)``: the drafter's logits in,
  DART's draft tree (tensors on the same device) out; remote pruning falls
  back to a local n-gram-free search when the trie host is slow or down.
- ``DartDrafter``: DART's one-layer drafter, loaded from DART checkpoints.
- ``DartGenerator``: draft-and-verify decoding on ``transformers`` causal LMs
  (greedy: lossless; sampling: tree speculative sampling).

torch, transformers and safetensors are needed by all but ``lattice_log`` (``pip install
'ngram-trie-host[dart]'`` after installing torch yourself).
"""
import importlib
from typing import Any

# Names are imported on first use (PEP 562), so that torch-free modules of
# this package (lattice_log, read by ngram-eval) import without torch.
_EXPORTS = {
    "DartDrafter": "dart_client.drafter",
    "DrafterCache": "dart_client.drafter",
    "DrafterConfig": "dart_client.drafter",
    "DartGenerator": "dart_client.generate",
    "GenerationResult": "dart_client.generate",
    "StepRecord": "dart_client.generate",
    "aux_layer_indices": "dart_client.generate",
    "DraftTree": "dart_client.pruner",
    "LocalPruner": "dart_client.pruner",
    "PrunerStats": "dart_client.pruner",
    "RemotePruner": "dart_client.pruner",
    "TokenizerMismatchError": "dart_client.pruner",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'dart_client' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
