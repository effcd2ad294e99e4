"""NgramClient / AsyncNgramClient: the gRPC client of a trie host.

The same methods and return types as :class:`ngram_service.NgramIndex`
(``conditional_probs``, ``topk``, ``prune``, ``prune_batch``, ``propose``,
``propose_batch``, ``info``), so code written against the in-process index
runs against a host::

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
call, as NgramIndex does; so do a bad ``timeout`` or ``k``, and any call
of a closed client.
"""
from __future__ import annotations

import ipaddress
import itertools
import json
import math
import numbers
import operator
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import grpc
import numpy as np

from ngram_service import _engine, proposals, tree
from ngram_service.arg_checks import is_real
from ngram_service.index import TopK, info_dict
from ngram_service.proto.ngram.v1 import ngram_pb2 as pb
from ngram_service.targets import TARGET_FORMS, target_problem

__all__ = ["NgramClient", "AsyncNgramClient", "DEFAULT_TIMEOUT"]

DEFAULT_TIMEOUT = 5.0
#: A deadline further than this (seconds; the engine's bound, cpp/python/timeout.h) cannot pass: no deadline.
NEVER = 100.0 * 365 * 24 * 3600
#: gRPC's largest message (a signed 32-bit length).
MAX_MESSAGE_BYTES = (1 << 31) - 1
#: TopKRequest.k is a uint32.
_MAX_K = (1 << 32) - 1
# gRPC's target schemes that targets.target_problem does not check, passed to gRPC as they are.
_OTHER_SCHEMES = ("vsock:", "xds:", "google-c2p:")
SERVICE = pb.DESCRIPTOR.services_by_name["NgramService"].full_name


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


def check_timeout(value: Any, name: str = "timeout", optional: bool = True) -> float | None:
    """A deadline in seconds as the engine takes one: a number > 0 and
    finite, or None (no deadline) where ``optional``, else ValueError naming
    ``name``; beyond NEVER: None."""
    none = ", or None" if optional else ""
    if value is None and optional:
        return None
    if not is_real(value):
        raise ValueError(f"{name} must be a number of seconds{none}, got {value!r}")
    s = float(value)
    if not (s > 0.0 and math.isfinite(s)):
        raise ValueError(f"{name} = {value!r}: must be a number of seconds > 0 and finite{none}")
    return None if s > NEVER else s


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
    if isinstance(targets, str):
        ts = [targets]
    elif isinstance(targets, bytes) or not isinstance(targets, Iterable):
        raise TypeError(f"targets must be a 'host:port' string or a sequence of them, got {targets!r}")
    else:
        ts = list(targets)
    if not ts:
        raise ValueError("targets: need at least one host:port")
    for t in ts:
        if not isinstance(t, str):
            raise TypeError(f"targets: {t!r} is not a 'host:port' string")
        why = None if t.startswith(_OTHER_SCHEMES) else target_problem(t)
        if why:
            raise ValueError(f"targets: {t!r}: {why}; give {TARGET_FORMS}")
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

def _probs_request(index: str, fp: str, contexts: Any, candidates: Any) -> pb.ConditionalProbsRequest:
    c = _engine.token_ids(contexts, "contexts", 2)
    w = _engine.token_ids(candidates, "candidates", 2)
    req = pb.ConditionalProbsRequest(index=index, tokenizer_fingerprint=fp, context_len=c.shape[1],
                                     num_candidates=w.shape[1])
    req.contexts.extend(c.ravel().tolist())
    req.candidates.extend(w.ravel().tolist())
    return req


def _probs_result(resp: pb.ConditionalProbsResponse) -> tuple[np.ndarray, np.ndarray]:
    b, k = resp.batch, resp.num_candidates
    probs = np.array(resp.probs, dtype=np.float32).reshape(b, k)
    matched = np.array(resp.matched, dtype=np.int32).reshape(b, k)
    return probs, matched


