"""`ngram-query`: ask a trie host, or a local trie file, from the shell; JSON out.

    ngram-query info                                        # the host on 127.0.0.1:50051
    ngram-query --target HOST:PORT info
    ngram-query --trie corpus3.ngt info                     # a local trie file, in process
    ngram-query --target HOST:PORT probs --context 785,374 --candidates 1,2,3
    ngram-query --trie corpus3.ngt probs --context 785,374 --candidates 1,2 --context 9 --candidates 4,5,6
    ngram-query --trie corpus3.ngt --tokenizer tokenizer.json topk --context "The quick brown"
    ngram-query --target HOST:PORT prune --npz lattice.npz # prefix, topk_tokens, topk_probs
    ngram-query --trie corpus3.ngt --tokenizer tokenizer.json propose --context "The quick brown"

The same commands print the same JSON whether they ask a host (NgramClient)
or a local file (NgramIndex); ``propose`` prints its trees as indented text
(each node's path probability, token and text) unless given ``--json``. With ``--tokenizer``, ``--context`` and
``--candidates`` are text, encoded without special tokens (every token of
the ``--candidates`` text is one candidate), and the output adds the ids and
the text of each token. A failed call prints ``{"error": CODE, "message":
...}`` on stderr and exits 1; a usage error (a bad option, or an input file
that cannot be read: no call is made) exits 2.
"""
from __future__ import annotations

import functools
import json
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import grpc
import numpy as np

from ngram_service.cli_options import (CONTEXT_SETTINGS, HOST_OPTIONS, MAX_DEADLINE_MS, FiniteFloatRange, IntRange,
                                       TargetType, ToolGroup, comma_items, deprecated_option, given_options,
                                       host_options, json_option, param_option, tls_client_options)
from ngram_service.client import DEFAULT_TIMEOUT, NgramClient
from ngram_service.fingerprint import tokenizer_json_fingerprint, trie_fingerprint
from ngram_service.index import NgramIndex, TrieFormatError
from ngram_service.params import PROPOSE_PARAMS, PRUNE_PARAMS

# ngram-serve's default --port (cpp/server/server_config.h, kDefaultPort):
# with no --target, ngram-query asks a host started without --port on this machine.
DEFAULT_TARGET = "127.0.0.1:50051"
# TopKRequest.k is a uint32 (proto/ngram/v1): the largest k a host can be asked for.
MAX_K = 2**32 - 1
# Token ids travel as int64 (numpy, the engine, the wire): one beyond cannot even be sent.
INT64 = range(-2**63, 2**63)


class QueryError(Exception):
    """A refused query, reported as {"error": code, "message": ...} like a host's status."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Session:
    """What every command asks: a host or a local trie, and how to read and check its input."""

    index: NgramIndex | NgramClient
    where: str  # names the trie in messages: "trie FILE" or "index 'NAME' on HOST:PORT"
    local: bool
    fingerprint: str | None  # --fingerprint
    tokenizer: Any = None  # tokenizers.Tokenizer, from --tokenizer
    tokenizer_fingerprint: str | None = None

    def check_fingerprint(self, info: dict[str, Any] | None = None) -> None:
        """Refuses a trie built with another tokenizer than --fingerprint
        (or --tokenizer) names. A host checks --fingerprint itself on every
        query but GetInfo, so over gRPC only ``info`` is checked here."""
        if self.fingerprint:
            expected, what = self.fingerprint, "--fingerprint"
            if not self.local and info is None:
                return
        elif self.tokenizer_fingerprint:
            expected, what = self.tokenizer_fingerprint, "--tokenizer"
        else:
            return
        info = self.index.info() if info is None else info
        have = trie_fingerprint(info)
        if not have:
            if what == "--tokenizer":  # text can still be encoded; the ids are unchecked
                click.echo(f"ngram-query: {self.where} records no tokenizer fingerprint; "
                           "the --tokenizer is not checked against it", err=True)
                return
            raise QueryError("FAILED_PRECONDITION", f"tokenizer_fingerprint: {self.where} records no tokenizer "
                                                    f"fingerprint to check {what} against")
        if have != expected:
            raise QueryError("FAILED_PRECONDITION", f"tokenizer_fingerprint: {self.where} was built with tokenizer "
                                                    f"{have}; {what} gives {expected}")

    def ids(self, text: str, option: str) -> list[int]:
        """Token ids of an option's value: comma-separated ids, or text with --tokenizer."""
        if self.tokenizer is not None:
            return list(self.tokenizer.encode(text, add_special_tokens=False).ids)
        if not text.strip():
            return []  # an empty context: the unigram continuations
        try:
            ids = [int(x) for x in comma_items(text, param_hint=option)]
        except ValueError:
            raise click.BadParameter(f"{text!r} is not a comma-separated list of token ids (give --tokenizer "
                                     "to pass text)", param_hint=option) from None
        for i, t in enumerate(ids):
            if t not in INT64:  # refused here as the engine refuses an id outside its vocabulary
                raise click.BadParameter(f"{option[2:]}[{i}] = {t} is not a token id: must be in "
                                         f"[0, {self.vocab_limit()})", param_hint=option)
        return ids

    def vocab_limit(self) -> str:
        """The vocabulary size of a local trie (a host's is not asked for: a usage error makes no call)."""
        return str(self.index.vocab_size) if isinstance(self.index, NgramIndex) else "the index's vocabulary size"

    def texts(self, ids: Any) -> dict[str, Any]:
        """{"texts": the text of each token} with --tokenizer, else {}."""
        if self.tokenizer is None:
            return {}
        return {"texts": [self.tokenizer.decode([int(i)], skip_special_tokens=False) for i in ids]}


