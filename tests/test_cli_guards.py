"""Bad input to ngram-query, ngram-eval and dart-generate: a usage error (exit
2) naming the option, the value and the limit, or for a failure found
mid-run an ``Error:`` line (exit 1); never a traceback, never a silent wrong
result. One test per defect of the audit; real CLI runs on real files (the
sample trie, tries built here), a real server on 127.0.0.1 where a call is
made.
"""
from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import click
import numpy as np
import pytest
from click.testing import CliRunner, Result
from conftest import SAMPLE_CORPUS, SAMPLE_TOKENIZER, require_module

from indexer.cli import main as build_main
from ngram_eval.cli import main as eval_main
from ngram_service.query_cli import main as query_main

TARGET_FORMS = "give HOST:PORT, [IPv6]:PORT or dns:///NAME:PORT, the port in 1..65535."
BEYOND_INT64 = "99999999999999999999"


def invoke(cmd: click.Command, *args: Any, input: bytes | str | None = None) -> Result:
    """A CLI run in process; an exception that escaped the command (a traceback) fails the test."""
    r = CliRunner().invoke(cmd, [str(a) for a in args], input=input)
    assert r.exception is None or isinstance(r.exception, SystemExit), (repr(r.exception), r.output)
    return r


def usage_error(r: Result, *needles: str) -> None:
    """Exit 2 with every needle in the error output."""
    assert r.exit_code == 2, r.output
    for n in needles:
        assert n in r.stderr, r.stderr


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dart(*args: Any, input: bytes | str | None = None) -> Result:
    """dart-generate on the tiny random models (needs torch and transformers)."""
    require_module("torch")
    require_module("transformers")
    from dart_client.cli import main

    return invoke(main, "--random-models", "--max-new-tokens", 4, *args, input=input)


@pytest.fixture(scope="module")
def lattice_npz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("npz") / "lat.npz"
    np.savez(path, prefix=np.array([1, 2]), topk_tokens=np.array([[3, 4], [5, 6]]),
             topk_probs=np.array([[0.5, 0.4], [0.6, 0.3]], dtype=np.float32))
    return path


def eval_args(trie: Path, *more: Any) -> list[Any]:
    return [trie, "--text", SAMPLE_CORPUS, "-t", SAMPLE_TOKENIZER, "--steps", 20, "--depth", 2, "--lattice-topk", 3,
            *more]


# ---- 1. token ids beyond int64 ----------------------------------------------------------------------------

@pytest.mark.parametrize("command, option", [
    (["topk", "--context", BEYOND_INT64], "--context"),
    (["topk", "--context", "-" + BEYOND_INT64], "--context"),
    (["probs", "--context", BEYOND_INT64, "--candidates", "1"], "--context"),
    (["probs", "--context", "1", "--candidates", f"2,{BEYOND_INT64}"], "--candidates"),
    (["propose", "--context", f"3,{BEYOND_INT64}"], "--context"),
])
def test_a_token_id_beyond_int64_is_a_usage_error(sample_trie: Path, command: list[str], option: str) -> None:
    r = invoke(query_main, "--trie", sample_trie, *command)
    usage_error(r, f"Invalid value for {option}:", "is not a token id: must be in [0, 4096)")
    # against a host the same, before any call (nothing listens on the port)
    r = invoke(query_main, "--target", f"127.0.0.1:{free_port()}", *command)
    usage_error(r, f"Invalid value for {option}:", "is not a token id: must be in [0, the index's vocabulary size)")


# ---- 2. output paths checked before any work -------------------------------------------------------------

