"""ngram-build refuses, before any work, what would destroy a file or fail only
at the end: an --out that is one of its inputs, a folder, or unwritable; a
second build of the same --out; options a --from-dart-trie conversion does
not use. SIGTERM ends a build as Ctrl-C does. Each test runs the real
command and checks what is left on disk."""
from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from ngram_service import NgramIndex

from conftest import SAMPLE_CORPUS, SAMPLE_TOKENIZER
from test_build import run_cli
from test_index_api import write_dart

TOK = str(SAMPLE_TOKENIZER)
#: A DART trie of 2-grams over ids {3, 7}: a vocabulary of 8 when no --vocab-size is given.
DART_NODES = [(-1, 0, 0, [(7, 1), (3, 2)]), (7, 0, 2, [(3, 3)]), (3, 0, 1, []), (3, 1, 1, [])]


def build_cli(*args: str) -> Any:
    from indexer.cli import main

    return CliRunner().invoke(main, [*args], catch_exceptions=False)


@pytest.fixture()
def shard(tmp_path: Path) -> Path:
    """A small JSON-lines shard: the first 20 documents of the bundled sample."""
    with gzip.open(SAMPLE_CORPUS / "peps-sample.jsonl.gz", "rt", encoding="utf-8") as f:
        lines = [next(f) for _ in range(20)]
    path = tmp_path / "in" / "victim.jsonl"
    path.parent.mkdir()
    path.write_text("".join(lines), encoding="utf-8")
    return path


def left_beside(path: Path) -> list[str]:
    """What a run left next to ``path`` under its name (OUT.build, OUT.lock, OUT.tmp-PID)."""
    return sorted(p.name for p in path.parent.glob(path.name + ".*"))


def test_an_out_that_is_an_input_shard_is_refused_and_the_shard_kept(shard: Path, tmp_path: Path) -> None:
    original = shard.read_bytes()
    link = tmp_path / "link.jsonl"
    link.symlink_to(shard)
    # The shard named itself, found in its folder, and reached through a symlink.
    for inputs, out in (([shard], shard), ([shard.parent], shard), ([shard], link)):
        r = build_cli(*map(str, inputs), "-q", "-t", TOK, "-j", "1", "--out", str(out))
        assert r.exit_code == 2, r.output
        assert f"--out {out} is the input shard {shard}: the trie would overwrite it" in r.stderr
        assert shard.read_bytes() == original and link.is_symlink()
        assert left_beside(shard) == [] and left_beside(link) == []


def test_an_out_that_is_the_tokenizer_or_the_dart_source_is_refused(shard: Path, tmp_path: Path) -> None:
    tok = tmp_path / "mytok.json"
    tok.write_bytes(SAMPLE_TOKENIZER.read_bytes())
    r = build_cli(str(shard), "-q", "-t", str(tok), "--out", str(tok))
    assert r.exit_code == 2
    assert f"--out {tok} is the --tokenizer file {tok}: the trie would overwrite it" in r.stderr
    assert tok.read_bytes() == SAMPLE_TOKENIZER.read_bytes()
    src = tmp_path / "ok.trie"
    write_dart(src, DART_NODES)
    before = src.read_bytes()
    r = build_cli("--from-dart-trie", str(src), "-q", "--out", str(src))
    assert r.exit_code == 2
    assert f"--out {src} is the --from-dart-trie source {src}: the trie would overwrite it" in r.stderr
    assert src.read_bytes() == before
    assert left_beside(tok) == [] and left_beside(src) == []


def test_an_out_that_names_a_folder_or_nothing_is_refused_upfront(shard: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "outdir").mkdir()
    for out, says in (("outdir", "outdir names a folder: give the trie's file name, e.g. outdir/corpus.ngt"),
                      ("out/", "out/ names a folder"), ("", "empty: give the trie's file name")):
        r = build_cli(str(shard), "-q", "-t", TOK, "--out", out)
        assert r.exit_code == 2, r.output
        assert f"Invalid value for '--out' / '-o': {says}" in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "outdir"]  # no OUT.build, no lock
    assert list((tmp_path / "outdir").iterdir()) == []


