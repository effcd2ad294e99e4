"""What the shell tools say: ngram-serve's usage errors and logs, ngram-query
against a host and against a local trie file, ngram-build's and ngram-info's
messages (issue 41's list: each fixed message has its test here).

Real server processes on 127.0.0.1 (tests/test_server.py's ServerProcess)
and real tries built from the bundled sample corpus.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import SAMPLE_DIR, SAMPLE_TOKENIZER, server_binary

from ngram_service import NgramIndex
from ngram_service.query_cli import DEFAULT_TARGET
from ngram_service.query_cli import main as query_main
from ngram_service.serve import USAGE_LINE

needs_server = pytest.mark.needs_server


def run_native(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([str(server_binary()), *args], check=False, capture_output=True, text=True, timeout=timeout)


def run_serve(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """The ngram-serve entry point, as the console script runs it."""
    return subprocess.run([sys.executable, "-m", "ngram_service.serve", *args], check=False, capture_output=True,
                          text=True, timeout=timeout)


def query(*args: str) -> tuple[int, Any, str]:
    """ngram-query in process: (exit code, the JSON it printed or None, stderr)."""
    r = CliRunner().invoke(query_main, list(args), catch_exceptions=False)
    out = json.loads(r.stdout) if r.exit_code == 0 else None
    return r.exit_code, out, r.stderr


def json_lines(stderr: str) -> list[dict[str, Any]]:
    """Every stderr line parsed as JSON (fails on a line that is not)."""
    return [json.loads(line) for line in stderr.splitlines()]


# ---- ngram-serve: usage errors, the default port --------------------------------------

@needs_server
@pytest.mark.parametrize("args,reason", [
    (["x.ngt", "--bogus"], "Error: unknown option --bogus"),
    ([], "Error: no trie FILE given"),
    (["x.ngt", "--port", "70000"], "Error: --port: 70000 is out of range: must be 0..65535"),
    (["x.ngt", "--max-batch", "0"], "Error: --max-batch: 0 is out of range: must be 1..1048576"),
], ids=["unknown-option", "no-file", "bad-port", "bad-limit"])
def test_native_usage_error_is_short(args: list[str], reason: str) -> None:
    r = run_native(*args)
    assert r.returncode == 2
    assert r.stderr.splitlines() == [USAGE_LINE, "Try 'ngram-serve --help' for help.", "", reason]


def test_wrapper_usage_error_is_short(tmp_path: Path) -> None:
    """ngram-serve's own options fail the same way, before any native server."""
    r = run_serve("x.ngt", "--cache-dir")
    assert r.returncode == 2
    assert r.stderr.splitlines() == [USAGE_LINE, "Try 'ngram-serve --help' for help.", "",
                                     "Error: --cache-dir needs a value"]


@needs_server
def test_help_into_a_closed_pipe_is_no_traceback() -> None:
    """`ngram-serve --help | head -2`: the reader is gone before the wrapper writes its part."""
    read, write = os.pipe()
    os.close(read)
    try:
        r = subprocess.run([sys.executable, "-m", "ngram_service.serve", "--help"], stdout=write,
                           stderr=subprocess.PIPE, text=True, timeout=60, check=False)
    finally:
        os.close(write)
    assert "Traceback" not in r.stderr and "BrokenPipeError" not in r.stderr, r.stderr


