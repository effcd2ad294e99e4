"""dart-generate: DART decoding of one prompt, with the figures that matter.

    dart-generate MODEL_DIR DRAFTER_DIR --trie corpus.ngt -p "def fib(n):"
    dart-generate MODEL_DIR DRAFTER_DIR --host 10.0.0.5:50051 --prompt-file q.txt --chat
    dart-generate --random-models --trie sample.ngt -p "def fib(n):"   # no checkpoints

The text goes to stdout; the figures (mean accepted length, tokens/s, time
per step split into target forward, drafter forward, pruning and transport)
to stderr, or everything as one JSON object with --json.

Nothing here imports torch before the options are parsed: ``--help`` works
after the base install, and a run without torch says what to install.
"""
from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Any

import click

from ngram_service.tree import DEFAULTS

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
        cfg = Path(self.spec).parent / "tokenizer_config.json"
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
    if name != "auto":
        return name
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def format_summary(s: dict[str, Any]) -> str:
    ps = s["per_step"]
    ms = lambda x: f"{1e3 * x:8.3f} ms"
    lines = [
        f"new tokens            {s['new_tokens']}  in {s['steps']} steps ({s['mode']})",
        f"mean accepted length  {s['mean_accepted_length']:.3f}",
        f"tokens/s              {s['tokens_per_s']:.1f}   (wall {s['wall_s']:.3f} s, prefill {s['prefill_s']:.3f} s)",
        "time per step:",
        f"  target forward      {ms(ps['target_s'])}",
        f"  drafter forward     {ms(ps['drafter_s'])}",
        f"  pruning             {ms(ps['prune_s'])}",
        f"  transport           {ms(ps['transport_s'])}",
        f"  verify + KV cache   {ms(ps['verify_s'])}",
        f"  total               {ms(ps['total_s'])}   pruning + transport: {100 * ps['prune_transport_share']:.1f}%",
    ]
    pr = s.get("pruner") or {}
    if pr and s.get("hosts"):
        lines.append(f"trees from the host   {s['remote_steps']}/{s['steps']}   fallbacks {pr.get('fallbacks', 0)}"
                     + (f"   errors {pr['errors']}" if pr.get("errors") else ""))
    return "\n".join(lines)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("model", required=False, type=click.Path(exists=True, file_okay=False))
@click.argument("drafter", required=False, type=click.Path(exists=True, file_okay=False))
@click.option("--random-models", is_flag=True,
              help="Instead of MODEL and DRAFTER: a tiny random target and drafter over the bundled sample "
                   "tokenizer, to try dart-generate without checkpoints (with the sample trie: "
                   "ngram-build --out sample.ngt, then --trie sample.ngt).")
