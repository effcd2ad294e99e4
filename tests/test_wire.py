"""ngram_service.wire against protobuf's own encoder and parser."""
from __future__ import annotations

import numpy as np
import pytest

from ngram_service import wire
from ngram_service.client import NgramClient
from ngram_service.proto.ngram.v1 import ngram_pb2 as pb


@pytest.mark.parametrize("n", [0, 1, 127, 128, 300, 2**21, 2**35 + 7, 2**63 + 5])
def test_varint_matches_protobuf(n: int) -> None:
    # PruneParams.max_nodes is field 2 (varint): its serialization is the tag, then the varint.
    if n < 2**32:
        assert wire.varint(2 << 3 | wire.VARINT) + wire.varint(n) == pb.PruneParams(max_nodes=n).SerializeToString()
    value, end = wire._read_varint(memoryview(wire.varint(n)), 0)
    assert (value, end) == (n, len(wire.varint(n)))


def test_prune_input_is_protobufs_bytes() -> None:
    rng = np.random.default_rng(0)
    prefix = rng.integers(0, 151_000, 64)
    tokens = rng.integers(-5, 2**40, (8, 25))  # out-of-vocabulary ids must still reach the server intact
    probs = rng.random((8, 25), dtype=np.float32)
    sizes = np.full(8, 25, dtype=np.uint32)
    mine = wire.prune_input(prefix, sizes, tokens.ravel(), probs.ravel())
    theirs = pb.PruneInput(prefix=prefix.tolist(), level_sizes=sizes.tolist(), tokens=tokens.ravel().tolist(),
                           probs=probs.ravel().tolist())
    assert mine == theirs.SerializeToString()
    back = pb.PruneInput.FromString(mine)
    assert list(back.tokens) == tokens.ravel().tolist() and list(back.prefix) == prefix.tolist()


def test_empty_fields_are_left_out() -> None:
    empty = np.zeros(0, dtype=np.int64)
    assert wire.prune_input(empty, empty, empty, np.zeros(0, np.float32)) == b""


def test_client_request_parses_as_the_message_protobuf_builds() -> None:
    client = NgramClient("127.0.0.1:1", index="web", tokenizer_fingerprint="fp")
    try:
        inputs = [wire.prune_input(np.array([5, 6]), np.array([2, 1], np.uint32), np.array([7, 8, 9]),
                                   np.array([0.5, 0.25, 1.0], np.float32))]
        data = client._prune_tree_request(inputs * 2, {"beam_width": 4, "eos_token_id": 3})
    finally:
        client.close()
    req = pb.PruneTreeRequest.FromString(data)
    assert (req.index, req.tokenizer_fingerprint, req.with_scores) == ("web", "fp", True)
    assert (req.params.beam_width, req.params.eos_token_id, req.params.HasField("max_nodes")) == (4, 3, False)
    assert len(req.inputs) == 2
    assert list(req.inputs[1].prefix) == [5, 6] and list(req.inputs[1].level_sizes) == [2, 1]
    assert list(req.inputs[1].tokens) == [7, 8, 9] and list(req.inputs[1].probs) == [0.5, 0.25, 1.0]


def test_response_decodes_as_protobuf_parses_it() -> None:
    resp = pb.PruneTreeResponse(trees=[
        pb.PrunedTreeNodes(tokens=[10, 11, -3], parents=[-1, 0, 1], scores=[0.0, -1.5, -2.25]),
        pb.PrunedTreeNodes(tokens=[4], parents=[-1]),  # no scores: left out on the wire
    ])
    trees = wire.prune_tree_response(resp.SerializeToString())
    assert len(trees) == 2
    tokens, parents, scores = trees[0]
    assert tokens.dtype == np.int32 and parents.dtype == np.int32 and scores.dtype == np.float32
    assert tokens.tolist() == [10, 11, -3] and parents.tolist() == [-1, 0, 1] and scores.tolist() == [0.0, -1.5, -2.25]
    assert trees[1][0].tolist() == [4] and len(trees[1][2]) == 0


def test_response_unpacked_elements_and_unknown_fields() -> None:
    # The same tree with its elements one at a time (a valid encoding), a
    # varint field 9 and a fixed64 field 10 the decoder does not know.
    def fixed32(field: int, value: int) -> bytes:
        return wire.varint(field << 3 | wire.I32) + (value & 0xFFFFFFFF).to_bytes(4, "little")

    node = fixed32(1, 10) + fixed32(1, -3) + fixed32(2, -1) + fixed32(2, 0)
    node += wire.varint(9 << 3 | wire.VARINT) + wire.varint(300)
    node += wire.varint(10 << 3 | wire.I64) + (1).to_bytes(8, "little")
    data = wire.length_delimited(1, node) + wire.varint(7 << 3 | wire.VARINT) + wire.varint(1)
    assert pb.PruneTreeResponse.FromString(data).trees[0].tokens == [10, -3]
    (tokens, parents, scores), = wire.prune_tree_response(data)
    assert tokens.tolist() == [10, -3] and parents.tolist() == [-1, 0] and len(scores) == 0


@pytest.mark.parametrize("cut", [1, 2, 5, 9])
def test_truncated_response_raises_value_error(cut: int) -> None:
    data = pb.PruneTreeResponse(trees=[pb.PrunedTreeNodes(tokens=[1, 2], parents=[-1, 0])]).SerializeToString()
    with pytest.raises(ValueError, match="truncated"):
        wire.prune_tree_response(data[:-cut])