@needs_server
def test_help_starts_with_the_usage_line_and_names_the_default_port() -> None:
    r = run_native("--help")
    assert r.returncode == 0 and r.stdout.splitlines()[0] == USAGE_LINE
    assert "--port P                 listen port (default 50051)" in r.stdout
    assert DEFAULT_TARGET == "127.0.0.1:50051"


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@needs_server
def test_serve_without_port_is_where_query_looks(sample_trie: Path) -> None:
    """ngram-serve with no --port listens where ngram-query asks with no --target."""
    if not port_is_free(50051):
        pytest.skip("127.0.0.1:50051 is in use on this machine")
    cmd = [str(server_binary()), str(sample_trie), "--host", "127.0.0.1"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            ev = json.loads(line)
            if ev["event"] in ("listening", "startup_failed"):
                break
        assert ev["event"] == "listening" and ev["port"] == 50051, ev
        code, out, err = query("info")
        assert code == 0, err
        assert out["ngrams"] == NgramIndex.open(sample_trie).info()["ngrams"]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


# ---- ngram-serve: every stderr line is JSON ------------------------------------------

@needs_server
def test_port_in_use_is_one_json_line_with_the_reason(sample_trie: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = run_native(str(sample_trie), "--host", "127.0.0.1", "--port", str(port))
    assert r.returncode == 1
    events = json_lines(r.stderr)  # gRPC's own multi-line log would not parse
    failed = events[-1]
    assert failed["event"] == "startup_failed", events
    assert failed["error"] == f"cannot listen on 127.0.0.1:{port}: Address already in use"
    assert [e["event"] for e in events] == ["index_loaded", "startup_failed"]


@needs_server
def test_grpc_log_is_json_lines(sample_trie: Path) -> None:
    """With gRPC's debug log on, its records are "grpc" events, one JSON line each."""
    env = {**os.environ, "GRPC_VERBOSITY": "debug"}
    proc = subprocess.Popen([str(server_binary()), str(sample_trie), "--host", "127.0.0.1", "--port", "0"],
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stderr is not None
        seen = []
        for line in proc.stderr:
            seen.append(json.loads(line))
            if seen[-1]["event"] == "listening":
                break
    finally:
        proc.send_signal(signal.SIGTERM)
        rest = proc.communicate(timeout=30)[1]
    events = seen + json_lines(rest)
    grpc_events = [e for e in events if e["event"] == "grpc"]
    assert grpc_events and all(e["level"] == "debug" and e["message"] for e in grpc_events[:3]), events[:5]
    assert events[-1]["event"] == "stopped"


@needs_server
def test_sighup_reload_failure_names_the_file(sample_trie: Path, tmp_path: Path) -> None:
    from test_server import ServerProcess

    live = tmp_path / "live.ngt"
    shutil.copy(sample_trie, live)
    with ServerProcess([live]) as s:
        n = len(s.events)
        broken = tmp_path / "broken.tmp"
        broken.write_bytes(sample_trie.read_bytes()[:1000])
        os.replace(broken, live)
        s.proc.send_signal(signal.SIGHUP)
        failed = s.wait_event("reload_failed", after=n)
    assert failed["path"] == str(live) and failed["index"] == "live"


# ---- ngram-query against a host -------------------------------------------------------

@pytest.fixture(scope="module")
def host(sample_trie: Path):
    from test_server import ServerProcess

    if server_binary() is None:
        pytest.skip("ngram-serve-native was not built")
    with ServerProcess([sample_trie], "--name", "sample") as s:
        yield s


@pytest.fixture(scope="module")
def sample_fingerprint(sample_trie: Path) -> str:
    return NgramIndex.open(sample_trie).info()["tokenizer"]["fingerprint"]


@pytest.fixture(scope="module")
def other_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample tokenizer with two tokens' ids swapped: another fingerprint."""
    cfg = json.loads(SAMPLE_TOKENIZER.read_text())
    vocab = cfg["model"]["vocab"]
    a, b = sorted(vocab, key=vocab.get)[100:102]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    out = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    out.write_text(json.dumps(cfg))
    return out


def where_args(where: str, host: Any, sample_trie: Path) -> list[str]:
    return ["--target", host.target] if where == "host" else ["--trie", str(sample_trie)]


@needs_server
@pytest.mark.parametrize("where", ["host", "trie"])
def test_info_checks_the_fingerprint(where: str, host: Any, sample_trie: Path, sample_fingerprint: str) -> None:
    base = where_args(where, host, sample_trie)
    code, out, err = query(*base, "--fingerprint", sample_fingerprint, "info")
    assert code == 0, err
    assert out["tokenizer"]["fingerprint"] == sample_fingerprint
    code, out, err = query(*base, "--fingerprint", "0" * 64, "info")
    assert code == 1 and out is None
    e = json.loads(err)
    assert e["error"] == "FAILED_PRECONDITION"
    assert sample_fingerprint in e["message"] and "0" * 64 in e["message"]


@needs_server
def test_host_names_the_fingerprint_mismatch_in_plain_english(host: Any) -> None:
    code, _, err = query("--target", host.target, "--fingerprint", "f" * 64, "topk", "--context", "1")
    assert code == 1
    e = json.loads(err)
    assert e["error"] == "FAILED_PRECONDITION" and "''s" not in e["message"]
    assert "index 'sample' was built with tokenizer" in e["message"] and "f" * 64 in e["message"]


@needs_server
@pytest.mark.parametrize("where", ["host", "trie"])
def test_probs_accepts_contexts_of_different_lengths(where: str, host: Any, sample_trie: Path) -> None:
    idx = NgramIndex.open(sample_trie)
    common = idx.topk([], 6).tokens.tolist()
    rows = [([common[0], common[1]], [common[2], common[3], 5]), ([common[4]], [common[5]]),
            ([7, common[0], common[1]], [common[2], 9]), ([common[1]], [common[0]])]
    args = where_args(where, host, sample_trie) + ["probs"]
    for c, w in rows:
        args += ["--context", ",".join(map(str, c)), "--candidates", ",".join(map(str, w))]
    code, out, err = query(*args)
    assert code == 0, err
    for i, (c, w) in enumerate(rows):
        p, m = idx.conditional_probs(np.array([c]), np.array([w]))
        assert out["probs"][i] == [float(x) for x in p[0]] and out["matched"][i] == m[0].tolist()
    assert any(x > 0 for row in out["probs"] for x in row)  # the rows hit n-grams, not only zeros


@needs_server
def test_local_trie_prints_what_the_host_prints(host: Any, sample_trie: Path, tmp_path: Path) -> None:
    idx = NgramIndex.open(sample_trie)
    prefix = np.array(idx.topk([], 2).tokens[:2], dtype=np.int64)
    cands = idx.topk(prefix, 4)
    topk_tokens = np.stack([np.resize(cands.tokens, 4), np.arange(10, 14)]).astype(np.int64)
    topk_probs = np.array([[0.4, 0.3, 0.2, 0.1], [0.5, 0.2, 0.2, 0.1]], dtype=np.float32)
    npz = tmp_path / "lattice.npz"
    np.savez(npz, prefix=prefix, topk_tokens=topk_tokens, topk_probs=topk_probs)
    # every row of the engine's prune table is an option: the weights per level as lists
    weighted = ["--level-weights", "1,0.5", "--logit-weights", "0.25,2", "--eos-token-id", "-1",
                "--ngram-on-first-level"]
    for cmd in (["info"], ["topk", "--context", ",".join(map(str, prefix.tolist())), "-k", "5"],
                ["prune", "--npz", str(npz), "--beam-width", "4", "--max-nodes", "6"],
                ["prune", "--npz", str(npz), *weighted]):
        hc, hout, herr = query("--target", host.target, *cmd)
        lc, lout, lerr = query("--trie", str(sample_trie), *cmd)
        assert hc == 0 and lc == 0, (herr, lerr)
        if cmd == ["info"]:  # the host adds nothing; the local file knows its format version too
            assert {k: v for k, v in lout.items() if k in hout} == hout
        else:
            assert lout == hout, cmd
    want = idx.prune(prefix, topk_tokens, topk_probs, level_weights=[1, 0.5], logit_weights=[0.25, 2],
                     eos_token_id=-1, ngram_on_first_level=True)
    assert lout["tokens"] == want.tokens.tolist() and lout["scores"] == want.scores.tolist()
    assert lout["scores"] != query("--trie", str(sample_trie), "prune", "--npz", str(npz))[1]["scores"]


def test_trie_refuses_host_options(sample_trie: Path) -> None:
    r = CliRunner().invoke(query_main, ["--trie", str(sample_trie), "--target", "h:1", "info"])
    assert r.exit_code == 2 and "options for a host given: --target" in r.stderr


@pytest.mark.parametrize("tok", ["file", "folder"])
def test_tokenizer_encodes_text(sample_trie: Path, tok: str) -> None:
    from tokenizers import Tokenizer

    spec = SAMPLE_TOKENIZER if tok == "file" else SAMPLE_TOKENIZER.parent
    t = Tokenizer.from_file(str(SAMPLE_TOKENIZER))
    idx = NgramIndex.open(sample_trie)
    text = "the first"
    ids = t.encode(text, add_special_tokens=False).ids
    code, out, err = query("--trie", str(sample_trie), "--tokenizer", str(spec), "topk", "--context", text, "-k", "4")
    assert code == 0, err
    want = idx.topk(ids, 4)
    assert out["context"] == ids and out["tokens"] == want.tokens.tolist()
    assert out["texts"] == [t.decode([i]) for i in want.tokens.tolist()]
    code, out, err = query("--trie", str(sample_trie), "--tokenizer", str(spec), "probs",
                           "--context", text, "--candidates", " of the", "--context", "a", "--candidates", " and")
    assert code == 0, err
    w = t.encode(" of the", add_special_tokens=False).ids
    p, _ = idx.conditional_probs([ids], [w])
    assert out["contexts"][0] == ids and out["candidates"][0] == w and out["probs"][0] == [float(x) for x in p[0]]


def test_tokenizer_of_another_trie_is_refused(sample_trie: Path, other_tokenizer: Path) -> None:
    code, out, err = query("--trie", str(sample_trie), "--tokenizer", str(other_tokenizer), "topk", "--context", "a")
    assert code == 1 and out is None
    e = json.loads(err)
    assert e["error"] == "FAILED_PRECONDITION" and "--tokenizer" in e["message"]


# ---- PruneTree's limits are the engine's, at most -------------------------------------

@needs_server
def test_prune_limits_above_the_engines_are_refused_at_start(sample_trie: Path) -> None:
    r = run_native(str(sample_trie), "--port", "0", "--max-nodes", "5000")
    assert r.returncode == 2 and r.stderr.splitlines()[-1] == "Error: --max-nodes: 5000 is out of range: must be 1..4096"


@needs_server
def test_a_prune_level_over_the_engines_limit_is_the_servers_refusal(sample_trie: Path) -> None:
    """1,025 candidates in a level: within --max-candidates (4,096) but past the
    engine's 1,024: the server refuses it as over a limit, naming the bound."""
    import grpc

    from ngram_service.client import NgramClient
    from test_server import ServerProcess

    k = 1025
    with ServerProcess([sample_trie]) as s, NgramClient(s.target, retry_attempts=1) as c:
        with pytest.raises(grpc.RpcError) as e:
            c.prune([1, 2], [np.arange(k)], [np.full(k, 1.0 / k, np.float32)])
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert e.value.details() == ("inputs[0].level_sizes[0] has 1025 candidates (K): must be 1..1024 "
                                     "(the engine's limit)")


# ---- ngram-query: what is checked before any call ---------------------------------------------

DEAD = "127.0.0.1:1"  # nothing listens: a message from a call would be UNAVAILABLE, exit 1


def test_npz_that_cannot_be_read_is_a_local_file_error(tmp_path: Path) -> None:
    notes = tmp_path / "notes.jsonl"
    notes.write_text('{"text": "not a lattice"}\n')
    r = CliRunner().invoke(query_main, ["--target", DEAD, "prune", "--npz", str(notes)])
    assert r.exit_code == 2 and r.stdout == ""
    assert f"Invalid value for --npz: {notes}: not a numpy .npz archive (np.savez writes one: a zip file)" in r.stderr
    assert "pickle" not in r.stderr and "INVALID_ARGUMENT" not in r.stderr
    npy = tmp_path / "one.npy"
    np.save(npy, np.arange(3))
    r = CliRunner().invoke(query_main, ["--target", DEAD, "prune", "--npz", str(npy)])
    assert r.exit_code == 2 and f"{npy}: a single .npy array, not an .npz archive" in r.stderr
    npz = tmp_path / "partial.npz"
    np.savez(npz, prefix=np.arange(2))
    r = CliRunner().invoke(query_main, ["--target", DEAD, "prune", "--npz", str(npz)])
    assert r.exit_code == 2 and f"{npz}: no array topk_tokens, topk_probs (it holds prefix)" in r.stderr


@pytest.mark.parametrize("args, message", [
    (["topk", "--context", "1", "-k", "99999999999"],
     "Invalid value for '-k': 99999999999 is not in the range 1<=x<=4294967295."),
    (["prune", "--npz", __file__, "--max-nodes", "5000"],
     "Invalid value for '--max-nodes': 5000 is not in the range 0<=x<=4096."),
    (["propose", "--context", "1", "--discount", "1.5"],
     "Invalid value for '--discount': 1.5 is not in the range 0.0<=x<=1.0."),
    (["--deadline-ms", "0", "info"], "Invalid value for '--deadline-ms': 0.0 is not in the range x>0."),
], ids=["k", "max-nodes", "discount", "deadline"])
def test_out_of_range_values_name_their_flag(args: list[str], message: str) -> None:
    r = CliRunner().invoke(query_main, ["--target", DEAD, *args])
    assert r.exit_code == 2 and message in r.stderr, r.stderr


def test_query_help_says_which_commands_print_json() -> None:
    r = CliRunner().invoke(query_main, ["--help"])
    assert "Every command prints JSON but propose, which prints its trees as indented text unless given --json" \
        in " ".join(r.stdout.split())


# ---- ngram-build and ngram-info ---------------------------------------------------------------

def build_cli(*args: str) -> Any:
    from indexer.cli import main as build_main

    return CliRunner().invoke(build_main, [*args], catch_exceptions=False)


@pytest.mark.parametrize("text", ['[\n  {"text": "a"},\n  {"text": "b"}\n]\n', '[{"text": "a"}, {"text": "b"}]\n'],
                         ids=["pretty", "one-line"])
def test_a_json_array_says_one_object_a_line_is_expected(tmp_path: Path, text: str) -> None:
    array = tmp_path / "array.json"
    array.write_text(text)
    r = build_cli(str(array), "--tokenizer", str(SAMPLE_TOKENIZER), "--out", str(tmp_path / "o.ngt"), "-q", "-j", "1")
    assert r.exit_code == 1
    (line,) = r.stderr.splitlines()
    assert line.startswith(f"ngram-build: error: {array}:1: ")
    assert line.endswith(": a JSON array; expected one JSON object a line (JSON lines), not an array of them")


def test_a_min_count_that_empties_orders_warns(tmp_path: Path) -> None:
    out = tmp_path / "o.ngt"
    r = build_cli(str(SAMPLE_DIR / "corpus"), "--tokenizer", str(SAMPLE_TOKENIZER), "--out", str(out), "-q",
                  "-j", "1", "--min-count", "3000")
    assert r.exit_code == 0, r.output
    ngrams = NgramIndex.open(out).info()["ngrams"]
    empty = [str(k + 1) for k, n in enumerate(ngrams) if n == 0]
    assert empty and ngrams[0] > 0  # a few tokens occur 3,000 times, no bigram does
    assert r.stderr == (f"ngram-build: warning: --min-count 3000 left no n-grams of orders {', '.join(empty)} "
                        f"(n-grams per order {ngrams})\n")
    r = build_cli(str(SAMPLE_DIR / "corpus"), "--out", str(out), "--min-count", "99999999999999999999999")
    assert r.exit_code == 2
    assert "Invalid value for '--min-count': 99999999999999999999999 is not in the range" in r.stderr


def test_info_counts_the_corpus_tokens_the_build_counted(tmp_path: Path) -> None:
    from ngram_service.cli_info import main as info_main

    out = tmp_path / "mc2.ngt"
    r = build_cli(str(SAMPLE_DIR / "corpus"), "--tokenizer", str(SAMPLE_TOKENIZER), "--out", str(out), "-j", "1",
                  "--min-count", "2")
    assert r.exit_code == 0, r.output
    built = re.search(r"done: .* (\d[\d,]*) tokens,", r.stderr)
    assert built, r.stderr
    info = NgramIndex.open(out).info()
    assert info["corpus"]["tokens"] == int(built.group(1).replace(",", "")) > info["tokens"]
    text = CliRunner().invoke(info_main, [str(out)]).stdout
    assert f"corpus      50 documents, {info['corpus']['tokens']:,} tokens, 1 shard(s)" in text
    assert f"the kept unigrams count {info['tokens']:,} tokens" in text


def test_ctrl_c_during_a_build_is_no_traceback(tmp_path: Path) -> None:
    """Ctrl-C reaches the terminal's whole process group: the driver and its pool workers."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    shard = (SAMPLE_DIR / "corpus" / "peps-sample.jsonl.gz").read_bytes()
    for i in range(6):
        (corpus / f"s{i}.jsonl.gz").write_bytes(shard * 3)  # gzip members concatenate
    for phase in ("[map", "[write]"):
        proc = subprocess.Popen([sys.executable, "-m", "indexer.cli", str(corpus), "--tokenizer", str(SAMPLE_TOKENIZER),
                                 "-j", "2", "--out", str(tmp_path / "o.ngt"), "--no-resume"],
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        assert proc.stderr is not None
        seen = []
        for line in proc.stderr:
            seen.append(line)
            if line.startswith(phase):
                os.killpg(proc.pid, signal.SIGINT)
                break
        rest = proc.stderr.read()
        proc.wait(timeout=120)
        if proc.returncode == 0:
            pytest.skip(f"the build finished before Ctrl-C reached it ({phase})")
        assert "Traceback" not in rest and "KeyboardInterrupt" not in rest, rest
        assert "was kept: run the same command again to resume" in rest
