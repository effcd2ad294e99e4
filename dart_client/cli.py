"""dart-generate: speculative decoding of one prompt, with the figures that matter.

    dart-generate MODEL_DIR DRAFTER_DIR --trie corpus.ngt -p "def fib(n):"
    dart-generate MODEL_DIR DRAFTER_DIR --target 10.0.0.5:50051 --prompt-file q.txt --chat
    dart-generate --random-models --trie sample.ngt -p "def fib(n):"   # no checkpoints
    dart-generate MODEL_DIR --drafter none --target 10.0.0.5:50051 -p "def fib(n):"   # proposals, no drafter

With a DART drafter, the trie prunes the drafter's lattices; with
``--drafter none`` the trie (--trie, --target) proposes the draft trees from
the sequence alone, prompt lookup merged in (neither: prompt lookup alone).
The text goes to stdout; the figures (mean accepted length, tokens/s, time
per step split into target forward, drafter forward, pruning or proposing,
and transport) to stderr, or everything as one JSON object with --json.

Nothing here imports torch before the options are parsed: ``--help`` works
after the base install, and a run without torch says what to install.
"""
from __future__ import annotations

import contextlib
import json
import re
import sys
from pathlib import Path
from typing import Any

import click

from dart_client.tree_budget import TREE_BUDGET
from ngram_service.cli_options import (CONTEXT_SETTINGS, HOST_OPTIONS, FiniteFloatRange, IntRange, OutputFile,
                                       TargetType, ToolCommand, deprecated_option, host_options, json_option,
                                       param_option, param_type, refuse_given, tls_client_options)
from ngram_service.params import LATTICE_TOPK, PROPOSE_PARAMS, PRUNE_PARAMS

#: Files of which a folder needs one for transformers to load a tokenizer from it.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt")


def _has_tokenizer(folder: Path) -> bool:
    return any((folder / name).is_file() for name in TOKENIZER_FILES)


def _tokenizer_spec(model: str, tokenizer: str | None) -> str:
    """What to load the tokenizer from: --tokenizer, else MODEL. A folder
    without tokenizer files is refused here: transformers would build an
    empty tokenizer from the model's config and every prompt would encode to
    no tokens."""
    if tokenizer:
        if Path(tokenizer).is_dir() and not _has_tokenizer(Path(tokenizer)):
            raise click.BadParameter(
                f"{tokenizer}: the folder has no tokenizer (none of {', '.join(TOKENIZER_FILES)})",
                param_hint="--tokenizer")
        return tokenizer
    if not _has_tokenizer(Path(model)):
        raise click.UsageError(f"the model folder {model} has no tokenizer (none of {', '.join(TOKENIZER_FILES)}): "
                               "pass --tokenizer with a tokenizer.json or a tokenizer folder")
    return model


class _TextTokenizer:
    """encode/decode over a tokenizer.json (tokenizers) or a transformers tokenizer."""

    def __init__(self, spec: str) -> None:
        self.spec = spec
        self.hf: Any = None
        self.tok: Any = None
        p = Path(spec)
        if p.is_dir() and (p / "tokenizer.json").is_file() and not any(
                (p / name).is_file() for name in ("tokenizer_config.json", "config.json")):
            # A bare tokenizer folder: transformers 4.x guesses a model type
            # from the folder's name there (indexer/sample/ -> "sam") and fails.
            p = p / "tokenizer.json"
        self.file = p
        if p.is_file():
            from tokenizers import Tokenizer

            self.tok = Tokenizer.from_file(str(p))
        else:
            from transformers import AutoTokenizer

            self.hf = AutoTokenizer.from_pretrained(spec)

    def encode(self, text: str, chat: bool) -> list[int]:
        if chat:
            if self.hf is None or not getattr(self.hf, "chat_template", None):
                raise click.UsageError("--chat needs a transformers tokenizer with a chat template (MODEL_DIR)")
            return list(self.hf.apply_chat_template([{"role": "user", "content": text}], tokenize=True,
                                                    add_generation_prompt=True))
        if self.hf is not None:
            return list(self.hf(text, add_special_tokens=False)["input_ids"])
        return list(self.tok.encode(text, add_special_tokens=False).ids)

    @property
    def eos_token_id(self) -> int | None:
        """The tokenizer's EOS (what DART stops at and gives the search):
        transformers' eos_token_id, or for a bare tokenizer.json the
        eos_token of a tokenizer_config.json beside it."""
        if self.hf is not None:
            return self.hf.eos_token_id
        cfg = self.file.parent / "tokenizer_config.json"
        if not cfg.is_file():
            return None
        eos = json.loads(cfg.read_text()).get("eos_token")
        if isinstance(eos, dict):
            eos = eos.get("content")
        return self.tok.token_to_id(eos) if isinstance(eos, str) else None

    def decode(self, ids: list[int]) -> str:
        if self.hf is not None:
            return self.hf.decode(ids, skip_special_tokens=True)
        return self.tok.decode(ids, skip_special_tokens=True)


