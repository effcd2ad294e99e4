"""NgramClient / AsyncNgramClient: the gRPC client of a trie host.

The same methods and return types as :class:`ngram_service.NgramIndex`
(``conditional_probs``, ``topk``, ``prune``, ``prune_batch``, ``info``), so
code written against the in-process index runs against a host::

    with NgramClient(["10.0.0.5:50051", "10.0.0.6:50051"]) as idx:
        probs, matched = idx.conditional_probs(contexts, candidates)

Several targets are balanced round-robin (one channel with gRPC's
round_robin policy when they are all IP literals, else one channel each,
taken in turn). UNAVAILABLE is retried with exponential backoff by gRPC's own
retry policy (service config); every call carries a deadline (``timeout``).
Server-side errors reach the caller as ``grpc.RpcError`` with their status
code (INVALID_ARGUMENT naming the field, NOT_FOUND, FAILED_PRECONDITION,
RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED, UNAVAILABLE). Arrays that cannot be
encoded at all (floats as token ids, wrong rank) raise ValueError before any
call, as NgramIndex does.
"""
from __future__ import annotations

import ipaddress
import itertools
import json
import queue
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc
import numpy as np

from ngram_service import _engine, tree, wire
from ngram_service.index import TopK, _int_array
from ngram_service.proto.ngram.v1 import ngram_pb2 as pb
from ngram_service.proto.ngram.v1 import ngram_pb2_grpc as pb_grpc

__all__ = ["NgramClient", "AsyncNgramClient", "DEFAULT_TIMEOUT"]

DEFAULT_TIMEOUT = 5.0
SERVICE = "ngram.v1.NgramService"
_PRUNE_PARAMS = ("beam_width", "max_nodes", "ngram_weight", "level_weights", "logit_weights",
                 "eos_token_id", "ngram_on_first_level")


def service_config(max_attempts: int = 5, initial_backoff: float = 0.05, max_backoff: float = 2.0,
                   round_robin: bool = True, retry: bool = True) -> str:
    """The channel's service config: retry UNAVAILABLE with exponential
    backoff (gRPC's own retry policy) and balance round-robin."""
    method: dict[str, Any] = {"name": [{"service": SERVICE}]}
    if retry:
        method["retryPolicy"] = {
            "maxAttempts": max(2, min(max_attempts, 5)),
            "initialBackoff": f"{initial_backoff}s",
            "maxBackoff": f"{max_backoff}s",
            "backoffMultiplier": 2,
            "retryableStatusCodes": ["UNAVAILABLE"],
        }
    cfg: dict[str, Any] = {"methodConfig": [method]}
    if round_robin:
        cfg["loadBalancingConfig"] = [{"round_robin": {}}]
    return json.dumps(cfg)


def _split_host_port(target: str) -> tuple[str, str] | None:
    if target.startswith("["):  # [v6]:port
        host, _, port = target[1:].partition("]:")
        return (host, port) if port else None
    host, sep, port = target.rpartition(":")
    return (host, port) if sep else None


def channel_targets(targets: str | Sequence[str]) -> list[str]:
    """gRPC channel targets for ``targets``: one ``ipv4:``/``ipv6:`` target
    holding every address when all are IP literals (gRPC balances them),
    else the targets as given (the client takes them in turn).

    A ``dns:///name:port`` target (a Kubernetes headless Service) is one
    channel over every address the name resolves to, balanced by the
    round_robin policy of the client's service config and re-resolved when a
    connection drops; ``dns://DNS-SERVER:PORT/name:port`` asks that DNS server.
    It must name its port: gRPC would otherwise assume 443."""
    ts = [targets] if isinstance(targets, str) else list(targets)
    if not ts:
        raise ValueError("targets: need at least one host:port")
    for t in ts:
        if t.startswith("dns:"):
            name = t[len("dns:"):].lstrip("/")
            if t.startswith("dns://") and not t.startswith("dns:///"):
                name = name.partition("/")[2]  # after the DNS server's authority
            if _split_host_port(name) is None:
                raise ValueError(f"targets: {t}: no port (dns:///name:port)")
    if len(ts) == 1:
        return ts
    families = set()
    for t in ts:
        hp = _split_host_port(t)
        if hp is None:
            return ts
        try:
            families.add(ipaddress.ip_address(hp[0]).version)
        except ValueError:
            return ts
    if len(families) != 1:
        return ts
    fam = families.pop()
    return [f"ipv{fam}:" + ",".join(ts)]


