"""ngram-build with inputs, work directory and output on S3 and on GCS: a
real S3-compatible server (moto in server mode) and a GCS emulator
(gcp-storage-emulator, in its own process) on 127.0.0.1, free ports, over HTTP."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.fs as pafs
import pytest

from conftest import require_module

from tests.random_corpus import write_shards
from indexer.cli import SAMPLE_DIR
from indexer.pipeline import BuildConfig, build
from indexer.shard_discovery import find_shards
from indexer.shards import ShardError

TOKENIZER = SAMPLE_DIR / "tokenizer.json"


@pytest.fixture(scope="module")
def s3():
    moto_server = require_module("moto.server")
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    _host, port = server.get_host_and_port()
    env = pytest.MonkeyPatch()
    env.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    env.setenv("AWS_ACCESS_KEY_ID", "test")
    env.setenv("AWS_SECRET_ACCESS_KEY", "test")
    env.setenv("AWS_REGION", "us-east-1")
    fs = pafs.S3FileSystem(endpoint_override=f"http://127.0.0.1:{port}", access_key="test", secret_key="test",
                           region="us-east-1", allow_bucket_creation=True)
    fs.create_dir("bkt")
    yield fs
    env.undo()
    server.stop()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_shards(tmp_path_factory.mktemp("s3-corpus"), seed=12, shards=3, docs=100, first_in_sub=True)


@pytest.fixture(scope="module")
def local_trie(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The corpus built from local files: what every object-storage build must equal, byte for byte."""
    out = tmp_path_factory.mktemp("local") / "t.ngt"
    build(cfg([str(corpus)], str(out), workers=1), progress=quiet)
    return out


def upload(fs: pafs.S3FileSystem, local: Path, prefix: str) -> None:
    pafs.copy_files(str(local), prefix, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=fs)


def keys(fs: pafs.S3FileSystem, prefix: str) -> list[str]:
    infos = fs.get_file_info(pafs.FileSelector(prefix, recursive=True, allow_not_found=True))
    return sorted(i.path for i in infos if i.type == pafs.FileType.File)


def cfg(inputs: list[str], out: str, **kw) -> BuildConfig:
    return BuildConfig(inputs=inputs, out=out, tokenizer=str(TOKENIZER), order=3, name="t", **kw)


def quiet(_m: str) -> None:
    pass


def test_s3_inputs_work_dir_and_output_give_the_local_bytes(s3, corpus: Path, local_trie: Path) -> None:
    upload(s3, corpus, "bkt/corpus")
    report = build(cfg(["s3://bkt/corpus/"], "s3://bkt/out/t.ngt", workers=2, tmp_dir="s3://bkt/work"),
                   progress=quiet)
    with s3.open_input_stream("bkt/out/t.ngt") as f:
        assert f.read() == local_trie.read_bytes()  # the manifest names the shards as below the prefix
    assert keys(s3, "bkt/out") == ["bkt/out/t.ngt"]
    assert keys(s3, "bkt/work") == []  # the build's work folder is removed after success
    assert report.peak_work_bytes > 0 and report.ranges == 8


def test_s3_globs_and_errors(s3, corpus: Path) -> None:
    upload(s3, corpus, "bkt/globbed")
    found = find_shards(["s3://bkt/globbed/part-*.jsonl.zst"])
    assert [s.name for s in found] == ["part-1.jsonl.zst", "part-2.jsonl.zst"]
    assert [s.location for s in find_shards(["s3://bkt/globbed/**/*.zst"])] == [
        "s3://bkt/globbed/part-1.jsonl.zst", "s3://bkt/globbed/part-2.jsonl.zst",
        "s3://bkt/globbed/sub/part-0.jsonl.zst"]
    assert [s.name for s in find_shards(["s3://bkt/globbed/sub/part-0.jsonl.zst"])] == ["part-0.jsonl.zst"]
    with pytest.raises(ShardError, match="s3://bkt/nothing/: no shard files"):
        find_shards(["s3://bkt/nothing/"])
    with pytest.raises(ShardError, match="pattern matches no shard files"):
        find_shards(["s3://bkt/globbed/*.txt"])


def test_pretokenized_npy_on_s3(s3, tmp_path: Path) -> None:
    arr = np.array([5, 6, 7, 0, 5, 6, 0, 9, 0], "<u2")
    arr.tofile(tmp_path / "tokens.npy")
    upload(s3, tmp_path / "tokens.npy", "bkt/npy/tokens.npy")
    common = dict(tokenizer=None, vocab_size=16, eos=0, order=3, workers=1, name="n")
    build(BuildConfig(inputs=[str(tmp_path / "tokens.npy")], out=str(tmp_path / "n.ngt"), **common), progress=quiet)
    build(BuildConfig(inputs=["s3://bkt/npy/"], out="s3://bkt/npy-out/n.ngt", **common), progress=quiet)
    with s3.open_input_stream("bkt/npy-out/n.ngt") as f:
        assert f.read() == (tmp_path / "n.ngt").read_bytes()


def test_cli_failed_build_leaves_no_output_and_resumes_from_s3(s3, corpus: Path) -> None:
    upload(s3, corpus, "bkt/cli")
    args = [sys.executable, "-m", "indexer.cli", "s3://bkt/cli/", "--tokenizer", str(TOKENIZER), "-j", "1",
            "--out", "s3://bkt/cli-out/t.ngt", "--tmp-dir", "s3://bkt/cli-work"]
    r = subprocess.run(args, capture_output=True, text=True, env={**os.environ, "NGRAM_BUILD_FAULT": "reduce:3:fail"})
    assert r.returncode == 1 and "s3://bkt/cli-work/build-" in r.stderr and "was kept" in r.stderr
    assert keys(s3, "bkt/cli-out") == []  # no partial trie
    r = subprocess.run(args, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("(resumed)") == 3
    assert keys(s3, "bkt/cli-out") == ["bkt/cli-out/t.ngt"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def gcs():
    """A GCS emulator in a child process: run as a thread of the test's own
    process it hung on pyarrow's first ranged read (open_input_file)."""
    require_module("gcp_storage_emulator")
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "gcp_storage_emulator", "start", "--host", "127.0.0.1",
                               "--port", str(port), "--in-memory", "--default-bucket", "bkt", "--quiet"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    pytest.fail("the GCS emulator did not start")
                time.sleep(0.1)
        env = pytest.MonkeyPatch()
        env.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{port}")
        yield pafs.GcsFileSystem(anonymous=True, endpoint_override=f"127.0.0.1:{port}", scheme="http")
        env.undo()
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()


def test_gcs_inputs_work_dir_and_output_give_the_local_bytes(gcs, corpus: Path, local_trie: Path) -> None:
    upload(gcs, corpus, "bkt/corpus")
    assert [s.name for s in find_shards(["gs://bkt/corpus/**/*.zst"])] == [
        "part-1.jsonl.zst", "part-2.jsonl.zst", "sub/part-0.jsonl.zst"]
    report = build(cfg(["gs://bkt/corpus/"], "gs://bkt/out/t.ngt", workers=2, tmp_dir="gs://bkt/work"),
                   progress=quiet)
    with gcs.open_input_stream("bkt/out/t.ngt") as f:
        assert f.read() == local_trie.read_bytes()
    assert keys(gcs, "bkt/out") == ["bkt/out/t.ngt"]
    assert keys(gcs, "bkt/work") == []  # the build's work folder is removed after success
    assert report.peak_work_bytes > 0 and report.ranges == 8