def _fingerprint_spec(model: str, tokenizer: str | None) -> str | None:
    if tokenizer and Path(tokenizer).exists():
        return tokenizer
    if (Path(model) / "tokenizer.json").is_file():
        return model
    return None


def _device(name: str) -> str:
    """--device, "auto" resolved; one this torch cannot use (a name it does
    not know, CUDA on a CPU build or without a GPU, a GPU index past the
    last) is refused here, before any model is made."""
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        torch.empty(0, device=name)
    except (RuntimeError, AssertionError) as e:  # the CPU build's CUDA calls assert
        why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise click.BadParameter(f"{name!r}: this torch cannot use it ({why})", param_hint="--device") from None
    return name


def _read_prompt(prompt_file: Any) -> str:
    """The prompt from --prompt-file, else stdin; one that is not UTF-8 text is a usage error."""
    stream = prompt_file or sys.stdin
    try:
        return stream.read()
    except UnicodeDecodeError as e:
        why = f"not UTF-8 text (byte {e.start}: {e.reason})"
        if prompt_file is None:
            raise click.UsageError(f"the prompt on stdin is {why}") from None
        raise click.BadParameter(f"{getattr(stream, 'name', '-')}: {why}", param_hint="--prompt-file") from None


def format_summary(s: dict[str, Any]) -> str:
    ps = s["per_step"]
    ms = lambda x: f"{1e3 * x:8.3f} ms"
    proposals = s["mode"] == "proposals"
    work = "proposing" if proposals else "pruning"
    lines = [
        f"new tokens            {s['new_tokens']}  in {s['steps']} steps ({s['mode']})",
        f"mean accepted length  {s['mean_accepted_length']:.3f}",
        f"tokens/s              {s['tokens_per_s']:.1f}   (wall {s['wall_s']:.3f} s, prefill {s['prefill_s']:.3f} s)",
        "time per step:",
        f"  target forward      {ms(ps['target_s'])}",
        *([] if proposals else [f"  drafter forward     {ms(ps['drafter_s'])}"]),
        f"  {work:<18}  {ms(ps['prune_s'])}",
        f"  transport           {ms(ps['transport_s'])}",
        f"  verify + KV cache   {ms(ps['verify_s'])}",
        f"  total               {ms(ps['total_s'])}   {work} + transport: {100 * ps['prune_transport_share']:.1f}%",
    ]
    pr = s.get("pruner") or {}
    if pr and s.get("hosts"):
        fallback = "fallbacks (prompt lookup)" if proposals else "fallbacks"
        lines.append(f"trees from the host   {s['remote_steps']}/{s['steps']}   {fallback} {pr.get('fallbacks', 0)}"
                     + (f"   errors {pr['errors']}" if pr.get("errors") else ""))
    elif proposals and not s.get("hosts") and s.get("tree_sources", {}).get("lookup") == s["steps"] and s["steps"]:
        lines.append("trees from           prompt lookup alone (no --trie or --target)")
    return "\n".join(lines)


#: Options that apply only with a DART drafter, and only with --drafter none (their parameter names).
DART_ONLY = ("topk", "beam_width", "ngram_weight", "search_context", "log_lattices")
PROPOSAL_ONLY = tuple(p.name for p in PROPOSE_PARAMS if p.name != "max_nodes")
#: Options that apply only with a trie host (--target).
HOST_ONLY = tuple(name for name in HOST_OPTIONS if name != "targets")
_PRUNE = {p.name: p for p in PRUNE_PARAMS}
_PROPOSE = {p.name: p for p in PROPOSE_PARAMS}
#: The default --deadline-ms: see docs/DART_CLIENT.md, "dart-generate", for the measurement that chose it.
DEADLINE_MS = 100.0
#: The default --kv-cache: see docs/DART_CLIENT.md, "The verification step", for the measurement that chose it.
KV_CACHE = "static"


