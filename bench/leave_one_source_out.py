"""Leave one source out: proposals on a kind of text no build has seen.

    python bench/leave_one_source_out.py [--corpus ../shared/data/corpus] [--work /tmp/loso]
        [--tokens 20000] [--max-doc-tokens 2048] [--max-nodes 16,64] [--no-suffix] [--sources peps,gsm8k]

For each source of the corpus (shards named SOURCE-NNNN.*: PEPs, Rust RFCs,
the Python docs, the stdlib, GSM8K, Common Crawl), a trie of --order
(3) is built from the other sources' shards alone (``ngram-build``'s
pipeline, -j --jobs; kept in --work and reused when there), and the
source's documents in the order of the SHA-1 of their text (the choice
``bench/heldout_split.py`` makes), each cut to its first --max-doc-tokens
tokens, until --tokens tokens (or --docs documents) are taken, are replayed
teacher forced through
``ngram-eval --proposals``'s evaluation (``evaluate_proposals``): the
proposals with both sources and with the corpus alone, the document alone
(a tree, and prompt lookup's chains), and, unless --no-suffix, SuffixDecoding
with its global tree over the same five sources.

Prints per source and on average (the mean of the sources' tokens per step,
each source weighing the same; and pooled, all steps together) the tokens
per verification step, and writes --out (JSON: every source's whole
evaluation, calibration included, and the build times).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from heldout_split import source_of  # noqa: E402  (bench/ is the script's folder: on the path)

from indexer.pipeline import BuildConfig, build  # noqa: E402
from indexer.shard_discovery import expand_inputs  # noqa: E402
from indexer.shards import ShardReader  # noqa: E402
from indexer.tokenizer import load_tokenizer  # noqa: E402
from ngram_eval.proposal_replay import ProposeSetting, evaluate_proposals  # noqa: E402
from ngram_eval.suffix_baseline import ARCTIC_DEFAULTS, VLLM_DEFAULTS, load_corpus_suffixes  # noqa: E402
from ngram_eval.synthetic import load_documents  # noqa: E402

SHARED = REPO.parent / "shared"


def pick_documents(files: list[Path], n: int) -> list[str]:
    """The n texts of these shards with the smallest SHA-1 (a fixed, content-defined choice)."""
    texts = [t for f in files for batch in ShardReader(f, "text") for t in batch]
    return [t for _, t in sorted((hashlib.sha1(t.encode()).hexdigest(), t) for t in texts)[:n]]


def columns(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The figures of one source's evaluation worth a column: name -> replay."""
    out: dict[str, dict[str, Any]] = {"chain (best)": result["lookup_chain"]["best"]}
    for n, r in result["lookup_alone"].items():
        out[f"document, {n}"] = r
    for r in result["tries"][0]["rows"]:
        out[f"{r['sources']}, {r['max_nodes']}"] = r
    for r in (result.get("suffix_baseline") or {}).get("rows", []):
        s = r["setting"]
        out[f"SD {s['name']}, " + (f"{r['max_nodes']}" if r["max_nodes"] else f"c{s['max_spec_tokens']}")] = r
    return out