def _topk_request(index: str, fp: str, context: Any, k: int) -> pb.TopKRequest:
    if isinstance(k, bool):
        raise ValueError(f"k must be an integer, got {k!r}")
    try:
        k = operator.index(k)
    except TypeError:
        raise ValueError(f"k must be an integer, got {k!r}") from None
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    if k > _MAX_K:
        raise ValueError(f"k = {k}: must be <= {_MAX_K} (TopKRequest.k is a uint32)")
    req = pb.TopKRequest(index=index, tokenizer_fingerprint=fp, k=k)
    req.context.extend(_engine.token_ids(context, "context", 1).tolist())
    return req


def _topk_result(resp: pb.TopKResponse) -> TopK:
    return TopK(np.array(resp.tokens, dtype=np.int32), np.array(resp.probs, dtype=np.float32),
                np.array(resp.counts, dtype=np.uint64), int(resp.matched))


def _info_result(resp: pb.GetInfoResponse) -> dict[str, Any]:
    """The same dict as NgramIndex.info()."""
    return info_dict(path=resp.path, order=resp.order, vocab_size=resp.vocab_size,
                     eos_id=None if resp.eos_id < 0 else resp.eos_id,
                     sizes={"file_bytes": resp.file_bytes, "ram_bytes": resp.ram_bytes}, mapped=resp.mapped,
                     ngrams=list(resp.ngram_counts), tokens=resp.total_tokens,
                     meta=json.loads(resp.meta_json) if resp.meta_json else {})


# Every call: method name -> (request serializer, response parser). PruneTree
# and ProposeTree go as bytes both ways: the engine's codec of each message
# writes the request whole and reads the trees (cpp/python/prune_tree_codec.h,
# propose_tree_codec.h, tree_codec.h).
_METHODS: dict[str, tuple[Callable[[Any], bytes] | None, Callable[[bytes], Any] | None]] = {
    "GetInfo": (pb.GetInfoRequest.SerializeToString, pb.GetInfoResponse.FromString),
    "ConditionalProbs": (pb.ConditionalProbsRequest.SerializeToString, pb.ConditionalProbsResponse.FromString),
    "TopK": (pb.TopKRequest.SerializeToString, pb.TopKResponse.FromString),
    "PruneTree": (None, None),
    "ProposeTree": (None, None),
}


