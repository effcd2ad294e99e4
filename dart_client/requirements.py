"""What dart_client needs beyond the base install, and how to say so."""
from __future__ import annotations

import importlib.util

#: The packages the decoding side imports (the base install has none of them).
NEEDED = ("torch", "transformers", "safetensors")

INSTALL_HINT = (
    "dart_client needs PyTorch, transformers and safetensors, which the base install leaves out.\n"
    "Install the torch build this machine needs first, then the extra:\n"
    "  GPU worker (Linux, CUDA):  pip install torch==2.13.0\n"
    "      (PyPI's Linux wheel is the CUDA build; it pulls several GB of CUDA libraries)\n"
    "  CPU only (tests, CI):      pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu\n"
    "  then:                      pip install 'ngram-trie-host[dart]'   (a checkout: pip install -e '.[dart]')"
)


def missing() -> list[str]:
    """The needed packages that cannot be imported here."""
    return [m for m in NEEDED if importlib.util.find_spec(m) is None]
