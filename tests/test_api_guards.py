"""Bad input to the public Python APIs (NgramIndex, NgramClient and
AsyncNgramClient, dart_client's pruners, proposers and generators): a
precise ValueError/TypeError naming the argument and its value, before any
work, never a crash, a hang, a raw error from deep inside gRPC or pybind, or
a silent wrong answer. Real engine, real server on 127.0.0.1."""
from __future__ import annotations

import asyncio
import math
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest

from ngram_service import NgramIndex
from ngram_service.client import AsyncNgramClient, NgramClient
from test_server import ServerProcess

V = 4096  # the sample trie's vocabulary

try:
    from ngram_service import native_client  # noqa: F401

    TRANSPORTS = ["python", "native"]
except ImportError:
    TRANSPORTS = ["python"]


@pytest.fixture(scope="module")
def host(sample_trie: Path) -> Iterator[ServerProcess]:
    with ServerProcess([sample_trie]) as s:
        yield s


def lattice() -> tuple[list[int], np.ndarray, np.ndarray]:
    tokens = np.tile(np.arange(1, 5, dtype=np.int64), (3, 1))
    return [1, 2], tokens, np.full((3, 4), 0.25, np.float32)


# ---- NgramClient / AsyncNgramClient ----------------------------------------------

BAD_TIMEOUTS = [0, -1.0, math.nan, math.inf, "1", True]


@pytest.mark.needs_server
@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("timeout", BAD_TIMEOUTS, ids=repr)
def test_client_call_timeout_checked(host: ServerProcess, transport: str, timeout: object) -> None:
    """A deadline that is no number of seconds > 0 and finite: ValueError
    naming it, as NgramIndex says, before anything is sent (it was
    DEADLINE_EXCEEDED, a TypeError from inside grpcio, or, over the native
    transport, no deadline at all)."""
    prefix, tokens, probs = lattice()
    with NgramClient(host.target, transport=transport, retry_attempts=1) as c:
        calls = [lambda: c.info(timeout=timeout), lambda: c.topk([1], 3, timeout=timeout),
                 lambda: c.conditional_probs([[1]], [[2]], timeout=timeout),
                 lambda: c.prune(prefix, tokens, probs, timeout=timeout),
                 lambda: c.propose([1, 2], timeout=timeout), lambda: c.propose_batch([[1]], timeout=timeout),
                 lambda: c.prune_tree_bytes(c.prune_tree_head({}), timeout=timeout),
                 lambda: c.wait_ready(timeout=timeout)]
        for call in calls:
            with pytest.raises(ValueError, match=r"^timeout (=|must)"):
                call()
    with pytest.raises(ValueError, match=r"^timeout (=|must)"):
        NgramClient(host.target, timeout=timeout)


@pytest.mark.needs_server
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_client_far_timeout_is_no_deadline(host: ServerProcess, transport: str) -> None:
    """A deadline beyond a century cannot pass (the engine's rule): the call
    runs (grpcio's deadline arithmetic overflowed into DEADLINE_EXCEEDED)."""
    with NgramClient(host.target, transport=transport, timeout=1e300) as c:
        assert c.info()["vocab_size"] == V
        assert c.propose([1, 2]).n_nodes > 0
        assert len(c.topk([1], 2, timeout=1e12).tokens) == 2


@pytest.mark.needs_server
@pytest.mark.parametrize("k", [2.5, math.nan, None, "3", True], ids=repr)
def test_client_topk_k_must_be_an_integer(host: ServerProcess, sample_trie: Path, k: object) -> None:
    """k as NgramIndex.topk takes it: 2.5 was cut to 2 continuations
    without a word; None, "3" and nan raised errors about '<' or int()."""
    with host.client(retry_attempts=1) as c:
        with pytest.raises(ValueError, match="^k must be an integer, got "):
            c.topk([1], k)
    with pytest.raises(ValueError, match="^k must be an integer"):  # the engine's words
        NgramIndex.open(sample_trie).topk([1], k)


