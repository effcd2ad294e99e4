"""`ngram-query`: ask a trie host from the shell; JSON out.

    ngram-query --target 127.0.0.1:50051 info
    ngram-query -t HOST:PORT probs --context 785,374 --candidates 1,2,3
    ngram-query -t HOST:PORT topk --context 785,374 -k 10
    ngram-query -t HOST:PORT prune --npz lattice.npz       # prefix, topk_tokens, topk_probs

A failed call prints ``{"error": CODE, "message": ...}`` on stderr and exits 1.
"""
from __future__ import annotations

import functools
import json
import sys
from typing import Any, Callable

import click
import grpc
import numpy as np

from ngram_service.client import DEFAULT_TIMEOUT, NgramClient
from ngram_service.tree import DEFAULTS


def _ids(text: str) -> list[int]:
    try:
        return [int(x) for x in text.replace(" ", "").split(",") if x != ""]
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a comma-separated list of token ids") from None


def _rows(texts: tuple[str, ...], what: str) -> list[list[int]]:
    rows = [_ids(t) for t in texts]
    if len({len(r) for r in rows}) > 1:
        raise click.BadParameter(f"every {what} row needs the same number of ids")
    return rows


def _emit(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, sort_keys=True))


def _rpc(f: Callable[..., None]) -> Callable[..., None]:
    """A failed call: {"error": CODE, "message": ...} on stderr, exit status 1."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            f(*args, **kwargs)
        except grpc.RpcError as e:
            code = e.code().name if hasattr(e, "code") else "UNKNOWN"
            details = e.details() if hasattr(e, "details") else str(e)
            click.echo(json.dumps({"error": code, "message": details}), err=True)
            sys.exit(1)

    return wrapper


def _tree_json(t: Any) -> dict[str, Any]:
    return {
        "tokens": t.tokens.tolist(),
        "parents": t.parents.tolist(),
        "depths": t.depths.tolist(),
        "scores": [float(x) for x in t.scores],
        "retrieve_indices": t.retrieve_indices.tolist(),
    }


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--target", "-t", "targets", multiple=True, default=["127.0.0.1:50051"], show_default=True,
              help="host:port of a trie host (repeat to balance over several).")
@click.option("--index", default="", help="Index name on the host (default: the host's first).")
@click.option("--fingerprint", default=None, help="Tokenizer fingerprint to check against the index.")
@click.option("--timeout", type=float, default=DEFAULT_TIMEOUT, show_default=True, help="Deadline per call (s).")
@click.option("--ca", type=click.Path(exists=True, dir_okay=False), help="CA certificate (PEM): use TLS.")
@click.option("--cert", type=click.Path(exists=True, dir_okay=False), help="Client certificate (PEM, mTLS).")
@click.option("--key", type=click.Path(exists=True, dir_okay=False), help="Client private key (PEM, mTLS).")
@click.option("--server-name", default=None, help="Name to verify the server certificate against.")
@click.pass_context
def main(ctx: click.Context, targets: tuple[str, ...], index: str, fingerprint: str | None, timeout: float,
         ca: str | None, cert: str | None, key: str | None, server_name: str | None) -> None:
    """Query an ngram-serve host (gRPC); every command prints JSON."""
    ctx.obj = NgramClient(list(targets), index=index, tokenizer_fingerprint=fingerprint, timeout=timeout,
                          root_certificates=ca, certificate_chain=cert, private_key=key, server_name=server_name)
    ctx.call_on_close(ctx.obj.close)


@main.command()
@click.pass_obj
@_rpc
def info(client: NgramClient) -> None:
    """Order, vocabulary, EOS, tokenizer, corpus manifest, n-gram counts."""
    _emit(client.info())


@main.command()
@click.option("--context", "contexts", multiple=True, required=True,
              help="Context token ids, comma-separated (repeat for a batch).")
@click.option("--candidates", "candidates", multiple=True, required=True,
              help="Candidate token ids, comma-separated (one per --context).")
@click.pass_obj
@_rpc
def probs(client: NgramClient, contexts: tuple[str, ...], candidates: tuple[str, ...]) -> None:
    """Conditional probabilities of candidates after contexts."""
    c = _rows(contexts, "--context")
    w = _rows(candidates, "--candidates")
    if len(c) != len(w):
        raise click.BadParameter("give one --candidates per --context")
    p, m = client.conditional_probs(np.array(c, dtype=np.int64), np.array(w, dtype=np.int64))
    _emit({"probs": [[float(x) for x in row] for row in p], "matched": m.tolist()})


@main.command()
@click.option("--context", required=True, help="Context token ids, comma-separated.")
@click.option("-k", "k", type=int, default=10, show_default=True, help="How many continuations.")
@click.pass_obj
@_rpc
def topk(client: NgramClient, context: str, k: int) -> None:
    """The k most frequent continuations of a context."""
    r = client.topk(np.array(_ids(context), dtype=np.int64), k)
    _emit({"tokens": r.tokens.tolist(), "probs": [float(x) for x in r.probs], "counts": r.counts.tolist(),
           "matched": r.matched})


@main.command()
@click.option("--npz", type=click.Path(exists=True, dir_okay=False), required=True,
              help="Arrays prefix [P], topk_tokens [D, K], topk_probs [D, K].")
@click.option("--beam-width", type=int, default=None,
              help=f"Beam width (default: the engine's, {DEFAULTS['beam_width']}).")
@click.option("--max-nodes", type=int, default=None,
              help=f"Nodes kept besides the root (default {DEFAULTS['max_nodes']}).")
@click.option("--ngram-weight", type=float, default=None,
              help=f"Weight of the n-gram term (default {DEFAULTS['ngram_weight']}).")
@click.pass_obj
@_rpc
def prune(client: NgramClient, npz: str, beam_width: int | None, max_nodes: int | None,
          ngram_weight: float | None) -> None:
    """DART tree pruning of one draft lattice."""
    with np.load(npz) as z:
        prefix, tokens, probs_ = z["prefix"], z["topk_tokens"], z["topk_probs"]
    t = client.prune(prefix, tokens, probs_, beam_width=beam_width, max_nodes=max_nodes, ngram_weight=ngram_weight)
    _emit(_tree_json(t))


if __name__ == "__main__":
    main()
