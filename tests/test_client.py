"""The Python client: round-robin over several hosts, asyncio, ngram-query, ngram-serve."""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import grpc

from click.testing import CliRunner  # noqa: E402

from ngram_service import NgramIndex  # noqa: E402
from ngram_service.client import AsyncNgramClient, NgramClient, channel_targets  # noqa: E402
from ngram_service.proto.ngram.v1 import ngram_pb2 as pb  # noqa: E402
from ngram_service.query_cli import main as query_main  # noqa: E402
from test_server import GOLDEN, TREE_FIELDS, ServerProcess  # noqa: E402
from test_server import dart_trie, tree_inputs  # noqa: E402,F401  (fixtures)



def test_channel_targets() -> None:
    assert channel_targets("h:1") == ["h:1"]
    assert channel_targets(["127.0.0.1:1", "127.0.0.2:2"]) == ["ipv4:127.0.0.1:1,127.0.0.2:2"]
    assert channel_targets(["[::1]:1", "[::1]:2"]) == ["ipv6:[::1]:1,[::1]:2"]
    assert channel_targets(["a:1", "127.0.0.1:2"]) == ["a:1", "127.0.0.1:2"]
    with pytest.raises(ValueError):
        channel_targets([])


@pytest.mark.needs_server
@pytest.mark.needs_server
@pytest.mark.parametrize("form", ["ip", "names"])
def test_round_robin_over_targets(sample_trie: Path, form: str) -> None:
    with ServerProcess([sample_trie], "--log-requests") as a, ServerProcess([sample_trie], "--log-requests") as b:
        targets = [a.target, b.target] if form == "ip" else [f"localhost:{a.port}", f"localhost:{b.port}"]
        with NgramClient(targets) as c:
            c.wait_ready()
            for _ in range(20):
                c.topk([1, 2], 3)
        calls = [sum(ev["event"] == "call" for ev in s.events) for s in (a, b)]
    assert sum(calls) == 20 and min(calls) >= 5, calls


@pytest.mark.needs_server
def test_async_client_equals_engine(dart_trie: Path, tree_inputs: list) -> None:  # noqa: F811
    idx = NgramIndex.open(dart_trie)
    z = np.load(GOLDEN / "dart-sample-queries.npz")

    async def run(target: str) -> None:
        async with AsyncNgramClient(target) as c:
            await c.wait_ready()
            assert await c.info() == idx.info()
            p, m = await c.conditional_probs(z["contexts"], z["candidates"])
            np.testing.assert_array_equal(p, z["probs"])
            np.testing.assert_array_equal(m, z["matched"])
            t = await c.topk(z["contexts"][0], 5)
            np.testing.assert_array_equal(t.tokens, idx.topk(z["contexts"][0], 5).tokens)
            trees = await asyncio.gather(*(c.prune(*r) for r in tree_inputs[:8]))
            trees += await c.prune_batch(tree_inputs[8:12])
            for got, want in zip(trees, idx.prune_batch(tree_inputs[:12])):
                for f in TREE_FIELDS:
                    np.testing.assert_array_equal(getattr(got, f), getattr(want, f))
            with pytest.raises(grpc.RpcError) as e:
                await c.topk([10**9], 1)
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT

    with ServerProcess([dart_trie]) as s:
        asyncio.run(run(s.target))


class FlakyTopK:
    """A gRPC server (grpcio, in this process) whose TopK answers UNAVAILABLE
    `failures` times, then [7]: it counts the attempts the client's retry
    policy makes, which the native host cannot be told to do."""

    def __init__(self, failures: int) -> None:
        from concurrent import futures

        self.failures, self.attempts = failures, 0
        self.server = grpc.server(futures.ThreadPoolExecutor(2))
        handler = grpc.unary_unary_rpc_method_handler(
            self._topk, request_deserializer=pb.TopKRequest.FromString,
            response_serializer=pb.TopKResponse.SerializeToString)
        self.server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
            "ngram.v1.NgramService", {"TopK": handler})])
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def _topk(self, request: pb.TopKRequest, context: grpc.ServicerContext) -> pb.TopKResponse:
        self.attempts += 1
        if self.attempts <= self.failures:
            context.abort(grpc.StatusCode.UNAVAILABLE, f"attempt {self.attempts} refused")
        return pb.TopKResponse(tokens=[7], probs=[1.0], counts=[3], matched=len(request.context))


@pytest.mark.parametrize("attempts,failures,ok", [(3, 2, True), (2, 2, False), (1, 1, False), (5, 0, True)])
def test_unavailable_is_retried_then_reported(attempts: int, failures: int, ok: bool) -> None:
    flaky = FlakyTopK(failures)
    try:
        with NgramClient(f"127.0.0.1:{flaky.port}", retry_attempts=attempts, timeout=10) as c:
            if ok:
                assert c.topk([1], 1).tokens.tolist() == [7]
            else:
                with pytest.raises(grpc.RpcError) as e:
                    c.topk([1], 1)
                assert e.value.code() == grpc.StatusCode.UNAVAILABLE
                assert f"attempt {attempts} refused" in e.value.details()  # the last attempt's answer
        assert flaky.attempts == min(attempts, failures + 1)
    finally:
        flaky.server.stop(None)


@pytest.mark.needs_server
def test_stopped_host_is_reported_unavailable(sample_trie: Path) -> None:
    with ServerProcess([sample_trie]) as s:
        port = s.port
    with NgramClient(f"127.0.0.1:{port}", retry_attempts=3, timeout=3) as c, pytest.raises(grpc.RpcError) as e:
        c.topk([1], 1)
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE


@pytest.mark.needs_server
def test_query_cli(dart_trie: Path, tmp_path: Path, tree_inputs: list) -> None:  # noqa: F811
    idx = NgramIndex.open(dart_trie)
    r = CliRunner()
    with ServerProcess([dart_trie]) as s:
        t = ["--target", s.target]
        out = r.invoke(query_main, [*t, "info"])
        assert out.exit_code == 0, out.output
        assert json.loads(out.output)["ngrams"] == idx.info()["ngrams"]
        out = r.invoke(query_main, [*t, "probs", "--context", "785,374", "--candidates", "1,2,3",
                                    "--context", "16,17", "--candidates", "4,5,6"])
        p, m = idx.conditional_probs([[785, 374], [16, 17]], [[1, 2, 3], [4, 5, 6]])
        assert json.loads(out.output) == {"probs": p.tolist(), "matched": m.tolist()}
        out = r.invoke(query_main, [*t, "topk", "--context", "16", "-k", "4"])
        assert json.loads(out.output)["tokens"] == idx.topk([16], 4).tokens.tolist()
        np.savez(tmp_path / "l.npz", prefix=tree_inputs[0][0], topk_tokens=tree_inputs[0][1],
                 topk_probs=tree_inputs[0][2])
        out = r.invoke(query_main, [*t, "prune", "--npz", str(tmp_path / "l.npz")])
        assert json.loads(out.output)["tokens"] == idx.prune(*tree_inputs[0]).tokens.tolist()
        out = r.invoke(query_main, [*t, "topk", "--context", "999999999"])
        assert out.exit_code == 1
        err = json.loads(out.output.strip().splitlines()[-1])
        assert err["error"] == "INVALID_ARGUMENT" and "context[0]" in err["message"]


@pytest.mark.needs_server
def test_ngram_serve_launcher_execs_the_binary() -> None:
    p = subprocess.run([sys.executable, "-m", "ngram_service.serve", "--help"], capture_output=True, text=True,
                       timeout=20)
    assert p.returncode == 0 and "--tls-client-ca" in p.stdout