def _options(f: Any) -> Any:
    """The search parameters' options, from the tables of ngram_service.params."""
    for p in reversed([q for q in PROPOSE_PARAMS if q.name != "max_nodes"]):
        f = param_option(p, help_prefix="--drafter none:")(f)
    f = param_option(_PRUNE["ngram_weight"], help_prefix="DART:")(f)
    f = param_option(_PRUNE["beam_width"], help_prefix="DART:")(f)
    f = param_option(LATTICE_TOPK, help_prefix="DART:")(f)
    f = deprecated_option("--topk", new="--lattice-topk", param="topk", type=param_type(LATTICE_TOPK))(f)
    return param_option(_PRUNE["max_nodes"], default=None,
                        show_default=f"{_PRUNE['max_nodes'].default}; {_PROPOSE['max_nodes'].default} with "
                                     "--drafter none")(f)


@click.command("dart-generate", cls=ToolCommand, context_settings=CONTEXT_SETTINGS)
@click.argument("model", required=False, type=click.Path(exists=True, file_okay=False))
@click.argument("drafter", required=False, type=click.Path(exists=True, file_okay=False))
@click.option("--model", "model_opt", type=click.Path(exists=True, file_okay=False),
              help="The target model folder (instead of the MODEL argument).")
@click.option("--drafter", "drafter_opt", metavar="DIR|none",
              help="The DART drafter folder (instead of the DRAFTER argument), or none: no drafter model, "
                   "the trie (--trie, --target) proposes the draft trees, prompt lookup merged in; without "
                   "--trie or --target, prompt lookup alone.")
@click.option("--random-models", is_flag=True,
              help="Instead of MODEL and DRAFTER: a tiny random target and drafter (with --drafter none: the "
                   "target alone) over the bundled sample tokenizer, to try dart-generate without checkpoints "
                   "(with the sample trie: ngram-build --out sample.ngt, then --trie sample.ngt).")
@click.option("--trie", type=click.Path(exists=True, dir_okay=False),
              help="Prune (or propose) in process with this trie file.")
@host_options(default_target=None, deadline_ms=DEADLINE_MS,
              deadline_help="Deadline of each step's call to the host; past it the step's trees are made here "
                            "(DART: pruned locally; --drafter none: prompt lookup alone).")
@deprecated_option("--host", new="--target", param="targets", multiple=True, type=TargetType())
@click.option("-p", "--prompt", help="The prompt text (default: --prompt-file, else stdin).")
@click.option("--prompt-file", type=click.File("r"), help="Read the prompt from this file ('-': stdin).")
@click.option("--chat/--no-chat", default=False, help="Wrap the prompt in the tokenizer's chat template.")
@click.option("--max-new-tokens", type=IntRange(min=1), default=256, show_default=True,
              help="Stop after this many new tokens (or at EOS).")
@deprecated_option("-n", new="--max-new-tokens", param="max_new_tokens", type=IntRange(min=1))
@click.option("--temperature", type=FiniteFloatRange(min=0), default=0.0, show_default=True,
              help="0: greedy (lossless); > 0: tree speculative sampling.")
@click.option("--top-k", type=IntRange(min=0), default=0, show_default=True,
              help="Sampling: keep the k likeliest tokens (0: all).")
@click.option("--top-p", type=FiniteFloatRange(0, 1), default=1.0, show_default=True,
              help="Sampling: keep the smallest set of tokens whose probability reaches p.")
# torch's generators take a seed in 0..2**64-1 (a larger one raised ValueError mid-run).
@click.option("--seed", type=IntRange(0, 2**64 - 1), default=None, help="Sampling: random seed.")
@click.option("--tokenizer", "-t", help="tokenizer.json or folder [default: MODEL].")
@click.option("--device", default="auto", show_default=True, help="cpu, cuda, cuda:1, ...")
@click.option("--dtype", type=click.Choice(["auto", "float32", "bfloat16", "float16"]), default="auto",
              show_default=True, help="auto: bfloat16 on CUDA, float32 on CPU.")
@click.option("--kv-cache", type=click.Choice(["dynamic", "static"]), default=KV_CACHE, show_default=True,
              help="The target's KV cache (the target alone's too, with --compare): static: preallocated, written in "
                   "place, the tree mask filled in place (docs/DART_CLIENT.md); dynamic: transformers' "
                   "DynamicCache, grown every step.")
