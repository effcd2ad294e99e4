"""The GPU worker's link to a trie host: one NgramClient, one attempt per
call, the fallback rule the remote pruner and proposer share (a back-off
after a failure), their stats, and the tokenizer fingerprint check.
"""
from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ngram_service.arg_checks import is_real
from ngram_service.fingerprint import tokenizer_json_fingerprint, trie_fingerprint

__all__ = ["HostLink", "PrunerStats", "TokenizerMismatchError", "check_fingerprint", "model_fingerprint"]

log = logging.getLogger(__name__)


class TokenizerMismatchError(ValueError):
    """The trie was built with another tokenizer than the model's."""


@dataclass
class PrunerStats:
    calls: int = 0
    remote_ok: int = 0
    fallbacks: int = 0  # calls pruned locally without the n-gram
    errors: dict[str, int] = field(default_factory=dict)  # failed RPCs by gRPC status code
    skipped_backoff: int = 0  # fallbacks without an RPC (waiting out a back-off)
    last_error: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"calls": self.calls, "remote_ok": self.remote_ok, "fallbacks": self.fallbacks,
                "errors": dict(self.errors), "skipped_backoff": self.skipped_backoff, "last_error": self.last_error}


def model_fingerprint(tokenizer: Any) -> str:
    """The tokenizer fingerprint the trie header carries, for the model's
    tokenizer.json (the file, or a folder holding one). For a trie built
    from a tiktoken rank file, pass ``tokenizer_fingerprint=`` (``ngram-info``
    prints it)."""
    return tokenizer_json_fingerprint(tokenizer)


def check_fingerprint(info: dict[str, Any], expected: str | None, where: str) -> None:
    """TokenizerMismatchError when the trie (``info``, NgramIndex.info()'s
    or the host's) records another fingerprint than ``expected``."""
    if not expected:
        return
    have = trie_fingerprint(info)
    if not have:
        log.warning("%s: the trie records no tokenizer fingerprint; cannot check it against the model's", where)
        return
    if have != expected:
        raise TokenizerMismatchError(
            f"{where}: the trie was built with tokenizer {have[:16]}..., the model's is {expected[:16]}...: "
            "draft trees would be scored with the wrong n-grams")


