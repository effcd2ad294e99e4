"""ngram-eval: which trie makes DART accept the most tokens, measured offline.

    ngram-eval a.ngt b.ngt --lattices run.parquet --plot out.png --json > out.json
    ngram-eval a.ngt --text heldout/ --tokenizer qwen3-tokenizer.json --ngram-weight 0,0.5,1
    ngram-eval o3.ngt o5.ngt --proposals --text heldout/ --tokenizer qwen3-tokenizer.json --max-nodes 16,64
"""
from __future__ import annotations

import contextlib
import itertools
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import click

from dart_client.lattice_log import LatticeFormatError, read_lattices
from ngram_eval.proposal_replay import SOURCES, ProposeSetting, evaluate_proposals, format_proposals
from ngram_eval.replay import PruneSetting
from ngram_eval.report import evaluate, format_table
from ngram_eval.synthetic import LogitModel, load_documents, synthetic_lattices
from ngram_service import NgramIndex, TrieFormatError, _engine
from ngram_service.cli_options import (CONTEXT_SETTINGS, DeprecatedOption, Deprecation, FiniteFloatRange, IntRange,
                                       OutputFile, ToolCommand, comma_items, deprecated_option, json_option,
                                       param_list_option, param_option, param_type, quiet_option, refuse_given,
                                       threads_option)
from ngram_service.fingerprint import trie_fingerprint
from ngram_service.params import LATTICE_TOPK, PROPOSE_PARAMS, PRUNE_PARAMS
from ngram_service.tree import LIMITS


def _sources(ctx: click.Context, param: click.Parameter, value: str) -> list[str]:
    items = comma_items(value, ctx, param)
    unknown = [x for x in items if x not in SOURCES]
    if unknown:
        raise click.BadParameter(f"{unknown[0]!r}: sources are {', '.join(SOURCES)}, comma-separated", ctx, param)
    return items


def _write_json(path: str, doc: dict[str, Any]) -> None:
    p = Path(path)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    os.replace(tmp, p)


def _looks_like_text(path: str) -> bool:
    """A folder or a file named like a corpus shard (the formats --text reads): never a trie."""
    from indexer.shards import shard_format

    return Path(path).is_dir() or shard_format(path) is not None


def _text_hint(tries: tuple[str, ...], texts: tuple[str, ...]) -> str:
    """How to give the TRIE arguments that look like held-out text to --text instead."""
    inputs = [*texts, *(t for t in tries if _looks_like_text(t))]
    flags = " ".join(f"--text {x}" for x in inputs[:3]) + (" ..." if len(inputs) > 3 else "")
    if texts:
        return (f". It looks like held-out text: --text takes one file or folder, so repeat it per input "
                f"({flags}) or give their folder once")
    return f". It looks like held-out text: give it with --text ({flags})"


def _trie_info(path: str, tries: tuple[str, ...], texts: tuple[str, ...]) -> dict[str, Any]:
    """TRIE ``path``'s info, or BadParameter naming the file once, with a
    hint when the argument looks like held-out text."""
    why = f"{path}: a folder, not a trie file" if Path(path).is_dir() else ""
    if not why:
        try:
            return NgramIndex.open(path).info()
        except TrieFormatError as e:
            why = str(e) if str(e).startswith(path) else f"{path}: {e}"  # the engine names the file itself
        except OSError as e:
            why = f"{path}: {e.strerror or e}"
    hint = _text_hint(tries, texts) if _looks_like_text(path) else ""
    raise click.BadParameter(why + hint, param_hint="TRIE")