@click.option("--trie", type=click.Path(exists=True, dir_okay=False), help="Prune in process with this trie file.")
@click.option("--host", "hosts", multiple=True, help="Trie host host:port (repeat for replicas).")
@click.option("-p", "--prompt", help="The prompt text (default: --prompt-file, else stdin).")
@click.option("--prompt-file", type=click.File("r"), help="Read the prompt from this file ('-': stdin).")
@click.option("--chat/--no-chat", default=False, help="Wrap the prompt in the tokenizer's chat template.")
@click.option("-n", "--max-new-tokens", type=click.IntRange(min=1), default=256, show_default=True)
@click.option("--temperature", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="0: greedy (lossless); > 0: tree speculative sampling.")
@click.option("--top-k", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--top-p", type=click.FloatRange(0, 1), default=1.0, show_default=True)
@click.option("--seed", type=int, default=None)
@click.option("--tokenizer", help="tokenizer.json or folder [default: MODEL].")
@click.option("--device", default="auto", show_default=True, help="cpu, cuda, cuda:1, ...")
@click.option("--dtype", type=click.Choice(["auto", "float32", "bfloat16", "float16"]), default="auto",
              show_default=True, help="auto: bfloat16 on CUDA, float32 on CPU.")
@click.option("--deadline-ms", type=click.FloatRange(min=0.1), default=5.0, show_default=True,
              help="RPC deadline per tree (--host).")
@click.option("--topk", type=click.IntRange(min=1), default=25, show_default=True, help="Candidates per level.")
@click.option("--beam-width", type=click.IntRange(min=1), default=DEFAULTS["beam_width"], show_default=True)
@click.option("--max-nodes", type=click.IntRange(min=0), default=DEFAULTS["max_nodes"], show_default=True)
@click.option("--ngram-weight", type=click.FloatRange(min=0), default=DEFAULTS["ngram_weight"], show_default=True)
@click.option("--eos", "eos_spec", default="model", show_default=True,
              help="EOS for stopping and for the search. model: stop at the target's generation config EOS, "
                   "search with the trie header's; tokenizer: the tokenizer's eos_token_id for both (DART); "
                   "an integer id: that id for both.")
@click.option("--search-context", type=click.Choice(["sequence", "step"]), default="sequence", show_default=True,
              help="What the search sees: the whole sequence (its last N-1 tokens), or DART's last step's tokens.")
@click.option("--sampling-order", type=click.Choice(["dart", "transformers"]), default="dart", show_default=True,
              help="dart: temperature, top-p, top-k; transformers: temperature, top-k, top-p.")
@click.option("--compare", is_flag=True, help="Also decode with the target alone: speedup, and (greedy) equality.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (text and figures) to stdout.")
@click.option("--log-lattices", type=click.Path(dir_okay=False),
              help="Record each step's draft lattice and committed tokens (Parquet) for ngram-eval.")
def main(model: str | None, drafter: str | None, random_models: bool, trie: str | None, hosts: tuple[str, ...],
         prompt: str | None, prompt_file: Any, chat: bool, max_new_tokens: int, temperature: float, top_k: int,
         top_p: float, seed: int | None, tokenizer: str | None, device: str, dtype: str, deadline_ms: float,
         topk: int, beam_width: int, max_nodes: int, ngram_weight: float, eos_spec: str, search_context: str,
         sampling_order: str, compare: bool, as_json: bool, log_lattices: str | None) -> None:
    """DART speculative decoding of a prompt with MODEL (a transformers causal
    LM folder) and DRAFTER (a DART drafter checkpoint folder), pruning draft
    trees in process (--trie) or on a trie host (--host).

    Needs torch, transformers and safetensors (not in the base install):
    the torch build for the machine first (the CUDA build on GPU workers,
    the CPU build for tests), then pip install 'ngram-trie-host[dart]'.

    --random-models decodes with random weights instead (no MODEL, DRAFTER
    or --tokenizer): the text is gibberish, the steps and their times are
    real."""
    if random_models:
        if model or drafter:
            raise click.UsageError("--random-models replaces MODEL and DRAFTER: give one or the other")
        if tokenizer:
            raise click.UsageError("--random-models decodes over the bundled sample tokenizer: drop --tokenizer")
    elif not (model and drafter):
        raise click.UsageError("give MODEL and DRAFTER folders (or --random-models to try without checkpoints)")
    if bool(trie) == bool(hosts):
        hint = " (the sample trie: ngram-build --out sample.ngt)" if random_models else ""
        raise click.UsageError(f"give exactly one of --trie FILE or --host HOST:PORT{hint}")
    if eos_spec not in ("model", "tokenizer") and not eos_spec.lstrip("-").isdigit():
        raise click.BadParameter(f"{eos_spec!r}: give model, tokenizer or a token id", param_hint="--eos")
    from dart_client.requirements import INSTALL_HINT, missing

    if missing():
        raise click.ClickException(f"missing {', '.join(missing())}.\n{INSTALL_HINT}")
    if not random_models:
        tok_spec = _tokenizer_spec(model, tokenizer)
    if prompt is None:
        prompt = (prompt_file or click.get_text_stream("stdin")).read()
    import torch
    import transformers

    transformers.utils.logging.disable_progress_bar()
    from dart_client.generate import DartGenerator
    from dart_client.pruner import LocalPruner, RemotePruner, TokenizerMismatchError

    dev = _device(device)
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
    params = dict(topk=topk, beam_width=beam_width, max_nodes=max_nodes, ngram_weight=ngram_weight,
                  eos_token_id=search_eos)
    try:
        from dart_client.pruner import model_fingerprint

        fp = model_fingerprint(fp_spec) if fp_spec else None
        if trie:
            pruner: Any = LocalPruner(trie, tokenizer_fingerprint=fp, **params)
        else:
            pruner = RemotePruner(list(hosts), tokenizer_fingerprint=fp, deadline=deadline_ms / 1000,
                                  connect_timeout=1.0, **params)
    except TokenizerMismatchError as e:
        raise click.ClickException(str(e)) from None
    if fp is None:
        click.echo("dart-generate: no tokenizer.json to fingerprint; the trie's tokenizer is not checked", err=True)
    if random_models:
        from dart_client.random_models import random_sample_models

        target, draft = random_sample_models(dtype=dt, device=dev)
        gen = DartGenerator(target, draft, pruner, eos_token_id=stop_eos, search_context=search_context)
    else:
        gen = DartGenerator.from_pretrained(model, drafter, pruner, device=dev, dtype=dt, tokenizer=None,
                                            eos_token_id=stop_eos, search_context=search_context)
    sample = dict(temperature=temperature, top_k=top_k, top_p=top_p, sampling_order=sampling_order, seed=seed)
    from dart_client.lattice_log import LatticeWriter

    with LatticeWriter(log_lattices, topk=topk) if log_lattices else contextlib.nullcontext() as lattice_log:
        res = gen.generate(ids, max_new_tokens, **sample, lattice_log=lattice_log)
    res.text = tok.decode(res.output_ids)
    out: dict[str, Any] = {"text": res.text, **res.summary(), "model": model_name, "hosts": list(hosts),
                           "device": dev, "dtype": str(dt).replace("torch.", ""),
                           "eos": {"stop": sorted(gen.eos), "search": getattr(pruner, "eos_token_id", None)}}
    if compare:
        base = gen.autoregressive(ids, max_new_tokens, **sample)
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
    close = getattr(pruner, "close", None)
    if close:
        close()
    if compare and out.get("identical_to_target") is False:
        sys.exit(1)


if __name__ == "__main__":
    main()