@pytest.mark.needs_server
def test_client_topk_k_past_the_wire(host: ServerProcess) -> None:
    """A k the request's uint32 cannot hold: ValueError naming k and the
    bound (was protobuf's 'Value out of range')."""
    with host.client(retry_attempts=1) as c:
        with pytest.raises(ValueError, match=r"^k = 1099511627776: must be <= 4294967295"):
            c.topk([1], 2**40)
        assert len(c.topk([1], np.int64(3)).tokens) == 3


@pytest.mark.needs_server
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_client_use_after_close(host: ServerProcess, transport: str) -> None:
    """Every call of a closed client: ValueError saying so (propose over the
    native transport raised a bare StopIteration; wait_ready returned as if
    connected)."""
    prefix, tokens, probs = lattice()
    c = NgramClient(host.target, transport=transport)
    c.close()
    c.close()  # closing again does nothing
    for call in [c.info, lambda: c.topk([1], 3), lambda: c.conditional_probs([[1]], [[2]]),
                 lambda: c.prune(prefix, tokens, probs), lambda: c.prune_batch([(prefix, tokens, probs)]),
                 lambda: c.propose([1, 2]), lambda: c.propose_batch([[1]]),
                 lambda: c.prune_tree_bytes(c.prune_tree_head({})), c.wait_ready]:
        with pytest.raises(ValueError, match=r"^NgramClient\(127\.0\.0\.1:\d+\) is closed"):
            call()


@pytest.mark.needs_server
def test_async_client_guards(host: ServerProcess) -> None:
    async def run() -> None:
        c = AsyncNgramClient(host.target, retry_attempts=1)
        await c.wait_ready(5)
        for bad in (0, math.nan):
            with pytest.raises(ValueError, match="^timeout = "):
                await c.info(timeout=bad)
            with pytest.raises(ValueError, match="^timeout = "):
                await c.wait_ready(bad)
        with pytest.raises(ValueError, match="^k must be an integer"):
            await c.topk([1], 2.5)
        await c.close()
        with pytest.raises(ValueError, match=r"^AsyncNgramClient\(127\.0\.0\.1:\d+\) is closed"):
            await c.info()
        with pytest.raises(ValueError, match="is closed"):
            await c.wait_ready(1)

    asyncio.run(run())


def test_client_wait_ready_names_the_target() -> None:
    """wait_ready on a host that never answers: grpc.FutureTimeoutError
    naming the target and the wait (it had no message)."""
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        target = f"127.0.0.1:{s.getsockname()[1]}"
    with NgramClient(target) as c:
        with pytest.raises(grpc.FutureTimeoutError, match=rf"^wait_ready: {target} not connected within 0.2 s"):
            c.wait_ready(0.2)


@pytest.mark.parametrize("targets, error, message", [
    ("127.0.0.1", ValueError, r"targets: '127.0.0.1': no port \(gRPC would dial 443\)"),
    ("localhost", ValueError, r"targets: 'localhost': no port \(gRPC would dial 443\)"),
    ("", ValueError, r"targets: '': empty"),
    (["127.0.0.1:50051", "127.0.0.2"], ValueError, r"targets: '127.0.0.2': no port"),
    ("127.0.0.1:abc", ValueError, r"targets: '127.0.0.1:abc': the port 'abc' is not a number"),
    ("127.0.0.1:99999", ValueError, r"targets: '127.0.0.1:99999': the port 99999 is not in 1..65535"),
    ("::1", ValueError, r"targets: '::1': an IPv6 address goes in brackets"),  # was host ':' port 1
    ("ipv4:127.0.0.1", ValueError, r"targets: 'ipv4:127.0.0.1': '127.0.0.1': no port"),  # was dialled on 443
    (None, TypeError, r"targets must be a 'host:port' string or a sequence of them, got None"),
    (50051, TypeError, r"targets must be a 'host:port' string or a sequence of them, got 50051"),
    (["127.0.0.1:50051", 5], TypeError, r"targets: 5 is not a 'host:port' string"),
], ids=repr)
def test_client_targets_checked(targets: object, error: type, message: str) -> None:
    """A target without a port went to port 443; 99999 to port 34463; None
    or a number raised 'not iterable' or an AttributeError."""
    for cls in (NgramClient, AsyncNgramClient):
        with pytest.raises(error, match="^" + message):
            cls(targets)