def load_tokenizer(spec: str) -> tuple[Any, str]:
    """A tokenizer.json (the file, or a folder holding one): the tokenizer and its fingerprint."""
    try:
        fingerprint = tokenizer_json_fingerprint(spec)  # also says what is wrong with the path
    except (OSError, ValueError) as e:
        raise click.BadParameter(str(e), param_hint="--tokenizer") from None
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise click.BadParameter("needs the tokenizers package (pip install tokenizers)",
                                 param_hint="--tokenizer") from None
    path = Path(spec).expanduser()
    path = path / "tokenizer.json" if path.is_dir() else path
    try:
        return Tokenizer.from_file(str(path)), fingerprint
    except Exception as e:  # noqa: BLE001 (tokenizers raises a bare Exception for a file it cannot read)
        raise click.BadParameter(f"{path}: not a tokenizer.json the tokenizers package reads ({e})",
                                 param_hint="--tokenizer") from None


def _emit(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, sort_keys=True))


def _reported(f: Callable[..., None]) -> Callable[..., None]:
    """A refused query: {"error": CODE, "message": ...} on stderr, exit status 1.
    CODE is the host's status code, or for a local trie INVALID_ARGUMENT (the
    engine's ValueError, naming the field) or FAILED_PRECONDITION."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            f(*args, **kwargs)
        except grpc.RpcError as e:
            code = e.code().name if hasattr(e, "code") else "UNKNOWN"
            details = e.details() if hasattr(e, "details") else str(e)
            _fail(code, details)
        except QueryError as e:
            _fail(e.code, str(e))
        except ValueError as e:
            _fail("INVALID_ARGUMENT", str(e))

    return wrapper


def _fail(code: str, message: str) -> None:
    click.echo(json.dumps({"error": code, "message": message}), err=True)
    sys.exit(1)


def _tree_json(t: Any) -> dict[str, Any]:
    return {
        "tokens": t.tokens.tolist(),
        "parents": t.parents.tolist(),
        "depths": t.depths.tolist(),
        "scores": [float(x) for x in t.scores],
        "retrieve_indices": t.retrieve_indices.tolist(),
    }


@click.group("ngram-query", cls=ToolGroup, context_settings=CONTEXT_SETTINGS)
@host_options(default_target=DEFAULT_TARGET, deadline_ms=1000 * DEFAULT_TIMEOUT,
              deadline_help="Deadline of each call to the host.")
@deprecated_option("-t", new="--target", param="targets", multiple=True, type=TargetType())
@deprecated_option("--timeout", new="--deadline-ms", param="deadline_ms",
                   type=FiniteFloatRange(min=0, min_open=True, max=MAX_DEADLINE_MS / 1000),
                   convert=lambda seconds: 1000 * seconds, note=" (milliseconds; --timeout was in seconds)")
@click.option("--trie", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Query this local trie file in process instead of a host (same commands, same output).")
@click.option("--verify", is_flag=True,
              help="With --trie: check every section's CRC-32C before answering (reads the whole file). "
                   "A host checks its tries when started with --verify.")
@click.option("--tokenizer", default=None,
              help="tokenizer.json (or a folder holding one): --context and --candidates are then text; "
                   "the trie's tokenizer fingerprint must match it.")
@click.option("--fingerprint", default=None,
              help="Tokenizer fingerprint the index must record (every command, info included, fails "
                   "with FAILED_PRECONDITION otherwise).")
@click.pass_context
def main(ctx: click.Context, targets: tuple[str, ...], index: str, deadline_ms: float, ca: str | None,
         cert: str | None, key: str | None, server_name: str | None, trie: str | None, verify: bool,
         tokenizer: str | None, fingerprint: str | None) -> None:
    """Query an ngram-serve host (gRPC), or a local trie file with --trie.
    Every command prints JSON but propose, which prints its trees as
    indented text unless given --json."""
    if verify and trie is None:
        raise click.UsageError("--verify checks a local --trie file; a host checks its tries when started "
                               "with ngram-serve --verify")
    tok, tok_fp = load_tokenizer(tokenizer) if tokenizer else (None, None)
    if trie is not None:
        given = given_options(ctx, list(HOST_OPTIONS))
        if given:
            raise click.UsageError(f"--trie reads a local file; options for a host given: {', '.join(given)}")
        try:
            local = NgramIndex.open(trie, verify=verify)
        except (TrieFormatError, OSError) as e:
            raise click.BadParameter(str(e), param_hint="--trie") from None
        ctx.obj = Session(local, f"trie {trie}", True, fingerprint, tok, tok_fp)
        return
    client = NgramClient(list(targets), index=index, tokenizer_fingerprint=fingerprint, timeout=deadline_ms / 1000,
                         **tls_client_options(ca, cert, key, server_name))
    ctx.call_on_close(client.close)
    where = f"index '{index}'" if index else "the default index"
    ctx.obj = Session(client, f"{where} on {','.join(targets)}", False, fingerprint, tok, tok_fp)


@main.command()
@click.pass_obj
@_reported
def info(s: Session) -> None:
    """Order, vocabulary, EOS, tokenizer, corpus manifest, n-gram counts;
    checks --fingerprint / --tokenizer against the index's."""
    got = s.index.info()
    s.check_fingerprint(got)
    _emit(got)


