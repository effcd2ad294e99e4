"""What a tree verification step costs against a one-token (autoregressive) step, part by part.

    python bench/bench_verify.py                                   # CPU, tiny random Qwen3
    python bench/bench_verify.py --shape small --context 320       # the --oracle shape (Qwen3 vocabulary)
    python bench/bench_verify.py --device cuda --shape qwen3-8b --cuda-graphs   # the GPU figures of issue 43

A random target of --shape holds --context positions in its KV cache; a
draft tree of --tree nodes (a binary tree, depth log2) is verified against
it, and one token is decoded against it, for each KV cache:

- dynamic: transformers' DynamicCache as the generator keeps it (the mask
  built by concatenation per step, the cache grown by concatenation per
  layer, compaction by a gather and a scatter per layer and tensor);
- static: dart_client.kv_cache.StaticKVCache through static_verify's
  StaticTarget (entries written in place, the mask filled in place,
  compaction in one gather and one scatter);
- static-fixed: static with the CUDA graphs' fixed shapes (the tree padded to
  a bucket, attention over the whole capacity), run eagerly;
- static-graphs (--cuda-graphs, CUDA only): the same, replayed from CUDA graphs.

Parts timed (medians over --reps, the variants interleaved): "mask" (the
additive mask of the step), "tree fwd" (the verification forward, its mask
included), "compact" (the accepted path's entries moved into place),
"AR fwd" (a one-token forward), "chunk fwd" (the tree's T tokens as a
plain causal forward without a cache or a mask: what their compute alone
costs), and the ratio "tree / AR" (tree forward
plus compaction over the one-token forward: what a step of verification
costs in one-token steps). --attn eager,sdpa times both attention paths of
transformers (a 4-D mask goes to sdpa's kernels or to eager's matmuls).
--profile prints torch.profiler's operator table of each tree forward.
JSON to bench/results/verify.json.
"""
from __future__ import annotations

import argparse
import inspect
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch

from dart_client.kv_cache import compact, truncate
from dart_client.random_models import SHAPES, random_target
from dart_client.static_verify import TREE_BUCKETS, StaticTarget
from bench_dart import write_result  # noqa: E402


