"""Leave one source out: proposals on a kind of text no build has seen
(``ngram-eval --proposals --leave-one-source-out CORPUS``; docs/EVALUATION.md).

A corpus' shards are grouped by source, the name before ``-NNNN`` (shards
named SOURCE-NNNN.*: ``peps-0001.json.gz`` is ``peps``). For each source, a
trie of each order is built from the other sources' shards alone
(``ngram-build``'s pipeline; kept in the work folder under a name that
hashes its inputs, so a rerun reuses it and a changed corpus does not), and
the source's own documents, in the order of the SHA-1 of their text (a
fixed, content-defined choice, as ``bench/heldout_split.py`` makes it), each
cut to its first ``max_doc_tokens`` tokens, until ``test_tokens`` tokens are
taken, are replayed teacher forced through ``evaluate_proposals``.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ngram_eval.calibration import format_calibration, pool_calibrations
from ngram_eval.proposal_replay import ProposeSetting, evaluate_proposals
from ngram_eval.synthetic import tokenize_documents

#: A test document's first tokens replayed: long documents would otherwise
#: make one source's figure one document's.
MAX_DOC_TOKENS = 2048
#: Test tokens per source (at least: whole documents are taken).
TEST_TOKENS = 20_000


def source_of(path: str) -> str:
    """A shard's source: its name before the extension and ``-NNNN``."""
    return re.sub(r"-\d+$", "", Path(path).name.split(".")[0])


def shards_by_source(corpus: Sequence[str]) -> dict[str, list[str]]:
    """The corpus' shard files (as ngram-build finds them) by source, sorted."""
    from indexer.shard_discovery import expand_inputs

    out: dict[str, list[str]] = {}
    for f in sorted(map(str, expand_inputs(list(corpus)))):
        out.setdefault(source_of(f), []).append(f)
    return dict(sorted(out.items()))


def by_digest(files: Sequence[str], text_field: str = "text") -> list[str]:
    """The texts of these shards in the order of their SHA-1 (empty ones left out)."""
    from indexer.shards import ShardReader

    texts = [t for f in files for batch in ShardReader(Path(f), text_field) for t in batch if t]
    return [t for _, t in sorted((hashlib.sha1(t.encode()).hexdigest(), t) for t in texts)]


@dataclass
class LosoConfig:
    """What a leave-one-source-out run reads and builds."""

    corpus: list[str]
    tokenizer: str
    work: Path
    orders: list[int]
    only: list[str] | None = None     # these held-out sources only (default: all)
    test_tokens: int = TEST_TOKENS
    max_doc_tokens: int = MAX_DOC_TOKENS
    text_field: str = "text"
    jobs: int = 1                     # build workers
    suffix_baseline: bool = False     # SuffixDecoding over the other sources too


def _inputs_key(files: Sequence[str], cfg: LosoConfig, *extra: object) -> str:
    """A digest of the inputs (paths, sizes, modification times), the
    tokenizer, the text field and ``extra`` (the order, or the test set's
    sizes): a kept file is reused only for the same."""
    tokenizer = cfg.tokenizer
    h = hashlib.sha1("\0".join(map(str, (tokenizer, cfg.text_field, *extra))).encode())
    for f in [*files, tokenizer]:
        st = os.stat(f) if os.path.isfile(f) else None
        h.update(f"\0{f}\0{st.st_size if st else ''}\0{st.st_mtime_ns if st else ''}".encode())
    return h.hexdigest()[:12]


def _trie_for(cfg: LosoConfig, src: str, train: list[str], order: int,
              say: Callable[[str], None]) -> tuple[str, float | None]:
    """The kept trie of the other sources at this order, built when missing;
    and the build's seconds (None when kept)."""
    import time

    from indexer.pipeline import BuildConfig, build

    path = cfg.work / f"without-{src}-o{order}-{_inputs_key(train, cfg, order)}.ngt"
    if path.is_file():
        say(f"{src}: order {order}: {path} kept from an earlier run")
        return str(path), None
    say(f"{src}: order {order}: building {path.name} from {len(train)} shards of the other sources")
    t0 = time.perf_counter()
    build(BuildConfig(inputs=train, out=str(path), tokenizer=cfg.tokenizer, order=order, workers=cfg.jobs,
                      text_field=cfg.text_field), progress=lambda _m: None)
    return str(path), time.perf_counter() - t0