def test_ngram_eval_output_paths_are_checked_before_the_evaluation(sample_trie: Path, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-folder" / "x.png"
    r = invoke(eval_main, *eval_args(sample_trie, "--plot", missing))
    usage_error(r, "Invalid value for '--plot'", f"its folder {missing.parent} does not exist")
    assert "lattices" not in r.stderr  # no progress line: nothing was evaluated
    r = invoke(eval_main, *eval_args(sample_trie, "--plot", tmp_path))
    usage_error(r, "Invalid value for '--plot'", "is a directory")
    r = invoke(eval_main, *eval_args(sample_trie, "--plot", sample_trie / "x.png"))
    usage_error(r, "Invalid value for '--plot'", "is not a folder")
    r = invoke(eval_main, *eval_args(sample_trie, "--json", tmp_path / "none" / "r.json"))
    usage_error(r, "Invalid value for '--json FILE'", "does not exist")
    out = tmp_path / "r.json"  # a good path still works
    r = invoke(eval_main, *eval_args(sample_trie, "-q", "--json", out))
    assert r.exit_code == 0 and json.loads(out.read_text())


def test_dart_generate_log_lattices_is_checked_before_decoding(sample_trie: Path, tmp_path: Path) -> None:
    r = dart("--trie", sample_trie, "-p", "hi", "--log-lattices", tmp_path / "none" / "x.parquet")
    usage_error(r, "Invalid value for '--log-lattices'", "does not exist")
    assert "mean accepted length" not in r.stderr


# ---- 3. dart-generate: prompt file, device, KV capacity --------------------------------------------------

def test_dart_generate_binary_prompt_file_is_a_usage_error(sample_trie: Path) -> None:
    r = dart("--trie", sample_trie, "--prompt-file", sample_trie)
    usage_error(r, "Invalid value for --prompt-file", "not UTF-8 text")
    r = dart("--trie", sample_trie, input=b"\xff\xfe")
    usage_error(r, "the prompt on stdin is not UTF-8 text")


def test_dart_generate_refuses_a_device_torch_cannot_use(sample_trie: Path) -> None:
    r = dart("--trie", sample_trie, "-p", "hi", "--device", "bogus")
    usage_error(r, "Invalid value for --device: 'bogus': this torch cannot use it")
    if not require_module("torch").cuda.is_available():
        r = dart("--trie", sample_trie, "-p", "hi", "--device", "cuda")
        usage_error(r, "Invalid value for --device: 'cuda': this torch cannot use it")


def test_dart_generate_kv_capacity_overflow_is_an_error_line(sample_trie: Path) -> None:
    r = dart("--trie", sample_trie, "-p", "hi", "--kv-capacity", 1)
    assert r.exit_code == 1, r.output
    assert r.stderr.startswith("Error: the static KV cache holds 1 positions") and "--kv-capacity" in r.stderr


# ---- 4. --target HOST:PORT -------------------------------------------------------------------------------

BAD_TARGETS = [
    ("127.0.0.1", "no port (gRPC would dial 443)"),
    ("127.0.0.1:99999", "the port 99999 is not in 1..65535"),
    ("127.0.0.1:0", "the port 0 is not in 1..65535"),
    ("127.0.0.1:abc", "the port 'abc' is not a number"),
    ("", "empty"),
    ("::1:50051", "an IPv6 address goes in brackets"),
    ("[::1]", "an IPv6 address in brackets needs its port after them"),
    ("dns:///name", "the name 'name': no port (gRPC would dial 443)"),
    ("http://h:1", "the scheme http: is not one the client takes"),
    ("xds:///trie-host", "the scheme xds: is not one the client takes"),
    ("ipv4:127.0.0.1:1,127.0.0.2", "'127.0.0.2': no port (gRPC would dial 443)"),
    ("unix:", "no socket path (unix:PATH)"),
]
#: The forms ngram_service.client takes (channel_targets, tests/test_dns_balancing.py) and gRPC's socket forms.
GOOD_TARGETS = ["h:1", "localhost:50051", "[::1]:50051", "dns:///trie-host.ns.svc:50051",
                "dns://127.0.0.1:53/trie-host:50051", "dns://127.0.0.1/trie-host:50051", "ipv4:127.0.0.1:1,127.0.0.2:2", "ipv6:[::1]:1,[::1]:2",
                "unix:/tmp/ngram.sock", "unix-abstract:ngram"]


def test_a_bad_target_is_a_usage_error_and_a_good_one_parses() -> None:
    for target, why in BAD_TARGETS:
        r = invoke(query_main, "--target", target, "info")
        usage_error(r, f"Invalid value for '--target': {target!r}: {why}; {TARGET_FORMS}")
        r = invoke(query_main, "-t", target, "info")  # the old spelling too
        usage_error(r, "Invalid value for '-t'", why)
    for target in GOOD_TARGETS:
        ctx = query_main.make_context("ngram-query", ["--target", target, "info"])
        assert ctx.params["targets"] == (target,)


@pytest.mark.needs_server
def test_host_and_dns_targets_answer_and_a_bad_one_makes_no_call(sample_trie: Path) -> None:
    from test_server import ServerProcess

    with ServerProcess([sample_trie]) as s:
        r = invoke(query_main, "--target", "127.0.0.1", "info")  # was: port 443 dialed until the deadline
        usage_error(r, "Invalid value for '--target': '127.0.0.1': no port")
        for target in (f"127.0.0.1:{s.port}", f"dns:///localhost:{s.port}", f"ipv4:127.0.0.1:{s.port}"):
            r = invoke(query_main, "--target", target, "topk", "-k", 1, "--context", 1)
            assert r.exit_code == 0 and json.loads(r.stdout)["tokens"], (target, r.output)


def test_dart_generate_target_without_port_is_refused() -> None:
    from dart_client.cli import main  # the check is the parser's: no torch needed

    r = invoke(main, "--random-models", "--target", "127.0.0.1", "-p", "hi")
    usage_error(r, "Invalid value for '--target': '127.0.0.1': no port")
    r = invoke(main, "--random-models", "--host", "127.0.0.1:70000", "-p", "hi")
    usage_error(r, "Invalid value for '--host'", "the port 70000 is not in 1..65535")


# ---- 5. ngram-eval: a trie of another vocabulary ---------------------------------------------------------

@pytest.fixture(scope="module")
def plain_tries(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Tries of pre-tokenized ids, no tokenizer fingerprint: vocabulary 8, and 4096 (the sample tokenizer's)."""
    d = tmp_path_factory.mktemp("plain")
    np.save(d / "ids.npy", np.array([1, 2, 3, 7, 1, 2, 4, 7, 2, 3, 5, 7], dtype=np.uint16))
    out = []
    for vocab, eos in ((8, 7), (4096, 7)):
        trie = d / f"v{vocab}.ngt"
        r = invoke(build_main, d / "ids.npy", "--vocab-size", vocab, "--eos", eos, "--out", trie, "-q", "-j", 1)
        assert r.exit_code == 0, r.output
        out.append(trie)
    return out[0], out[1]


def test_ngram_eval_refuses_a_trie_of_a_smaller_vocabulary(plain_tries: tuple[Path, Path]) -> None:
    small, same = plain_tries
    r = invoke(eval_main, *eval_args(small, "-q"))
    usage_error(r, "Invalid value for TRIE", "a vocabulary of 8 ids", "has 4096")
    r = invoke(eval_main, *eval_args(same, "-q"))  # no fingerprint, a vocabulary that fits: a warning only
    assert r.exit_code == 0, r.output
    assert "records no tokenizer fingerprint" in r.stderr


# ---- 6. deadlines ----------------------------------------------------------------------------------------

def test_deadline_is_bounded() -> None:
    r = invoke(query_main, "--deadline-ms", "1e13", "info")
    usage_error(r, "Invalid value for '--deadline-ms': 1e+13 is more than 86400000 (a day), the longest deadline.")
    r = invoke(query_main, "--timeout", "-1", "info")
    usage_error(r, "Invalid value for '--timeout': -1.0 is not in the range 0<x<=86400.0")
    ctx = query_main.make_context("ngram-query", ["--deadline-ms", "86400000", "info"])
    assert ctx.params["deadline_ms"] == 86_400_000
    from dart_client.cli import main  # the same shared option

    r = invoke(main, "--random-models", "--target", "h:1", "--deadline-ms", "1e13", "-p", "hi")
    usage_error(r, "Invalid value for '--deadline-ms'", "is more than 86400000 (a day)")


# ---- 7. comma lists: no empty item -----------------------------------------------------------------------

def test_an_empty_list_item_is_refused(sample_trie: Path, lattice_npz: Path) -> None:
    r = invoke(query_main, "--trie", sample_trie, "topk", "--context", "1,,2")
    usage_error(r, "Invalid value for --context: '1,,2' has an empty item")
    r = invoke(query_main, "--trie", sample_trie, "topk", "--context", "1,2,")
    usage_error(r, "'1,2,' has an empty item")
    r = invoke(query_main, "--trie", sample_trie, "topk", "--context", "1 2")  # was read as 12
    usage_error(r, "'1 2' is not a comma-separated list of token ids")
    r = invoke(query_main, "--trie", sample_trie, "prune", "--npz", lattice_npz, "--level-weights", "1,,1")
    usage_error(r, "Invalid value for '--level-weights': '1,,1' has an empty item")
    r = invoke(eval_main, *eval_args(sample_trie, "--max-nodes", "1,,2"))
    usage_error(r, "Invalid value for '--max-nodes': '1,,2' has an empty item")
    r = invoke(eval_main, *eval_args(sample_trie, "--proposals", "--sources", "both,"))
    usage_error(r, "Invalid value for '--sources': 'both,' has an empty item")
    r = invoke(eval_main, "--leave-one-source-out", SAMPLE_CORPUS, "-t", SAMPLE_TOKENIZER, "--proposals",
               "--order", "2,,3")
    usage_error(r, "Invalid value for '--order': '2,,3' has an empty item")


# ---- 8. seeds --------------------------------------------------------------------------------------------

def test_a_seed_out_of_range_names_the_option(sample_trie: Path) -> None:
    r = invoke(eval_main, *eval_args(sample_trie, "--seed", -1))
    usage_error(r, "Invalid value for '--seed': -1 is not in the range x>=0")
    from dart_client.cli import main

    r = invoke(main, "--random-models", "--trie", sample_trie, "-p", "hi", "--seed", 2**70)
    usage_error(r, "Invalid value for '--seed'", "0<=x<=18446744073709551615")


# ---- 9. -p with --prompt-file; number wording ------------------------------------------------------------

def test_prompt_given_twice_is_refused(sample_trie: Path, tmp_path: Path) -> None:
    from dart_client.cli import main

    f = tmp_path / "p.txt"
    f.write_text("hello")
    r = invoke(main, "--random-models", "--trie", sample_trie, "-p", "hi", "--prompt-file", f)
    usage_error(r, "give one of -p/--prompt or --prompt-file, not both")


def test_a_word_for_a_number_says_float_or_integer(sample_trie: Path, lattice_npz: Path) -> None:
    r = invoke(query_main, "--trie", sample_trie, "prune", "--npz", lattice_npz, "--level-weights", "a")
    usage_error(r, "Invalid value for '--level-weights': 'a' is not a valid float.")
    r = invoke(query_main, "--trie", sample_trie, "prune", "--npz", lattice_npz, "--beam-width", "a")
    usage_error(r, "Invalid value for '--beam-width': 'a' is not a valid integer.")
    r = invoke(query_main, "--trie", sample_trie, "prune", "--npz", lattice_npz, "--ngram-weight", "x")
    usage_error(r, "Invalid value for '--ngram-weight': 'x' is not a valid float.")


# ---- beyond the audit: dart-generate --eos an id the model cannot emit ------------------------------------

def test_an_eos_id_outside_the_vocabulary_is_refused(sample_trie: Path) -> None:
    """It was taken silently: decoding never stopped at it and the search dropped it (eos "search": -1)."""
    r = dart("--trie", sample_trie, "-p", "hi", "--eos", "5000")
    usage_error(r, "Invalid value for --eos: 5000 is not a token id of the model: must be in [0, 4096)")
    r = dart("--trie", sample_trie, "-p", "hi", "--eos", BEYOND_INT64)  # refused when parsed
    usage_error(r, f"Invalid value for --eos: {BEYOND_INT64} is not a token id of any model (past int64)")
    r = dart("--trie", sample_trie, "-p", "hi", "--eos", "-5")  # refused when parsed, before any model loads
    usage_error(r, "Invalid value for --eos: '-5': give model, tokenizer or a token id")