def test_client_good_targets_still_accepted() -> None:
    for t in ["localhost:50051", "[::1]:50051", "unix:/tmp/ngram.sock", "dns:///localhost:50051",
              "ipv4:127.0.0.1:1,127.0.0.2:2", "xds:///trie-host"]:
        NgramClient(t).close()
    for many in ({"127.0.0.1:1"}, (t for t in ["127.0.0.1:1", "127.0.0.2:2"])):  # any iterable, as list() took
        NgramClient(many).close()


def test_async_client_wait_ready_names_the_target() -> None:
    """AsyncNgramClient.wait_ready timed out with a bare asyncio.TimeoutError."""
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        target = f"127.0.0.1:{s.getsockname()[1]}"

    async def run() -> None:
        c = AsyncNgramClient(target)
        try:
            with pytest.raises(asyncio.TimeoutError, match=rf"^wait_ready: {target} not connected within 0.2 s"):
                await c.wait_ready(0.2)
        finally:
            await c.close()

    asyncio.run(run())


@pytest.mark.parametrize("size", [0, -5, 2**40, 1.5, True], ids=repr)
def test_client_max_message_bytes_checked(size: object) -> None:
    """Was: 2**40 an OverflowError from grpcio, -5 no limit, 0 a client whose every call failed."""
    with pytest.raises(ValueError, match=rf"^max_message_bytes = {re.escape(repr(size))}: must be an integer in 1\.\.2147483647"):
        NgramClient("127.0.0.1:1", max_message_bytes=size)
    NgramClient("127.0.0.1:1", max_message_bytes=-1).close()  # gRPC's "no limit"


