"""Tokens per step of proposal parameter sets, teacher forced on held-out
documents: the engine's own proposals (NgramIndex.propose through
ngram_eval.proposal_replay.replay, as `ngram-eval --proposals` replays
them) for every (trie, setting), where ngram-eval's grid covers only
--max-nodes, --sources and --discount.

    python bench/proposal_variants.py --text HELDOUT.jsonl --tokenizer TOK TRIE... \\
        --settings '[{}, {"max_branch": 24}, {"discount": 0.6, "max_nodes": 16}]' \\
        [--out bench/results/proposal_variants.json]

A setting is a dict of propose keywords ({}: the engine's defaults). Prints
one line per (trie, setting) as it finishes and writes the JSON. Not part
of the test run.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_propose import parse_settings  # noqa: E402
from ngram_eval.proposal_replay import replay  # noqa: E402
from ngram_eval.synthetic import load_documents  # noqa: E402
from ngram_service import NgramIndex  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tries", nargs="+")
    ap.add_argument("--text", required=True, help="held-out documents (the formats ngram-build reads)")
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--settings", default="[{}]", help="JSON list of propose keyword dicts")
    ap.add_argument("--out", default="bench/results/proposal_variants.json")
    a = ap.parse_args()
    settings = parse_settings(ap, a.settings)
    docs, _ = load_documents([a.text], a.tokenizer)
    print(f"{len(docs)} documents, {sum(len(d) for d in docs):,} tokens, teacher forced", flush=True)
    rows = []
    for trie in a.tries:
        index = NgramIndex.open(trie)
        for params in settings:
            t0 = time.monotonic()
            r = replay(index, docs, params).as_dict()
            rows.append({"trie": trie, "order": index.order, "setting": params, **r})
            label = json.dumps(params, separators=(",", ":"))[1:-1] or "defaults"
            print(f"{Path(trie).name:<24} {r['tokens_per_step']:.4f}  {label}  ({time.monotonic() - t0:.0f} s)",
                  flush=True)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(a.out).with_suffix(".tmp")
    tmp.write_text(json.dumps({"documents": len(docs), "rows": rows, "command": " ".join(sys.argv)}, indent=2) + "\n")
    os.replace(tmp, a.out)


if __name__ == "__main__":
    main()