@click.option("--kv-capacity", type=IntRange(min=1), default=None,
              help="--kv-cache static: the cache's positions; a step past them is an error [default: the prompt, "
                   "--max-new-tokens and the largest tree, grown when needed].")
@click.option("--cuda-graphs/--no-cuda-graphs", default=False, show_default=True,
              help="--kv-cache static on a CUDA device: every forward padded to a size bucket and replayed from a "
                   "CUDA graph captured once per bucket.")
@click.option("--tree-budget", type=IntRange(min=2), default=TREE_BUDGET, show_default=True,
              help="The most tokens of one verification forward, the draft tree and its root: a larger tree is cut "
                   "to its best nodes (in a batch, B trees share it; docs/DART_CLIENT.md).")
@_options
@click.option("--eos", "eos_spec", default="model", show_default=True,
              help="EOS for stopping and for the search. model: stop at the target's generation config EOS, "
                   "search with the trie header's; tokenizer: the tokenizer's eos_token_id for both (DART); "
                   "an integer id: that id for both.")
@click.option("--search-context", type=click.Choice(["sequence", "step"]), default="sequence", show_default=True,
              help="DART: what the search sees: the whole sequence (its last N-1 tokens), or DART's last step's "
                   "tokens.")
@click.option("--sampling-order", type=click.Choice(["dart", "transformers"]), default="dart", show_default=True,
              help="dart: temperature, top-p, top-k; transformers: temperature, top-k, top-p.")
@click.option("--compare", is_flag=True, help="Also decode with the target alone: speedup, and (greedy) equality.")
@json_option("Print one JSON object (the text and the figures) on stdout instead of the text and a summary.")
@click.option("--log-lattices", type=OutputFile(),
              help="DART: record each step's draft lattice and committed tokens (Parquet) for ngram-eval.")