class _ClientBase:
    """Configuration and the request/response logic of every method, shared by
    the sync and async clients: each public method builds its request here
    and hands it to ``_call`` (the only part that differs), with the parser
    of the response."""

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
        transport: str = "python",
        options: Sequence[tuple[str, Any]] = (),
    ) -> None:
        """targets: "host:port" or several (balanced round-robin).
        index: the index to query ("" = the host's default).
        tokenizer_fingerprint: sent with every query; a host whose index was
        built with another tokenizer answers FAILED_PRECONDITION.
        timeout: the deadline of every call, in seconds (per-call override):
        a number > 0 and finite, or None for none (beyond a century: none);
        anything else is a ValueError before any call, as NgramIndex's.
        root_certificates / private_key / certificate_chain: PEM bytes, text
        or paths; any of them (or tls=True) makes the channel TLS; the last
        two are the client certificate for mutual TLS.
        server_name: the name to check the server certificate against when
        it differs from the target's host.
        with_scores: also fetch node scores in prune results.
        transport: what carries ``prune_tree_bytes`` (dart_client's call),
        ``propose`` and ``propose_batch``: "python" (grpcio), "native" (the
        grpc++ client built beside the engine, ngram_service.native_client;
        ImportError where this install lacks it) or "auto" (native where
        present). Every other method goes over grpcio; AsyncNgramClient is
        grpcio only.
        """
        if transport not in ("python", "native", "auto"):
            raise ValueError(f"transport must be 'python', 'native' or 'auto', got {transport!r}")
        check_timeout(timeout)
        if isinstance(max_message_bytes, bool) or not isinstance(max_message_bytes, numbers.Integral) or not (
                max_message_bytes == -1 or 1 <= max_message_bytes <= MAX_MESSAGE_BYTES):
            raise ValueError(f"max_message_bytes = {max_message_bytes!r}: must be an integer in "
                             f"1..{MAX_MESSAGE_BYTES} (gRPC's limit), or -1 (no limit)")
        if (private_key is None) != (certificate_chain is None):
            raise ValueError("private_key and certificate_chain: give both (mutual TLS's client certificate) or "
                             "neither")
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
        self._server_name = server_name
        self._tls_material = (_pem(root_certificates), _pem(private_key), _pem(certificate_chain)) if use_tls else None
        self._transport_wanted = transport
        self.transport = "python"
        self._native: Any = None  # PruneTree's grpc++ channels
        self._native_propose: Any = None  # ProposeTree's
        self._turn = itertools.cycle(range(len(self.targets)))
        self._channels: list[Any] = []
        self._methods: list[dict[str, Any]] = []
        self._closed = False

    def _open(self, grpc_module: Any) -> None:
        """One channel per target (grpc or grpc.aio) and its method callables."""
        g = grpc_module
        self._channels = [
            g.secure_channel(t, self._credentials, options=self._options) if self._credentials
            else g.insecure_channel(t, options=self._options)
            for t in self.targets
        ]
        self._methods = [
            {name: c.unary_unary(f"/{SERVICE}/{name}", request_serializer=ser, response_deserializer=parse)
             for name, (ser, parse) in _METHODS.items()}
            for c in self._channels
        ]
        if self._transport_wanted != "python":
            self._native = self._open_native(self._transport_wanted == "native", "PruneTree")
            if self._native is not None:
                self._native_propose = self._open_native(True, "ProposeTree")
            self.transport = "native" if self._native is not None else "python"

    def _open_native(self, required: bool, method: str) -> Any:
        """The grpc++ channels of ngram_service.native_client for one method,
        or None where this install lacks it and ``required`` is false."""
        try:
            from ngram_service import native_client
        except ImportError:
            if required:
                raise
            return None
        return native_client.NativeChannels(self.targets, self._options, self._tls_material,
                                            native_client.method_path(method))

    def _method(self, name: str) -> Any:
        return self._methods[next(self._turn)][name]

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"{type(self).__name__}({', '.join(self.targets)}) is closed: make a new client")

    def _deadline(self, timeout: float | None) -> float | None:
        """The call's deadline in seconds (None: none); ValueError for a bad
        ``timeout`` or a closed client, before anything is sent."""
        self._check_open()
        return check_timeout(timeout) if timeout is not None else check_timeout(self.timeout)

    def _native_deadline(self, timeout: float | None) -> float:
        """_deadline for the grpc++ channels, which always take one."""
        seconds = self._deadline(timeout)
        return NEVER if seconds is None else seconds

    # Each returns (method name, request, parser of the response).
    def _info(self) -> tuple[str, Any, Callable[[Any], Any]]:
        return "GetInfo", pb.GetInfoRequest(index=self.index), _info_result

    def _conditional_probs(self, contexts: Any, candidates: Any) -> tuple[str, Any, Callable[[Any], Any]]:
        return ("ConditionalProbs", _probs_request(self.index, self.tokenizer_fingerprint, contexts, candidates),
                _probs_result)

    def _topk(self, context: Any, k: int) -> tuple[str, Any, Callable[[Any], Any]]:
        return "TopK", _topk_request(self.index, self.tokenizer_fingerprint, context, k), _topk_result

    def prune_tree_head(self, params: dict[str, Any]) -> bytes:
        """A serialized PruneTreeRequest without its inputs: the index, the
        fingerprint, ``params`` (NgramIndex.prune's keywords) and with_scores.
        Serialized PruneInputs (field 4) appended to it make the request
        (``_engine.LatticeBatch.request``)."""
        return _engine.prune_tree_request(self.index, self.tokenizer_fingerprint, self.with_scores, params)

    def _prune(self, requests: Any, params: dict[str, Any], parse: Callable[[Any], Any]
               ) -> tuple[str, Any, Callable[[Any], Any]]:
        request = _engine.prune_tree_request(self.index, self.tokenizer_fingerprint, self.with_scores, params,
                                             requests)
        return "PruneTree", request, parse

    def _prune_one(self, prefix: Any, topk_tokens: Any, topk_probs: Any,
                   params: dict[str, Any]) -> tuple[str, Any, Callable[[Any], Any]]:
        return self._prune([(prefix, topk_tokens, topk_probs)], params, lambda r: _trees(r, 1, "lattice")[0])

    def _prune_many(self, requests: Any, params: dict[str, Any]) -> tuple[str, Any, Callable[[Any], Any]]:
        return self._prune(requests, params, _engine.decode_trees)

    def propose_tree_request(self, contexts: Any, **params: Any) -> bytes:
        """The serialized ProposeTreeRequest that propose_batch sends for
        ``contexts`` (to log, replay or send with another gRPC client): the
        index, the fingerprint, ``params`` (NgramIndex.propose's keywords;
        TypeError for an unknown name, ValueError naming the field for a
        value of the wrong type; ranges are the host's to check), then each
        context's ids. A context that is not integer ids of rank 1:
        ValueError naming it."""
        return _engine.propose_tree_request(self.index, self.tokenizer_fingerprint, params, contexts)

    def _propose_one(self, context: Any, params: dict[str, Any]) -> tuple[str, Any, Callable[[Any], Any]]:
        request = _engine.propose_tree_request(self.index, self.tokenizer_fingerprint, params, [context])
        return "ProposeTree", request, lambda r: _trees(r, 1, "contexts", "ProposeTreeResponse")[0]

    def _propose_many(self, contexts: Any, params: dict[str, Any]) -> tuple[str, Any, Callable[[Any], Any]]:
        contexts = list(contexts)
        return "ProposeTree", self.propose_tree_request(contexts, **params), \
            lambda r: _trees(r, len(contexts), "contexts", "ProposeTreeResponse")


