"""The PruneTree and ProposeTree calls over grpc++
(``ngram_service._native_client``), for ``NgramClient(transport="native")``
and dart_client's RemotePruner.

The extension is built beside ``ngram-serve-native`` where grpc++ is
installed; importing this module raises ImportError where the extension or
its libraries are missing, and NgramClient then keeps to grpcio. Targets,
channel options (service config, round robin, reconnect back-off) and TLS
material are NgramClient's own, so both transports reach the same hosts the
same way; a failed call raises :class:`NativeRpcError`, a ``grpc.RpcError``
with the same ``code()`` and ``details()`` grpcio gives.
"""
from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import grpc

from ngram_service import _native_client  # ImportError: no grpc++ here
from ngram_service.proto.ngram.v1 import ngram_pb2 as pb

__all__ = ["NativeChannels", "NativeRpcError"]

_SERVICE = pb.DESCRIPTOR.services_by_name["NgramService"]


def method_path(name: str) -> str:
    """The gRPC path of an NgramService method: /ngram.v1.NgramService/NAME."""
    return f"/{_SERVICE.full_name}/{_SERVICE.methods_by_name[name].name}"


PRUNE_TREE = method_path("PruneTree")
_CODES = {c.value[0]: c for c in grpc.StatusCode}


class NativeRpcError(grpc.RpcError):
    """A call that ended with a status other than OK."""

    def __init__(self, code: int, details: str) -> None:
        self._code = _CODES.get(code, grpc.StatusCode.UNKNOWN)
        self._details = details
        super().__init__(f"{self._code.name}: {details}")

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


class NativeChannels:
    """One grpc++ channel per NgramClient target, taken in turn, for one
    method (``method_path``; PruneTree unless told)."""

    def __init__(self, targets: Sequence[str], options: Sequence[tuple[str, Any]],
                 tls: tuple[bytes | None, bytes | None, bytes | None] | None, method: str = PRUNE_TREE) -> None:
        root, key, chain = tls if tls is not None else (None, None, None)
        self._channels = [
            _native_client.Channel(t, list(options), tls is not None, (root or b"").decode(), (key or b"").decode(),
                                   (chain or b"").decode(), method)
            for t in targets
        ]
        self._turn = itertools.cycle(self._channels)

    def call(self, request: bytes, timeout: float) -> bytes:
        """One call of the method: serialized request in, serialized response out."""
        try:
            return next(self._turn).call(request, timeout)
        except _native_client.RpcFailure as e:
            raise NativeRpcError(*e.args) from None

    def wait_ready(self, timeout: float) -> bool:
        return all(c.wait_ready(timeout) for c in self._channels)

    def close(self) -> None:
        self._channels = []
        self._turn = itertools.cycle(())
