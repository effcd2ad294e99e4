"""dart_client: the GPU-worker side of DART speculative decoding.

- ``RemotePruner(targets)`` / ``LocalPruner(trie)``: the drafter's logits in,
  DART's draft tree (tensors on the same device) out; remote pruning falls
  back to a local n-gram-free search when the trie host is slow or down.
- ``DartDrafter``: DART's one-layer drafter, loaded from DART checkpoints.
- ``DartGenerator``: draft-and-verify decoding on ``transformers`` causal LMs
  (greedy: lossless; sampling: tree speculative sampling).

torch, transformers and safetensors are needed (``pip install
'ngram-trie-host[dart]'`` after installing torch yourself).
"""
from dart_client.drafter import DartDrafter, DrafterCache, DrafterConfig
from dart_client.generate import (
    DartGenerator,
    GenerationResult,
    StepRecord,
    aux_layer_indices,
)
from dart_client.pruner import (
    DraftTree,
    LocalPruner,
    PrunerStats,
    RemotePruner,
    TokenizerMismatchError,
)

__all__ = [
    "DartDrafter",
    "DartGenerator",
    "DraftTree",
    "DrafterCache",
    "DrafterConfig",
    "GenerationResult",
    "LocalPruner",
    "PrunerStats",
    "RemotePruner",
    "StepRecord",
    "TokenizerMismatchError",
    "aux_layer_indices",
]