@main.command()
@click.option("--context", "contexts", multiple=True, required=True,
              help="Context token ids, comma-separated (text with --tokenizer); repeat for a batch, "
                   "of any lengths.")
@click.option("--candidates", "candidates", multiple=True, required=True,
              help="Candidate token ids, comma-separated (text with --tokenizer: each of its tokens); "
                   "one --candidates per --context, of any lengths.")
@click.pass_obj
@_reported
def probs(s: Session, contexts: tuple[str, ...], candidates: tuple[str, ...]) -> None:
    """Conditional probabilities of candidates after contexts."""
    c = [s.ids(t, "--context") for t in contexts]
    w = [s.ids(t, "--candidates") for t in candidates]
    if len(c) != len(w):
        raise click.UsageError(f"give one --candidates per --context ({len(c)} --context, {len(w)} --candidates)")
    s.check_fingerprint()
    p, m = conditional_probs_ragged(s.index, c, w)
    out: dict[str, Any] = {"probs": p, "matched": m}
    if s.tokenizer is not None:
        out.update(contexts=c, candidates=w, candidate_texts=[s.texts(row)["texts"] for row in w])
    _emit(out)


def conditional_probs_ragged(index: NgramIndex | NgramClient, contexts: list[list[int]],
                             candidates: list[list[int]]) -> tuple[list[list[float]], list[list[int]]]:
    """conditional_probs of rows whose context and candidate lengths differ:
    one call per (context length, candidates length) group, answers in the
    order of the rows. The engine takes [B, C] contexts and [B, K]
    candidates, and padding a context would change its suffix."""
    groups: dict[tuple[int, int], list[int]] = {}
    for row, (c, w) in enumerate(zip(contexts, candidates)):
        groups.setdefault((len(c), len(w)), []).append(row)
    probs: list[list[float]] = [[] for _ in contexts]
    matched: list[list[int]] = [[] for _ in contexts]
    for (clen, wlen), rows in groups.items():
        ctx = np.array([contexts[r] for r in rows], dtype=np.int64).reshape(len(rows), clen)
        cand = np.array([candidates[r] for r in rows], dtype=np.int64).reshape(len(rows), wlen)
        p, m = index.conditional_probs(ctx, cand)
        for i, r in enumerate(rows):
            probs[r] = [float(x) for x in p[i]]
            matched[r] = [int(x) for x in m[i]]
    return probs, matched


@main.command()
@click.option("--context", required=True, help="Context token ids, comma-separated (text with --tokenizer).")
@click.option("-k", "k", type=IntRange(1, MAX_K), default=10, show_default=True, help="How many continuations.")
@click.pass_obj
@_reported
def topk(s: Session, context: str, k: int) -> None:
    """The k most frequent continuations of a context."""
    ids = s.ids(context, "--context")
    s.check_fingerprint()
    r = s.index.topk(np.array(ids, dtype=np.int64), k)
    out: dict[str, Any] = {"tokens": r.tokens.tolist(), "probs": [float(x) for x in r.probs],
                           "counts": r.counts.tolist(), "matched": int(r.matched), **s.texts(r.tokens)}
    if s.tokenizer is not None:
        out["context"] = ids
    _emit(out)


