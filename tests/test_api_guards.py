"""Bad input to the public Python APIs (NgramIndex, NgramClient and
AsyncNgramClient, dart_client's pruners, proposers and generators): a
precise ValueError/TypeError naming the argument and its value, before any
work, never a crash, a hang, a raw error from deep inside gRPC or pybind, or
a silent wrong answer. Real engine, real server on 127.0.0.1."""
from __future__ import annotations

import asyncio
import math
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
    ("127.0.0.1", ValueError, r"targets: '127.0.0.1': not host:port"),
    ("localhost", ValueError, r"targets: 'localhost': not host:port"),
    ("", ValueError, r"targets: '': not host:port"),
    (["127.0.0.1:50051", "127.0.0.2"], ValueError, r"targets: '127.0.0.2': not host:port"),
    ("127.0.0.1:abc", ValueError, r"targets: '127.0.0.1:abc': port 'abc' is not in 1..65535"),
    ("127.0.0.1:99999", ValueError, r"targets: '127.0.0.1:99999': port '99999' is not in 1..65535"),
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
              "ipv4:127.0.0.1:1,127.0.0.2:2"]:
        NgramClient(t).close()


@pytest.mark.parametrize("size", [0, -5, 2**40, 1.5, True], ids=repr)
def test_client_max_message_bytes_checked(size: object) -> None:
    """Was: 2**40 an OverflowError from grpcio, -5 no limit, 0 a client whose every call failed."""
    with pytest.raises(ValueError, match=rf"^max_message_bytes = {size!r}: must be an integer in 1\.\.2147483647"):
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