def _trees(response: bytes, n: int, sent: str, what: str = "PruneTreeResponse") -> list[tree.DraftTree]:
    """A response's n trees, decoded and encoded by the engine (depths, mask,
    retrieve rows); another count: ValueError."""
    trees = _engine.decode_trees(response, what, "lattices" if what == "PruneTreeResponse" else "contexts")
    if len(trees) != n:
        raise ValueError(f"{what}: {len(trees)} trees for {n} {sent}")
    return trees


class NgramClient(_ClientBase):
    """Synchronous client; thread-safe (share one per process)."""

    def __init__(self, targets: str | Sequence[str], **kwargs: Any) -> None:
        super().__init__(targets, **kwargs)
        self._open(grpc)

    def _call(self, call: tuple[str, Any, Callable[[Any], Any]], timeout: float | None) -> Any:
        name, req, parse = call
        if name == "ProposeTree" and self._native_propose is not None:
            return parse(self._native_propose.call(req, self._native_deadline(timeout)))
        return parse(self._method(name)(req, timeout=self._deadline(timeout)))

    def prune_tree_bytes(self, request: bytes, *, timeout: float | None = None) -> bytes:
        """One PruneTree call from a serialized request to the serialized
        response, over ``transport``; failures raise grpc.RpcError with the
        status code, as every method's do."""
        if self._native is not None:
            return self._native.call(request, self._native_deadline(timeout))
        return self._method("PruneTree")(request, timeout=self._deadline(timeout))

    def close(self) -> None:
        """Closes the channels; every later call raises ValueError (closing again does nothing)."""
        self._closed = True
        for c in self._channels:
            c.close()
        if self._native is not None:
            self._native.close()
        if self._native_propose is not None:
            self._native_propose.close()

    def __enter__(self) -> "NgramClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def wait_ready(self, timeout: float = 10.0) -> None:
        """Blocks until every channel is connected (grpc.FutureTimeoutError,
        naming the target, otherwise)."""
        self._check_open()
        seconds = check_timeout(timeout)
        for t, c in zip(self.targets, self._channels):
            try:
                grpc.channel_ready_future(c).result(timeout=seconds)
            except grpc.FutureTimeoutError:
                raise grpc.FutureTimeoutError(f"wait_ready: {t} not connected within {timeout} s") from None

    def info(self, *, timeout: float | None = None) -> dict[str, Any]:
        """Header, metadata and sizes of the index (the same dict as NgramIndex.info())."""
        return self._call(self._info(), timeout)

    def conditional_probs(self, contexts: Any, candidates: Any, *, timeout: float | None = None
                          ) -> tuple[np.ndarray, np.ndarray]:
        """(probs float32 [B, K], matched int32 [B, K]); see NgramIndex.conditional_probs."""
        return self._call(self._conditional_probs(contexts, candidates), timeout)

    def topk(self, context: Any, k: int, *, timeout: float | None = None) -> TopK:
        """The k most frequent continuations; see NgramIndex.topk."""
        return self._call(self._topk(context, k), timeout)

    def prune(self, prefix: Any, topk_tokens: Any, topk_probs: Any, *, timeout: float | None = None,
              beam_width: int | None = None, max_nodes: int | None = None, ngram_weight: float | None = None,
              level_weights: Any = None, logit_weights: Any = None, eos_token_id: int | None = None,
              ngram_on_first_level: bool | None = None) -> tree.DraftTree:
        """One draft lattice -> its DraftTree; see NgramIndex.prune (same
        parameters; None, the default of each: the host's default, the
        engine's table)."""
        return self._call(self._prune_one(prefix, topk_tokens, topk_probs, tree.prune_keywords(locals())), timeout)

    def prune_batch(self, requests: Any, *, timeout: float | None = None, threads: int | None = None,
                    beam_width: int | None = None, max_nodes: int | None = None, ngram_weight: float | None = None,
                    level_weights: Any = None, logit_weights: Any = None, eos_token_id: int | None = None,
                    ngram_on_first_level: bool | None = None) -> list[tree.DraftTree]:
        """All sequences of a decoding step in one call: requests are
        (prefix, topk_tokens, topk_probs) tuples or dicts with those keys;
        see NgramIndex.prune_batch (None: the host's default). ``threads``
        is accepted for compatibility (the host decides)."""
        return self._call(self._prune_many(requests, tree.prune_keywords(locals())), timeout)

    def propose(self, context: Any, *, timeout: float | None = None, max_nodes: int | None = None,
                max_depth: int | None = None, max_branch: int | None = None, min_prob: float | None = None,
                corpus: bool | None = None, lookup: bool | None = None, lookup_weight: float | None = None,
                lookup_min_match: int | None = None, discount: float | None = None, lookup_decay: float | None = None,
                lookup_prior: float | None = None, order_weight: float | None = None,
                root_branch: int | None = None) -> tree.DraftTree:
        """A draft tree of the corpus' and the context's likeliest
        continuations of ``context`` (int [N], the whole sequence so far);
        see NgramIndex.propose (same parameters and tree; None, the default
        of each: the host's default, the engine's table; scores are path
        probabilities). Bad values: grpc.RpcError INVALID_ARGUMENT with the
        engine's message."""
        return self._call(self._propose_one(context, proposals.propose_keywords(locals())), timeout)

    def propose_batch(self, contexts: Any, *, timeout: float | None = None, threads: int | None = None,
                      max_nodes: int | None = None, max_depth: int | None = None, max_branch: int | None = None,
                      min_prob: float | None = None, corpus: bool | None = None, lookup: bool | None = None,
                      lookup_weight: float | None = None, lookup_min_match: int | None = None,
                      discount: float | None = None, lookup_decay: float | None = None,
                      lookup_prior: float | None = None, order_weight: float | None = None,
                      root_branch: int | None = None) -> list[tree.DraftTree]:
        """propose for many contexts in one call, one parameter set; see
        NgramIndex.propose_batch (None: the host's default; an invalid
        context is INVALID_ARGUMENT prefixed ``contexts[i]:``). ``threads``
        is accepted for compatibility (the host decides)."""
        return self._call(self._propose_many(contexts, proposals.propose_keywords(locals())), timeout)