def _pem(x: bytes | str | Path | None) -> bytes | None:
    """PEM bytes from bytes, PEM text or a path."""
    if x is None or isinstance(x, bytes):
        return x
    s = str(x)
    if "-----BEGIN" in s:
        return s.encode()
    return Path(s).read_bytes()


# ---- requests and results: shared by the sync and async clients ----------------

def _probs_request(index: str, fp: str, contexts: Any, candidates: Any) -> tuple[pb.ConditionalProbsRequest, int, int]:
    c = _int_array(contexts, "contexts", 2)
    w = _int_array(candidates, "candidates", 2)
    req = pb.ConditionalProbsRequest(index=index, tokenizer_fingerprint=fp, context_len=c.shape[1],
                                     num_candidates=w.shape[1])
    req.contexts.extend(c.ravel().tolist())
    req.candidates.extend(w.ravel().tolist())
    return req, c.shape[0], w.shape[1]


def _probs_result(resp: pb.ConditionalProbsResponse) -> tuple[np.ndarray, np.ndarray]:
    b, k = resp.batch, resp.num_candidates
    probs = np.array(resp.probs, dtype=np.float32).reshape(b, k)
    matched = np.array(resp.matched, dtype=np.int32).reshape(b, k)
    return probs, matched


def _topk_request(index: str, fp: str, context: Any, k: int) -> pb.TopKRequest:
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    req = pb.TopKRequest(index=index, tokenizer_fingerprint=fp, k=int(k))
    req.context.extend(_int_array(context, "context", 1).tolist())
    return req


def _topk_result(resp: pb.TopKResponse) -> TopK:
    return TopK(np.array(resp.tokens, dtype=np.int32), np.array(resp.probs, dtype=np.float32),
                np.array(resp.counts, dtype=np.uint64), int(resp.matched))


def _prune_params(params: dict[str, Any]) -> pb.PruneParams:
    """PruneParams from NgramIndex.prune's keyword parameters (checked as
    ngram_service.tree checks them); unset fields take the server's defaults,
    which are the engine's (the same as NgramIndex.prune's)."""
    unknown = set(params) - set(_PRUNE_PARAMS)
    if unknown:
        raise TypeError(f"unknown pruning parameter(s): {', '.join(sorted(unknown))}")
    given = {k: v for k, v in params.items() if v is not None}
    beam, nodes, lam, lw, gw, eos, first = tree._params(
        given.get("beam_width", 20), given.get("max_nodes", 60), given.get("ngram_weight", 0.5),
        params.get("level_weights"), params.get("logit_weights"), params.get("eos_token_id"),
        params.get("ngram_on_first_level", False))
    p = pb.PruneParams(ngram_on_first_level=first)
    if "beam_width" in given:
        p.beam_width = beam
    if "max_nodes" in given:
        p.max_nodes = nodes
    if "ngram_weight" in given:
        p.ngram_weight = lam
    if lw is not None:
        p.level_weights.extend(lw.tolist())
    if gw is not None:
        p.logit_weights.extend(gw.tolist())
    if eos is not None:
        p.eos_token_id = eos
    return p


def _prune_input(pre: np.ndarray, tok: np.ndarray, pr: np.ndarray, offsets: np.ndarray | None,
                 field: str = "") -> bytes:
    """One lattice as normalized by ngram_service.tree (2-D [D, K], or 1-D
    levels concatenated with their offsets), as a serialized PruneInput."""
    if pre.ndim != 1:
        raise ValueError(f"{field}prefix must be 1-D [P], got shape {pre.shape}")
    if offsets is None:
        if tok.ndim != 2:
            raise ValueError(f"{field}topk_tokens must be 2-D [D, K], got shape {tok.shape}")
        if pr.shape != tok.shape:
            raise ValueError(f"{field}topk_probs has shape {pr.shape}, topk_tokens {tok.shape}: they must match")
        sizes = np.full(tok.shape[0], tok.shape[1], dtype=np.uint32)
    else:
        sizes = np.diff(offsets.astype(np.int64))
    return wire.prune_input(pre, sizes, tok.ravel(), pr.ravel())


