"""What infra/k8s/deployment.yaml says, for the scripts and tests that must agree with it.

The Deployment is the one definition of the image name and of the arguments
the trie host runs with: infra/container-smoke-test.sh builds that image and
starts it with exactly those arguments (read here), and
tests/test_k8s_manifests.py checks the rest against them. Also the memory
formula the Deployment's resources come from (docs/OPERATIONS.md).

    python3 infra/manifest.py image        # the image name
    python3 infra/manifest.py args         # the serving container's args, one per line
    python3 infra/manifest.py init-args    # the fetch init container's args, one per line
    python3 infra/manifest.py memory BYTES # the memory request for a trie of BYTES
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

K8S = Path(__file__).resolve().parent / "k8s"
DEPLOYMENT = K8S / "deployment.yaml"
SERVE_CONTAINER = "ngram-serve"
FETCH_CONTAINER = "fetch-trie"

MIB = 1 << 20
# The server beside its trie: about 45 MB resident measured (docs/SERVER.md),
# plus gRPC buffers for requests in flight (--max-queue + --threads calls x a
# few hundred KB at most for PruneTree-sized messages); 256 MiB leaves room
# for both.
SERVER_OVERHEAD = 256 * MIB


# --ram: a format-1 trie read into RAM also decodes its tokens (32-bit words
# with their count ranks) and child offsets (docs/FORMAT.md, "In RAM"): 1.48
# and 1.40 times the file's bytes measured (shared corpus, Linux sources;
# 2.0 on the 177 k-n-gram bundled sample, whose difference SERVER_OVERHEAD
# covers many times over).
RAM_DECODE_FACTOR = 1.5


def memory_request(trie_bytes: int, in_ram: bool = False) -> int:
    """Bytes of memory for one serving pod, rounded up to a MiB.

    mmap (default): the trie's pages live in the page cache, charged to the
    pod's memory cgroup; reserving the whole file keeps every page resident
    (a lookup that faults to disk costs milliseconds). --ram: the trie is
    read into anonymous memory and its decoded arrays built beside it; while
    it loads, the file's page cache is there too, so the peak is the file
    twice plus the decoded arrays (the kernel drops the cache after).
    """
    factor = 2 + RAM_DECODE_FACTOR if in_ram else 1
    need = int(factor * trie_bytes) + SERVER_OVERHEAD
    return -(-need // MIB) * MIB


def load(path: Path = DEPLOYMENT) -> dict[str, Any]:
    with open(path) as f:
        return yaml.safe_load(f)


def _container(pod_spec: dict[str, Any], key: str, name: str) -> dict[str, Any]:
    for c in pod_spec.get(key, []):
        if c["name"] == name:
            return c
    raise KeyError(f"{DEPLOYMENT}: no {key} entry named {name}")


def serve_container(deployment: dict[str, Any] | None = None) -> dict[str, Any]:
    d = deployment or load()
    return _container(d["spec"]["template"]["spec"], "containers", SERVE_CONTAINER)


def fetch_container(deployment: dict[str, Any] | None = None) -> dict[str, Any]:
    d = deployment or load()
    return _container(d["spec"]["template"]["spec"], "initContainers", FETCH_CONTAINER)


def image() -> str:
    return serve_container()["image"]


def main(argv: list[str]) -> None:
    what = argv[0] if argv else ""
    if what == "image":
        print(image())
    elif what == "args":
        print("\n".join(serve_container()["args"]))
    elif what == "init-args":
        print("\n".join(fetch_container()["args"]))
    elif what == "memory" and len(argv) == 2:
        print(memory_request(int(argv[1])))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
