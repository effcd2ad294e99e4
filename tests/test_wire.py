"""The PruneTree wire format NgramClient writes and reads (the engine's codec,
cpp/python/prune_wire.h) against protobuf's own encoder and decoder: a host
in this process (grpcio) records the bytes each call brings and answers with
bytes protobuf built."""
from __future__ import annotations

from concurrent import futures
from typing import Any, Iterator

import grpc
import numpy as np
import pytest

from ngram_service.client import NgramClient
from ngram_service.proto.ngram.v1 import ngram_pb2 as pb


class RecordingHost:
    """PruneTree only, bytes in and bytes out: what the client sent, as sent; ``answer`` as the response."""

    def __init__(self) -> None:
        self.requests: list[bytes] = []
        self.answer = pb.PruneTreeResponse().SerializeToString()
        self.server = grpc.server(futures.ThreadPoolExecutor(2))
        handler = grpc.unary_unary_rpc_method_handler(self._prune)  # no (de)serializers: raw bytes
        self.server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
            "ngram.v1.NgramService", {"PruneTree": handler})])
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def _prune(self, request: bytes, _context: Any) -> bytes:
        self.requests.append(request)
        return self.answer

    def client(self, **kwargs: Any) -> NgramClient:
        return NgramClient(f"127.0.0.1:{self.port}", retry_attempts=1, timeout=30, **kwargs)


@pytest.fixture
def host() -> Iterator[RecordingHost]:
    h = RecordingHost()
    yield h
    h.server.stop(None)


def test_prune_request_is_protobufs_bytes(host: RecordingHost) -> None:
    rng = np.random.default_rng(0)
    prefix = rng.integers(0, 151_000, 64)
    tokens = rng.integers(-5, 2**40, (8, 25))  # out-of-vocabulary ids must still reach the server intact
    probs = rng.random((8, 25), dtype=np.float32)
    ragged = ([3], [np.array([1, 2, 3]), np.array([2**35 + 7])], [np.array([0.5, 0.25, 0.125], np.float32),
                                                                  np.array([1.0], np.float32)])
    with host.client() as c:
        assert c.prune_batch([(prefix, tokens, probs), ragged]) == []
    theirs = pb.PruneTreeRequest(inputs=[
        pb.PruneInput(prefix=prefix.tolist(), level_sizes=[25] * 8, tokens=tokens.ravel().tolist(),
                      probs=probs.ravel().tolist()),
        pb.PruneInput(prefix=[3], level_sizes=[3, 1], tokens=[1, 2, 3, 2**35 + 7], probs=[0.5, 0.25, 0.125, 1.0])])
    [mine] = host.requests
    assert pb.PruneTreeRequest.FromString(mine).inputs == theirs.inputs
    assert mine.endswith(theirs.SerializeToString())  # the inputs, after the head, byte for byte protobuf's


def test_bad_requests_are_named(host: RecordingHost) -> None:
    with host.client() as c, \
            pytest.raises(ValueError, match=r"requests\[1\]: level 0: topk_tokens\[0\] has shape \(2,\)"):
        c.prune_batch([([1], [[2]], [[0.5]]), ([1], [[2, 3]], [[0.5]])])
    assert host.requests == []  # refused before anything was sent


def test_client_request_parses_as_the_message_protobuf_builds(host: RecordingHost) -> None:
    with host.client(index="web", tokenizer_fingerprint="fp") as c:
        c.prune_batch([([5, 6], [np.array([7, 8]), np.array([9])],
                        [np.array([0.5, 0.25], np.float32), np.array([1.0], np.float32)])] * 2,
                      beam_width=4, eos_token_id=3)
    [data] = host.requests
    req = pb.PruneTreeRequest.FromString(data)
    assert (req.index, req.tokenizer_fingerprint, req.with_scores) == ("web", "fp", True)
    assert (req.params.beam_width, req.params.eos_token_id, req.params.HasField("max_nodes")) == (4, 3, False)
    assert len(req.inputs) == 2
    assert list(req.inputs[1].prefix) == [5, 6] and list(req.inputs[1].level_sizes) == [2, 1]
    assert list(req.inputs[1].tokens) == [7, 8, 9] and list(req.inputs[1].probs) == [0.5, 0.25, 1.0]