def _test_documents(cfg: LosoConfig, src: str, files: list[str], tok: Any) -> list[Any]:
    """The source's test documents as token arrays, each cut to
    max_doc_tokens, in SHA-1 order until test_tokens are taken; their texts
    are kept in the work folder (the record of what was tested, and what a
    rerun with the same inputs reads)."""
    test = cfg.work / f"test-{src}-{_inputs_key(files, cfg, cfg.test_tokens, cfg.max_doc_tokens)}.jsonl"
    if test.is_file():
        texts = [json.loads(line)["text"] for line in test.read_text().splitlines()]
        return [d[:cfg.max_doc_tokens] for d in tokenize_documents(tok, texts)]
    texts, docs, taken = by_digest(files, cfg.text_field), [], 0
    for at in range(0, len(texts), 64):  # tokenized a batch at a time: a source may be large
        for d in tokenize_documents(tok, texts[at:at + 64]):
            if taken >= cfg.test_tokens:
                break
            docs.append(d[:cfg.max_doc_tokens])
            taken += len(docs[-1])
        if taken >= cfg.test_tokens:
            break
    if not docs:
        raise ValueError(f"{src}: no text to replay in {', '.join(files)} (field {cfg.text_field!r})")
    tmp = test.with_name(f".{test.name}.{os.getpid()}")
    tmp.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[:len(docs)]))
    os.replace(tmp, test)
    return docs


def leave_one_source_out(cfg: LosoConfig, settings: Sequence[ProposeSetting],
                         progress: Callable[[str], None] = lambda m: None) -> dict[str, Any]:
    """Every held-out source's evaluation (``evaluate_proposals``' JSON, one
    trie per order, with the build times) and the summary table. Raises
    ValueError for a corpus of fewer than two sources or an unknown source."""
    by_source = shards_by_source(cfg.corpus)
    if len(by_source) < 2:
        raise ValueError(f"{', '.join(cfg.corpus)}: leave one source out needs shards of at least two sources "
                         f"(named SOURCE-NNNN.*), found {', '.join(by_source) or 'none'}")
    chosen = list(dict.fromkeys(cfg.only)) if cfg.only else list(by_source)
    unknown = [s for s in chosen if s not in by_source]
    if unknown:
        raise ValueError(f"{', '.join(unknown)}: not a source of {', '.join(cfg.corpus)} "
                         f"(its sources: {', '.join(by_source)})")
    from indexer.tokenizer import load_tokenizer

    cfg.work.mkdir(parents=True, exist_ok=True)
    tok = load_tokenizer(cfg.tokenizer)
    per_source: dict[str, dict[str, Any]] = {}
    for src in chosen:
        train = [f for s, fs in by_source.items() if s != src for f in fs]
        tries, builds = [], {}
        for order in cfg.orders:
            path, seconds = _trie_for(cfg, src, train, order, progress)
            tries.append(path)
            builds[str(order)] = seconds
        docs = _test_documents(cfg, src, by_source[src], tok)
        corpus, info = None, None
        if cfg.suffix_baseline:
            from ngram_eval.suffix_baseline import ARCTIC_DEFAULTS, VLLM_DEFAULTS, load_corpus_suffixes

            corpus, info = load_corpus_suffixes(train, tok, max(VLLM_DEFAULTS.max_depth, ARCTIC_DEFAULTS.max_depth),
                                                text_field=cfg.text_field, progress=progress)
        res = evaluate_proposals(tries, docs, settings, progress=lambda m, s=src: progress(f"{s}: {m}"),
                                 suffix_corpus=corpus, suffix_corpus_info=info)
        del corpus
        res["build_seconds"] = builds
        per_source[src] = res
        progress(f"{src}: " + ", ".join(f"{k} {v['mean']:.3f}" for k, v in summarize({src: res}).items()))
    return {"mode": "leave_one_source_out", "corpus": list(cfg.corpus), "orders": list(cfg.orders),
            "test_tokens": cfg.test_tokens, "max_doc_tokens": cfg.max_doc_tokens,
            "table": summarize(per_source), "combined": combined(per_source), "sources": per_source}