def _check_tries(tries: tuple[str, ...], tokenizer: Any, texts: tuple[str, ...]) -> None:
    """Every TRIE opens, and (with a tokenizer) was built with that tokenizer:
    the fingerprint its header records, else at least a vocabulary that
    holds the tokenizer's ids (the engine would take the others for unseen
    tokens and report a result all the same)."""
    for t in tries:
        info = _trie_info(t, tries, texts)
        if tokenizer is None:
            continue
        have = trie_fingerprint(info)
        if have and have != tokenizer.fingerprint:
            raise click.BadParameter(f"{t}: built with tokenizer {have[:12]}..., not {tokenizer.spec} "
                                     f"({tokenizer.fingerprint[:12]}...): its n-grams are other token ids",
                                     param_hint="TRIE")
        if tokenizer.vocab_size > int(info["vocab_size"]):
            raise click.BadParameter(f"{t}: a vocabulary of {info['vocab_size']} ids, and the tokenizer "
                                     f"{tokenizer.spec} has {tokenizer.vocab_size}: the trie was built with "
                                     "another tokenizer", param_hint="TRIE")
        if not have:
            click.echo(f"ngram-eval: {t} records no tokenizer fingerprint; --tokenizer is checked against its "
                       "vocabulary size only", err=True)


class _EvalCommand(ToolCommand):
    """ngram-eval's command: ``--json FILE``, its old spelling, read as the hidden --json-file."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, _old_json_file(args))


def _old_json_file(args: list[str]) -> list[str]:
    """``--json FILE.json`` and ``--json=FILE`` (a file to write, as --json
    was until it became a switch) -> ``--json-file FILE``."""
    out: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            out += args[i:]
            break
        if a.startswith("--json="):
            out += ["--json-file", a[len("--json="):]]
        elif a == "--json" and i + 1 < len(args) and args[i + 1].lower().endswith(".json") \
                and not args[i + 1].startswith("-"):
            out += ["--json-file", args[i + 1]]
            i += 1
        else:
            out.append(a)
        i += 1
    return out


#: ``--json FILE``, read as --json-file (_old_json_file): the table on stdout and the JSON in FILE.
JSON_FILE = Deprecation("--json FILE", "--json", None, note=" (the JSON on stdout instead of the table: --json > FILE)")


class _JsonFileOption(DeprecatedOption):
    """The hidden --json-file: named in errors as it is given, ``--json FILE``."""

    def get_error_hint(self, ctx: click.Context) -> str:
        return "'--json FILE'"


#: Options that apply only to one kind of evaluation (their parameter names).
DART_ONLY = ("beam_width", "ngram_weight", "threads")
PROPOSALS_ONLY = ("sources", "discount", "suffix_corpus", "leave_one_source_out")
#: Options of the leave-one-source-out protocol only.
LOSO_ONLY = ("orders", "work", "test_tokens", "max_doc_tokens", "hold_out", "jobs", "suffix_baseline")
SYNTHETIC_ONLY = ("steps", "depth", "topk", "hit", "decay", "true_bonus", "noise", "seed")
_PRUNE = {p.name: p for p in PRUNE_PARAMS}
_PROPOSE = {p.name: p for p in PROPOSE_PARAMS}
#: --max-nodes with --proposals, when not given: a small tree and the engine's default.
PROPOSAL_MAX_NODES = (16, _PROPOSE["max_nodes"].default)


@click.command("ngram-eval", cls=_EvalCommand, context_settings=CONTEXT_SETTINGS)
# Folders pass click's check: _check_tries rejects them with a hint (`--text a/ b/` makes b/ a TRIE).
@click.argument("tries", nargs=-1, type=click.Path(exists=True), metavar="TRIE...")
@click.option("--lattices", type=click.Path(exists=True, dir_okay=False),
              help="A lattice log (Parquet, one row per decoding step) from dart-generate --log-lattices.")
@click.option("--text", "texts", multiple=True, type=click.Path(exists=True),
              help="Held-out documents, one shard file or folder per --text (the formats ngram-build reads; "
                   "repeat it: --text a.jsonl --text b.jsonl): synthetic lattices from them "
                   "(docs/EVALUATION.md states the model), or with --proposals the documents replayed.")
@click.option("--tokenizer", "-t", help="Tokenizer of --text (as ngram-build takes it); also checked against "
                                        "each TRIE.")
@click.option("--text-field", default="text", show_default=True, help="JSON field / Parquet column of --text.")
@click.option("--proposals", is_flag=True,
              help="Evaluate the tries' own draft trees (NgramIndex.propose: no drafter, no lattices) on --text, "
                   "teacher forced, beside prompt lookup alone (docs/PROPOSALS.md), with each tree's calibration "
                   "(its node scores against the share accepted). Uses --max-nodes, --sources, --discount and "
                   "--suffix-corpus, or --leave-one-source-out; the lattice options are refused.")
@param_list_option(_PRUNE["max_nodes"], default=None,
                   show_default=f"{_PRUNE['max_nodes'].default}; {','.join(map(str, PROPOSAL_MAX_NODES))} "
                                "with --proposals",
                   help_prefix="Grid:")
@param_list_option(_PRUNE["beam_width"], help_prefix="Grid, DART:")
@param_list_option(_PRUNE["ngram_weight"], help_prefix="Grid, DART:")
@click.option("--sources", default="both,corpus", show_default=True, callback=_sources,
              metavar="LIST",
              help="--proposals: which continuations to propose, comma-separated: both (trie and the document "
                   "so far), corpus (trie only), lookup (the document only; prompt lookup alone is always "
                   "reported).")
@param_list_option(_PROPOSE["discount"], help_prefix="Grid, --proposals:")
@click.option("--suffix-corpus", "suffix_corpus", multiple=True, type=click.Path(exists=True),
              help="--proposals: also report SuffixDecoding (vLLM's 'suffix' method: a suffix tree over the document "
                   "so far and one over this corpus, raw counts) at vLLM's and Arctic Inference's default "
                   "settings. Give the shards the tries were built from (files or folders, the formats ngram-build "
                   "reads, tokenized with --tokenizer; repeat it per input). Reading and sorting 12 M tokens takes "
                   "about half a minute and 1 GB.")
@click.option("--leave-one-source-out", "leave_one_source_out", multiple=True, type=click.Path(exists=True),
              metavar="CORPUS",
              help="--proposals on text no build has seen, instead of TRIE and --text: for each source of CORPUS "
                   "(shards named SOURCE-NNNN.*; files or folders, repeat it per input), tries of --order built "
                   "from the other sources alone, and that source's documents replayed (docs/EVALUATION.md).")
@click.option("--order", "orders", default="3", show_default=True,
              callback=lambda c, p, v: _int_list(v, 2, _engine.MAX_ORDER, c, p),
              metavar="LIST", help="--leave-one-source-out: the orders of the tries built, comma-separated.")
@click.option("--work", type=click.Path(file_okay=False, path_type=Path),
              help="--leave-one-source-out: folder for the tries built and the test documents, kept and reused "
                   "by the next run with the same inputs (default: a temporary folder, removed at the end).")
@click.option("--test-tokens", default=20_000, show_default=True, type=IntRange(1),
              help="--leave-one-source-out: test tokens per source (whole documents, so at least this many).")
@click.option("--max-doc-tokens", default=2048, show_default=True, type=IntRange(1),
              help="--leave-one-source-out: a test document's first tokens replayed.")
@click.option("--hold-out", "hold_out", metavar="LIST",
              help="--leave-one-source-out: only these sources held out, comma-separated (default: each).")
@click.option("--build-jobs", "jobs", default=1, show_default=True, type=IntRange(1),
              help="--leave-one-source-out: build worker processes.")
@click.option("--suffix-baseline", is_flag=True,
              help="--leave-one-source-out: also report SuffixDecoding with its global tree over the other sources "
                   "(about half a minute and 1 GB a source).")
@click.option("--steps", default=5000, show_default=True, type=IntRange(1),
              help="Synthetic lattices: how many to draw (positions sampled uniformly).")
@click.option("--depth", default=8, show_default=True, type=IntRange(1, LIMITS["max_depth"]),
              help="Synthetic lattices: levels D.")
@param_option(LATTICE_TOPK, help_prefix="Synthetic lattices:")
@deprecated_option("--topk", new="--lattice-topk", param="topk", type=param_type(LATTICE_TOPK))
@click.option("--hit", default=0.9, show_default=True, type=FiniteFloatRange(0, 1),
              help="Synthetic lattices: probability that the true token is a level-0 candidate.")
@click.option("--decay", default=0.85, show_default=True, type=FiniteFloatRange(0, 1),
              help="Synthetic lattices: per-level factor on --hit and --true-bonus.")
@click.option("--true-bonus", default=4.0, show_default=True, type=FiniteFloatRange(),
              help="Synthetic lattices: logit added to the true token at level 0.")
@click.option("--noise", default=1.0, show_default=True, type=FiniteFloatRange(0),
              help="Synthetic lattices: logit noise sd.")
# numpy's generators take a non-negative seed of any size.
@click.option("--seed", default=0, show_default=True, type=IntRange(min=0), help="Synthetic lattices: random seed.")
@threads_option("DART: pruning threads (the time per tree is measured with these).")
@json_option("Print the results as JSON on stdout instead of the table.")
@click.option("--json-file", cls=_JsonFileOption, deprecation=JSON_FILE, type=OutputFile())
@click.option("--plot", "plot_out", type=OutputFile(),
              help="Write a PNG: accepted length per setting and trie, 95% intervals; with --proposals, tokens per "
                   "step per node budget and each trie's calibration (predicted path probability against the share "
                   "of nodes accepted). Needs matplotlib (pip install 'ngram-trie-host[plot]'; checked before the "
                   "evaluation starts).")
@quiet_option()
@click.pass_context
def main(ctx: click.Context, tries: tuple[str, ...], lattices: str | None, texts: tuple[str, ...],
         tokenizer: str | None, text_field: str, proposals: bool, max_nodes: list[int] | None, beam_width: list[int],
         ngram_weight: list[float], sources: list[str], discount: list[float], suffix_corpus: tuple[str, ...],
         leave_one_source_out: tuple[str, ...], orders: list[int], work: Path | None, test_tokens: int,
         max_doc_tokens: int, hold_out: str | None, jobs: int, suffix_baseline: bool, steps: int, depth: int, topk: int,
         hit: float, decay: float, true_bonus: float, noise: float, seed: int, threads: int, as_json: bool,
         json_file: str | None, plot_out: str | None, quiet: bool) -> None:
    """Replays draft lattices through each TRIE's DART pruning and reports the
    mean accepted length DART would reach (tokens per verification step: the
    longest prefix of the target's continuation that is a path of the pruned
    tree, plus the bonus token), its distribution, the n-gram hit rate per
    order and the pruning time, for every combination of the grid options.

    A trie's headline figures (its row marked in the table's headline column,
    vs first, the JSON's top-level figures) are those of DART's default
    setting (the defaults of the three grid options below) when the grid
    holds it, else of the trie's best setting in the grid.

    With --proposals, replays --text documents through each TRIE's own
    draft trees instead (no drafter): tokens per verification step, teacher
    forced, beside prompt lookup alone and (with --suffix-corpus)
    SuffixDecoding, and whether the trees' scores are calibrated
    probabilities (docs/EVALUATION.md, "Proposals"). With
    --leave-one-source-out CORPUS instead of TRIE and --text, builds the
    tries itself: each source of CORPUS is replayed on tries of the
    others (docs/EVALUATION.md, "Leave one source out")."""
    if json_file is not None:
        if as_json:
            raise click.UsageError("--json and --json FILE: give one (--json FILE is deprecated)")
        click.echo(JSON_FILE.message("ngram-eval"), err=True)
    if proposals:
        refuse_given(ctx, DART_ONLY, "only without --proposals (DART pruning)")
        refuse_given(ctx, SYNTHETIC_ONLY, "only without --proposals (synthetic lattices)")
    else:
        refuse_given(ctx, PROPOSALS_ONLY, "only with --proposals")
        if lattices:
            refuse_given(ctx, SYNTHETIC_ONLY + ("text_field",), "only with --text (synthetic lattices)")
    if not leave_one_source_out:
        refuse_given(ctx, LOSO_ONLY, "only with --leave-one-source-out")
    if plot_out:  # before any work: a missing matplotlib would otherwise fail after the whole evaluation
        from ngram_eval.plot import require_matplotlib

        try:
            require_matplotlib()
        except RuntimeError as e:
            raise click.ClickException(f"--plot: {e}") from None
    if leave_one_source_out:
        if tries or texts or lattices:
            raise click.UsageError("--leave-one-source-out builds its tries and chooses its documents: "
                                   "give no TRIE, --text or --lattices")
        refuse_given(ctx, ("suffix_corpus",), "not with --leave-one-source-out")
        if not tokenizer:
            raise click.UsageError("--leave-one-source-out needs --tokenizer (the tries are built with it)")
        _load_tokenizer(tokenizer)  # a bad one is named before any build
        _leave_one_source_out(leave_one_source_out, tokenizer, text_field, orders, work, test_tokens,
                              max_doc_tokens, hold_out, jobs, suffix_baseline, sources, discount, max_nodes,
                              Output(as_json, json_file, plot_out), quiet)
        return
    if not tries:
        raise click.UsageError("Missing argument 'TRIE...'.")
    if proposals and not texts:
        raise click.UsageError("--proposals needs --text FILE [--text FILE ...] (held-out documents to replay)")
    if bool(lattices) == bool(texts):
        raise click.UsageError("give exactly one of --lattices FILE or --text FILE [--text FILE ...]")
    if max_nodes is None:
        max_nodes = list(PROPOSAL_MAX_NODES) if proposals else [_PRUNE["max_nodes"].default]
    if texts and not tokenizer:
        raise click.UsageError("--text needs --tokenizer (the tokenizer the tries were built with)")
    say = (lambda m: None) if quiet else (lambda m: click.echo(m, err=True))
    tok = _load_tokenizer(tokenizer) if tokenizer else None
    _check_tries(tries, tok, texts)
    if proposals:
        out = Output(as_json, json_file, plot_out)
        _evaluate_proposals(tries, texts, tokenizer, text_field, sources, discount, max_nodes, out, say,
                            suffix_corpus, tok)
        return
    info: dict[str, Any]
    if lattices:
        try:
            lat = read_lattices(lattices)
        except LatticeFormatError as e:
            raise click.ClickException(str(e)) from None
        info = {"mode": "logged"}
    else:
        from indexer.shards import ShardError

        model = LogitModel(depth=depth, topk=topk, hit=hit, decay=decay, true_bonus=true_bonus, noise=noise)
        try:
            docs, nbytes = load_documents(list(texts), tokenizer, text_field)  # type: ignore[arg-type]
            lat = synthetic_lattices(docs, model, steps, seed, source=",".join(texts))
        except (ShardError, ValueError) as e:
            raise click.ClickException(str(e)) from None
        info = {"mode": "synthetic", "texts": list(texts), "model": model.as_dict(), "seed": seed,
                "documents": len(docs), "text_bytes": nbytes}
        say(f"{len(lat)} synthetic lattices from {len(docs)} documents ({nbytes:,} bytes)")
    settings = [PruneSetting(b, n, w) for b, n, w in itertools.product(beam_width, max_nodes, ngram_weight)]
    try:
        result = evaluate(list(tries), lat, settings, threads=threads, lattice_info=info, progress=say)
    except ValueError as e:
        raise click.ClickException(str(e)) from None
    from ngram_eval.plot import plot_grid

    _report(result, format_table(result), Output(as_json, json_file, plot_out), plot_grid)


def _evaluate_proposals(tries: tuple[str, ...], texts: tuple[str, ...], tokenizer: str, text_field: str,
                        sources: list[str], discount: list[float], max_nodes: list[int], out: Output,
                        say: Any, suffix_corpus: tuple[str, ...] = (), tok: Any = None) -> None:
    from indexer.shards import ShardError

    try:
        docs, nbytes = load_documents(list(texts), tokenizer, text_field)
    except (ShardError, ValueError) as e:
        raise click.ClickException(str(e)) from None
    say(f"{len(docs)} documents ({nbytes:,} bytes, {sum(len(d) for d in docs):,} tokens)")
    corpus, corpus_info = None, None
    if suffix_corpus:
        from ngram_eval.suffix_baseline import ARCTIC_DEFAULTS, VLLM_DEFAULTS, load_corpus_suffixes

        try:
            corpus, corpus_info = load_corpus_suffixes(
                list(suffix_corpus), tok, max(VLLM_DEFAULTS.max_depth, ARCTIC_DEFAULTS.max_depth),
                text_field=text_field, progress=say)
        except (ShardError, ValueError) as e:
            raise click.ClickException(f"--suffix-corpus: {e}") from None
    settings = [ProposeSetting(n, src, b) for n, src, b in itertools.product(max_nodes, sources, discount)]
    try:
        result = evaluate_proposals(list(tries), docs, settings, progress=say, suffix_corpus=corpus,
                                    suffix_corpus_info=corpus_info)
    except ValueError as e:
        raise click.ClickException(str(e)) from None
    result["texts"] = list(texts)
    result["text_bytes"] = nbytes
    from ngram_eval.plot import plot_proposals

    _report(result, format_proposals(result), out, plot_proposals)


def _load_tokenizer(spec: str) -> Any:
    from indexer.tokenizer import TokenizerError, load_tokenizer

    try:
        return load_tokenizer(spec)
    except (TokenizerError, OSError) as e:
        raise click.BadParameter(str(e), param_hint="--tokenizer") from None


def _int_list(value: str, lo: int, hi: int, ctx: click.Context, param: click.Parameter) -> list[int]:
    try:
        items = [int(x) for x in comma_items(value, ctx, param)]
    except ValueError:
        raise click.BadParameter(f"{value!r}: integers, comma-separated", ctx, param) from None
    bad = [x for x in items if not lo <= x <= hi]
    if bad:
        raise click.BadParameter(f"{bad[0]!r}: each must be in {lo}..{hi}", ctx, param)
    return items


def _leave_one_source_out(corpus: tuple[str, ...], tokenizer: str, text_field: str, orders: list[int],
                          work: Path | None, test_tokens: int, max_doc_tokens: int, hold_out: str | None, jobs: int,
                          suffix_baseline: bool, sources: list[str], discount: list[float],
                          max_nodes: list[int] | None, out: Output, quiet: bool) -> None:
    import tempfile

    from indexer.build_config import BuildError
    from ngram_eval.leave_one_source_out import LosoConfig, format_loso, leave_one_source_out

    say = (lambda m: None) if quiet else (lambda m: click.echo(m, err=True))
    settings = [ProposeSetting(n, src, b) for n, src, b in
                itertools.product(max_nodes or PROPOSAL_MAX_NODES, sources, discount)]
    only = comma_items(hold_out, param_hint="--hold-out") if hold_out else None
    with tempfile.TemporaryDirectory(prefix="ngram-eval-loso-") if work is None else contextlib.nullcontext() as tmp:
        cfg = LosoConfig(corpus=list(corpus), tokenizer=tokenizer, work=work or Path(tmp), orders=orders, only=only,
                         test_tokens=test_tokens, max_doc_tokens=max_doc_tokens, text_field=text_field, jobs=jobs,
                         suffix_baseline=suffix_baseline)
        try:
            result = leave_one_source_out(cfg, settings, progress=say)
        except (BuildError, ValueError, RuntimeError) as e:  # ShardError and TokenizerError are ValueErrors
            raise click.ClickException(str(e)) from None
        except OSError as e:
            raise click.ClickException(f"{e.filename or cfg.work}: {e.strerror or e}") from None
    from ngram_eval.plot import plot_proposals

    _report(result, format_loso(result), out, lambda r, path: plot_proposals(r["combined"], path))


class Output(NamedTuple):
    """Where the results go: the table, or with --json the JSON, on stdout;
    the deprecated --json FILE writes the JSON there beside the table; --plot."""

    as_json: bool
    json_file: str | None
    plot: str | None


def _report(result: dict[str, Any], table: str, out: Output, plot: Callable[[dict[str, Any], str], None]) -> None:
    if out.as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        click.echo(table)
    if out.json_file:
        _write_json(out.json_file, result)
    if out.plot:
        try:
            plot(result, out.plot)
        except RuntimeError as e:
            raise click.ClickException(str(e)) from None


if __name__ == "__main__":
    main(sys.argv[1:])
