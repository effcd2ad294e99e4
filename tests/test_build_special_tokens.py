"""ngram-build --add-special-tokens encodes as DART's build does
(add_special_tokens=True): a Llama-2-style tokenizer's BOS starts every document."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer
from tokenizers.processors import TemplateProcessing

from indexer.cli import SAMPLE_DIR
from indexer.tokenizer import load_tokenizer
from ngram_service import NgramIndex


def llama2_style_tokenizer(path: Path) -> int:
    """The sample tokenizer plus a BOS "<s>" that its post-processor prepends; returns the BOS id."""
    tok = Tokenizer.from_file(str(SAMPLE_DIR / "tokenizer.json"))
    tok.add_special_tokens(["<s>"])
    bos = tok.token_to_id("<s>")
    tok.post_processor = TemplateProcessing(single="<s> $A", special_tokens=[("<s>", bos)])
    tok.save(str(path))
    return bos


def test_add_special_tokens_puts_a_bos_before_every_document(tmp_path: Path) -> None:
    bos = llama2_style_tokenizer(tmp_path / "tokenizer.json")
    texts = ["the trie host", "", "draft tree <s> as text", "x"]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    common = [sys.executable, "-m", "indexer.cli", str(tmp_path / "c.jsonl"), "--tokenizer",
              str(tmp_path / "tokenizer.json"), "-j", "1", "-q"]
    plain, dart = tmp_path / "plain.ngt", tmp_path / "dart.ngt"
    assert subprocess.run(common + ["--out", str(plain)]).returncode == 0
    assert subprocess.run(common + ["--out", str(dart), "--add-special-tokens"]).returncode == 0
    assert NgramIndex.open(plain).count([bos]) == 0
    idx = NgramIndex.open(dart)
    assert idx.info()["build"]["add_special_tokens"] is True
    # Exactly the ids DART's build counts: BOS + text ids + EOS, per document.
    tok = load_tokenizer(str(tmp_path / "tokenizer.json"), backend="hf")
    flat, lengths = tok.encode_to_arrays(texts, add_special_tokens=True)
    assert idx.count([bos]) == len(texts) == int(np.sum(flat == bos))
    assert idx.info()["corpus"]["tokens"] == int(lengths.sum()) == NgramIndex.open(plain).info()["corpus"]["tokens"] + 4
    start = 0
    for n in lengths.tolist():
        doc = flat[start:start + n].tolist()
        start += n
        assert doc[0] == bos and doc[-1] == tok.eos_id
        assert idx.count(doc[:3]) >= 1