def binary_tree(n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """n nodes, node i's parent (i - 1) // 2: (ancestor mask [n, n], depths [n], an accepted path of depth 3)."""
    parents = [(i - 1) // 2 for i in range(n)]
    mask = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        j = i
        while j >= 0:
            mask[i, j] = True
            j = parents[j]
    depth = mask.sum(1) - 1
    path, node = [], min(n - 1, 14)
    while node >= 0:
        path.append(node)
        node = parents[node]
    return mask, depth, torch.tensor(path[::-1])


class Variant:
    """One KV cache kind at one attention path: the cache filled with the context, and its timed parts."""

    def __init__(self, name: str, model: Any, args: argparse.Namespace, attn: str, tree: int) -> None:
        self.name, self.model, self.attn = name, model, attn
        dev = next(model.parameters()).device
        self.dev, self.ctx = dev, args.context
        self.tmask, depth, path = (t.to(dev) for t in binary_tree(tree))
        self.n = tree
        self.ids = torch.randint(1, model.config.vocab_size, (1, self.n), device=dev)
        self.pos = (depth + args.context)[None]
        self.lens = torch.tensor([args.context], device=dev)
        self.paths = path[None]
        self.keep = len(path)
        prompt = torch.randint(1, model.config.vocab_size, (1, args.context), device=dev)
        self.static = None
        # the KV cache's argument, as the generator names it
        self.kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        if name == "dynamic":
            self.cache = getattr(model(input_ids=prompt, use_cache=True), self.kw)
        else:
            fwd = lambda ids, cache, position_ids=None, mask=None, keep=None, hidden=False: model(  # noqa: E731
                input_ids=ids, position_ids=position_ids, attention_mask=mask, use_cache=True, **{self.kw: cache})
            self.static = StaticTarget(model, fwd, model.config, dtype=model.dtype, device=dev, cache_kw=self.kw,
                                       cuda_graphs=name == "static-graphs",
                                       fixed_shapes=name in ("static-fixed", "static-graphs"))
            self.static.begin(1, args.context + 1 + tree)
            self.static.prefill(prompt, [args.context], keep=1, hidden=False)
            self.cache = self.static.cache

    def mask(self) -> Any:
        if self.static is None:  # as generate.py's _step builds it
            start = self.ctx
            ctx = torch.arange(start, device=self.dev)[None, None] < self.lens[:, None, None]
            allowed = torch.cat((ctx.expand(1, self.n, start), self.tmask[None]), dim=2)
            m = torch.zeros(allowed.shape, dtype=self.model.dtype, device=self.dev)
            return m.masked_fill_(~allowed, torch.finfo(self.model.dtype).min)[:, None]
        return self.static._fill_mask(1, self.n, self.ctx + self.n, self.lens, self.ctx, self.tmask[None])

    def tree(self) -> Any:
        if self.static is None:
            out = self.model(input_ids=self.ids, position_ids=self.pos, attention_mask=self.mask(), use_cache=True,
                             **{self.kw: self.cache})
        else:
            out = self.static.forward(self.ids, self.pos, self.tmask[None], self.lens, self.ctx, False)
        return out.logits

    def compact(self) -> None:
        compact(self.cache, self.ctx, self.lens, self.paths, self.keep, self.ctx + self.keep, False)
        self.reset()

    def reset(self) -> None:
        truncate(self.cache, self.ctx)

    def chunk(self) -> Any:
        """The same T tokens as a plain causal forward, no cache, no mask: their compute alone."""
        return self.model(input_ids=self.ids, use_cache=False).logits

    def one(self) -> Any:
        ids, pos = self.ids[:, :1], torch.tensor([[self.ctx]], device=self.dev)
        if self.static is None:
            out = self.model(input_ids=ids, position_ids=pos, use_cache=True, **{self.kw: self.cache})
        else:
            out = self.static.forward(ids, pos, torch.ones(1, 1, 1, dtype=torch.bool, device=self.dev), self.lens,
                                      self.ctx, False)
        self.reset()
        return out.logits


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--shape", default="tiny", choices=sorted(SHAPES))
    ap.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                    help="auto: bfloat16 on CUDA, float32 on the CPU")
    ap.add_argument("--context", type=int, default=128, help="positions in the KV cache before the step")
    ap.add_argument("--tree", default="64",
                    help="draft tree nodes (the root included); several, comma-separated, time each (the forward's "
                         "cost against its tokens: what a batch's tree budget trades)")
    ap.add_argument("--attn", default="sdpa", help="attention paths, comma-separated: sdpa, eager")
    ap.add_argument("--cuda-graphs", action="store_true", help="also time static-graphs (CUDA only)")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--profile", action="store_true", help="print torch.profiler's operator table per tree forward")
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "verify.json"))
    args = ap.parse_args()
    try:
        trees = [int(x) for x in args.tree.split(",")]
    except ValueError:
        ap.error(f"--tree: sizes, comma-separated (no empty item), got {args.tree!r}")
    if not trees or min(trees) < 1:
        ap.error(f"--tree: sizes of at least 1, got {args.tree!r}")
    dev = torch.device(args.device)
    if args.cuda_graphs and dev.type != "cuda":
        sys.exit("--cuda-graphs needs --device cuda (CUDA graphs are CUDA's)")
    torch.set_num_threads(args.threads)
    dtype = {"auto": torch.bfloat16 if dev.type == "cuda" else torch.float32, "float32": torch.float32,
             "bfloat16": torch.bfloat16, "float16": torch.float16}[args.dtype]
    sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)
    model = random_target(args.shape, dtype=dtype, device=dev)
    kinds = ["dynamic", "static", "static-fixed"] + (["static-graphs"] if args.cuda_graphs else [])
    variants = []
    with torch.no_grad():  # the prefills' caches keep no autograd graph (GiBs a variant at the 8B shape)
        for tree in trees:
            for attn in [a.strip() for a in args.attn.split(",") if a.strip()]:
                for kind in kinds:
                    if kind == "static-graphs" and attn != "sdpa":
                        continue
                    model.config._attn_implementation = attn
                    variants.append(Variant(kind, model, args, attn, tree))
    parts: dict[str, Callable[[Variant], Any]] = {"mask": Variant.mask, "tree fwd": Variant.tree,
                                                  "compact": Variant.compact, "AR fwd": Variant.one,
                                                  "chunk fwd": Variant.chunk}
    times: dict[tuple[str, str, int], dict[str, list[float]]] = {(v.name, v.attn, v.n): {p: [] for p in parts}
                                                                 for v in variants}
    with torch.no_grad():
        for rep in range(args.reps + 3):  # 3 warm-up rounds (the graphs' captures among them)
            for v in variants:
                model.config._attn_implementation = v.attn
                for part, f in parts.items():
                    sync()
                    t0 = time.perf_counter()
                    f(v)
                    sync()
                    dt = time.perf_counter() - t0  # the tree's entries stay for "compact", which cuts them
                    if rep >= 3:
                        times[(v.name, v.attn, v.n)][part].append(dt)
        if args.profile:
            from torch.profiler import ProfilerActivity, profile

            acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
            for v in variants:
                model.config._attn_implementation = v.attn
                with profile(activities=acts) as prof:
                    for _ in range(5):
                        v.tree()
                        v.reset()
                    sync()
                print(f"== {v.name} ({v.attn}), {v.n} nodes: tree forward x5")
                print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))
    rows = []
    by_key = {(v.name, v.attn, v.n): v for v in variants}
    for (name, attn, tree), ts in times.items():
        med = {p: statistics.median(x) for p, x in ts.items()}
        static = by_key[(name, attn, tree)].static
        # What really ran from graphs: a failed capture turns them off (static_verify logs it), and a tree
        # past the last bucket runs eagerly, its one-token forward alone replayed.
        graphs = bool(static and static.cuda_graphs)
        rows.append({"kv_cache": name, "attn": attn, "tree": tree,
                     **{f"{p.replace(' ', '_')}_ms": 1e3 * m for p, m in med.items()},
                     "tree_over_ar": (med["tree fwd"] + med["compact"]) / med["AR fwd"],
                     "cuda_graphs": graphs, "captures": static.captures if static else 0,
                     "tree_from_graph": graphs and tree <= TREE_BUCKETS[-1]})
    head = (f"{'kv cache':<15}{'attn':<7}{'tree':>6}{'mask ms':>9}{'tree fwd':>10}{'compact':>9}{'AR fwd':>9}"
            f"{'chunk fwd':>11}{'tree / AR':>11}")
    print(head + "\n" + "-" * len(head))
    for r in rows:
        print(f"{r['kv_cache']:<15}{r['attn']:<7}{r['tree']:6d}{r['mask_ms']:9.3f}{r['tree_fwd_ms']:10.3f}"
              f"{r['compact_ms']:9.3f}{r['AR_fwd_ms']:9.3f}{r['chunk_fwd_ms']:11.3f}{r['tree_over_ar']:11.2f}")
    print(f"(medians of {args.reps}, ms; tree fwd includes its mask; chunk fwd: the tree's tokens as a plain causal "
          "forward without cache or mask, their compute alone; tree / AR: (tree fwd + compact) / AR fwd)")
    if args.cuda_graphs:
        off = sorted({r["tree"] for r in rows if r["kv_cache"] == "static-graphs" and not r["cuda_graphs"]})
        eager = sorted({r["tree"] for r in rows if r["kv_cache"] == "static-graphs" and r["cuda_graphs"]
                        and not r["tree_from_graph"]})
        if off:
            print(f"WARNING: static-graphs ran eagerly at trees {off}: the capture failed (see the log above)")
        if eager:
            print(f"static-graphs at trees {eager}: past the last bucket ({TREE_BUCKETS[-1]}), the tree forward "
                  "runs eagerly; its AR fwd is replayed")
    result = {"benchmark": "tree verification step against a one-token step", "args": vars(args),
              "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else platform.processor() or "cpu",
              "torch": torch.__version__, "dtype": str(dtype).replace("torch.", ""),
              "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "rows": rows}
    write_result(Path(args.out), result)


if __name__ == "__main__":
    main()
