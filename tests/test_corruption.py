"""Every region of a trie, in each format version, corrupted in turn (fuzz/corrupt_trie.py):
with verify=True every copy is refused; without it, each is refused or
answers, with no other exception, crash or hang (a child process with a
time limit). tests/test_fuzz_smoke.py reads the same copies under ASan.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ngram_service import NgramIndex

REPO = Path(__file__).resolve().parents[1]


def test_every_section_corrupted(sample_trie_each_format: Path) -> None:
    sample_trie = sample_trie_each_format
    sections = NgramIndex.open(sample_trie).sections()
    p = subprocess.run([sys.executable, str(REPO / "fuzz" / "corrupt_trie.py"), str(sample_trie), "--check"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
    assert p.returncode == 0, (p.returncode, p.stdout[-4000:], p.stderr[-4000:])
    s = json.loads(p.stdout)
    # header + table + every section, each with several corruptions
    assert s["variants"] >= 8 * (len(sections) + 2), s
    assert s["refused_with_verify"] == s["variants"], s["not_refused_with_verify"]
    assert s["other_errors"] == []
    # without verification, both open modes of every copy were tried
    assert s["refused_without_verify"] + s["answered_without_verify"] + s["refused_by_a_query"] == 2 * s["variants"]
    assert s["answered_without_verify"] > 0  # some corruptions go unnoticed without verify: that is the point of it
