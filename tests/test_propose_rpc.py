"""The ProposeTree RPC: corpus proposals from a real ngram-serve-native on
127.0.0.1 through NgramClient (both transports) and ngram-query, against the
engine in process (NgramIndex.propose): the same trees, the same errors, its
limits, the tokenizer fingerprint check, its metrics."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from click.testing import CliRunner
from conftest import SAMPLE_TOKENIZER, require_module
from test_propose import Corpus
from test_server import TREE_FIELDS, ServerProcess, _slow_prune_request, free_port, metrics_text, wait_in_flight

from ngram_service import NgramIndex
from ngram_service.proposals import DEFAULTS, LIMITS
from ngram_service.proto.ngram.v1 import ngram_pb2 as pb
from ngram_service.query_cli import main as query_main

pytestmark = pytest.mark.needs_server

TEXTS = [
    "This PEP proposes",
    "This PEP proposes a new feature. The feature is small. This PEP proposes a new",
    "def f(x):\n    return x + 1\n\ndef g(x):\n    return x",
    "The specification of the module is given in the next section. The module",
    "import os\nimport sys\nimport",
]
PARAMS = [
    {},
    {"max_nodes": 16, "max_depth": 4},
    {"lookup": False},
    {"corpus": False},
    {"max_branch": 2, "min_prob": 0.01, "discount": 0.2},
    {"lookup_weight": 0.5, "lookup_min_match": 1, "max_nodes": 200},
    {"max_nodes": 0},
    {"max_depth": 1, "max_branch": 32},
    {"order_weight": 1.0, "root_branch": 3},
]


def assert_trees_equal(a: Any, b: Any, what: str = "") -> None:
    for f in TREE_FIELDS:
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f"{what} {f}")


@pytest.fixture(scope="module")
def plain_trie(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small random-corpus trie whose metadata records no tokenizer."""
    return Corpus(seed=7, order=3).write(tmp_path_factory.mktemp("plain") / "plain.ngt", 1)


