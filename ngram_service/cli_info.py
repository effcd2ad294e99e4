"""`ngram-info`: what a trie file holds, and whether it is intact."""
from __future__ import annotations

import json
import sys

import click

from ngram_service.cli_options import CONTEXT_SETTINGS, ToolCommand, json_option
from ngram_service.index import NgramIndex, TrieFormatError


@click.command("ngram-info", cls=ToolCommand, context_settings=CONTEXT_SETTINGS)
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
@click.option("--verify", is_flag=True, help="Check every section's CRC-32C (reads the whole file).")
@click.option("--sections", is_flag=True, help="Also list the section table.")
@json_option()
def main(path: str, verify: bool, sections: bool, as_json: bool) -> None:
    """Print a trie file's header and metadata: order, vocabulary, EOS,
    tokenizer fingerprint, corpus manifest, build parameters, n-grams per
    order, bytes per n-gram, and the memory the trie takes read into RAM.
    Exit status 1 if the file is refused."""
    try:
        idx = NgramIndex.open(path, verify=verify)
    except (TrieFormatError, OSError) as e:
        click.echo(f"ngram-info: {e}", err=True)
        sys.exit(1)
    info = idx.info()
    info["bytes_per_ngram"] = round(info["file_bytes"] / max(info["ngrams_total"], 1), 3)
    info["ram_bytes_per_ngram"] = round(info["ram_bytes"] / max(info["ngrams_total"], 1), 3)
    if verify:
        info["checksums"] = "ok"
    if sections:
        info["sections"] = idx.sections()
    if as_json:
        click.echo(json.dumps(info, indent=2, sort_keys=True))
        return
    corpus = info.get("corpus") or {}
    tok = info.get("tokenizer") or {}
    # The build's count of the corpus' tokens; info["tokens"] is the stored unigrams' total, which is less
    # when --min-count dropped some (the denominator of a context-free probability).
    corpus_tokens = corpus.get("tokens", info["tokens"])
    kept = f"; the kept unigrams count {info['tokens']:,} tokens" if info["tokens"] != corpus_tokens else ""
    size = f"{info['file_bytes']:,} bytes"
    if info.get("compressed"):
        size += f", zstd-compressed; {info['ram_bytes']:,} bytes in RAM once opened"
    lines = [
        f"file        {info['path']} ({size})",
        f"name        {info.get('name')}",
        f"order       {info['order']}",
        f"vocabulary  {info['vocab_size']:,} (EOS {'none' if info['eos_id'] is None else info['eos_id']})",
        f"tokenizer   {tok.get('name')} sha256:{tok.get('fingerprint')}" if tok.get("fingerprint") else
        "tokenizer   none recorded (clients cannot check their tokenizer against this trie)",
        f"corpus      {corpus.get('documents', 0):,} documents, {corpus_tokens:,} tokens, "
        f"{len(corpus.get('shards', []))} shard(s)",
        f"n-grams     {', '.join(f'{k + 1}: {n:,}' for k, n in enumerate(info['ngrams']))} "
        f"(total {info['ngrams_total']:,}; {info['bytes_per_ngram']} bytes each)" + kept,
        f"in RAM      {info['ram_bytes']:,} bytes with mode=\"ram\" / ngram-serve --ram "
        f"({info['ram_bytes_per_ngram']} per n-gram; mapped, the file's pages)",
        f"build       {json.dumps(info.get('build'), sort_keys=True)}",
    ]
    if verify:
        lines.append("checksums   ok")
    table = info.get("sections", [])
    kind_width = max((len(s["kind"]) for s in table), default=0)
    for s in table:
        lines.append(f"  {s['kind']:<{kind_width}}  level {s['level']:>2}  offset {s['offset']:>12,}  "
                     f"{s['length']:>12,} bytes  {s['count']:>12,} x {s['width']:>2} bits  crc {s['crc32c']:08x}")
    click.echo("\n".join(lines))


if __name__ == "__main__":
    main()