@pytest.mark.parametrize("given", ["private_key", "certificate_chain"])
def test_client_half_a_client_certificate(given: str) -> None:
    """A private key without its certificate chain (or the reverse) aborted
    the process inside gRPC's TLS (a CHECK failure); now ValueError. Run in a
    child process, so that the old abort fails this test and not the run."""
    code = ("from ngram_service.client import NgramClient\n"
            "try:\n"
            f"    NgramClient('127.0.0.1:1', {given}=b'x', retry_attempts=1).info(timeout=1)\n"
            "except ValueError as e:\n"
            "    print('ValueError:', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("ValueError: private_key and certificate_chain: give both"), out.stdout


# ---- NgramIndex and the engine ------------------------------------------------------

@pytest.mark.parametrize("verify", ["no", 1], ids=repr)
def test_index_open_verify_is_a_switch(sample_trie: Path, verify: object) -> None:
    """verify='no' was pybind's 'incompatible function arguments' listing
    the engine's signature; now the engine's words for a switch."""
    with pytest.raises(ValueError, match=rf"^verify must be True or False, got {re.escape(repr(verify))}$"):
        NgramIndex.open(sample_trie, verify=verify)
    assert NgramIndex.open(sample_trie, verify=np.True_).vocab_size == V
    assert NgramIndex.open(sample_trie, verify=None).vocab_size == V  # None: the default, as before


def test_index_open_path_types(sample_trie: Path) -> None:
    """A bytes path was opened as the text "b'...'" (no such file); None as
    a file named "None"."""
    assert NgramIndex.open(bytes(sample_trie)).vocab_size == V
    for bad in (None, 5):
        with pytest.raises(TypeError, match=rf"^path must be a str, bytes or os.PathLike, got {re.escape(repr(bad))}$"):
            NgramIndex.open(bad)


def test_index_prune_batch_threads_message(sample_trie: Path) -> None:
    """prune_batch(threads=1000000) said 'must be a non-negative integer or
    None, got 1000000' (it is one); now the limit, as propose_batch says it."""
    idx = NgramIndex.open(sample_trie)
    for call in (lambda t: idx.prune_batch([lattice()], threads=t), lambda t: idx.propose_batch([[1]], threads=t)):
        with pytest.raises(ValueError, match=r"^threads must be in 0\.\.4096 or None, got 1000000$"):
            call(10**6)
        with pytest.raises(ValueError, match=r"^threads must be an integer, got 2\.5$"):
            call(2.5)


@pytest.mark.parametrize("flag", ["no", "False", 1, 0.0, []], ids=repr)
def test_prune_switch_is_true_or_false(sample_trie: Path, flag: object) -> None:
    """ngram_on_first_level='no' (any object) was taken for its truth: 'no'
    and 'False' meant True. Now True or False only, as propose's switches."""
    idx = NgramIndex.open(sample_trie)
    with pytest.raises(ValueError, match=rf"^ngram_on_first_level must be True or False, got {re.escape(repr(flag))}$"):
        idx.prune(*lattice(), ngram_on_first_level=flag)
    with NgramClient("127.0.0.1:1") as client, \
            pytest.raises(ValueError, match="^ngram_on_first_level must be True or False"):
        client.prune(*lattice(), ngram_on_first_level=flag)  # refused before the wire
    assert idx.prune(*lattice(), ngram_on_first_level=True).n_nodes > 0
    assert idx.prune(*lattice(), ngram_on_first_level=np.True_).n_nodes > 0  # numpy's bools are switches too


# ---- dart_client ----------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, message", [
    ({"beam_width": 2.5}, r"beam_width must be an integer, got 2\.5"),
    ({"beam_width": 0}, r"beam_width = 0: must be 1\.\.1024"),
    ({"max_nodes": -1}, r"max_nodes = -1: must be 0\.\.4096"),
    ({"ngram_weight": math.nan}, r"ngram_weight = nan: must be in \[0, 1e\+06\]"),
    ({"level_weights": [1.0, -2.0]}, r"level_weights\[1\] = -2\.0: must be in \[0, 1e\+06\]"),
    ({"eos_token_id": 2.5}, r"eos_token_id must be an integer or None, got 2\.5"),
    ({"eos_token_id": -5}, r"eos_token_id = -5: must be >= -1"),
    ({"ngram_on_first_level": "no"}, r"ngram_on_first_level must be True or False, got 'no'"),
    ({"topk": 2.5}, r"topk must be an integer, got 2\.5"),
    ({"topk": 5000}, r"topk = 5000: must be 1\.\.1024"),
    ({"temperature": math.nan}, r"temperature must be > 0 and finite, got nan"),
    ({"temperature": math.inf}, r"temperature must be > 0 and finite, got inf"),
], ids=repr)
def test_pruner_parameters_checked_at_construction(sample_trie: Path, kwargs: dict, message: str) -> None:
    """A LocalPruner took beam_width=2.5 as 2, eos_token_id=2.5 as 2 and
    ngram_on_first_level='no' as True without a word; beam_width=0, NaN
    weights and temperatures failed at every call (a RemotePruner fell back
    at every call), in messages about requests[0] or topk_probs."""
    torch = pytest.importorskip("torch")
    from dart_client import LocalPruner

    with pytest.raises(ValueError, match="^" + message):
        LocalPruner(sample_trie, **kwargs)
    assert LocalPruner(sample_trie, topk=4)(torch.randn(2, 8), None, [1, 2]).draft_tokens.numel() > 1


