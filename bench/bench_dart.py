"""DART decoding benchmark: where a decoding step's time goes, local versus remote pruning.

    python bench/bench_dart.py                                   # CPU, tiny random Qwen3
    python bench/bench_dart.py --device cuda --shape qwen3-0.6b  # Qwen3-0.6B's shape, random weights

For each mode (--modes; by default the target alone, DART with a
LocalPruner, DART with a RemotePruner on a trie host started here on
127.0.0.1, and DART with a host that does not answer) it decodes the same
prompts and reports, per decoding step: target forward (tree verification),
drafter forward, pruning on the worker (top-k on the device, copies, local
search), transport (the RPC round trip, the host's search included), verify
(acceptance + KV-cache compaction), and the share of the step spent on
pruning + transport; plus mean accepted length and tokens/s. A table goes
to stdout, JSON to bench/results/dart.json (--out), rewritten after each
round (--rounds) so that a run cut short keeps the rounds it finished
(rounds_done).

Batches (--batch-sizes, default 1,2,4,8,16): B ragged prompts decoded
together (one verification forward per step for the whole batch, one prune
call for its B trees), in every mode but dart-host-down, the target alone on the same B rows (one token per row per
forward): tokens/s over the batch (all new tokens / wall time), over the
target alone's at that B ("x AR") and over the mode's own at B = 1, and the
time of a batch step (median; the steps of the sequence that ran longest,
i.e. every step of the batch), in a second table and under "batches" in the
JSON (tokens_per_s_over_ar).

--tree-budget (default: the generators', dart_client.tree_budget.TREE_BUDGET)
bounds the tokens of a verification forward: B rows' trees share it.

--kv-cache dynamic,static (default: static, the generators' default) runs
every mode, the target alone included, with each KV cache, the modes named
MODE/KIND; "x AR" is then tokens/s over the target alone with the same
cache, and "fwd/AR" a step's target forward over the target alone's
one-token forward (JSON: tokens_per_s_over_ar, target_over_ar_forward).
--cuda-graphs replays the static cache's forwards from CUDA graphs.

The weights are random, so the mean accepted length says little about a
trained drafter (the draft vocabulary is seeded with the tokens the target
produces most, so that some drafts are accepted); the time split per step is
what this measures.

--oracle TEXT (held-out documents, the formats ngram-build reads; --tokenizer,
default the shape's: the bundled sample tokenizer for 4,096 ids, else
../shared/data/qwen3-tokenizer.json) makes the target an oracle
(dart_client/oracle.py): its whole forward runs, then its answer is the
document's next token, so greedy decoding reproduces each document and a
step accepts what teacher forcing accepts there: real acceptance at the real
forward's cost, a speedup users can read. The prompts are the first
--prompt-tokens of the first --prompts documents long enough for
--new-tokens more; the table adds tokens/s over the target alone and, for
the proposal modes, the mean accepted length of the teacher-forced replay
of the same positions (which decoding must equal). The DART modes then
draft with an OracleDrafter: the random drafter's forward runs, and its
lattices are those of ngram_eval.synthetic's stated drafter model
(LogitModel's defaults: 25 candidates, the true token at level 0 with
probability 0.9, fading by 0.85 a level) over the same documents. Trie: --trie, else for a 4,096-id shape the bundled
sample corpus built here, else the DART sample trie converted from
../shared/golden (Qwen3 vocabulary).
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# NGRAM_SHARED (as the tests read it), else ../shared next to the checkout or two levels up from a
# git worktree (wt/NAME)
SHARED = Path(os.environ["NGRAM_SHARED"]) if os.environ.get("NGRAM_SHARED") else next(
    (p for p in (REPO.parent / "shared", REPO.parent.parent / "shared") if p.is_dir()), REPO.parent / "shared")
SAMPLE_TOKENIZER = REPO / "indexer" / "sample" / "tokenizer.json"
sys.path.insert(0, str(REPO))

import numpy as np
import torch

from dart_client import DartGenerator, LocalPruner, RemotePruner
from dart_client.generate import ProposalGenerator
from dart_client.proposer import LocalProposer, LookupProposer, RemoteProposer
from dart_client.oracle import OracleDrafter, OracleTarget
from dart_client.random_models import SHAPES, random_drafter, random_target
from dart_client.tree_budget import TREE_BUDGET

TEXTS = [
    "PEP 8 -- Style Guide for Python Code\n\nIntroduction\n============\n\nThis document gives coding conventions",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    ",
    "Abstract\n========\n\nThis PEP proposes a new syntax for function decorators",
    "The Zen of Python, by Tim Peters\n\nBeautiful is better than ugly.\nExplicit is better than implicit.\n",
    "Rationale\n=========\n\nThe current implementation of the import system",
    "import sys\nimport os\n\n\ndef main(argv):\n",
    "Backwards Compatibility\n=======================\n\n",
    "Specification\n-------------\n\nThe following changes are proposed",
]


def build_trie(args: argparse.Namespace, vocab: int, work: Path) -> tuple[Path, str]:
    if args.trie:
        return Path(args.trie), "given"
    if vocab <= 4096:
        out = work / "sample.ngt"
        subprocess.run([sys.executable, "-m", "indexer.cli", "--out", str(out), "-q", "-j", "2"], check=True, cwd=REPO)
        return out, "bundled sample corpus (N=3)"
    dart = SHARED / "golden" / "dart-sample.trie"
    if dart.is_file():
        out = work / "dart-sample.ngt"
        subprocess.run([sys.executable, "-m", "indexer.cli", "--from-dart-trie", str(dart), "--out", str(out),
                        "--vocab-size", "151669", "--eos", "151643", "-q"], check=True, cwd=REPO)
        return out, "DART sample trie (converted)"
    out = work / "sample.ngt"
    subprocess.run([sys.executable, "-m", "indexer.cli", "--out", str(out), "-q", "-j", "2"], check=True, cwd=REPO)
    return out, "bundled sample corpus (4,096 ids: larger ids are dropped from the lattices)"


def prompts_for(vocab: int, n: int, length: int, ragged: bool = False) -> tuple[list[list[int]], str]:
    """n prompts of at most ``length`` tokens (ragged: prompt i cut to a
    length between length/4 and length, different from its neighbours')."""
    from tokenizers import Tokenizer

    from indexer.cli import SAMPLE_DIR

    cut = [length if not ragged else max(1, length // 4 + (i * 7919) % (length - length // 4 + 1)) for i in range(n)]
    spec = SAMPLE_DIR / "tokenizer.json" if vocab <= 4096 else SHARED / "data" / "qwen3-tokenizer.json"
    if spec.is_file():
        tok = Tokenizer.from_file(str(spec))
        out = []
        for i in range(n):
            text = TEXTS[i % len(TEXTS)] * (8 if ragged else 1)  # long enough for any cut
            out.append(tok.encode(text, add_special_tokens=False).ids[(i % 5 if ragged else 0):][:cut[i]])
        return out, spec.name
    g = torch.Generator().manual_seed(0)
    return [torch.randint(0, vocab, (cut[i],), generator=g).tolist() for i in range(n)], "random ids"


def oracle_references(args: argparse.Namespace, vocab: int) -> tuple[list[list[int]], str]:
    """The first --prompts documents of --oracle with at least --prompt-tokens
    + --new-tokens + 1 tokens, cut there: the texts the oracle follows."""
    from ngram_eval.synthetic import load_documents

    from indexer.tokenizer_source import TokenizerError

    spec = args.tokenizer or str(SAMPLE_TOKENIZER if vocab <= 4096 else SHARED / "data" / "qwen3-tokenizer.json")
    try:
        docs, _ = load_documents([args.oracle], spec)
    except (TokenizerError, OSError, ValueError) as e:
        sys.exit(f"--oracle {args.oracle} (tokenizer {spec}): {e}")
    need = args.prompt_tokens + args.new_tokens + 1
    refs = [d[:need].tolist() for d in docs if len(d) >= need][:args.prompts]
    if len(refs) < args.prompts:
        sys.exit(f"--oracle {args.oracle}: {len(refs)} documents of at least {need} tokens, --prompts wants "
                 f"{args.prompts}")
    if max(max(r) for r in refs) >= vocab:
        sys.exit(f"--oracle: the tokenizer {spec} gives ids up to {max(max(r) for r in refs)}, the "
                 f"{args.shape} shape has {vocab}")
    return refs, f"{args.oracle} ({Path(spec).name})"


def replay_tau(gen: Any, refs: list[list[int]], prompt: int, new: int) -> float | None:
    """The mean accepted length (drafts + 1) of the teacher-forced replay of
    a proposal mode at the positions decoding visits: from each prompt plus
    the token the prefill commits, the tree proposed at each position and the
    longest path the reference confirms (ngram_eval.proposal_replay)."""
    from ngram_eval.proposal_replay import accepted_length
    from ngram_service.proposals import propose_lookup

    proposer = getattr(gen, "proposer", None)
    if proposer is None:
        return None
    index = getattr(proposer, "index", None)
    if index is None and isinstance(proposer, RemoteProposer):
        return None  # the host's trees are the local mode's (same trie)
    cap = gen.tree_nodes(1)  # a one-row step's tree under the generator's tree budget
    params = proposer.params if cap is None else dict(proposer.params, max_nodes=cap)
    steps = taus = 0
    for ref in refs:
        doc = np.asarray(ref)
        at = prompt + 1
        while at < prompt + new:
            tree = (index.propose(doc[:at], **params) if index is not None
                    else propose_lookup(doc[:at], gen.vocab_size, **params))
            acc = accepted_length(tree.tokens.tolist(), tree.parents.tolist(), tree.depths.tolist(), ref, at)
            steps += 1
            taus += acc + 1
            at += acc + 1
    return taus / steps if steps else None


class Host:
    """ngram-serve-native on 127.0.0.1 (any free port)."""

    def __init__(self, trie: Path, threads: int) -> None:
        from ngram_service.serve import find_native_binary

        binary = find_native_binary()
        if binary is None:
            raise FileNotFoundError("ngram-serve-native was not built")
        self.proc = subprocess.Popen([str(binary), str(trie), "--host", "127.0.0.1", "--port", "0",
                                      "--threads", str(threads)], stderr=subprocess.PIPE, text=True)
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if ev.get("event") == "listening":
                self.target = f"127.0.0.1:{ev['port']}"
                return
        raise RuntimeError("ngram-serve-native exited at start")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


#: The modes beside the target alone (which always runs: every speedup is over it), and the names --modes
#: takes for groups of them. The remote modes need ngram-serve-native; without it they are skipped.
MODES = ("dart-local", "dart-remote", "dart-host-down", "propose-local", "propose-remote", "lookup")
MODE_GROUPS = {"dart": MODES[:3], "proposals": MODES[3:], "all": MODES}


def parse_modes(spec: str) -> list[str]:
    """--modes: mode and group names, comma-separated, in MODES' order; ValueError names the unknown one."""
    chosen: set[str] = set()
    for name in (n.strip() for n in spec.split(",")):
        if name in MODE_GROUPS:
            chosen.update(MODE_GROUPS[name])
        elif name in MODES:
            chosen.add(name)
        elif not name:
            raise ValueError(f"{spec!r} has an empty item: name a mode between every two commas")
        else:
            raise ValueError(f"unknown mode {name!r} (modes: {', '.join(MODES)}; groups: {', '.join(MODE_GROUPS)})")
    return [m for m in MODES if m in chosen]


def is_ar(mode: str) -> bool:
    """The target alone (autoregressive, or autoregressive/KV-CACHE)."""
    return mode.split("/")[0] == "autoregressive"


def decode(gen: Any, prompts: list[list[int]], new_tokens: int, mode: str) -> list[Any]:
    """One pass over the prompts, one at a time: the GenerationResults."""
    return [gen.autoregressive(p, new_tokens, stop_at_eos=False) if is_ar(mode)
            else gen.generate(p, new_tokens, stop_at_eos=False) for p in prompts]


def summarize(results: list[Any], mode: str, gen: Any, rounds: int) -> dict[str, Any]:
    steps = [s for r in results for s in r.steps]
    tokens = sum(len(r.output_ids) for r in results)
    wall = sum(r.wall_s for r in results)
    decode_s = sum(s.total_s for s in steps)
    keys = ("target_s", "drafter_s", "prune_s", "transport_s", "verify_s")
    per = {k: statistics.fmean(getattr(s, k) for s in steps) if steps else 0.0 for k in keys}
    med = {k: statistics.median(getattr(s, k) for s in steps) if steps else 0.0 for k in keys}
    total = sum(per.values())
    out = {
        "mode": mode,
        "prompts": len(results) // rounds,
        "rounds": rounds,
        "new_tokens": tokens,
        "steps": len(steps),
        "mean_accepted_length": statistics.fmean(s.accepted + 1 for s in steps)
        if steps and not is_ar(mode) else 1.0,
        "tokens_per_s": tokens / wall if wall else 0.0,
        "decode_tokens_per_s": tokens / decode_s if decode_s else 0.0,
        "per_step_mean_s": per,
        "per_step_median_s": med,
        "step_mean_s": total,
        "prune_transport_share": (per["prune_s"] + per["transport_s"]) / total if total else 0.0,
        "prune_transport_median_s": statistics.median(s.prune_s + s.transport_s for s in steps) if steps else 0.0,
        "tree_nodes_mean": statistics.fmean(s.tree_nodes for s in steps) if steps else 0.0,
    }
    out["kv_cache"] = gen.kv_cache
    out["cuda_graphs"] = bool(gen._static is not None and gen._static.cuda_graphs)
    if not is_ar(mode):
        out["remote_steps"] = sum(s.remote for s in steps)
        st = getattr(gen, "pruner", None) or getattr(gen, "proposer", None)
        st = getattr(st, "stats", None)
        out["pruner"] = st.as_dict() if st is not None else {}
    return out


def run_batches(gen: DartGenerator, prompts: list[list[int]], sizes: list[int], new_tokens: int,
                mode: str) -> list[dict[str, Any]]:
    rows = []
    run = gen.autoregressive if is_ar(mode) else gen.generate  # the target alone: one token per row per forward
    for b in sizes:
        batch = [prompts[i % len(prompts)] for i in range(b)]
        run(batch, 4, stop_at_eos=False)  # warm-up at this shape
        t0 = time.perf_counter()
        results = run(batch, new_tokens, stop_at_eos=False)
        wall = time.perf_counter() - t0
        longest = max(results, key=lambda r: len(r.steps))
        steps = longest.steps
        tokens = sum(len(r.output_ids) for r in results)
        rows.append({
            "mode": mode,
            "kv_cache": gen.kv_cache,
            "batch": b,
            "new_tokens": tokens,
            "steps": len(steps),
            "tokens_per_s": tokens / wall,
            "wall_s": wall,
            "step_median_s": statistics.median(s.total_s for s in steps),
            "step_parts_mean_s": {k: statistics.fmean(getattr(s, k) for s in steps)
                                  for k in ("target_s", "drafter_s", "prune_s", "transport_s", "verify_s")},
            "mean_batch": statistics.fmean(s.batch_size for s in steps),
            "mean_accepted_length": statistics.fmean(s.accepted + 1 for r in results for s in r.steps),
            "tree_nodes_mean": statistics.fmean(s.tree_nodes for r in results for s in r.steps),
            "remote_steps": sum(s.remote for s in steps),
        })
    return rows


def median_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The round whose tokens/s is the median (rounds of one mode and batch size)."""
    rows = sorted(rows, key=lambda r: r["tokens_per_s"])
    return dict(rows[len(rows) // 2], rounds=len(rows))


def batch_table(rows: list[dict[str, Any]]) -> str:
    head = (f"{'mode':<22}{'B':>4}{'tok/s':>9}{'x AR':>6}{'x B=1':>7}{'step ms':>9}{'target':>9}{'drafter':>9}"
            f"{'prune':>9}{'transp.':>9}{'verify':>9}{'tau':>6}{'nodes':>7}{'mean B':>8}")
    lines = [head, "-" * len(head)]
    one = {r["mode"]: r["tokens_per_s"] for r in rows if r["batch"] == 1}
    for r in rows:
        p = r["step_parts_mean_s"]
        ms = lambda x: f"{1e3 * x:9.3f}"
        x_ar = f"{r['tokens_per_s_over_ar']:6.2f}" if "tokens_per_s_over_ar" in r else f"{'-':>6}"
        x_one = f"{r['tokens_per_s'] / one[r['mode']]:7.2f}" if r["mode"] in one else f"{'-':>7}"
        lines.append(f"{r['mode']:<22}{r['batch']:4d}{r['tokens_per_s']:9.1f}{x_ar}{x_one}{ms(r['step_median_s'])}"
                     f"{ms(p['target_s'])}{ms(p['drafter_s'])}{ms(p['prune_s'])}{ms(p['transport_s'])}"
                     f"{ms(p['verify_s'])}{r['mean_accepted_length']:6.2f}{r['tree_nodes_mean']:7.1f}"
                     f"{r['mean_batch']:8.2f}")
    lines.append("(tok/s: all new tokens of the batch / wall; x AR: over the target alone's at the same B with the "
                 "same KV cache; step ms: median batch step; parts: means per batch step; nodes: a row's tree, "
                 "root included, under --tree-budget)")
    return "\n".join(lines)


def table(rows: list[dict[str, Any]]) -> str:
    head = (f"{'mode':<22}{'tau':>6}{'replay':>7}{'tok/s':>9}{'x AR':>6}{'step ms':>9}{'target':>9}{'drafter':>9}"
            f"{'prune':>9}{'transp.':>9}{'verify':>9}{'prune+tr':>10}{'p+t med':>9}{'remote':>8}{'fwd/AR':>8}")
    lines = [head, "-" * len(head)]
    for r in rows:
        # the target alone with the same KV cache: tokens/s and its one-token forward (kept in the row: the JSON)
        base = next((a for a in rows if is_ar(a["mode"]) and a.get("kv_cache") == r.get("kv_cache")), None)
        ar = base["tokens_per_s"] if base else 0.0
        ar_fwd = base["per_step_mean_s"]["target_s"] if base else 0.0
        p = r["per_step_mean_s"]
        r["target_over_ar_forward"] = p["target_s"] / ar_fwd if ar_fwd else None
        r["tokens_per_s_over_ar"] = r["tokens_per_s"] / ar if ar else None
        ms = lambda x: f"{1e3 * x:9.3f}"
        remote = f"{r.get('remote_steps', 0)}/{r['steps']}" if "remote_steps" in r else "-"
        replay = f"{r['replay_tau']:7.2f}" if r.get("replay_tau") else f"{'-':>7}"
        speedup = f"{r['tokens_per_s'] / ar:6.2f}" if ar else f"{'-':>6}"
        lines.append(f"{r['mode']:<22}{r['mean_accepted_length']:6.2f}{replay}{r['tokens_per_s']:9.1f}{speedup}"
                     f"{ms(r['step_mean_s'])}"
                     f"{ms(p['target_s'])}{ms(p['drafter_s'])}{ms(p['prune_s'])}{ms(p['transport_s'])}"
                     f"{ms(p['verify_s'])}{100 * r['prune_transport_share']:9.1f}%{ms(r['prune_transport_median_s'])}"
                     f"{remote:>8}"
                     + (f"{r['target_over_ar_forward']:8.2f}" if r["target_over_ar_forward"] else f"{'-':>8}"))
    lines.append("(ms per decoding step, means; prune = top-k + copies + local search on the worker, or proposing; "
                 "transport = RPC round trip incl. the host's search; p+t med: median of prune + transport; "
                 "replay: --oracle's teacher-forced mean accepted length at the same positions; x AR: tok/s over "
                 "the target alone's, with the same KV cache; fwd/AR: the step's target forward over the target "
                 "alone's one-token forward)")
    return "\n".join(lines)


def write_result(out: Path, result: dict[str, Any]) -> None:
    """The benchmark's JSON, written whole (a temporary file renamed)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n")
    tmp.replace(out)
    print(f"# wrote {out}", file=sys.stderr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--shape", default="tiny", choices=sorted(SHAPES))
    ap.add_argument("--family", default="qwen3", choices=["qwen3", "llama"])
    ap.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--draft-length", type=int, default=7, help="mask positions (D - 1)")
    ap.add_argument("--draft-vocab", type=int, default=32000)
    ap.add_argument("--trie", help="trie file (default: see the module doc)")
    ap.add_argument("--deadline-ms", type=float, default=5.0)
    ap.add_argument("--host-threads", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None,
                    help="torch CPU threads (default: 1 on the CPU, where tiny models gain nothing from more and "
                         "a shared machine makes them contend; torch's default on CUDA)")
    ap.add_argument("--modes", default="dart",
                    help="what decodes beside the target alone (always run), comma-separated: "
                         f"{', '.join(MODES)}, or the groups {', '.join(f'{g} ({MODE_GROUPS[g][0]}...)' for g in MODE_GROUPS)}"
                         "; dart: the drafter pruned in process, on a host started here, and with that host down; "
                         "proposals: no drafter, trees proposed by the trie in process, by the host, or by prompt "
                         "lookup alone (default: dart)")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds of all modes (A, B, A, B)")
    ap.add_argument("--batch-sizes", default="1,2,4,8,16",
                    help="batch sizes for the batched decoding table ('' to skip)")
    ap.add_argument("--oracle", metavar="TEXT",
                    help="held-out documents the target follows (module doc): real acceptance, real cost")
    ap.add_argument("--tokenizer", help="--oracle's tokenizer (default: the shape's, see the module doc)")
    ap.add_argument("--kv-cache", default="static",
                    help="the target's KV caches to compare, comma-separated: dynamic (transformers' DynamicCache), "
                         "static (dart_client.kv_cache.StaticKVCache); with more than one, each mode runs with each, "
                         "named MODE/KIND, the target alone too")
    ap.add_argument("--tree-budget", type=int, default=TREE_BUDGET,
                    help="the generators' tree_budget: the most tokens of a verification forward, all rows' trees "
                         "and roots (0: no budget; default %(default)s)")
    ap.add_argument("--cuda-graphs", action="store_true",
                    help="the static cache's forwards replayed from CUDA graphs (needs --device cuda)")
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "dart.json"))
    args = ap.parse_args()
    try:
        modes = parse_modes(args.modes)
    except ValueError as e:
        ap.error(f"--modes: {e}")
    if args.tree_budget and args.tree_budget < 2:
        ap.error(f"--tree-budget: at least 2 (a root and a node), or 0 for none; got {args.tree_budget}")

    dev = torch.device(args.device)
    kinds = [k.strip() for k in args.kv_cache.split(",") if k.strip()]
    if not kinds or any(k not in ("dynamic", "static") for k in kinds):
        ap.error(f"--kv-cache: dynamic, static or both, got {args.kv_cache!r}")
    if args.cuda_graphs and (dev.type != "cuda" or "static" not in kinds):
        ap.error("--cuda-graphs needs --device cuda and --kv-cache static (CUDA graphs are CUDA's)")
    if args.trie and not Path(args.trie).is_file():
        ap.error(f"--trie {args.trie}: no such file")

    def kv(kind: str) -> dict[str, Any]:
        return dict(kv_cache=kind, cuda_graphs=args.cuda_graphs and kind == "static",
                    tree_budget=args.tree_budget or None)

    def named(mode: str, kind: str) -> str:
        return mode if len(kinds) == 1 else f"{mode}/{kind}"

    if args.threads or dev.type == "cpu":
        torch.set_num_threads(args.threads or 1)
    dtype = {"auto": torch.bfloat16 if dev.type == "cuda" else torch.float32, "float32": torch.float32,
             "bfloat16": torch.bfloat16, "float16": torch.float16}[args.dtype]
    sizes = [int(x) for x in args.batch_sizes.split(",") if x.strip()]
    start = time.perf_counter()

    def progress(what: str) -> None:  # a large shape takes minutes: say where it is
        print(f"# {time.perf_counter() - start:7.1f} s  {what}", file=sys.stderr, flush=True)

    refs: list[list[int]] = []
    if args.oracle:  # before the target: a large shape takes a minute to build, a bad tokenizer a second to find
        progress(f"tokenizing {args.oracle}")
        refs, prompt_src = oracle_references(args, SHAPES[args.shape]["vocab_size"])
    with tempfile.TemporaryDirectory(prefix="bench-dart-") as work, contextlib.ExitStack() as stack:
        progress(f"building a random {args.shape} target on {dev}")
        target = random_target(args.shape, family=args.family, dtype=dtype, device=dev)
        progress(f"target built: {sum(p.numel() for p in target.parameters()) / 1e9:.2f} B parameters on "
                 f"{next(target.parameters()).device}")
        vocab = target.config.vocab_size
        trie, trie_src = build_trie(args, vocab, Path(work))
        if args.oracle:
            target = OracleTarget(target, refs)
            prompts = [r[:args.prompt_tokens] for r in refs]
            # ragged batches: each document cut at several lengths (rows of one document follow it alike)
            n = len(refs)
            ragged = [refs[i % n][:max(target.fingerprint_tokens, args.prompt_tokens - 3 * (i // n))]
                      for i in range(max(sizes, default=1))]
        else:
            prompts, prompt_src = prompts_for(vocab, args.prompts, args.prompt_tokens)
            ragged, _ = prompts_for(vocab, max(sizes, default=1), args.prompt_tokens, ragged=True)
        print(f"# {args.shape} ({args.family}), {dev} {str(dtype).replace('torch.', '')}, trie: {trie_src}, "
              f"prompts: {prompt_src}", file=sys.stderr)

        probe = DartGenerator(target, random_drafter(target, draft_length=args.draft_length, draft_vocab_size=16),
                              LocalPruner(trie))
        probe.autoregressive(prompts[0], 8)  # warm-up
        # Seed the draft vocabulary with what the target says most (see the module doc): with --oracle, the
        # documents' continuations, known without decoding them.
        said = collections.Counter(t for r in refs for t in r[args.prompt_tokens:]) if refs else collections.Counter(
            t for p in prompts for t in probe.autoregressive(p, args.new_tokens).output_ids)
        dv = min(args.draft_vocab, vocab)
        ids = [t for t, _ in said.most_common(dv)]
        seen = set(ids)
        ids += [i for i in range(vocab) if i not in seen][: dv - len(ids)]
        drafter = random_drafter(target, draft_length=args.draft_length, draft_ids=ids, seed=1)
        if refs:  # its forward runs; its lattices are ngram_eval.synthetic's model of the text
            from ngram_eval.synthetic import LogitModel, TextLattices

            drafter = OracleDrafter(drafter, refs, TextLattices([np.asarray(r) for r in refs],
                                                                LogitModel(depth=args.draft_length + 1)))
        progress("drafter built")

        host = None
        if any(m.endswith("-remote") for m in modes):
            try:
                host = Host(trie, args.host_threads)
                stack.callback(host.stop)
            except (FileNotFoundError, RuntimeError) as e:
                print(f"# remote modes skipped: {e}", file=sys.stderr)
        pr = rp = None
        if host is not None and "dart-remote" in modes:
            pr = stack.enter_context(RemotePruner(host.target, deadline=args.deadline_ms / 1000))
        if host is not None and "propose-remote" in modes:
            rp = stack.enter_context(RemoteProposer(host.target, deadline=args.deadline_ms / 1000))
        makers = {  # the mode's generator for a KV cache kind; None: skipped
            "dart-local": lambda k: DartGenerator(target, drafter, LocalPruner(trie), **kv(k)),
            "dart-remote": lambda k: pr and DartGenerator(target, drafter, pr, **kv(k)),
            "propose-local": lambda k: ProposalGenerator(target, LocalProposer(trie), **kv(k)),
            "propose-remote": lambda k: rp and ProposalGenerator(target, rp, **kv(k)),
            "lookup": lambda k: ProposalGenerator(target, LookupProposer(), **kv(k)),
        }
        gens: dict[str, Any] = {}
        for kind in kinds:
            gens[named("autoregressive", kind)] = DartGenerator(target, probe.drafter, probe.pruner, **kv(kind))
            for mode in modes:
                gen = makers[mode](kind) if mode in makers else None
                if gen:
                    gens[named(mode, kind)] = gen
        progress("warm-up of every mode")
        for mode, gen in gens.items():  # warm-up, then the stats count the timed steps only
            # CUDA graphs: long enough for most tree sizes' graphs to be captured before the timed rounds
            decode(gen, prompts[:1], 64 if args.cuda_graphs else 8, mode)
            link = getattr(gen, "pruner", None) or getattr(gen, "proposer", None)
            if hasattr(link, "stats"):
                link.stats.__init__()
        # Interleaved (A, B, C, A, B, C, ...): on a GPU the mode timed first can pay far more per forward.
        results: dict[str, list[Any]] = {m: [] for m in gens}
        batch_rows: dict[tuple[str, int], list[dict[str, Any]]] = {}
        replays: dict[str, float | None] = {}

        def report(rounds: int, extra: list[dict[str, Any]] = ()) -> tuple[list[dict[str, Any]],
                                                                           list[dict[str, Any]], str]:
            """The rows so far, written to --out: a run cut short (a device's time limit) keeps its rounds."""
            rows = [summarize(results[m], m, gens[m], rounds) for m in gens] + list(extra)
            if refs:
                for row in rows[:len(gens)]:
                    outs = [r.output_ids for r in results[row["mode"]]]
                    row["follows_the_text"] = all(o == ref[args.prompt_tokens:args.prompt_tokens + args.new_tokens]
                                                  for o, ref in zip(outs, refs * rounds))
                    if row["mode"] not in replays:  # the same each round: replayed once
                        replays[row["mode"]] = replay_tau(gens[row["mode"]], refs, args.prompt_tokens,
                                                          args.new_tokens)
                    row["replay_tau"] = replays[row["mode"]]
            batches = [median_row(v) for v in batch_rows.values()]
            for row in batches:  # tokens/s over the target alone's at the same B, with the same cache
                ar = next((a for a in batches if is_ar(a["mode"]) and a["batch"] == row["batch"]
                           and a["kv_cache"] == row["kv_cache"]), None)
                if ar is not None:
                    row["tokens_per_s_over_ar"] = row["tokens_per_s"] / ar["tokens_per_s"]
            text = table(rows)  # fills each row's ratios over the target alone
            write_result(Path(args.out), {
                "benchmark": "dart_client decoding step split",
                "args": vars(args),
                "modes_run": list(gens),
                "rounds_done": rounds,
                "trie": trie_src,
                "prompts_from": prompt_src,
                "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else platform.processor() or "cpu",
                "torch": torch.__version__,
                "threads": torch.get_num_threads(),
                "target": {k: getattr(target.config, k) for k in ("hidden_size", "num_hidden_layers", "vocab_size")},
                "drafter": {"draft_length": args.draft_length, "levels": args.draft_length + 1, "draft_vocab": dv},
                "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
                "modes": rows,
                "batches": batches,
            })
            return rows, batches, text

        for r in range(args.rounds):
            for mode, gen in gens.items():
                progress(f"round {r + 1}/{args.rounds}: {mode}")
                results[mode] += decode(gen, prompts, args.new_tokens, mode)
            for mode, gen in gens.items():
                if sizes:
                    progress(f"round {r + 1}/{args.rounds}: {mode}, batches {args.batch_sizes}")
                for row in run_batches(gen, ragged, sizes, args.new_tokens, mode):
                    batch_rows.setdefault((mode, row["batch"]), []).append(row)
            if r + 1 < args.rounds:
                report(r + 1)
        down = []
        if "dart-host-down" in modes:  # a host that does not answer: every step falls back to the local pruner
            with RemotePruner("127.0.0.1:9", deadline=args.deadline_ms / 1000, connect_timeout=0.1) as pruner:
                gen = DartGenerator(target, drafter, pruner, **kv(kinds[0]))
                down.append(summarize(decode(gen, prompts, args.new_tokens, "dart-host-down"), "dart-host-down",
                                      gen, 1))
        rows, batches, text = report(args.rounds, down)
        if refs and not all(row["follows_the_text"] for row in rows[:len(gens)]):
            print("# WARNING: a mode did not reproduce the oracle's text", file=sys.stderr)

    print(text)
    if batches:
        print()
        print(batch_table(batches))


if __name__ == "__main__":
    main()
