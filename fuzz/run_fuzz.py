"""Builds the libFuzzer targets under AddressSanitizer + UBSan and runs them.

    python fuzz/run_fuzz.py --seconds 60                 # every target for a minute (what CI runs, shorter)
    python fuzz/run_fuzz.py --runs 1000000 --seconds 3000 --json bench/results/fuzz_campaign.json
    python fuzz/run_fuzz.py --corrupted                  # fuzz_trie_reader once on every corrupted copy of a trie

Targets (fuzz/*.cc; docs/RELIABILITY.md says what each checks):
  fuzz_trie_reader      arbitrary bytes as a trie file, opened and queried
  fuzz_engine_api       queries and prune with arbitrary arrays and parameters
  fuzz_server_requests  the gRPC service's request decoding and handlers

Seeds come from the test fixtures: tries built from the bundled sample
corpus (and corrupted copies of them, fuzz/corrupt_trie.py), the requests
the tests send. Needs clang and libFuzzer (infra/install-system-deps.sh).
Corpora and crash inputs go under --work (default build/fuzz/work).
Exit status 1 when a target crashed, leaked or broke an invariant.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGETS = ["fuzz_trie_reader", "fuzz_engine_api", "fuzz_server_requests"]
TINY_TEXT = ("the cat sat on the mat. the dog sat on the log. a cat and a dog met on the mat.\n"
             "the end of the story is the start of the next one.\n")


def build(build_dir: Path, targets: list[str]) -> None:
    """Configures (once) and builds the targets with clang, -DNGRAM_FUZZ=ON, ASan + UBSan."""
    if shutil.which("clang++") is None:
        raise SystemExit("clang++ is not installed (infra/install-system-deps.sh installs it)")
    if not (build_dir / "CMakeCache.txt").is_file():
        build_dir.mkdir(parents=True, exist_ok=True)
        gen = ["-G", "Ninja"] if shutil.which("ninja") else []
        subprocess.run(["cmake", *gen, "-S", str(REPO), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
                        "-DCMAKE_C_COMPILER=clang", "-DCMAKE_CXX_COMPILER=clang++", "-DNGRAM_FUZZ=ON",
                        "-DNGRAM_SANITIZE=address,undefined"], check=True, stdout=subprocess.DEVNULL)
    jobs = str(min(2, os.cpu_count() or 1))
    subprocess.run(["cmake", "--build", str(build_dir), "-j", jobs, "--target", *targets], check=True,
                   stdout=subprocess.DEVNULL)


def make_tries(work: Path) -> tuple[Path, Path]:
    """(tiny trie, sample trie): a few hundred bytes of text, and the bundled sample corpus (order 3)."""
    from indexer.cli import SAMPLE_DIR
    from indexer.pipeline import BuildConfig, build as build_trie

    tiny, sample = work / "tiny.ngt", work / "sample.ngt"
    tok = str(SAMPLE_DIR / "tokenizer.json")
    if not tiny.is_file():
        text = work / "tiny.jsonl"
        text.write_text("".join(json.dumps({"text": line}) + "\n" for line in TINY_TEXT.splitlines()))
        build_trie(BuildConfig(inputs=[str(text)], out=str(tiny), tokenizer=tok, order=3), progress=lambda _m: None)
    if not sample.is_file():
        build_trie(BuildConfig(inputs=[str(SAMPLE_DIR / "corpus")], out=str(sample), tokenizer=tok, order=3),
                   progress=lambda _m: None)
    return tiny, sample


def tiny_v2(tiny: Path) -> Path:
    """The tiny trie in file format version 2, beside it."""
    from indexer.trie_assembly import convert_to_v2

    out = tiny.with_name("tiny_v2.ngt")
    if not out.is_file():
        convert_to_v2(tiny, out)
    return out


def _engine_seed(ops: list[tuple]) -> bytes:
    """Bytes that fuzz_queries.h reads as these calls (token ids inside the vocabulary)."""
    out = bytearray()

    def tok(t: int) -> None:
        out.extend(struct.pack("<BH", 0, t))

    for op, *args in ops:
        if op == "cp":  # conditional_probs: contexts [B, C], candidates [B, K]
            ctx, cand = args
            out.extend(bytes([0, len(ctx), len(ctx[0]), len(cand[0])]))
            for row in ctx:
                for t in row:
                    tok(t)
            for row in cand:
                for t in row:
                    tok(t)
        elif op == "topk":
            ctx, k = args
            out.extend(bytes([1, len(ctx)]))
            for t in ctx:
                tok(t)
            out.extend(struct.pack("<h", k))
        elif op == "count":
            out.extend(bytes([2, len(args[0])]))
            for t in args[0]:
                tok(t)
        else:  # prune: prefix, levels of tokens (probs 0.5 each), default parameters
            prefix, levels = args
            out.extend(bytes([3, len(prefix), len(levels)]))
            for t in prefix:
                tok(t)
            out.extend(bytes(len(lv) for lv in levels))
            for lv in levels:
                for t in lv:
                    tok(t)
            out.append(0)  # probabilities as bytes / 255
            out.extend(bytes([128] * sum(len(lv) for lv in levels)))
            out.append(0)  # parameters at their defaults
    return bytes(out)


def _server_seeds() -> list[bytes]:
    """One byte for the method (0 GetInfo, 1 ConditionalProbs, 2 TopK, 3 PruneTree), then the body;
    the requests tests/test_server.py sends, valid and invalid."""
    from ngram_service.proto.ngram.v1 import ngram_pb2 as pb

    lattice = pb.PruneInput(prefix=[1, 2], level_sizes=[3, 3], tokens=[10, 11, 12, 13, 14, 15], probs=[0.5] * 6)
    msgs = [
        (0, pb.GetInfoRequest()),
        (0, pb.GetInfoRequest(index="nope")),
        (1, pb.ConditionalProbsRequest(context_len=2, num_candidates=2, contexts=[1, 2, 3, 4], candidates=[5, 6, 7, 8])),
        (1, pb.ConditionalProbsRequest(context_len=2, num_candidates=1, contexts=[1, 10**7], candidates=[3])),
        (1, pb.ConditionalProbsRequest(context_len=2, num_candidates=1, contexts=[1, 2], candidates=[3],
                                       tokenizer_fingerprint="x")),
        (2, pb.TopKRequest(context=[1, 2], k=5)),
        (2, pb.TopKRequest(context=[], k=3)),
        (3, pb.PruneTreeRequest(inputs=[lattice], params=pb.PruneParams(beam_width=4, max_nodes=8), with_scores=True)),
        (3, pb.PruneTreeRequest(inputs=[lattice, lattice], params=pb.PruneParams(eos_token_id=3,
                                                                                 level_weights=[1.0, 0.5]))),
        (3, pb.PruneTreeRequest(inputs=[pb.PruneInput(prefix=[1], level_sizes=[2], tokens=[4, 4], probs=[0.1, 2.0])])),
    ]
    return [bytes([m]) + msg.SerializeToString() for m, msg in msgs]


def seed(target: str, seeds: Path, tiny: Path, sample: Path) -> None:
    """The target's seed inputs, and the inputs that once found a bug (fuzz/regressions/TARGET/)."""
    seeds.mkdir(parents=True, exist_ok=True)
    for f in sorted((REPO / "fuzz" / "regressions" / target).glob("*")):
        shutil.copyfile(f, seeds / f"regression-{f.name}")
    if target == "fuzz_trie_reader":
        sys.path.insert(0, str(REPO / "fuzz"))
        from corrupt_trie import variants

        for name, path in (("tiny", tiny), ("tiny_v2", tiny_v2(tiny))):  # both file format versions
            data = path.read_bytes()
            (seeds / f"{name}.ngt").write_bytes(data)
            for i, (_what, blob) in enumerate(variants(data, random_flips=1)):
                (seeds / f"corrupt-{name}-{i:04d}").write_bytes(blob)
    elif target == "fuzz_engine_api":
        ops = [("cp", [[1, 2], [3, 4]], [[5, 6], [7, 8]]), ("topk", [1, 2], 5), ("count", [1, 2, 3]),
               ("prune", [1, 2], [[10, 11, 12], [13, 14, 15]]), ("prune", [5], [[1, 2]])]
        for i, op in enumerate(ops):
            (seeds / f"op-{i}").write_bytes(_engine_seed([op]))
        (seeds / "all").write_bytes(_engine_seed(ops))
    else:
        for i, body in enumerate(_server_seeds()):
            (seeds / f"request-{i:02d}").write_bytes(body)