def test_pruner_call_arguments(sample_trie: Path) -> None:
    """logits as numpy: AttributeError "'str' object has no attribute
    'type'"; zero levels: 'the root is not a token id'; a short d2t: torch's
    IndexError; max_nodes=2.5 cut to 2 and NaN ignored."""
    torch = pytest.importorskip("torch")
    from dart_client import LocalPruner

    pr = LocalPruner(sample_trie, topk=4)
    with pytest.raises(TypeError, match=r"^logits must be a torch\.Tensor \[D, V_draft\], got ndarray"):
        pr(np.zeros((2, 8), np.float32), None, [1, 2])
    with pytest.raises(TypeError, match=r"^logits must be a torch\.Tensor \[B, D, V_draft\], got ndarray"):
        pr.prune_batch(np.zeros((1, 2, 8), np.float32), None, [[1, 2]])
    for shape in [(0, 8), (2, 0)]:
        with pytest.raises(ValueError, match=rf"^logits must be \[B, D, V_draft\] with D >= 1 levels and "
                                             rf"V_draft >= 1 ids, got shape \(1, {shape[0]}, {shape[1]}\)"):
            pr(torch.randn(*shape), None, [1, 2])
    with pytest.raises(ValueError, match=r"^d2t must be \[V_draft\] = \[8\], got shape \(3,\)"):
        pr(torch.randn(2, 8), torch.zeros(3, dtype=torch.int64), [1, 2])
    with pytest.raises(TypeError, match=r"^d2t must be a torch\.Tensor \[V_draft\] \(or None\), got ndarray"):
        pr(torch.randn(2, 8), np.zeros(8, np.int64), [1, 2])
    for bad in (2.5, math.nan, "3"):
        with pytest.raises(ValueError, match=rf"^max_nodes must be an integer, got {re.escape(repr(bad))}"):
            pr.prune_batch(torch.randn(1, 2, 8), None, [[1, 2]], max_nodes=bad)
    assert pr.prune_batch(torch.randn(1, 2, 8), None, [[1, 2]], max_nodes=np.int64(2)).n_nodes == [3]


@pytest.mark.parametrize("tokens, message", [
    ([1, 2, 3.7], r"tokens\[0\]: token ids must be integers, got dtype float64"),
    ([1, math.nan], r"tokens\[0\]: token ids must be integers, got dtype float64"),
    ([1, 2**70], r"tokens\[0\]: token ids must be integers in \[-2\*\*63, 2\*\*63\)"),
    (["a"], r"tokens\[0\]: dtype <U1 is not a real number type"),
    ([1, 2**40], r"tokens\[0\]: token id 1099511627776 is past the engine's ids \(0\.\.2147483647\)"),
], ids=repr)
def test_proposer_token_ids_converted_as_the_engine_does(sample_trie: Path, tokens: list, message: str) -> None:
    """3.7 was cut to 3 and proposed from; NaN, 2**70 and 'a' raised
    numpy's or int()'s errors; 2**40 blamed a 'vocab_size' nobody gave."""
    torch = pytest.importorskip("torch")
    from dart_client import LocalProposer, LookupProposer

    for proposer in (LocalProposer(sample_trie), LookupProposer()):
        with pytest.raises(ValueError, match="^" + message):
            proposer(tokens)
        with pytest.raises(ValueError, match="^" + message.replace("0", "1", 1)):
            proposer.propose_batch([[1, 2], tokens])
        with pytest.raises(ValueError, match=r"^tokens\[0\]: token ids must be integers, got dtype float32"):
            proposer(torch.tensor([1.5, 2.0]))
        assert proposer(torch.tensor([[1, 2, 1, 2]])).draft_tokens[0] == 2  # any shape, flattened


def test_proposer_counts_are_integers(sample_trie: Path) -> None:
    """max_nodes=2.5 per call was cut to 2 and NaN ignored; max_context=2.5 cut to 2."""
    pytest.importorskip("torch")
    from dart_client import LocalProposer, LookupProposer

    proposer = LocalProposer(sample_trie)
    for bad in (2.5, math.nan, "3"):
        with pytest.raises(ValueError, match=rf"^max_nodes must be an integer, got {re.escape(repr(bad))}"):
            proposer.propose_batch([[1, 2]], max_nodes=bad)
        with pytest.raises(ValueError, match=rf"^max_context must be an integer, got {re.escape(repr(bad))}"):
            LookupProposer(max_context=bad)
    assert proposer.propose_batch([[1, 2]], max_nodes=np.int64(3)).n_nodes == [4]


