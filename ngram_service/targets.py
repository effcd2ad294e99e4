"""A trie host's address: which forms the clients take, and what is wrong
with one that is not among them (one definition for the command-line tools'
--target and NgramClient's targets). No grpc import: --help stays fast."""
from __future__ import annotations

import re

__all__ = ["TARGET_FORMS", "target_problem"]

_PORT = re.compile(r"[0-9]+")
#: gRPC's target schemes that carry no HOST:PORT: a Unix domain socket (unix:PATH, unix:///PATH, unix-abstract:NAME).
_SOCKET_SCHEMES = ("unix:", "unix-abstract:")
TARGET_FORMS = "HOST:PORT, [IPv6]:PORT or dns:///NAME:PORT, the port in 1..65535"


def _host_port_problem(text: str) -> str | None:
    """What is wrong with HOST:PORT or [IPv6]:PORT, or None."""
    if text.startswith("["):
        host, close, port = text[1:].partition("]")
        if not close or not port.startswith(":"):
            return "an IPv6 address in brackets needs its port after them"
        port = port[1:]
    else:
        host, sep, port = text.rpartition(":")
        if not sep:
            return "no port (gRPC would dial 443)"
        if "/" in host:
            return "not HOST:PORT (no scheme or path)"
        if ":" in host:
            return "an IPv6 address goes in brackets"
    if not host:
        return "no host"
    if not _PORT.fullmatch(port):
        return f"the port {port!r} is not a number" if port else "no port (gRPC would dial 443)"
    if not 1 <= int(port) <= 65535:
        return f"the port {port} is not in 1..65535"
    return None


def target_problem(target: str) -> str | None:
    """What is wrong with a trie host's address, or None for the forms the
    client takes (ngram_service.client.channel_targets): HOST:PORT,
    [IPv6]:PORT, dns:///NAME:PORT or dns://DNS-SERVER:PORT/NAME:PORT,
    gRPC's ipv4:/ipv6: address lists, a Unix socket (unix:PATH)."""
    if not target.strip():
        return "empty"
    if target.startswith(_SOCKET_SCHEMES):
        return None if target.partition(":")[2].strip("/") else "no socket path (unix:PATH)"
    if target.startswith("dns:"):
        rest = target[len("dns:"):]
        if rest.startswith("//") and not rest.startswith("///"):  # dns://DNS-SERVER[:PORT]/NAME:PORT
            server, _, rest = rest[2:].partition("/")
            why = _host_port_problem(server if server.rpartition(":")[2].isdigit() else f"{server}:53")
            if why:
                return f"the DNS server {server!r}: {why}"
        why = _host_port_problem(rest.lstrip("/"))
        return f"the name {rest.lstrip('/')!r}: {why}" if why else None
    scheme = re.match(r"([a-zA-Z][a-zA-Z0-9+.-]*):/", target)
    if scheme:  # xds:///svc, http://h:1 (HOST:PORT has no slash after its colon)
        return f"the scheme {scheme.group(1)}: is not one the client takes"
    if target.startswith(("ipv4:", "ipv6:")):
        for address in target[len("ipv4:"):].split(","):
            why = _host_port_problem(address)
            if why:
                return f"{address!r}: {why}"
        return None
    return _host_port_problem(target)