@pytest.fixture(scope="module")
def contexts(sample_trie: Path) -> list[np.ndarray]:
    """Sample-tokenizer text (some repeating itself, for the lookup source),
    random ids with a repeated stretch, a single token."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(SAMPLE_TOKENIZER))
    out = [np.array(tok.encode(t, add_special_tokens=False).ids, dtype=np.int64) for t in TEXTS]
    rng = np.random.default_rng(5)
    r = rng.integers(0, NgramIndex.open(sample_trie).vocab_size, 40)
    out += [np.concatenate([r, r[:7]]), np.array([int(out[0][-1])])]
    return out


@pytest.fixture(scope="module")
def server(sample_trie: Path, sample_trie_v2: Path, plain_trie: Path):
    with ServerProcess([sample_trie, sample_trie_v2, plain_trie], "--name", "sample", "--name", "v2",
                       "--name", "plain") as s:
        yield s


# ---- answers ---------------------------------------------------------------------

def test_trees_equal_in_process(server: ServerProcess, sample_trie: Path, sample_trie_v2: Path,
                                contexts: list[np.ndarray]) -> None:
    """For every context and parameter set, on both file formats: the tree
    over gRPC is NgramIndex.propose's, field by field (tokens, parents,
    depths, path-probability scores, mask, retrieve rows)."""
    sizes = []
    for name, path in (("sample", sample_trie), ("v2", sample_trie_v2)):
        idx = NgramIndex.open(path)
        with server.client(index=name) as c:
            for params in PARAMS:
                for i, ctx in enumerate(contexts):
                    got, want = c.propose(ctx, **params), idx.propose(ctx, **params)
                    assert_trees_equal(got, want, f"{name} {params} context {i}")
                    sizes.append(len(got.tokens))
                    assert got.scores[0] == 1.0 and got.parents[0] == -1
    # The comparison is not of trivial trees: full trees of the default 64 nodes, and empty ones.
    assert max(sizes) == 201 and DEFAULTS["max_nodes"] + 1 in sizes and min(sizes) == 1
    with server.client() as c:  # the default index is the first: sample
        assert_trees_equal(c.propose(contexts[1]), NgramIndex.open(sample_trie).propose(contexts[1]))


def test_sources_change_the_tree(server: ServerProcess, contexts: list[np.ndarray]) -> None:
    """The parameters reach the engine: turning either source off, or the
    budget down, gives another tree."""
    ctx = contexts[1]  # repeats itself: the lookup source has something to say
    with server.client() as c:
        both, corpus, lookup = c.propose(ctx), c.propose(ctx, lookup=False), c.propose(ctx, corpus=False)
        assert len({tuple(both.paths()), tuple(corpus.paths()), tuple(lookup.paths())}) == 3
        assert len(lookup.tokens) > 1
        assert len(c.propose(ctx, max_nodes=5).tokens) == 6


def test_batch_equals_singles(server: ServerProcess, sample_trie: Path, contexts: list[np.ndarray]) -> None:
    idx = NgramIndex.open(sample_trie)
    with server.client() as c:
        for params in (PARAMS[0], PARAMS[1], PARAMS[4]):
            batch = c.propose_batch(contexts, **params)
            assert len(batch) == len(contexts)
            for i, (got, ctx) in enumerate(zip(batch, contexts)):
                assert_trees_equal(got, c.propose(ctx, **params), f"context {i}")
            for got, want in zip(batch, idx.propose_batch(contexts, **params)):
                assert_trees_equal(got, want)
        assert c.propose_batch([]) == []
        lists = c.propose_batch([ctx.tolist() for ctx in contexts[:3]])  # any sequence of ids
        for got, ctx in zip(lists, contexts[:3]):
            assert_trees_equal(got, idx.propose(ctx))


def test_native_transport(server: ServerProcess, sample_trie: Path, contexts: list[np.ndarray]) -> None:
    """transport="native" (grpc++) carries propose and propose_batch: the same
    trees, the same errors."""
    require_module("ngram_service._native_client")
    idx = NgramIndex.open(sample_trie)
    with server.client(transport="native") as c:
        assert c.transport == "native"
        assert_trees_equal(c.propose(contexts[1], max_nodes=30), idx.propose(contexts[1], max_nodes=30))
        for got, want in zip(c.propose_batch(contexts), idx.propose_batch(contexts)):
            assert_trees_equal(got, want)
        with pytest.raises(grpc.RpcError) as e:
            c.propose_batch([contexts[0], []])
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert e.value.details() == "contexts[1]: context: empty; its last token is the tree's root"


def test_async_client(server: ServerProcess, sample_trie: Path, contexts: list[np.ndarray]) -> None:
    import asyncio

    from ngram_service.client import AsyncNgramClient

    idx = NgramIndex.open(sample_trie)

    async def run() -> None:
        async with AsyncNgramClient(server.target) as c:
            assert_trees_equal(await c.propose(contexts[1], max_nodes=20), idx.propose(contexts[1], max_nodes=20))
            for got, want in zip(await c.propose_batch(contexts), idx.propose_batch(contexts)):
                assert_trees_equal(got, want)
            with pytest.raises(grpc.RpcError) as e:
                await c.propose([1, 2], discount=2.0)
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "discount" in e.value.details()

    asyncio.run(run())


def test_request_bytes_are_protobufs(server: ServerProcess, contexts: list[np.ndarray]) -> None:
    """The client's hand-written request is the message protobuf writes, and
    the server answers a request protobuf wrote with the same trees."""
    with server.client(index="sample", tokenizer_fingerprint="fp") as c:
        params = {"max_nodes": 9, "discount": 0.25, "lookup": False, "lookup_min_match": 3, "lookup_decay": 0.3,
                  "lookup_prior": 0.5, "order_weight": 0.9, "root_branch": 4}
        sent = [*contexts, np.zeros(0, np.int64), [2**62, -5]]
        raw = c.propose_tree_request(sent, **params)
        want = pb.ProposeTreeRequest(index="sample", tokenizer_fingerprint="fp", params=pb.ProposeParams(**params),
                                     contexts=[pb.ProposeInput(context=list(x)) for x in sent])
        assert pb.ProposeTreeRequest.FromString(raw) == want
    with server.client() as c:
        req = pb.ProposeTreeRequest(params=pb.ProposeParams(max_nodes=9),
                                    contexts=[pb.ProposeInput(context=x.tolist()) for x in contexts])
        resp = server.stub().ProposeTree(req, timeout=10)
        for t, got in zip(resp.trees, c.propose_batch(contexts, max_nodes=9)):
            assert list(t.tokens) == got.tokens.tolist() and list(t.parents) == got.parents.tolist()
            np.testing.assert_array_equal(np.array(t.scores, np.float32), got.scores)
    assert len(resp.trees) == len(contexts)


# ---- bad input ----------------------------------------------------------------------

SMALL = ["--max-batch", "3", "--max-propose-context", "16", "--max-nodes", "10", "--max-levels", "4"]


@pytest.fixture(scope="module")
def small(sample_trie: Path):
    with ServerProcess([sample_trie], *SMALL) as s:
        yield s


def _req(*contexts: list[int], **params: Any) -> pb.ProposeTreeRequest:
    """Within the small server's node and depth limits unless told: the
    engine's defaults (64 nodes, depth 8) are over them."""
    params = {"max_nodes": 8, "max_depth": 4, **params}
    return pb.ProposeTreeRequest(contexts=[pb.ProposeInput(context=c) for c in contexts],
                                 params=pb.ProposeParams(**params))