def test_an_unwritable_out_or_tmp_dir_names_the_option_and_the_cause(shard: Path, tmp_path: Path) -> None:
    a_file = tmp_path / "afile"
    a_file.write_text("x")
    out = tmp_path / "x.ngt"
    cases = [
        (["--out", str(a_file / "x.ngt")],
         f"Invalid value for '--out' / '-o': cannot write {a_file / 'x.ngt'}: {a_file} is a file, not a folder"),
        (["--out", str(out), "--tmp-dir", str(a_file)], f"Invalid value for '--tmp-dir': {a_file} is a file"),
        (["--out", str(out), "--tmp-dir", str(a_file / "work")],
         f"Invalid value for '--tmp-dir': cannot make the work folder {a_file / 'work'}: {a_file} is a file"),
        # os.access lets root write /proc, where mkdir still fails: the folder is made when checked
        (["--out", str(out), "--tmp-dir", "/proc/ngram-no-such-dir"],
         "Invalid value for '--tmp-dir': cannot make the work folder /proc/ngram-no-such-dir: "),
    ]
    for args, says in cases:
        r = build_cli(str(shard), "-q", "-t", TOK, *args)
        assert r.exit_code == 2, r.output
        assert says in r.stderr
    (tmp_path / "y.ngt.build").write_text("x")  # where the default work folder would go
    r = build_cli(str(shard), "-q", "-t", TOK, "--out", str(tmp_path / "y.ngt"))
    assert r.exit_code == 2
    assert f"Invalid value for '--out': {tmp_path / 'y.ngt.build'} is a file, not a folder" in r.stderr
    assert "--tmp-dir puts it elsewhere" in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "in", "y.ngt.build"]
    assert a_file.read_text() == "x"


