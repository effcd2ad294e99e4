"""ngram_service.wire against protobuf's own encoder."""
from __future__ import annotations

import numpy as np
import pytest

from ngram_service import wire
from ngram_service.client import NgramClient
from ngram_service.proto.ngram.v1 import ngram_pb2 as pb


@pytest.mark.parametrize("n", [0, 1, 127, 128, 300, 2**21, 2**32 - 1, 2**35 + 7, 2**63 - 1, 2**63 + 5, 2**64 - 1])
def test_varint_matches_protobuf(n: int) -> None:
    # ReloadResponse.file_bytes is field 3, a uint64: every n of the varint's range (proto3 leaves out a 0).
    if n > 0:
        assert wire.varint(3 << 3 | wire.VARINT) + wire.varint(n) == pb.ReloadResponse(file_bytes=n).SerializeToString()
    else:
        assert wire.varint(n) == b"\x00"
    # PruneParams.max_nodes is field 2 (varint): its serialization is the tag, then the varint.
    if n < 2**32:
        assert wire.varint(2 << 3 | wire.VARINT) + wire.varint(n) == pb.PruneParams(max_nodes=n).SerializeToString()
    # A uint64 varint field of any value: PruneParams.eos_token_id is int64, the same encoding for n < 2**63.
    if n < 2**63:
        assert wire.varint(6 << 3 | wire.VARINT) + wire.varint(n) == pb.PruneParams(eos_token_id=n).SerializeToString()


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