# (request, the message's start); every message names its field.
BAD = [
    (_req([]), "contexts[0]: context: empty"),
    (_req([1, 2], []), "contexts[1]: context: empty"),
    (_req([1, 2], [1, 2, 4096]), "contexts[1]: context[2] = 4096"),
    (_req([-1, 2]), "contexts[0]: context[0] = -1"),
    (_req([1, 2], max_nodes=-1), "contexts[0]: max_nodes = -1"),
    (_req([1, 2], max_depth=-2), "contexts[0]: max_depth = -2"),
    (_req([1, 2], max_depth=65), "contexts[0]: max_depth = 65"),  # past the engine's 64: its message
    (_req([1, 2], max_branch=0), "contexts[0]: max_branch = 0"),
    (_req([1, 2], max_branch=LIMITS["max_branch"] + 1), "contexts[0]: max_branch = 33"),
    (_req([1, 2], min_prob=1.5), "contexts[0]: min_prob = 1.5"),
    (_req([1, 2], discount=float("nan")), "contexts[0]: discount = nan"),
    (_req([1, 2], lookup_weight=-1.0), "contexts[0]: lookup_weight = -1"),
    (_req([1, 2], lookup_min_match=0), "contexts[0]: lookup_min_match = 0"),
    (_req([1, 2], lookup_min_match=33), "contexts[0]: lookup_min_match = 33"),
    (_req([1, 2], lookup_prior=2.0), "contexts[0]: lookup_prior = 2"),
    # the former scoring's parameter, set by an older client
    (_req([1, 2], backoff=0.4), "params.backoff: no longer a parameter; proposals interpolate"),
    # the server's limits, lowered by its flags
    (_req([1], [1], [1], [1]), "contexts: 4 trees, the server's limit is 3 (--max-batch)"),
    (_req([1, 2], list(range(17))), "contexts[1].context: 17 tokens, the server's limit is 16 (--max-propose-context)"),
    (_req([1, 2], max_nodes=11), "params.max_nodes: 11 nodes, the server's limit is 10 (--max-nodes)"),
    (_req([1, 2], max_depth=5), "params.max_depth: 5 levels, the server's limit is 4 (--max-levels)"),
]