@pytest.fixture(scope="module")
def generators(sample_trie: Path) -> tuple:
    """A ProposalGenerator and a DartGenerator over one tiny random target of the sample vocabulary."""
    torch = pytest.importorskip("torch")
    from dart_client import DartGenerator, LocalPruner, LookupProposer, ProposalGenerator
    from dart_client.random_models import random_sample_models

    torch.manual_seed(0)
    target, drafter = random_sample_models()
    return (target, drafter, ProposalGenerator(target, LookupProposer()),
            DartGenerator(target, drafter, LocalPruner(sample_trie)))


@pytest.mark.parametrize("kwargs, message", [
    ({"max_new_tokens": math.nan}, r"max_new_tokens must be an integer, got nan"),
    ({"max_new_tokens": 2.5}, r"max_new_tokens must be an integer, got 2\.5"),
    ({"temperature": math.nan}, r"temperature must be a finite number >= 0 \(0: greedy\), got nan"),
    ({"temperature": -1.0}, r"temperature must be a finite number >= 0 \(0: greedy\), got -1\.0"),
    ({"top_k": -1}, r"top_k must be >= 0 \(0: off\), got -1"),
    ({"top_k": 2.5}, r"top_k must be an integer, got 2\.5"),
    ({"top_p": 1.5}, r"top_p must be in \[0, 1\], got 1\.5"),
    ({"top_p": math.nan}, r"top_p must be in \[0, 1\], got nan"),
    ({"seed": 2.5}, r"seed must be an integer, got 2\.5"),
    ({"seed": 2**70}, r"seed must be in \[-2\*\*63, 2\*\*64\) \(torch's seeds\) or None"),
], ids=repr)
def test_generate_arguments_checked(generators: tuple, kwargs: dict, message: str) -> None:
    """max_new_tokens=NaN decoded forever (a hang); 2.5 failed in a slice;
    a NaN or negative temperature decoded greedily; top_k -1 or 2.5 failed
    in torch.topk; top_p 1.5 or NaN sampled without top-p; a float seed
    failed in torch. Each is refused before any forward, the
    autoregressive baseline alike."""
    _, _, pg, dg = generators
    call = {"max_new_tokens": 3, **kwargs}
    if "max_new_tokens" not in kwargs:
        call["temperature"] = call.get("temperature", 1.0)
    for gen in (pg, dg):
        for method in (gen.generate, gen.autoregressive):
            with pytest.raises(ValueError, match="^" + message):
                method([5, 6, 7], **call)


@pytest.mark.parametrize("prompt, message", [
    ([5, 6, 4096], r"input_ids: token id 4096 is not in the target's vocabulary \[0, 4096\)"),
    ([5, -1], r"input_ids: token id -1 is not in the target's vocabulary \[0, 4096\)"),
    ([5, 2**70], r"input_ids: token id 1180591620717411303424 is not in the target's vocabulary"),
    ([[5, 6], [7, 9999]], r"prompt 1: token id 9999 is not in the target's vocabulary \[0, 4096\)"),
    ([5, 6.7, 7], r"input_ids: token ids must be integers, got 6\.7"),
    ([[5, 6], [7, 8.0]], r"prompt 1: token ids must be integers, got 8\.0"),
    ("torch-float", r"input_ids: token ids must be integers, got dtype torch\.float32"),
    ("numpy-float", r"prompt 0: token ids must be integers, got dtype float64"),
], ids=repr)
def test_generate_prompt_ids_checked(generators: tuple, prompt: object, message: str) -> None:
    """Ids outside the vocabulary raised torch's 'index out of range in
    self' from the embedding; 6.7 (or a float tensor) was cut to 6 and
    decoded."""
    import torch

    _, _, pg, dg = generators
    if prompt == "torch-float":
        prompt = torch.tensor([5.5, 6.0])
    elif prompt == "numpy-float":
        prompt = np.array([[5.0, 6.0]])
    for gen in (pg, dg):
        with pytest.raises(ValueError, match="^" + message):
            gen.generate(prompt, 2)
    for bad in (None, "hello"):
        with pytest.raises(TypeError, match=r"^input_ids must be token ids \(a list, an array or a tensor\)"):
            pg.generate(bad, 2)