def _one_input(prefix: Any, topk_tokens: Any, topk_probs: Any) -> bytes:
    return _prune_input(tree._ids(prefix, "prefix"), *tree._lattice(topk_tokens, topk_probs))


def _batch_inputs(requests: Any) -> list[bytes]:
    out = []
    for i, r in enumerate(requests):
        pre, tok, pr, off = tree._request(r, i)
        out.append(_prune_input(np.asarray(pre), tok, pr, off, f"requests[{i}]: "))
    return out


def tree_from_nodes(tokens: np.ndarray, parents: np.ndarray, scores: np.ndarray | None = None) -> tree.PrunedTree:
    """A PrunedTree from the wire's node list (node 0 the root, parents before
    children): depths, the ancestor mask and the retrieve rows are derived by
    the engine's own encoder (the one prune uses), so both sides agree."""
    if scores is None or len(scores) != len(tokens):
        scores = np.full(len(tokens), np.nan, dtype=np.float32)
    return tree.PrunedTree(*_engine.encode_tree(tokens, parents, scores))


def _prune_result(resp: pb.PruneTreeResponse) -> list[Any]:
    out = []
    for t in resp.trees:
        scores = np.array(t.scores, dtype=np.float32) if len(t.scores) else None
        out.append(tree_from_nodes(np.array(t.tokens, dtype=np.int32), np.array(t.parents, dtype=np.int32), scores))
    return out


def _raw_method(channel: Any, name: str, stream: bool = False) -> Any:
    """A PruneTree call that takes a serialized request (built with
    ngram_service.wire) and returns the parsed response; the path comes from
    the proto's descriptor."""
    path = f"/{pb.DESCRIPTOR.services_by_name['NgramService'].full_name}/{name}"
    parse = pb.PruneTreeResponse.FromString
    if stream:
        return channel.stream_stream(path, response_deserializer=parse)
    return channel.unary_unary(path, response_deserializer=parse)


def _info_result(resp: pb.GetInfoResponse) -> dict[str, Any]:
    """The same dict as NgramIndex.info()."""
    counts = list(resp.ngram_counts)
    meta = json.loads(resp.meta_json) if resp.meta_json else {}
    return {
        "path": resp.path,
        "order": resp.order,
        "vocab_size": resp.vocab_size,
        "eos_id": None if resp.eos_id < 0 else resp.eos_id,
        "file_bytes": resp.file_bytes,
        "mapped": resp.mapped,
        "ngrams": counts,
        "ngrams_total": sum(counts),
        "tokens": resp.total_tokens,
        **meta,
    }


class _ClientBase:
    """Configuration shared by the sync and async clients."""

    def __init__(
        self,
        targets: str | Sequence[str],
        *,
        index: str = "",
        tokenizer_fingerprint: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        root_certificates: bytes | str | Path | None = None,
        private_key: bytes | str | Path | None = None,
        certificate_chain: bytes | str | Path | None = None,
        tls: bool | None = None,
        server_name: str | None = None,
        max_message_bytes: int = 64 << 20,
        retry_attempts: int = 5,  # 1: no retries
        with_scores: bool = True,
        options: Sequence[tuple[str, Any]] = (),
    ) -> None:
        """targets: "host:port" or several (balanced round-robin).
        index: the index to query ("" = the host's default).
        tokenizer_fingerprint: sent with every query; a host whose index was
        built with another tokenizer answers FAILED_PRECONDITION.
        timeout: the deadline of every call, in seconds (per-call override).
        root_certificates / private_key / certificate_chain: PEM bytes, text
        or paths; any of them (or tls=True) makes the channel TLS; the last
        two are the client certificate for mutual TLS.
        server_name: the name to check the server certificate against when
        it differs from the target's host.
        with_scores: also fetch node scores in prune results.
        """
        self.targets = channel_targets(targets)
        self.index = index
        self.tokenizer_fingerprint = tokenizer_fingerprint or ""
        self.timeout = timeout
        self.with_scores = with_scores
        use_tls = tls if tls is not None else any(x is not None for x in (root_certificates, private_key,
                                                                           certificate_chain))
        self._credentials = (
            grpc.ssl_channel_credentials(_pem(root_certificates), _pem(private_key), _pem(certificate_chain))
            if use_tls else None
        )
        opts: list[tuple[str, Any]] = [
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.max_receive_message_length", max_message_bytes),
        ]
        if retry_attempts > 1:
            opts += [("grpc.enable_retries", 1),
                     ("grpc.service_config", service_config(max_attempts=retry_attempts))]
        else:  # one attempt: the caller has its own fallback (dart_client.RemotePruner)
            opts += [("grpc.enable_retries", 0),
                     ("grpc.service_config", service_config(max_attempts=2, retry=False))]
        if server_name:
            opts.append(("grpc.ssl_target_name_override", server_name))
        self._options = opts + list(options)
        self._turn = itertools.cycle(range(len(self.targets)))

    def _deadline(self, timeout: float | None) -> float:
        return self.timeout if timeout is None else timeout

    def _prune_tree_request(self, inputs: list[bytes], params: dict[str, Any]) -> bytes:
        """A serialized PruneTreeRequest: its small fields through protobuf,
        the inputs (serialized by ngram_service.wire) appended as field 4."""
        head = pb.PruneTreeRequest(index=self.index, tokenizer_fingerprint=self.tokenizer_fingerprint,
                                   params=_prune_params(params), with_scores=self.with_scores)
        return head.SerializeToString() + b"".join(wire.length_delimited(4, i) for i in inputs)