@pytest.mark.parametrize("request_,message", BAD, ids=[m for _, m in BAD])
def test_invalid_argument_names_the_field(small: ServerProcess, request_: pb.ProposeTreeRequest,
                                          message: str) -> None:
    with pytest.raises(grpc.RpcError) as e:
        small.stub().ProposeTree(request_, timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value.details()
    assert e.value.details().startswith(message), e.value.details()


def test_within_the_lowered_limits_is_answered(small: ServerProcess, sample_trie: Path) -> None:
    idx = NgramIndex.open(sample_trie)
    ctxs = [list(range(16)), [5], [7, 8]]
    with small.client() as c:
        with pytest.raises(grpc.RpcError) as e:  # the engine's default max_nodes, 64, is over --max-nodes 10
            c.propose([1, 2])
        assert e.value.details() == "params.max_nodes: 64 nodes, the server's limit is 10 (--max-nodes)"
        for got, want in zip(c.propose_batch(ctxs, max_nodes=10, max_depth=4), idx.propose_batch(
                ctxs, max_nodes=10, max_depth=4)):
            assert_trees_equal(got, want)


def test_errors_are_the_engines(server: ServerProcess, sample_trie: Path) -> None:
    """The host's message is the one NgramIndex.propose_batch raises, word for word."""
    idx = NgramIndex.open(sample_trie)
    cases = [([[1, 2], [3, 10**6]], {}), ([[1, 2]], {"min_prob": 2.0}), ([[4], []], {}),
             ([[1, 2]], {"max_nodes": LIMITS["max_nodes"] + 1})]
    with server.client() as c:
        for ctxs, params in cases:
            with pytest.raises(ValueError) as local:
                idx.propose_batch(ctxs, **params)
            with pytest.raises(grpc.RpcError) as remote:
                c.propose_batch(ctxs, **params)
            assert remote.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert remote.value.details() == str(local.value)


def test_engine_context_limit(server: ServerProcess) -> None:
    """Without --max-propose-context the bound is the engine's (1,048,576 tokens)."""
    n = LIMITS["max_context"] + 1
    with server.client(timeout=60) as c, pytest.raises(grpc.RpcError) as e:
        c.propose(np.ones(n, np.int64))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.details() == f"contexts[0].context: {n} tokens, the server's limit is {n - 1} (the engine's limit)"


def test_client_side_errors(server: ServerProcess) -> None:
    """What cannot be encoded is refused before any call, as NgramIndex refuses it."""
    with server.client() as c:
        with pytest.raises(TypeError, match="unexpected keyword argument 'beam_width'"):
            c.propose([1, 2], beam_width=3)
        with pytest.raises(ValueError, match="max_nodes must be an integer"):
            c.propose([1, 2], max_nodes=2.5)
        with pytest.raises(ValueError, match="max_nodes must be an integer"):
            c.propose([1, 2], max_nodes=True)
        with pytest.raises(ValueError, match="lookup must be True or False"):
            c.propose([1, 2], lookup=1)
        with pytest.raises(ValueError, match="discount must be a number"):
            c.propose([1, 2], discount="0.5")
        with pytest.raises(ValueError, match=r"max_depth = 36893488147419103232: must be 0\.\.64"):
            c.propose([1, 2], max_depth=2**65)
        with pytest.raises(ValueError, match="context"):
            c.propose([[1, 2]])
        with pytest.raises(ValueError, match=r"^contexts\[1\]: context"):
            c.propose_batch([[1, 2], [1.5, 2.0]])
        # numpy scalars convert as Python numbers do
        t = c.propose([1, 2], max_nodes=np.int64(3), discount=np.float32(0.5))
        assert len(t.tokens) <= 4


def test_fingerprint_and_index(server: ServerProcess, sample_trie: Path) -> None:
    """As for PruneTree: a fingerprint that differs, or an index that records
    none, is FAILED_PRECONDITION; an unknown index NOT_FOUND."""
    idx = NgramIndex.open(sample_trie)
    fp = idx.info()["tokenizer"]["fingerprint"]
    with server.client(index="sample", tokenizer_fingerprint=fp) as c:
        assert_trees_equal(c.propose([1, 2, 3]), idx.propose([1, 2, 3]))
    with server.client(index="sample", tokenizer_fingerprint="0" * 64) as c, pytest.raises(grpc.RpcError) as e:
        c.propose([1, 2, 3])
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert e.value.details() == (f"tokenizer_fingerprint: index 'sample' was built with tokenizer {fp}; "
                                 f"the request gives '{'0' * 64}'")
    with server.client(index="plain", tokenizer_fingerprint=fp) as c, pytest.raises(grpc.RpcError) as e:
        c.propose_batch([[1, 2]])
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "records no tokenizer" in e.value.details()
    with server.client(index="plain") as c:  # no fingerprint sent: answered
        assert len(c.propose([1, 2]).tokens) > 1
    with server.client(index="nope") as c, pytest.raises(grpc.RpcError) as e:
        c.propose([1])
    assert e.value.code() == grpc.StatusCode.NOT_FOUND


# ---- metrics, log, admission -----------------------------------------------------------

def test_metrics_and_log(sample_trie: Path, contexts: list[np.ndarray]) -> None:
    port = free_port()
    with ServerProcess([sample_trie], "--metrics-port", str(port), "--metrics-host", "127.0.0.1",
                       "--log-requests") as s, s.client() as c:
        one = c.propose(contexts[1])
        many = c.propose_batch(contexts, max_nodes=20)
        with pytest.raises(grpc.RpcError):
            c.propose([])
        text = metrics_text(port)
        # The log lines come through the server's stderr, read by another thread: wait for all three.
        deadline = time.monotonic() + 10
        while sum(ev.get("event") == "call" for ev in s.events) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        calls = [ev for ev in s.events if ev.get("event") == "call"]
    nodes = sum(len(t.tokens) - 1 for t in [one, *many])
    assert 'ngram_requests_total{code="OK",method="ProposeTree"} 2' in text
    assert 'ngram_requests_total{code="INVALID_ARGUMENT",method="ProposeTree"} 1' in text
    assert 'ngram_request_seconds_count{method="ProposeTree"} 3' in text
    assert f'ngram_trees_total{{method="ProposeTree"}} {1 + len(contexts)}' in text
    assert f'ngram_tree_nodes_total{{method="ProposeTree"}} {nodes}' in text
    assert 'method="PruneTree"' not in text
    assert [(ev["method"], ev["code"]) for ev in calls] == [("ProposeTree", 0), ("ProposeTree", 0), ("ProposeTree", 3)]
    assert calls[2]["message"].startswith("contexts[0]: context: empty")


def test_admission(sample_trie: Path) -> None:
    """ProposeTree is admitted as every method is: over --max-queue it is
    refused at once (RESOURCE_EXHAUSTED, counted), and the trees a PruneTree
    answers are counted beside it."""
    port = free_port()
    with ServerProcess([sample_trie], "--threads", "1", "--max-queue", "1", "--max-queue-wait-ms", "600000",
                       "--metrics-port", str(port), "--metrics-host", "127.0.0.1") as s, \
            s.client(retry_attempts=1) as c:
        # Slow enough that both are still there when the call below arrives, on a loaded machine too.
        slow = [s.stub().PruneTree.future(_slow_prune_request(6, seed=i), timeout=120) for i in range(2)]
        wait_in_flight(port, 2)  # one running, one queued
        with pytest.raises(grpc.RpcError) as e:
            c.propose([1, 2])
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert not any(f.done() for f in slow)
        assert [len(f.result().trees) for f in slow] == [6, 6]
        assert len(c.propose([1, 2]).tokens) > 1  # the place is free again
        text = metrics_text(port)
    assert 'ngram_rejected_total{method="ProposeTree",reason="queue_full"} 1' in text
    assert 'ngram_trees_total{method="PruneTree"} 12' in text


# ---- ngram-query propose ---------------------------------------------------------------

def query(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(query_main, list(args), catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def test_query_propose_json_host_and_trie(server: ServerProcess, sample_trie: Path) -> None:
    """--json: the same trees from a host and from --trie, NgramIndex's;
    with --tokenizer the text is encoded and each token's text added."""
    idx = NgramIndex.open(sample_trie)
    args = ["propose", "--context", "732,374,2776", "--context", "5", "--max-nodes", "12", "--no-lookup", "--json"]
    code, host_out, err = query("--target", server.target, *args)
    assert code == 0, err
    code, local_out, err = query("--trie", str(sample_trie), *args)
    assert code == 0, err
    host, local = json.loads(host_out), json.loads(local_out)
    assert host == local and len(host["trees"]) == 2
    for got, ctx in zip(host["trees"], [[732, 374, 2776], [5]]):
        want = idx.propose(ctx, max_nodes=12, lookup=False)
        assert got["tokens"] == want.tokens.tolist() and got["parents"] == want.parents.tolist()
        assert got["scores"] == [float(x) for x in want.scores]
        assert got["depths"] == want.depths.tolist() and got["retrieve_indices"] == want.retrieve_indices.tolist()

    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(SAMPLE_TOKENIZER))
    text = TEXTS[1]
    for where in (["--target", server.target], ["--trie", str(sample_trie)]):
        code, out, err = query(*where, "--tokenizer", str(SAMPLE_TOKENIZER), "propose", "--context", text, "--json")
        assert code == 0, err
        tree = json.loads(out)["trees"][0]
        ids = tok.encode(text, add_special_tokens=False).ids
        want = idx.propose(ids)
        assert tree["context"] == ids and tree["tokens"] == want.tokens.tolist()
        assert tree["texts"] == [tok.decode([i]) for i in want.tokens.tolist()]


def test_query_propose_text(server: ServerProcess, sample_trie: Path) -> None:
    """The readable form: the root, then one line per node, depth first, each
    with its path probability and token under its parent; then the sizes."""
    idx = NgramIndex.open(sample_trie)
    ctx = [732, 374, 2776]
    want = idx.propose(ctx, max_nodes=8)
    for where in (["--target", server.target], ["--trie", str(sample_trie)]):
        code, out, err = query(*where, "--tokenizer", str(SAMPLE_TOKENIZER), "propose", "--context",
                               "This PEP proposes", "--max-nodes", "8")
        assert code == 0, err
        lines = out.splitlines()
        assert lines[0] == "context: 3 tokens"
        assert lines[1] == "1.000000  2776 ' proposes'  (root)"
        assert lines[-1] == f"8 nodes besides the root, depth {want.depths.max()}, {len(want.retrieve_indices)} leaves"
        body = lines[2:-1]
        assert len(body) == 8
        # every node once, with its probability and its depth as indentation
        seen = set()
        for line in body:
            prob, rest = line.split("  ", 1)
            token = int(rest.lstrip("|` -").split(" ", 1)[0])
            depth = (len(rest) - len(rest.lstrip("|` -"))) // 4
            node = next(i for i in range(1, len(want.tokens)) if want.tokens[i] == token and want.depths[i] == depth
                        and i not in seen)
            seen.add(node)
            assert prob == f"{want.scores[node]:.6f}"
        assert seen == set(range(1, 9))
    code, out, err = query("--target", server.target, "propose", "--context", "1,2", "--context", "3")
    assert code == 0, err
    assert out.startswith("contexts[0]: 2 tokens\n1.000000  2  (root)\n") and "\n\ncontexts[1]: 1 tokens\n" in out


def test_query_propose_errors(server: ServerProcess, sample_trie: Path) -> None:
    for where in (["--target", server.target], ["--trie", str(sample_trie)]):
        code, out, err = query(*where, "propose", "--context", "", "--json")
        assert code == 1 and out == ""
        e = json.loads(err)
        assert e == {"error": "INVALID_ARGUMENT", "message": "contexts[0]: context: empty; its last token is the "
                                                             "tree's root"}
        code, out, err = query(*where, "propose", "--context", "1,2", "--max-branch", "0")  # the parser's range
        assert code == 2 and "Invalid value for '--max-branch': 0 is not in the range 1<=x<=32." in err
    code, out, err = query("--target", server.target, "--fingerprint", "f" * 64, "propose", "--context", "1,2")
    assert code == 1 and json.loads(err)["error"] == "FAILED_PRECONDITION"
    code, out, err = query("--target", server.target, "propose", "--context", "a,b")
    assert code == 2 and "comma-separated list of token ids" in err


def test_query_propose_console_script(server: ServerProcess, sample_trie: Path) -> None:
    """The command as the shell runs it."""
    r = subprocess.run([sys.executable, "-m", "ngram_service.query_cli", "--target", server.target, "propose",
                        "--context", "732,374,2776", "--max-nodes", "3", "--json"],
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    want = NgramIndex.open(sample_trie).propose([732, 374, 2776], max_nodes=3)
    assert json.loads(r.stdout)["trees"][0]["tokens"] == want.tokens.tolist()


def test_parameter_table_is_the_wire_message() -> None:
    """The engine's one table of propose's parameters (kProposeFields, in
    PROPOSE_DEFAULTS' order) is ProposeParams' fields in number order, but
    the former `backoff`, which the wire keeps only to refuse it (the
    codec's bytes are checked against protobuf's own encoder in
    test_request_bytes_are_protobufs)."""
    from ngram_service import proposals

    fields = sorted(pb.ProposeParams.DESCRIPTOR.fields, key=lambda f: f.number)
    assert [f.name for f in fields if not f.GetOptions().deprecated] == list(proposals.DEFAULTS)
    assert [f.name for f in fields if f.GetOptions().deprecated] == ["backoff"]