@click.pass_context
def main(ctx: click.Context, model: str | None, drafter: str | None, model_opt: str | None, drafter_opt: str | None,
         random_models: bool, trie: str | None, targets: tuple[str, ...], index: str, deadline_ms: float,
         ca: str | None, cert: str | None, key: str | None, server_name: str | None, prompt: str | None,
         prompt_file: Any, chat: bool, max_new_tokens: int, temperature: float, top_k: int, top_p: float,
         seed: int | None, tokenizer: str | None, device: str, dtype: str, kv_cache: str, kv_capacity: int | None,
         cuda_graphs: bool, tree_budget: int, max_nodes: int | None, topk: int, beam_width: int, ngram_weight: float, eos_spec: str,
         search_context: str, sampling_order: str, compare: bool, as_json: bool, log_lattices: str | None,
         **proposal_options: Any) -> None:
    """Speculative decoding of a prompt with MODEL (a transformers causal LM
    folder) and DRAFTER (a DART drafter checkpoint folder), pruning draft
    trees in process (--trie) or on a trie host (--target); or, with
    --drafter none, with MODEL alone: the trie proposes the draft trees,
    prompt lookup merged in (no --trie or --target: prompt lookup alone).

    Needs torch, transformers and safetensors (not in the base install):
    the torch build for the machine first (the CUDA build on GPU workers,
    the CPU build for tests), then pip install 'ngram-trie-host[dart]'.

    --random-models decodes with random weights instead (no MODEL, DRAFTER
    or --tokenizer): the text is gibberish, the steps and their times are
    real."""
    if model and model_opt:
        raise click.UsageError("MODEL given twice: as the argument and as --model")
    model = model or model_opt
    if drafter and drafter_opt:
        raise click.UsageError("DRAFTER given twice: as the argument and as --drafter")
    proposals = drafter_opt is not None and drafter_opt.lower() == "none"
    if drafter_opt is not None and not proposals:
        if not Path(drafter_opt).is_dir():
            raise click.BadParameter(f"{drafter_opt}: not a folder (give a DART drafter folder, or none)",
                                     param_hint="--drafter")
        drafter = drafter_opt
    if random_models:
        if model or drafter:
            raise click.UsageError("--random-models replaces MODEL and DRAFTER: give one or the other")
        if tokenizer:
            raise click.UsageError("--random-models decodes over the bundled sample tokenizer: drop --tokenizer")
    elif proposals and not model:
        raise click.UsageError("give the MODEL folder (or --random-models to try without a checkpoint)")
    elif not proposals and not (model and drafter):
        raise click.UsageError("give MODEL and DRAFTER folders (or --random-models to try without checkpoints; "
                               "or MODEL and --drafter none to decode with proposals, no drafter model)")
    if proposals:
        refuse_given(ctx, DART_ONLY, "only with a DART drafter")
    else:
        refuse_given(ctx, PROPOSAL_ONLY, "only with --drafter none")
    if trie and targets:
        raise click.UsageError("give one of --trie FILE or --target HOST:PORT, not both")
    if not proposals and not (trie or targets):
        hint = " (the sample trie: ngram-build --out sample.ngt)" if random_models else ""
        raise click.UsageError(f"give exactly one of --trie FILE or --target HOST:PORT{hint}")
    if not targets:
        refuse_given(ctx, HOST_ONLY, "only with --target (a trie host)")
    if kv_cache != "static":
        refuse_given(ctx, ("kv_capacity", "cuda_graphs"), "only with --kv-cache static")
    if prompt is not None and prompt_file is not None:
        raise click.UsageError("give one of -p/--prompt or --prompt-file, not both")
    client_options = tls_client_options(ca, cert, key, server_name)
    if eos_spec not in ("model", "tokenizer") and not re.fullmatch(r"[0-9]+", eos_spec):
        raise click.BadParameter(f"{eos_spec!r}: give model, tokenizer or a token id", param_hint="--eos")
    if eos_spec not in ("model", "tokenizer") and int(eos_spec) >= 1 << 63:  # no model's id; the search's int64
        raise click.BadParameter(f"{eos_spec} is not a token id of any model (past int64)", param_hint="--eos")
    from dart_client.requirements import INSTALL_HINT, missing

    if missing():
        raise click.ClickException(f"missing {', '.join(missing())}.\n{INSTALL_HINT}")
    if not random_models:
        tok_spec = _tokenizer_spec(model, tokenizer)
    if prompt is None:
        prompt = _read_prompt(prompt_file)
    import torch
    import transformers

    transformers.utils.logging.disable_progress_bar()
    from dart_client.generate import DartGenerator, ProposalGenerator
    from dart_client.proposer import LocalProposer, LookupProposer, RemoteProposer
    from dart_client.pruner import LocalPruner, RemotePruner, TokenizerMismatchError

    dev = _device(device)
    if cuda_graphs and not dev.startswith("cuda"):
        raise click.UsageError(f"--cuda-graphs: CUDA graphs need a CUDA device, --device is {dev}")
    static = dict(kv_cache=kv_cache, kv_capacity=kv_capacity, cuda_graphs=cuda_graphs, tree_budget=tree_budget)
    dt = {"auto": torch.bfloat16 if dev.startswith("cuda") else torch.float32, "float32": torch.float32,
          "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    if random_models:
        from dart_client.random_models import sample_tokenizer

        tokenizer = str(sample_tokenizer())
        model_name = "random (tiny)"
        tok = _TextTokenizer(tokenizer)
        fp_spec: str | None = tokenizer
    else:
        assert model is not None
        model_name = model
        tok = _TextTokenizer(tok_spec)
        fp_spec = _fingerprint_spec(model, tokenizer)
    ids = tok.encode(prompt, chat)
    if not ids:
        raise click.UsageError("the prompt encodes to no tokens")
    stop_eos: Any = None  # None: the target's generation config
    search_eos: int | None = None  # None: the trie header's
    if eos_spec == "tokenizer":
        e = tok.eos_token_id
        if e is None:
            raise click.UsageError(f"--eos tokenizer: the tokenizer ({tokenizer or model_name}) names no eos_token")
        stop_eos = search_eos = int(e)
    elif eos_spec != "model":
        stop_eos = search_eos = int(eos_spec)
    if max_nodes is None:  # the default is the mode's: DART's, or the engine's for proposals
        max_nodes = (_PROPOSE if proposals else _PRUNE)["max_nodes"].default
    propose_params = {"max_nodes": max_nodes, **{name: proposal_options[name] for name in PROPOSAL_ONLY}}
    params = dict(topk=topk, beam_width=beam_width, max_nodes=max_nodes, ngram_weight=ngram_weight,
                  eos_token_id=search_eos)
    try:
        from dart_client.pruner import model_fingerprint

        fp = model_fingerprint(fp_spec) if fp_spec else None
        if proposals:
            if trie:
                source: Any = LocalProposer(trie, tokenizer_fingerprint=fp, **propose_params)
            elif targets:
                source = RemoteProposer(list(targets), tokenizer_fingerprint=fp, deadline=deadline_ms / 1000,
                                        index=index, connect_timeout=1.0, client_options=client_options,
                                        **propose_params)
            else:
                source = LookupProposer(**propose_params)
        elif trie:
            source = LocalPruner(trie, tokenizer_fingerprint=fp, **params)
        else:
            source = RemotePruner(list(targets), tokenizer_fingerprint=fp, deadline=deadline_ms / 1000,
                                  index=index, connect_timeout=1.0, client_options=client_options, **params)
    except TokenizerMismatchError as e:
        raise click.ClickException(str(e)) from None
    except ValueError as e:  # a parameter outside the engine's range
        raise click.UsageError(str(e)) from None
    if fp is None and (trie or targets):
        click.echo("dart-generate: no tokenizer.json to fingerprint; the trie's tokenizer is not checked", err=True)
    gen: Any
    if random_models:
        from dart_client.random_models import random_sample_models, random_sample_target

        if proposals:
            gen = ProposalGenerator(random_sample_target(dtype=dt, device=dev), source, eos_token_id=stop_eos,
                                    **static)
        else:
            target, draft = random_sample_models(dtype=dt, device=dev)
            gen = DartGenerator(target, draft, source, eos_token_id=stop_eos, search_context=search_context, **static)
    elif proposals:
        gen = ProposalGenerator.from_pretrained(model, source, device=dev, dtype=dt, eos_token_id=stop_eos, **static)
    else:
        gen = DartGenerator.from_pretrained(model, drafter, source, device=dev, dtype=dt, tokenizer=None,
                                            eos_token_id=stop_eos, search_context=search_context, **static)
    vocab = int(getattr(gen.target.config, "vocab_size", 0) or 0)
    if eos_spec not in ("model", "tokenizer") and vocab and not 0 <= int(eos_spec) < vocab:
        # an id the model cannot emit: decoding would never stop at it and the search would drop it silently
        raise click.BadParameter(f"{eos_spec} is not a token id of the model: must be in [0, {vocab})",
                                 param_hint="--eos")
    sample = dict(temperature=temperature, top_k=top_k, top_p=top_p, sampling_order=sampling_order, seed=seed)
    from dart_client.kv_cache import CacheOverflowError
    from dart_client.lattice_log import LatticeWriter

    try:  # the message names --kv-capacity; a step past a fixed capacity is found mid-run: exit 1
        with LatticeWriter(log_lattices, topk=topk) if log_lattices else contextlib.nullcontext() as lattice_log:
            res = gen.generate(ids, max_new_tokens, **sample, lattice_log=lattice_log)
        base = gen.autoregressive(ids, max_new_tokens, **sample) if compare else None
    except CacheOverflowError as e:
        raise click.ClickException(str(e)) from None
    res.text = tok.decode(res.output_ids)
    out: dict[str, Any] = {"text": res.text, **res.summary(), "model": model_name, "hosts": list(targets),
                           "device": dev, "dtype": str(dt).replace("torch.", ""), "kv_cache": kv_cache,
                           "cuda_graphs": cuda_graphs, "tree_budget": tree_budget,
                           "eos": {"stop": sorted(gen.eos),
                                   "search": None if proposals else getattr(source, "eos_token_id", None)}}
    if proposals:
        out["drafter"] = "none"
        out["proposals"] = dict(source.params)
    if base is not None:
        out["autoregressive"] = {"tokens_per_s": base.tokens_per_s, "wall_s": base.wall_s,
                                 "new_tokens": len(base.output_ids)}
        out["speedup"] = base.wall_s / res.wall_s * len(res.output_ids) / max(1, len(base.output_ids)) \
            if res.wall_s > 0 else 0.0
        if temperature == 0:
            out["identical_to_target"] = base.output_ids == res.output_ids
    if as_json:
        click.echo(json.dumps(out, indent=2))
    else:
        click.echo(res.text)
        click.echo(format_summary(out), err=True)
        if compare:
            ar = out["autoregressive"]
            msg = f"target alone          {ar['tokens_per_s']:.1f} tokens/s   speedup {out['speedup']:.2f}x"
            if "identical_to_target" in out:
                msg += f"   identical output: {out['identical_to_target']}"
            click.echo(msg, err=True)
    close = getattr(source, "close", None)
    if close:
        close()
    if compare and out.get("identical_to_target") is False:
        sys.exit(1)


if __name__ == "__main__":
    main()