class NgramClient(_ClientBase):
    """Synchronous client; thread-safe (share one per process)."""

    def __init__(self, targets: str | Sequence[str], **kwargs: Any) -> None:
        super().__init__(targets, **kwargs)
        self._channels = [
            grpc.secure_channel(t, self._credentials, options=self._options) if self._credentials
            else grpc.insecure_channel(t, options=self._options)
            for t in self.targets
        ]
        self._stubs = [pb_grpc.NgramServiceStub(c) for c in self._channels]
        self._prune_calls = [_raw_method(c, "PruneTree") for c in self._channels]
        self._prune_streams = [_raw_method(c, "PruneTreeStream", stream=True) for c in self._channels]
        self._streams = threading.local()

    def _stub(self) -> pb_grpc.NgramServiceStub:
        return self._stubs[next(self._turn)]

    def _prune_call(self) -> Any:
        return self._prune_calls[next(self._turn)]

    def close(self) -> None:
        for c in self._channels:
            c.close()

    def __enter__(self) -> "NgramClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def wait_ready(self, timeout: float = 10.0) -> None:
        """Blocks until every channel is connected (grpc.FutureTimeoutError otherwise)."""
        for c in self._channels:
            grpc.channel_ready_future(c).result(timeout=timeout)

    def info(self, *, timeout: float | None = None) -> dict[str, Any]:
        """Header, metadata and sizes of the index (the same dict as NgramIndex.info())."""
        return _info_result(self._stub().GetInfo(pb.GetInfoRequest(index=self.index), timeout=self._deadline(timeout)))

    def conditional_probs(self, contexts: Any, candidates: Any, *, timeout: float | None = None
                          ) -> tuple[np.ndarray, np.ndarray]:
        """(probs float32 [B, K], matched int32 [B, K]); see NgramIndex.conditional_probs."""
        req, _, _ = _probs_request(self.index, self.tokenizer_fingerprint, contexts, candidates)
        return _probs_result(self._stub().ConditionalProbs(req, timeout=self._deadline(timeout)))

    def topk(self, context: Any, k: int, *, timeout: float | None = None) -> TopK:
        """The k most frequent continuations; see NgramIndex.topk."""
        req = _topk_request(self.index, self.tokenizer_fingerprint, context, k)
        return _topk_result(self._stub().TopK(req, timeout=self._deadline(timeout)))

    def prune(self, prefix: Any, topk_tokens: Any, topk_probs: Any, *, timeout: float | None = None,
              **params: Any) -> tree.PrunedTree:
        """One draft lattice -> its PrunedTree; see NgramIndex.prune (same parameters)."""
        req = self._prune_tree_request([_one_input(prefix, topk_tokens, topk_probs)], params)
        return _prune_result(self._prune_call()(req, timeout=self._deadline(timeout)))[0]

    def prune_batch(self, requests: Any, *, timeout: float | None = None, stream: bool = False,
                    threads: int | None = None, **params: Any) -> list[tree.PrunedTree]:
        """All sequences of a decoding step in one call: requests are
        (prefix, topk_tokens, topk_probs) tuples or dicts with those keys;
        see NgramIndex.prune_batch. ``threads`` is accepted for compatibility
        (the host decides). stream=True sends the batch over this thread's
        long-lived PruneTreeStream instead of a unary call."""
        req = self._prune_tree_request(_batch_inputs(requests), params)
        if stream:
            return _prune_result(self._stream_call(req))
        return _prune_result(self._prune_call()(req, timeout=self._deadline(timeout)))

    def _stream_call(self, req: bytes) -> pb.PruneTreeResponse:
        """One request/response on this thread's bidirectional stream (opened
        on first use, reopened after an error)."""
        for attempt in range(2):
            st = getattr(self._streams, "s", None)
            if st is None:
                q: queue.Queue = queue.Queue()
                responses = self._prune_streams[next(self._turn)](iter(q.get, None))
                st = self._streams.s = (q, responses)
            q, responses = st
            q.put(req)
            try:
                return next(responses)
            except StopIteration:  # the server ended the stream (draining): reopen once
                self._streams.s = None
                if attempt:
                    raise grpc.RpcError("PruneTreeStream ended by the server") from None
            except BaseException:
                self._streams.s = None
                q.put(None)
                raise
        raise AssertionError("unreachable")

    def close_stream(self) -> None:
        """Ends this thread's PruneTreeStream, if any."""
        st = getattr(self._streams, "s", None)
        if st is not None:
            st[0].put(None)
            self._streams.s = None