def test_response_trees_decode_with_and_without_scores(host: RecordingHost) -> None:
    resp = pb.PruneTreeResponse(trees=[
        pb.PrunedTreeNodes(tokens=[5, 6, 7, 8], parents=[-1, 0, 0, 1], scores=[0.0, 0.5, 0.25, 0.125]),
        pb.PrunedTreeNodes(tokens=[9], parents=[-1])])
    lattice = ([1], [[5, 6]], [[0.5, 0.25]])
    with host.client() as c:
        host.answer = resp.SerializeToString()
        a, b = c.prune_batch([lattice, lattice])
        assert a.tokens.tolist() == [5, 6, 7, 8] and a.depths.tolist() == [0, 1, 1, 2]
        assert a.scores.tolist() == [0.0, 0.5, 0.25, 0.125]
        assert a.retrieve_indices.tolist() == [[0, 1, 3], [0, 2, -1]]
        assert b.tokens.tolist() == [9] and np.isnan(b.scores).all()  # no scores sent: NaN, not a made-up 0
        with pytest.raises(ValueError, match=r"PruneTreeResponse: 2 trees for 1 lattice"):
            c.prune(*lattice)
        host.answer = resp.SerializeToString()[:-2]
        with pytest.raises(ValueError, match=r"PruneTreeResponse.*at byte"):
            c.prune_batch([lattice, lattice])
        host.answer = pb.PruneTreeResponse(trees=resp.trees[1:]).SerializeToString()
        assert c.prune(*lattice).tokens.tolist() == [9]


def test_parameter_table_is_the_wire_order() -> None:
    """The engine's one table of prune's parameters (kPruneFields, in the
    order prune_params() reports them) numbers them as PruneParams does:
    field i + 1; PRUNE_DEFAULTS is its scalars, in the same order."""
    from ngram_service.tree import DEFAULTS, prune_params

    fields = pb.PruneParams.DESCRIPTOR.fields_by_number
    names = [fields[i + 1].name for i in range(len(fields))]
    assert names == list(prune_params())
    assert list(DEFAULTS) == [n for n in names if n in DEFAULTS]


def test_prune_integers_are_int64_as_the_table_holds_them(host: RecordingHost) -> None:
    """beam_width and max_nodes are int64 on the wire (they were uint32): every value a uint32 held is
    encoded to the same bytes, and a negative one is sent to the host's check, not refused by the codec."""
    from google.protobuf import descriptor_pb2

    for name in ("beam_width", "max_nodes"):
        assert pb.PruneParams.DESCRIPTOR.fields_by_name[name].type == descriptor_pb2.FieldDescriptorProto.TYPE_INT64
    for v in (0, 1, 20, 127, 128, 4096, 2**31, 2**32 - 1):
        as_uint32 = b"\x08" + _varint(v)  # field 1, varint: what a uint32 beam_width of v was
        assert pb.PruneParams(beam_width=v).SerializeToString() == as_uint32
    with host.client() as c:
        c.prune_batch([([1], [[2]], [[0.5]])], beam_width=-1, max_nodes=2**33)
    [data] = host.requests
    sent = pb.PruneTreeRequest.FromString(data).params
    assert (sent.beam_width, sent.max_nodes) == (-1, 2**33)
    # the head, byte for byte protobuf's (fields 1-3 and 5 before the inputs)
    assert data.startswith(pb.PruneTreeRequest(params=pb.PruneParams(beam_width=-1, max_nodes=2**33),
                                               with_scores=True).SerializeToString())


def _varint(v: int) -> bytes:
    out = bytearray()
    while True:
        out.append((v & 0x7F) | (0x80 if v > 0x7F else 0))
        v >>= 7
        if not v:
            return bytes(out)
