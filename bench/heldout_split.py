"""Splits a corpus into a training part and held-out documents, for
measuring what a trie predicts on text it was not built from.

    python bench/heldout_split.py CORPUS OUT [--per-source 12] [--reuse]

From each source (shards named SOURCE-NNNN.*), the --per-source documents
whose SHA-1 of text is smallest are held out (a fixed, content-defined
choice: the same documents every run); OUT/train/ gets every other document
as zstd JSON-lines shards (one per input shard), OUT/heldout.jsonl the
held-out ones, OUT/split.json what it was made from (the corpus's shards
with their sizes, and --per-source). Prints what it wrote. With --reuse, an
OUT whose split.json matches CORPUS and --per-source is kept as it is; one
that does not is split again, and whatever else OUT holds (a trie built from
the old train/) is the caller's to rebuild: the exit status says which, 0 kept,
3 split anew. Used by bench_propose.py and bench/gpu_verify_check.sh.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

import zstandard

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from indexer.shard_discovery import expand_inputs  # noqa: E402
from indexer.shards import ShardReader  # noqa: E402
from ngram_eval.leave_one_source_out import source_of  # noqa: E402


SPLIT_MADE = 3  # --reuse's exit status when OUT was split anew


def made_from(corpus: str, per_source: int) -> dict[str, object]:
    """What a split depends on: the corpus's shards (resolved path and size) and --per-source."""
    files = expand_inputs([corpus])
    return {"per_source": per_source, "shards": [[str(Path(f).resolve()), os.path.getsize(f)] for f in files]}


def split(corpus: str, out: Path, per_source: int) -> dict[str, int]:
    (out / "split.json").unlink(missing_ok=True)  # a split cut short must not keep the last one's record
    files = expand_inputs([corpus])
    by_source: dict[str, list[tuple[str, str]]] = {}  # source -> [(digest, text)]
    texts: dict[str, list[str]] = {}
    for f in files:
        texts[f] = [t for batch in ShardReader(Path(f), "text") for t in batch]
        by_source.setdefault(source_of(f), []).extend(
            (hashlib.sha1(t.encode()).hexdigest(), t) for t in texts[f])
    held = set()
    for docs in by_source.values():
        held.update(d for d, _ in sorted(docs)[:per_source])
    (out / "train").mkdir(parents=True, exist_ok=True)
    counts = {"train": 0, "heldout": 0}
    heldout_lines = []
    written = set()
    for f, ts in texts.items():
        lines = []
        for t in ts:
            if hashlib.sha1(t.encode()).hexdigest() in held:
                heldout_lines.append(json.dumps({"text": t, "source": source_of(f)}) + "\n")
                counts["heldout"] += 1
            else:
                lines.append(json.dumps({"text": t}) + "\n")
                counts["train"] += 1
        target = out / "train" / (Path(f).name.split(".")[0] + ".jsonl.zst")
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_bytes(zstandard.ZstdCompressor(level=3).compress("".join(lines).encode()))
        os.replace(tmp, target)
        written.add(target.name)
    for old in (out / "train").glob("*.jsonl.zst"):  # an earlier split's shards of another corpus
        if old.name not in written:
            old.unlink()
    target = out / "heldout.jsonl"
    tmp = target.with_name(".heldout.jsonl.tmp")
    tmp.write_text("".join(heldout_lines))
    os.replace(tmp, target)
    # Written last: a split cut short leaves no record, so --reuse makes it again.
    target = out / "split.json"
    tmp = target.with_name(".split.json.tmp")
    tmp.write_text(json.dumps(made_from(corpus, per_source), indent=1) + "\n")
    os.replace(tmp, target)
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus")
    ap.add_argument("out", type=Path)
    ap.add_argument("--per-source", type=int, default=12)
    ap.add_argument("--reuse", action="store_true",
                    help=f"keep OUT if its split.json matches; exit {SPLIT_MADE} when it was split anew")
    a = ap.parse_args()
    record = a.out / "split.json"
    if a.reuse and record.is_file() and json.loads(record.read_text()) == made_from(a.corpus, a.per_source):
        print(f"{a.out}: kept (split.json matches {a.corpus}, --per-source {a.per_source})")
        return
    if a.reuse and record.is_file():
        print(f"{a.out}: split.json records another corpus or --per-source; splitting again", file=sys.stderr)
    counts = split(a.corpus, a.out, a.per_source)
    print(f"{a.out}: {counts['train']} training documents in train/, {counts['heldout']} held out in heldout.jsonl")
    if a.reuse:
        sys.exit(SPLIT_MADE)


if __name__ == "__main__":
    main()