def test_generator_constructor_arguments(generators: tuple, sample_trie: Path) -> None:
    """tree_budget NaN or 2.5 cut every tree to one node (NaN // B); '64'
    was a TypeError about '<'; kv_capacity=2.5 failed in torch.zeros at the
    first call; eos_token_id=np.int64(3) was 'not iterable' and 2.5 too;
    aux_layers past the target's layers failed at the first step with an
    IndexError."""
    from dart_client import DartGenerator, LocalPruner, LookupProposer, ProposalGenerator

    target, drafter, _, _ = generators
    for bad in (math.nan, 2.5, "64", True):
        with pytest.raises(ValueError, match=rf"^tree_budget must be an integer, got {re.escape(repr(bad))}"):
            ProposalGenerator(target, LookupProposer(), tree_budget=bad)
    with pytest.raises(ValueError, match=r"^kv_capacity must be an integer, got 2\.5"):
        ProposalGenerator(target, LookupProposer(), kv_capacity=2.5)
    for bad in (2.5, "x", [1, 2.5]):
        with pytest.raises(ValueError, match=r"^eos_token_id must be (a token id or a sequence of them|an integer)"):
            ProposalGenerator(target, LookupProposer(), eos_token_id=bad)
    assert ProposalGenerator(target, LookupProposer(), eos_token_id=np.int64(3)).eos == {3}
    assert ProposalGenerator(target, LookupProposer(), eos_token_id=[np.int64(3), 4]).eos == {3, 4}
    for bad in ([100, 200, 300], [1, 2], [1.5, 2, 3]):
        with pytest.raises(ValueError, match=r"^aux_layers must be 3 indices of the target's 9 hidden states"):
            DartGenerator(target, drafter, LocalPruner(sample_trie), aux_layers=bad)


@pytest.mark.parametrize("cls_name", ["RemotePruner", "RemoteProposer"])
@pytest.mark.parametrize("kwargs, message", [
    ({"deadline": 0}, r"deadline = 0: must be a number of seconds > 0 and finite$"),
    ({"deadline": math.nan}, r"deadline = nan: must be a number of seconds > 0 and finite$"),
    ({"deadline": "5ms"}, r"deadline must be a number of seconds, got '5ms'"),
    ({"connect_timeout": -1}, r"connect_timeout = -1: must be a number of seconds > 0 and finite$"),
    ({"backoff_initial": math.nan}, r"backoff_initial = nan: must be a number of seconds >= 0 and finite"),
    ({"backoff_max": -1.0}, r"backoff_max = -1\.0: must be a number of seconds >= 0 and finite"),
], ids=repr)
def test_remote_source_times_checked(cls_name: str, kwargs: dict, message: str) -> None:
    """A zero deadline made every call a fallback, a NaN one no deadline
    over the native transport; a NaN back-off never asked the host again, a
    negative one at every call; a failed first contact only logged it."""
    pytest.importorskip("torch")
    import dart_client

    with pytest.raises(ValueError, match="^" + message):
        getattr(dart_client, cls_name)("127.0.0.1:1", **kwargs)


def test_no_trie_names_the_vocabulary_given() -> None:
    """NoTrie(-1) said 'vocab_size = 0'."""
    from ngram_service.tree import NoTrie

    with pytest.raises(ValueError, match=r"^vocab_size = -1: must be in 1\.\.2147483648$"):
        NoTrie(-1)
    assert NoTrie(7).vocab_size == 7