def _params(table: tuple[Any, ...]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A command's options for a parameter table (ngram_service.params): the engine's names, defaults, ranges."""

    def apply(f: Callable[..., Any]) -> Callable[..., Any]:
        for p in reversed(table):
            f = param_option(p)(f)
        return f

    return apply


def read_lattice(npz: str) -> tuple[Any, Any, Any]:
    """prefix, topk_tokens, topk_probs from an .npz file, or a usage error
    naming the file (no call is made for a file that cannot be read)."""
    with open(npz, "rb") as f:
        head = f.read(6)
    if head == b"\x93NUMPY":
        raise click.BadParameter(f"{npz}: a single .npy array, not an .npz archive of prefix, topk_tokens and "
                                 "topk_probs (np.savez writes one)", param_hint="--npz")
    if not head.startswith(b"PK"):  # np.load would take any other file for a pickle
        raise click.BadParameter(f"{npz}: not a numpy .npz archive (np.savez writes one: a zip file)",
                                 param_hint="--npz")
    try:
        z = np.load(npz, allow_pickle=False)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
        raise click.BadParameter(f"{npz}: not a readable .npz archive ({e})", param_hint="--npz") from None
    with z:
        missing = [a for a in ("prefix", "topk_tokens", "topk_probs") if a not in z.files]
        if missing:
            raise click.BadParameter(f"{npz}: no array {', '.join(missing)} (it holds {', '.join(z.files)})",
                                     param_hint="--npz")
        try:
            return z["prefix"], z["topk_tokens"], z["topk_probs"]
        except (ValueError, OSError, zipfile.BadZipFile) as e:
            raise click.BadParameter(f"{npz}: {e}", param_hint="--npz") from None


@main.command()
@click.option("--npz", type=click.Path(exists=True, dir_okay=False), required=True,
              help="numpy .npz with prefix int [P], topk_tokens int [D, K], topk_probs float [D, K] "
                   "(docs/SERVER.md, 'ngram-query').")
@_params(PRUNE_PARAMS)
@click.pass_obj
@_reported
def prune(s: Session, npz: str, **params: Any) -> None:
    """DART tree pruning of one draft lattice."""
    prefix, tokens, probs_ = read_lattice(npz)
    s.check_fingerprint()
    t = s.index.prune(prefix, tokens, probs_, **params)
    _emit({**_tree_json(t), **s.texts(t.tokens)})


@main.command()
@click.option("--context", "contexts", multiple=True, required=True,
              help="The sequence so far: token ids, comma-separated (text with --tokenizer); its last token is "
                   "the tree's root. Repeat for several trees in one call.")
@_params(PROPOSE_PARAMS)
@json_option("Print JSON ({\"trees\": [...]}, one per --context) instead of the indented trees.")
@click.pass_obj
@_reported
def propose(s: Session, contexts: tuple[str, ...], as_json: bool, **params: Any) -> None:
    """Corpus proposals: the draft tree of each context's likeliest
    continuations, from the trie and the context itself (every --context in
    one call). Prints each tree indented, a node per line: its path
    probability, token id (and text with --tokenizer)."""
    ids = [s.ids(t, "--context") for t in contexts]
    s.check_fingerprint()
    trees = s.index.propose_batch([np.array(c, dtype=np.int64) for c in ids], **params)
    if as_json:
        out = []
        for c, t in zip(ids, trees):
            tj = {**_tree_json(t), **s.texts(t.tokens)}
            if s.tokenizer is not None:
                tj["context"] = c
            out.append(tj)
        _emit({"trees": out})
        return
    blocks = []
    for i, (c, t) in enumerate(zip(ids, trees)):
        head = f"contexts[{i}]: {len(c)} tokens" if len(ids) > 1 else f"context: {len(c)} tokens"
        blocks.append("\n".join([head, *_tree_lines(s, t)]))
    click.echo("\n\n".join(blocks))


def _tree_lines(s: Session, t: Any) -> list[str]:
    """A tree as text: one node per line, depth first, children in node
    order; each line its path probability, then the token under its parent."""
    tokens, parents, scores = t.tokens.tolist(), t.parents.tolist(), t.scores.tolist()
    texts = s.texts(tokens).get("texts")
    children: dict[int, list[int]] = {}
    for i in range(1, len(tokens)):
        children.setdefault(parents[i], []).append(i)

    def label(i: int) -> str:
        return f"{tokens[i]} {texts[i]!r}" if texts is not None else str(tokens[i])

    lines = [f"{scores[0]:.6f}  {label(0)}  (root)"]

    def walk(v: int, indent: str) -> None:
        kids = children.get(v, [])
        for j, k in enumerate(kids):
            last = j == len(kids) - 1
            lines.append(f"{scores[k]:.6f}  {indent}{'`-- ' if last else '|-- '}{label(k)}")
            walk(k, indent + ("    " if last else "|   "))

    walk(0, "")
    depth = int(t.depths.max()) if len(tokens) else 0
    lines.append(f"{len(tokens) - 1} nodes besides the root, depth {depth}, {len(t.retrieve_indices)} leaves")
    return lines


if __name__ == "__main__":
    main()