def test_a_folder_without_write_permission_is_refused_as_such(shard: Path, tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        if os.access(locked, os.W_OK):
            pytest.skip("this user may write a mode 555 folder (root)")
        r = build_cli(str(shard), "-q", "-t", TOK, "--out", str(locked / "x.ngt"))
        assert r.exit_code == 2
        assert f"cannot write {locked / 'x.ngt'}: {locked} is not writable (permission denied)" in r.stderr
        assert list(locked.iterdir()) == []
    finally:
        locked.chmod(0o755)


def _big_corpus(tmp_path: Path, copies: int) -> Path:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    data = (SAMPLE_CORPUS / "peps-sample.jsonl.gz").read_bytes()
    for i in range(6):
        (corpus / f"s{i}.jsonl.gz").write_bytes(data * copies)  # gzip members concatenate
    return corpus


def _start_build(corpus: Path, out: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "indexer.cli", str(corpus), "-t", TOK, "--out", str(out), *args],
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _read_until(proc: subprocess.Popen[str], prefix: str) -> bool:
    """Reads proc's stderr up to a line starting with ``prefix``; False when it ended first."""
    assert proc.stderr is not None
    return any(line.startswith(prefix) for line in proc.stderr)


def test_sigterm_in_the_write_is_ctrl_c_and_a_later_run_resumes(tmp_path: Path) -> None:
    corpus = _big_corpus(tmp_path, 3)
    out = tmp_path / "o.ngt"
    proc = _start_build(corpus, out, "-j", "2")
    assert proc.stderr is not None
    if _read_until(proc, "[write]"):
        os.kill(proc.pid, signal.SIGTERM)  # what `kill PID` and a container's stop send: the driver only
    proc.wait(timeout=120)
    try:  # a driver killed outright leaves its idle pool workers, which hold stderr open
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    rest = proc.stderr.read()
    if proc.returncode == 0:
        pytest.skip("the build finished before SIGTERM reached it")
    assert proc.returncode == 1, rest  # as after Ctrl-C (click's Aborted!), not killed by the signal
    assert "was kept: run the same command again to resume" in rest and "Aborted!" in rest
    assert "Traceback" not in rest and "leaked semaphore" not in rest, rest
    assert left_beside(out) == ["o.ngt.build"]  # no o.ngt.tmp-PID, no lock
    r = run_cli(str(corpus), "-t", TOK, "--out", str(out), "-j", "2")
    assert r.returncode == 0, r.stderr
    assert "(resumed)" in r.stderr
    assert left_beside(out) == [] and NgramIndex.open(out, verify=True).info()["corpus"]["documents"] > 0


def test_a_later_run_removes_what_dead_writers_of_out_left(shard: Path, tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    out = tmp_path / "s.ngt"
    stale = [tmp_path / f"s.ngt.tmp-{dead}", tmp_path / f"s.ngt.plain.tmp.tmp-{dead}",
             tmp_path / "s.ngt.plain.tmp", tmp_path / "s.ngt.plain.tmp.v1.tmp"]  # staged files of a killed build
    kept = [tmp_path / "s.ngt.tmp-1",  # a live process's (init's)
            tmp_path / f"s.ngtx.tmp-{dead}", tmp_path / "s.ngt.tmp-notapid"]  # not OUT's temporaries
    for f in stale + kept:
        f.write_bytes(b"partial")
    r = build_cli(str(shard), "-q", "-t", TOK, "-j", "1", "--out", str(out))
    assert r.exit_code == 0, r.output
    assert not any(f.exists() for f in stale) and all(f.exists() for f in kept)
    assert NgramIndex.open(out, verify=True).info()["corpus"]["documents"] == 20


def test_a_second_build_of_the_same_out_is_refused_naming_the_first(tmp_path: Path) -> None:
    corpus = _big_corpus(tmp_path, 3)
    out = tmp_path / "o.ngt"
    first = _start_build(corpus, out, "-j", "1")
    try:
        assert _read_until(first, "[plan]")  # the first holds the lock and is at work
        second = run_cli(str(corpus), "-t", TOK, "--out", str(out), "-j", "1", "--no-resume")
        assert second.returncode == 1, second.stderr
        assert (f"ngram-build: error: {out}: another ngram-build (pid {first.pid}) is writing it, holding "
                f"{out}.lock; wait for it to end, or give another --out") in second.stderr
        assert "Traceback" not in second.stderr and "was kept" not in second.stderr
        assert first.stderr is not None
        rest = first.stderr.read()
        assert first.wait(timeout=300) == 0, rest  # the second took nothing from it (--no-resume deletes nothing)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert left_beside(out) == []
    assert NgramIndex.open(out, verify=True).info()["corpus"]["documents"] > 0


def test_from_dart_trie_refuses_an_eos_outside_the_vocabulary_and_build_options(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    src = tmp_path / "ok.trie"
    write_dart(src, DART_NODES)
    out = tmp_path / "dok.ngt"
    for eos, extra, vocab in (("99", [], "8"), ("-1", [], "8"), ("9", ["--vocab-size", "9"], "9")):
        r = build_cli("--from-dart-trie", str(src), "-q", "--eos", eos, *extra, "--out", str(out))
        assert r.exit_code == 1
        assert f"ngram-build: error: {src}: eos id {eos} is outside [0, {vocab})" in r.stderr
    r = build_cli("--from-dart-trie", str(src), "-q", "--order", "4", "--min-count", "2", "--workers", "2",
                  "--out", str(out))
    assert r.exit_code == 2
    assert "--order, --min-count, --threads: not with --from-dart-trie" in r.stderr
    assert left_beside(out) == [] and not out.exists()
    r = build_cli("--from-dart-trie", str(src), "-q", "--out", "s3://bucket/dok.ngt")
    assert r.exit_code == 2
    assert "Invalid value for '--out': --from-dart-trie writes a local file" in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ok.trie"]  # not a local file named s3:/bucket/dok.ngt
    # --format applies to a conversion too.
    r = build_cli("--from-dart-trie", str(src), "-q", "--eos", "3", "--format", "2", "--out", str(out))
    assert r.exit_code == 0, r.output
    info = NgramIndex.open(out, verify=True).info()
    assert (info["format_version"], info["eos_id"], info["vocab_size"]) == (2, 3, 8)


def test_no_eos_names_the_option_and_no_documents_keeps_no_work(shard: Path, tmp_path: Path) -> None:
    cfg = json.loads(SAMPLE_TOKENIZER.read_text(encoding="utf-8"))
    for tok in cfg["added_tokens"]:
        tok["content"] = tok["content"].replace("|", "#")  # <#endoftext#>: no known EOS left
    cfg["model"]["vocab"] = {t.replace("|", "#") if t.startswith("<|") else t: i for t, i in cfg["model"]["vocab"].items()}
    noeos = tmp_path / "noeos.json"
    noeos.write_text(json.dumps(cfg), encoding="utf-8")
    out = tmp_path / "n.ngt"
    r = build_cli(str(shard), "-q", "-t", str(noeos), "-j", "1", "--out", str(out))
    assert r.exit_code == 1
    assert "no end-of-document token found (looked for <|endoftext|>" in r.stderr
    assert r.stderr.rstrip().endswith("give --eos ID or --eos TOKEN") and "eos=" not in r.stderr
    assert left_beside(out) == []

    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    out = tmp_path / "e.ngt"
    r = build_cli(str(empty), "-t", TOK, "-j", "1", "--out", str(out))
    assert r.exit_code == 1
    assert ("ngram-build: error: no documents in the input (1 shard(s): every shard is empty): nothing to count; "
            "give INPUT shards that hold documents") in r.stderr
    assert "run the same command again" not in r.stderr
    assert left_beside(out) == []