class AsyncNgramClient(_ClientBase):
    """asyncio client (grpc.aio): the same methods as NgramClient, awaited."""

    def __init__(self, targets: str | Sequence[str], **kwargs: Any) -> None:
        if kwargs.get("transport", "python") != "python":
            raise ValueError("AsyncNgramClient: only transport='python' (the native client is synchronous)")
        super().__init__(targets, **kwargs)
        self._open(grpc.aio)

    async def _call(self, call: tuple[str, Any, Callable[[Any], Any]], timeout: float | None) -> Any:
        name, req, parse = call
        return parse(await self._method(name)(req, timeout=self._deadline(timeout)))

    async def close(self) -> None:
        """Closes the channels; every later call raises ValueError (closing again does nothing)."""
        self._closed = True
        for c in self._channels:
            await c.close()

    async def __aenter__(self) -> "AsyncNgramClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def wait_ready(self, timeout: float = 10.0) -> None:
        """Waits until every channel is connected (asyncio.TimeoutError,
        naming the target, otherwise)."""
        import asyncio

        self._check_open()
        seconds = check_timeout(timeout)
        for t, c in zip(self.targets, self._channels):
            try:
                await asyncio.wait_for(c.channel_ready(), seconds)
            except asyncio.TimeoutError:
                raise asyncio.TimeoutError(f"wait_ready: {t} not connected within {timeout} s") from None

    async def info(self, *, timeout: float | None = None) -> dict[str, Any]:
        return await self._call(self._info(), timeout)

    async def conditional_probs(self, contexts: Any, candidates: Any, *, timeout: float | None = None
                                ) -> tuple[np.ndarray, np.ndarray]:
        return await self._call(self._conditional_probs(contexts, candidates), timeout)

    async def topk(self, context: Any, k: int, *, timeout: float | None = None) -> TopK:
        return await self._call(self._topk(context, k), timeout)

    async def prune(self, prefix: Any, topk_tokens: Any, topk_probs: Any, *, timeout: float | None = None,
                    beam_width: int | None = None, max_nodes: int | None = None, ngram_weight: float | None = None,
                    level_weights: Any = None, logit_weights: Any = None, eos_token_id: int | None = None,
                    ngram_on_first_level: bool | None = None) -> tree.DraftTree:
        params = tree.prune_keywords(locals())
        return await self._call(self._prune_one(prefix, topk_tokens, topk_probs, params), timeout)

    async def prune_batch(self, requests: Any, *, timeout: float | None = None, threads: int | None = None,
                          beam_width: int | None = None, max_nodes: int | None = None,
                          ngram_weight: float | None = None, level_weights: Any = None, logit_weights: Any = None,
                          eos_token_id: int | None = None,
                          ngram_on_first_level: bool | None = None) -> list[tree.DraftTree]:
        return await self._call(self._prune_many(requests, tree.prune_keywords(locals())), timeout)

    async def propose(self, context: Any, *, timeout: float | None = None, max_nodes: int | None = None,
                      max_depth: int | None = None, max_branch: int | None = None, min_prob: float | None = None,
                      corpus: bool | None = None, lookup: bool | None = None, lookup_weight: float | None = None,
                      lookup_min_match: int | None = None, discount: float | None = None,
                      lookup_decay: float | None = None, lookup_prior: float | None = None,
                      order_weight: float | None = None, root_branch: int | None = None) -> tree.DraftTree:
        return await self._call(self._propose_one(context, proposals.propose_keywords(locals())), timeout)

    async def propose_batch(self, contexts: Any, *, timeout: float | None = None, threads: int | None = None,
                            max_nodes: int | None = None, max_depth: int | None = None, max_branch: int | None = None,
                            min_prob: float | None = None, corpus: bool | None = None, lookup: bool | None = None,
                            lookup_weight: float | None = None, lookup_min_match: int | None = None,
                            discount: float | None = None, lookup_decay: float | None = None,
                            lookup_prior: float | None = None, order_weight: float | None = None,
                            root_branch: int | None = None) -> list[tree.DraftTree]:
        return await self._call(self._propose_many(contexts, proposals.propose_keywords(locals())), timeout)