def summarize(per_source: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per column: each source's tokens per step, their mean, and pooled (all steps together)."""
    names: list[str] = []
    for res in per_source.values():
        for k in columns(res):
            if k not in names:
                names.append(k)
    table: dict[str, Any] = {}
    for k in names:
        reps = {src: columns(res).get(k) for src, res in per_source.items()}
        have = {s: r for s, r in reps.items() if r}
        tps = {s: r["tokens_per_step"] for s, r in have.items()}
        table[k] = {"by_source": tps, "mean": sum(tps.values()) / len(tps) if tps else None,
                    "pooled": sum(r["tokens"] for r in have.values()) / max(1, sum(r["steps"] for r in have.values()))}
    return table


def format_table(per_source: dict[str, dict[str, Any]], table: dict[str, Any]) -> str:
    names = list(table)
    width = max(9, *(len(n) for n in names))
    lines = [f"{'held-out source':<16} {'docs':>4} {'tokens':>7} " + " ".join(f"{n:>{width}}" for n in names)]
    for src, res in per_source.items():
        lines.append(f"{src:<16} {res['documents']:>4} {res['tokens']:>7,} "
                     + " ".join(f"{table[n]['by_source'].get(src, float('nan')):>{width}.3f}" for n in names))
    docs = sum(r["documents"] for r in per_source.values())
    toks = sum(r["tokens"] for r in per_source.values())
    lines.append(f"{'mean of sources':<16} {docs:>4} {toks:>7,} " + " ".join(f"{table[n]['mean']:>{width}.3f}"
                                                                           for n in names))
    lines.append(f"{'pooled':<16} {'':>4} {'':>7} " + " ".join(f"{table[n]['pooled']:>{width}.3f}" for n in names))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--corpus", type=Path, default=SHARED / "data" / "corpus")
    ap.add_argument("--tokenizer", "-t", default=str(SHARED / "data" / "qwen3-tokenizer.json"))
    ap.add_argument("--work", type=Path, default=Path("/tmp/loso"), help="tries and test documents (kept)")
    ap.add_argument("--order", type=int, default=3)
    ap.add_argument("--jobs", "-j", type=int, default=1, help="build workers")
    ap.add_argument("--tokens", type=int, default=20_000, help="test tokens per source (at least: whole documents)")
    ap.add_argument("--docs", type=int, default=200, help="test documents per source at most")
    ap.add_argument("--max-doc-tokens", type=int, default=2048, help="a test document's first tokens replayed")
    ap.add_argument("--max-nodes", default="16,64", help="node budgets, comma-separated")
    ap.add_argument("--sources", default="", help="only these sources (comma-separated; default: all)")
    ap.add_argument("--no-suffix", action="store_true", help="leave SuffixDecoding out")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "leave_one_source_out.json")
    a = ap.parse_args()
    budgets = [int(x) for x in a.max_nodes.split(",")]
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731

    by_source: dict[str, list[Path]] = {}
    for f in expand_inputs([a.corpus]):
        by_source.setdefault(source_of(str(f)), []).append(f)
    chosen = [s for s in a.sources.split(",") if s] or sorted(by_source)
    unknown = [s for s in chosen if s not in by_source]
    if unknown:
        sys.exit(f"{', '.join(unknown)}: not a source of {a.corpus} ({', '.join(sorted(by_source))})")
    a.work.mkdir(parents=True, exist_ok=True)
    tok = load_tokenizer(a.tokenizer)
    settings = [ProposeSetting(n, "both") for n in budgets] + [ProposeSetting(max(budgets), "corpus")]
    per_source: dict[str, dict[str, Any]] = {}
    builds: dict[str, float | None] = {}
    for src in chosen:
        train = [str(f) for s, fs in sorted(by_source.items()) if s != src for f in fs]
        trie = a.work / f"without-{src}-o{a.order}.ngt"
        if trie.is_file():
            builds[src] = None
            say(f"{src}: {trie} kept from an earlier run")
        else:
            say(f"{src}: building {trie} from {len(train)} shards of the other sources")
            t0 = time.perf_counter()
            build(BuildConfig(inputs=train, out=str(trie), tokenizer=a.tokenizer, order=a.order, workers=a.jobs),
                  progress=lambda _m: None)
            builds[src] = time.perf_counter() - t0
            say(f"{src}: built in {builds[src]:.0f} s")
        test = a.work / f"test-{src}-{a.docs}.jsonl"
        if not test.is_file():
            tmp = test.with_name(f".{test.name}.{os.getpid()}")
            tmp.write_text("".join(json.dumps({"text": t}) + "\n" for t in pick_documents(by_source[src], a.docs)))
            os.replace(tmp, test)
        docs = []
        for d, _ in zip(load_documents([str(test)], a.tokenizer)[0], range(a.docs)):
            if sum(len(x) for x in docs) >= a.tokens:
                break
            docs.append(d[:a.max_doc_tokens])
        corpus, info = None, None
        if not a.no_suffix:
            corpus, info = load_corpus_suffixes(train, tok, max(VLLM_DEFAULTS.max_depth, ARCTIC_DEFAULTS.max_depth),
                                                progress=say)
        res = evaluate_proposals([str(trie)], docs, settings, progress=lambda m, s=src: say(f"{s}: {m}"),
                                 suffix_corpus=corpus, suffix_corpus_info=info)
        del corpus
        res["build_seconds"] = builds[src]
        per_source[src] = res
        summary = summarize({src: res})
        say(f"{src}: " + ", ".join(f"{k} {v['mean']:.3f}" for k, v in summary.items()))
    table = summarize(per_source)
    print(format_table(per_source, table))
    doc = {"corpus": str(a.corpus), "tokenizer": a.tokenizer, "order": a.order, "tokens_per_source": a.tokens,
           "max_docs_per_source": a.docs, "max_doc_tokens": a.max_doc_tokens, "max_nodes": budgets, "table": table, "sources": per_source}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = a.out.with_name(f".{a.out.name}.{os.getpid()}")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, a.out)
    say(f"wrote {a.out}")


if __name__ == "__main__":
    main()
