"""The engine's PruneTree codec (cpp/python/prune_wire.h) against protobuf's
own encoder and decoder, as NgramClient uses it."""
from __future__ import annotations

import numpy as np
import pytest

from ngram_service import _engine
from ngram_service.client import NgramClient
from ngram_service.proto.ngram.v1 import ngram_pb2 as pb


def test_prune_request_is_protobufs_bytes() -> None:
    rng = np.random.default_rng(0)
    prefix = rng.integers(0, 151_000, 64)
    tokens = rng.integers(-5, 2**40, (8, 25))  # out-of-vocabulary ids must still reach the server intact
    probs = rng.random((8, 25), dtype=np.float32)
    ragged = ([3], [np.array([1, 2, 3]), np.array([2**35 + 7])], [np.array([0.5, 0.25, 0.125], np.float32),
                                                                  np.array([1.0], np.float32)])
    mine = _engine.prune_request(b"", [(prefix, tokens, probs), ragged])
    theirs = pb.PruneTreeRequest(inputs=[
        pb.PruneInput(prefix=prefix.tolist(), level_sizes=[25] * 8, tokens=tokens.ravel().tolist(),
                      probs=probs.ravel().tolist()),
        pb.PruneInput(prefix=[3], level_sizes=[3, 1], tokens=[1, 2, 3, 2**35 + 7], probs=[0.5, 0.25, 0.125, 1.0])])
    assert mine == theirs.SerializeToString()


def test_bad_requests_are_named() -> None:
    with pytest.raises(ValueError, match=r"requests\[1\]: level 0: topk_tokens\[0\] has shape \(2,\)"):
        _engine.prune_request(b"", [([1], [[2]], [[0.5]]), ([1], [[2, 3]], [[0.5]])])


def test_client_request_parses_as_the_message_protobuf_builds() -> None:
    client = NgramClient("127.0.0.1:1", index="web", tokenizer_fingerprint="fp")
    try:
        head = client.prune_tree_head({"beam_width": 4, "eos_token_id": 3})
    finally:
        client.close()
    data = _engine.prune_request(head, [([5, 6], [np.array([7, 8]), np.array([9])],
                                         [np.array([0.5, 0.25], np.float32), np.array([1.0], np.float32)])] * 2)
    req = pb.PruneTreeRequest.FromString(data)
    assert (req.index, req.tokenizer_fingerprint, req.with_scores) == ("web", "fp", True)
    assert (req.params.beam_width, req.params.eos_token_id, req.params.HasField("max_nodes")) == (4, 3, False)
    assert len(req.inputs) == 2
    assert list(req.inputs[1].prefix) == [5, 6] and list(req.inputs[1].level_sizes) == [2, 1]
    assert list(req.inputs[1].tokens) == [7, 8, 9] and list(req.inputs[1].probs) == [0.5, 0.25, 1.0]


def test_response_trees_decode_with_and_without_scores() -> None:
    resp = pb.PruneTreeResponse(trees=[
        pb.PrunedTreeNodes(tokens=[5, 6, 7, 8], parents=[-1, 0, 0, 1], scores=[0.0, 0.5, 0.25, 0.125]),
        pb.PrunedTreeNodes(tokens=[9], parents=[-1])])
    a, b = _engine.decode_prune_trees(resp.SerializeToString())
    assert a.tokens.tolist() == [5, 6, 7, 8] and a.depths.tolist() == [0, 1, 1, 2]
    assert a.scores.tolist() == [0.0, 0.5, 0.25, 0.125]
    assert a.retrieve_indices.tolist() == [[0, 1, 3], [0, 2, -1]]
    assert b.tokens.tolist() == [9] and np.isnan(b.scores).all()  # no scores sent: NaN, not a made-up 0
    with pytest.raises(ValueError, match=r"PruneTreeResponse.*at byte"):
        _engine.decode_prune_trees(resp.SerializeToString()[:-2])