def _columns(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """One source's figures worth a column: name -> replay."""
    out: dict[str, dict[str, Any]] = {"chain (best)": result["lookup_chain"]["best"]}
    for n, r in result["lookup_alone"].items():
        out[f"document, {n}"] = r
    for t in result["tries"]:
        for r in t["rows"]:
            out[f"o{t['order']} {r['sources']}, {r['max_nodes']}"] = r
    for r in (result.get("suffix_baseline") or {}).get("rows", []):
        s = r["setting"]
        out[f"SD {s['name']}, " + (f"{r['max_nodes']}" if r["max_nodes"] else f"c{s['max_spec_tokens']}")] = r
    return out


def summarize(per_source: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per column: each source's tokens per step, their mean (each source
    weighing the same) and pooled (all steps together)."""
    names: list[str] = []
    for res in per_source.values():
        names += [k for k in _columns(res) if k not in names]
    table: dict[str, Any] = {}
    for k in names:
        have = {s: r for s, res in per_source.items() if (r := _columns(res).get(k))}
        tps = {s: r["tokens_per_step"] for s, r in have.items()}
        table[k] = {"by_source": tps, "mean": sum(tps.values()) / len(tps) if tps else None,
                    "pooled": sum(r["tokens"] for r in have.values()) / max(1, sum(r["steps"] for r in have.values()))}
    return table


def _mean(reps: Sequence[dict[str, Any]]) -> float:
    return sum(r["tokens_per_step"] for r in reps) / len(reps)


def combined(per_source: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The sources as one evaluation, in ``evaluate_proposals``' shape (what
    ``plot_proposals`` draws): each row's tokens per step the mean of the
    sources' (the table's "mean of sources"), its calibration every
    source's nodes pooled."""
    results = list(per_source.values())
    first = results[0]
    tries = []
    for i, t in enumerate(first["tries"]):
        rows = [{**{k: r[k] for k in ("max_nodes", "sources", "discount")},
                 "tokens_per_step": _mean([res["tries"][i]["rows"][j] for res in results]),
                 "calibration": pool_calibrations([res["tries"][i]["rows"][j]["calibration"] for res in results])}
                for j, r in enumerate(t["rows"])]
        tries.append({"path": "tries of the other sources", "order": t["order"], "rows": rows,
                      "calibration_row": t["calibration_row"]})
    out: dict[str, Any] = {
        "documents": sum(r["documents"] for r in results), "tokens": sum(r["tokens"] for r in results),
        "texts": ["each source, on tries of the others"],
        "lookup_alone": {n: {"tokens_per_step": _mean([res["lookup_alone"][n] for res in results])}
                         for n in first["lookup_alone"]},
        "tries": tries}
    if first.get("suffix_baseline"):
        out["suffix_baseline"] = {"rows": [
            {"setting": r["setting"], "max_nodes": r["max_nodes"],
             "tokens_per_step": _mean([res["suffix_baseline"]["rows"][j] for res in results])}
            for j, r in enumerate(first["suffix_baseline"]["rows"])]}
    return out


def format_loso(result: dict[str, Any]) -> str:
    """The table: a row per held-out source, then the mean of sources and pooled."""
    per_source, table = result["sources"], result["table"]
    names = list(table)
    width = max(9, *(len(n) for n in names))
    lines = ["tokens per verification step, teacher forced, on each source with a trie of the others",
             f"{'held-out source':<16} {'docs':>4} {'tokens':>7} " + " ".join(f"{n:>{width}}" for n in names)]
    for src, res in per_source.items():
        lines.append(f"{src:<16} {res['documents']:>4} {res['tokens']:>7,} "
                     + " ".join(f"{table[n]['by_source'].get(src, float('nan')):>{width}.3f}" for n in names))
    docs = sum(r["documents"] for r in per_source.values())
    toks = sum(r["tokens"] for r in per_source.values())
    lines.append(f"{'mean of sources':<16} {docs:>4} {toks:>7,} "
                 + " ".join(f"{table[n]['mean']:>{width}.3f}" for n in names))
    lines.append(f"{'pooled':<16} {'':>4} {'':>7} " + " ".join(f"{table[n]['pooled']:>{width}.3f}" for n in names))
    cal = []
    for t in result["combined"]["tries"]:
        r = t["rows"][t["calibration_row"]]
        cal.append((f"order {t['order']} ({r['max_nodes']} nodes)", r["calibration"]))
    lines += ["", "Calibration, every source's nodes pooled: nodes by predicted path probability (their score), "
                  "the mean score and the share accepted", *format_calibration(cal)]
    return "\n".join(lines)