class AsyncNgramClient(_ClientBase):
    """asyncio client (grpc.aio): the same methods as NgramClient, awaited."""

    def __init__(self, targets: str | Sequence[str], **kwargs: Any) -> None:
        super().__init__(targets, **kwargs)
        self._channels = [
            grpc.aio.secure_channel(t, self._credentials, options=self._options) if self._credentials
            else grpc.aio.insecure_channel(t, options=self._options)
            for t in self.targets
        ]
        self._stubs = [pb_grpc.NgramServiceStub(c) for c in self._channels]
        self._prune_calls = [_raw_method(c, "PruneTree") for c in self._channels]

    def _stub(self) -> pb_grpc.NgramServiceStub:
        return self._stubs[next(self._turn)]

    def _prune_call(self) -> Any:
        return self._prune_calls[next(self._turn)]

    async def close(self) -> None:
        for c in self._channels:
            await c.close()

    async def __aenter__(self) -> "AsyncNgramClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def wait_ready(self, timeout: float = 10.0) -> None:
        import asyncio

        await asyncio.wait_for(asyncio.gather(*(c.channel_ready() for c in self._channels)), timeout)

    async def info(self, *, timeout: float | None = None) -> dict[str, Any]:
        resp = await self._stub().GetInfo(pb.GetInfoRequest(index=self.index), timeout=self._deadline(timeout))
        return _info_result(resp)

    async def conditional_probs(self, contexts: Any, candidates: Any, *, timeout: float | None = None
                                ) -> tuple[np.ndarray, np.ndarray]:
        req, _, _ = _probs_request(self.index, self.tokenizer_fingerprint, contexts, candidates)
        return _probs_result(await self._stub().ConditionalProbs(req, timeout=self._deadline(timeout)))

    async def topk(self, context: Any, k: int, *, timeout: float | None = None) -> TopK:
        req = _topk_request(self.index, self.tokenizer_fingerprint, context, k)
        return _topk_result(await self._stub().TopK(req, timeout=self._deadline(timeout)))

    async def prune(self, prefix: Any, topk_tokens: Any, topk_probs: Any, *, timeout: float | None = None,
                    **params: Any) -> tree.PrunedTree:
        req = self._prune_tree_request([_one_input(prefix, topk_tokens, topk_probs)], params)
        return _prune_result(await self._prune_call()(req, timeout=self._deadline(timeout)))[0]

    async def prune_batch(self, requests: Any, *, timeout: float | None = None, threads: int | None = None,
                          **params: Any) -> list[tree.PrunedTree]:
        req = self._prune_tree_request(_batch_inputs(requests), params)
        return _prune_result(await self._prune_call()(req, timeout=self._deadline(timeout)))