class HostLink(contextlib.AbstractContextManager):
    """A trie host reached through ``NgramClient``, one attempt per call, with
    the fallback rule RemotePruner and RemoteProposer share: on a timeout or
    any RPC error the call is answered here without the host (the owner's
    fallback), the event is counted in ``stats`` and the host is left alone
    for a back-off (backoff_initial, doubling up to backoff_max seconds;
    reset by a success) before it is tried again. A tokenizer fingerprint
    mismatch raises TokenizerMismatchError at construction (the host
    answered then), or, found later, turns the host off for good
    (``stats.last_error`` says why).

    The owner's constructor takes its host's keywords (KEYWORDS, with their
    defaults) out of its own with ``take_keywords``, sets ``stats``
    (PrunerStats) and calls ``_connect``; it may override ``_host_info``
    (called with the host's info at each contact)."""

    #: A remote pruner's or proposer's keywords for its host, and their defaults:
    #: deadline (seconds per call), the model's tokenizer (spec) or its
    #: fingerprint, the host's index, the first contact's timeout, the
    #: back-off, the transport ("auto", "native" or "python") and other
    #: NgramClient keywords (client_options).
    KEYWORDS: dict[str, Any] = {
        "deadline": 0.005, "tokenizer": None, "tokenizer_fingerprint": None, "index": "", "connect_timeout": 2.0,
        "backoff_initial": 0.05, "backoff_max": 5.0, "transport": "auto", "client_options": None,
    }

    #: What a call does without the host, for the log lines.
    without_host = "pruning locally without the n-gram"
    stats: PrunerStats

    @classmethod
    def take_keywords(cls, kwargs: dict[str, Any]) -> dict[str, Any]:
        """The host's keywords out of ``kwargs`` (removed there), defaults filled in."""
        return {k: kwargs.pop(k, default) for k, default in cls.KEYWORDS.items()}

    def _connect(self, targets: str | Sequence[str], *, deadline: float, tokenizer: Any,
                 tokenizer_fingerprint: str | None, index: str, connect_timeout: float, backoff_initial: float,
                 backoff_max: float, transport: str, client_options: dict[str, Any] | None) -> None:
        from ngram_service.client import NgramClient, check_timeout

        # Checked here, by their own names: a NaN deadline or back-off meant a
        # host never asked again, a zero one a fallback at every call.
        for name, seconds in (("deadline", deadline), ("connect_timeout", connect_timeout)):
            check_timeout(seconds, name, optional=False)
        for name, seconds in (("backoff_initial", backoff_initial), ("backoff_max", backoff_max)):
            if not is_real(seconds) or not 0 <= seconds < math.inf:
                raise ValueError(f"{name} = {seconds!r}: must be a number of seconds >= 0 and finite")
        self.deadline = float(deadline)
        self.connect_timeout = float(connect_timeout)
        self.backoff_initial = float(backoff_initial)
        self.backoff_max = float(backoff_max)
        fingerprint = tokenizer_fingerprint or (model_fingerprint(tokenizer) if tokenizer is not None else None)
        self.fingerprint = fingerprint
        # One attempt: the local fallback is the retry.
        opts = {"retry_attempts": 1, "transport": transport, **(client_options or {})}
        channel_opts = list(opts.pop("options", ()))
        # Reconnect soon after the host comes back (gRPC's default waits 1 s, then up to 120 s).
        channel_opts += [("grpc.initial_reconnect_backoff_ms", 100), ("grpc.min_reconnect_backoff_ms", 100),
                         ("grpc.max_reconnect_backoff_ms", int(max(1.0, backoff_max) * 1000))]
        self.client = NgramClient(targets, index=index, tokenizer_fingerprint=fingerprint, timeout=self.deadline,
                                  with_scores=False, options=channel_opts, **opts)
        self.info: dict[str, Any] | None = None
        self._backoff = 0.0
        self._retry_at = 0.0
        self._disabled = ""
        try:
            self._contact(self.connect_timeout)
        except TokenizerMismatchError:
            self.client.close()
            raise
        except Exception as e:  # noqa: BLE001 (host down at start: decode without it for now)
            self._failed(e)

    @property
    def transport(self) -> str:
        """The tree call's transport: "native" or "python"."""
        return self.client.transport

    @property
    def remote_available(self) -> bool:
        return self.info is not None and not self._disabled

    def close(self) -> None:
        """Closes the client's channels; the owner falls back from then on."""
        self.client.close()

    def __exit__(self, *exc: object) -> None:  # a context manager: AbstractContextManager's __enter__
        self.close()

    def _host_info(self, info: dict[str, Any]) -> None:
        """What the owner reads from the host's info (order, vocabulary, EOS)."""

    def _contact(self, timeout: float) -> None:
        info = self.client.info(timeout=timeout)
        check_fingerprint(info, self.fingerprint, f"trie host {self.client.targets}")
        self.info = info
        self._host_info(info)

    def _failed(self, e: BaseException) -> None:
        code = _status_name(e)
        self.stats.errors[code] = self.stats.errors.get(code, 0) + 1
        self.stats.last_error = f"{code}: {_details(e)}"
        was_up = self._backoff == 0
        self._backoff = self.backoff_initial if was_up else min(self.backoff_max, 2 * self._backoff)
        self._retry_at = time.monotonic() + self._backoff
        # One warning per outage; the retries that fail again are debug lines.
        (log.warning if was_up else log.debug)(
            "trie host %s: %s; %s, retrying in %.3f s",
            self.client.targets, self.stats.last_error, self.without_host, self._backoff)

    def _through_host(self, n: int, remote: Callable[[], Any], fallback: Callable[[], Any], tm: Any) -> Any:
        """remote() (the host's answer to a call of n trees) unless the host
        is off or backing off, else, or when it fails, fallback(). Sets
        tm.transport (the round trip: the time in remote() less tm.search),
        tm.remote, and adds the fallback's time to tm.search."""
        if not self._disabled and time.monotonic() >= self._retry_at:
            t0 = time.perf_counter()
            try:
                if self.info is None:  # first contact after a failed start: order, vocab, fingerprint
                    self._contact(max(self.deadline, 0.02))
                trees = remote()
                tm.transport = time.perf_counter() - t0 - tm.search
                tm.remote = True
                if self._backoff:
                    log.warning("trie host %s: back (after %s)", self.client.targets, self.stats.last_error)
                self._backoff = 0.0
                return trees
            except TokenizerMismatchError as e:
                self._disabled = str(e)
                self.stats.last_error = self._disabled
                log.error("%s; the host is off for this client", e)
            except Exception as e:  # noqa: BLE001 (any failure: fall back, never stop decoding)
                self._failed(e)
            tm.transport = time.perf_counter() - t0 - tm.search
        else:
            self.stats.skipped_backoff += n
        self.stats.fallbacks += n
        t1 = time.perf_counter()
        trees = fallback()
        tm.search += time.perf_counter() - t1
        return trees


def _status_name(e: BaseException) -> str:
    code = getattr(e, "code", None)
    if callable(code):
        try:
            c = code()
            return getattr(c, "name", str(c))
        except Exception:  # noqa: BLE001
            pass
    return type(e).__name__


def _details(e: BaseException) -> str:
    d = getattr(e, "details", None)
    if callable(d):
        try:
            return str(d())
        except Exception:  # noqa: BLE001
            pass
    return str(e)