STAT = re.compile(r"stat::(\w+):\s+(\d+)")
PROGRESS = re.compile(r"#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)")


def run_target(target: str, binary: Path, work: Path, trie: Path, runs: int | None, seconds: int,
               extra_inputs: list[Path] | None = None) -> dict:
    corpus, seeds, crashes = work / target / "corpus", work / target / "seeds", work / target / "crashes"
    for d in (corpus, crashes):
        d.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "NGRAM_FUZZ_TRIE": str(trie),
           "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=1:symbolize=1",
           "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1"}
    cmd = [str(binary), f"-artifact_prefix={crashes}/", "-print_final_stats=1", "-timeout=20",
           "-rss_limit_mb=3072", "-max_len=4096" if target != "fuzz_trie_reader" else "-max_len=16384"]
    if extra_inputs is not None:  # run each given file once
        cmd += [str(p) for p in extra_inputs]
    else:
        cmd += [f"-max_total_time={seconds}", str(corpus), str(seeds)]
        if runs:
            cmd.append(f"-runs={runs}")
    t0 = time.monotonic()
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    log = p.stdout
    (work / target / "last.log").write_text(log)
    stats = {k: int(v) for k, v in STAT.findall(log)}
    last = PROGRESS.findall(log)
    return {
        "target": target,
        "exit_code": p.returncode,
        "seconds": round(time.monotonic() - t0, 1),
        "inputs": stats.get("number_of_executed_units", len(extra_inputs or [])),
        "execs_per_sec": stats.get("average_exec_per_sec"),
        "coverage_edges": int(last[-1][1]) if last else None,
        "features": int(last[-1][2]) if last else None,
        "corpus": int(last[-1][3]) if last else None,
        "peak_rss_mb": stats.get("peak_rss_mb"),
        "crashes": sorted(x.name for x in crashes.iterdir()),
        "log_tail": log[-3000:] if p.returncode else "",
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--targets", nargs="+", default=TARGETS, choices=TARGETS)
    ap.add_argument("--seconds", type=int, default=60, help="time limit per target (default 60)")
    ap.add_argument("--runs", type=int, help="stop a target after this many inputs")
    ap.add_argument("--build-dir", type=Path, default=REPO / "build" / "fuzz")
    ap.add_argument("--work", type=Path, help="corpora, seeds, crashes (default BUILD_DIR/work)")
    ap.add_argument("--corrupted", action="store_true",
                    help="run fuzz_trie_reader once on every corrupted copy of the tiny trie in format versions 1 "
                         "and 2 (fuzz/corrupt_trie.py) and on fuzz/regressions/fuzz_trie_reader/*")
    ap.add_argument("--json", type=Path, help="write the summary here too")
    a = ap.parse_args(argv)
    work = a.work or a.build_dir / "work"
    work.mkdir(parents=True, exist_ok=True)
    targets = ["fuzz_trie_reader"] if a.corrupted else a.targets
    build(a.build_dir, targets)
    tiny, sample = make_tries(work)
    results = []
    for t in targets:
        binary = a.build_dir / "fuzz" / t
        if a.corrupted:
            sys.path.insert(0, str(REPO / "fuzz"))
            from corrupt_trie import variants

            folder = work / "corrupted"
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            for name, path in (("v1", tiny), ("v2", tiny_v2(tiny))):  # both file format versions
                for i, (_what, blob) in enumerate(variants(path.read_bytes())):
                    (folder / f"corrupt-{name}-{i:05d}").write_bytes(blob)
            files = sorted(folder.iterdir()) + sorted((REPO / "fuzz" / "regressions" / t).glob("*"))
            results.append(run_target(t, binary, work, tiny, None, a.seconds, extra_inputs=files))
            print(json.dumps({k: v for k, v in results[-1].items() if k != "log_tail"}), flush=True)
            continue
        seed(t, work / t / "seeds", tiny, sample)
        results.append(run_target(t, binary, work, sample, a.runs, a.seconds))
        print(json.dumps({k: v for k, v in results[-1].items() if k != "log_tail"}), flush=True)
    summary = {"targets": results}
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(summary, indent=1))
    bad = [r for r in results if r["exit_code"] != 0 or r["crashes"]]
    for r in bad:
        sys.stderr.write(f"{r['target']}: exit {r['exit_code']}, crashes {r['crashes']}\n{r['log_tail']}\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
