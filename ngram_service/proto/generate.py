"""Regenerates the Python stubs of proto/ngram/v1/*.proto into this package.

    python -m ngram_service.proto.generate

Needs grpcio-tools (a development dependency only: the generated files are
committed). The stubs import each other as ``ngram_service.proto.ngram.v1``;
the descriptors keep the wire names (``ngram/v1/ngram.proto``) so reflection
clients see the same files as the C++ server serves.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PROTO_DIR = ROOT / "proto"


def main() -> int:
    from grpc_tools import protoc

    protos = sorted(str(p.relative_to(PROTO_DIR)) for p in (PROTO_DIR / "ngram" / "v1").glob("*.proto"))
    args = ["protoc", f"-I{PROTO_DIR}", f"--python_out={HERE}", f"--pyi_out={HERE}", f"--grpc_python_out={HERE}"]
    if protoc.main(args + protos) != 0:
        return 1
    for d in (HERE / "ngram", HERE / "ngram" / "v1"):
        (d / "__init__.py").touch()
    for f in (HERE / "ngram" / "v1").glob("*_pb2*.py"):
        text = f.read_text()
        fixed = re.sub(r"^from ngram\.v1 import", "from ngram_service.proto.ngram.v1 import", text, flags=re.M)
        f.write_text(fixed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
