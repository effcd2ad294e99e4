"""ngram-serve with a trie in object storage or behind a URL (ngram_service/trie_fetch.py).

Real stores on 127.0.0.1: moto's S3 server (ThreadedMotoServer) and an HTTPS
server with a throw-away CA; the real `ngram-serve` entry point in a
subprocess, so the fetch, the verification and the exec of the native server
are the code a pod runs.
"""
from __future__ import annotations

import datetime
import http.server
import json
import os
import re
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from indexer.trie_output import compress_file
from ngram_service import NgramIndex
from ngram_service.index import index_name
from ngram_service.serve import NATIVE_SWITCHES, ServeArgs, find_native_binary
from ngram_service.trie_fetch import cache_path

boto3 = pytest.importorskip("boto3")
moto_server = pytest.importorskip("moto.server")

BUCKET = "tries"
CREDS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
needs_native = pytest.mark.needs_server  # skipped without the binary, a failure under CI (conftest)


@pytest.fixture(scope="module")
def s3() -> Iterator[tuple[Any, dict[str, str]]]:
    """A moto S3 server on 127.0.0.1 (free port), its client, and the environment that points pyarrow at it."""
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        env = {**CREDS, "AWS_ENDPOINT_URL": f"http://{host}:{port}"}
        client = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name="us-east-1",
                              aws_access_key_id="testing", aws_secret_access_key="testing")
        client.create_bucket(Bucket=BUCKET)
        yield client, env
    finally:
        server.stop()


def run_serve(args: list[str], env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess:
    """The ngram-serve entry point, as the console script runs it."""
    return subprocess.run([sys.executable, "-m", "ngram_service.serve", *args], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=timeout)


def events(stderr: str) -> list[str]:
    return [json.loads(line)["event"] for line in stderr.splitlines() if line.startswith("{")]


def flip_byte_in_section(data: bytes, trie: Path, kind: str) -> bytes:
    """The trie's bytes with one byte inside its first section of ``kind`` flipped."""
    sec = next(s for s in NgramIndex.open(trie).sections() if s["kind"] == kind)
    pos = sec["offset"] + sec["length"] // 2
    return data[:pos] + bytes([data[pos] ^ 0x40]) + data[pos + 1:]


# ---- S3 --------------------------------------------------------------------------

@needs_native
def test_serves_from_s3_then_from_cache_without_downloading(s3, sample_trie: Path, tmp_path: Path) -> None:
    from ngram_service.client import NgramClient

    client, env = s3
    client.put_object(Bucket=BUCKET, Key="v1/sample.ngt", Body=sample_trie.read_bytes())
    loc = f"s3://{BUCKET}/v1/sample.ngt"
    cache = tmp_path / "cache"

    def serve_once() -> tuple[dict[str, Any], list[str]]:
        proc = subprocess.Popen([sys.executable, "-m", "ngram_service.serve", loc, "--cache-dir", str(cache),
                                 "--host", "127.0.0.1", "--port", "0"],
                                env={**os.environ, **env}, stderr=subprocess.PIPE, text=True)
        seen: list[str] = []
        try:
            assert proc.stderr is not None
            for line in proc.stderr:
                ev = json.loads(line)
                seen.append(ev["event"])
                if ev["event"] == "listening":
                    with NgramClient(f"127.0.0.1:{ev['port']}", index="sample") as c:
                        info = c.info()
                    break
            else:
                raise AssertionError(f"server exited: {seen}, rc={proc.wait()}")
            proc.terminate()
            assert proc.wait(timeout=20) == 0
            return info, seen
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    info, seen = serve_once()
    local = cache_path(loc, cache)
    assert seen[:2] == ["trie_fetch", "trie_fetched"] and "index_loaded" in seen
    assert local.read_bytes() == sample_trie.read_bytes()
    assert info == NgramIndex.open(sample_trie).info() | {"path": str(local)}
    assert [p.name for p in cache.iterdir() if not p.name.startswith(".")] == [local.name]

    # The object is gone: a second start that tried to download would fail.
    client.delete_object(Bucket=BUCKET, Key="v1/sample.ngt")
    info2, seen2 = serve_once()
    assert seen2[0] == "trie_cached" and "trie_fetch" not in seen2
    assert info2 == info


def test_fetch_only_prints_the_local_path(s3, sample_trie: Path, tmp_path: Path) -> None:
    client, env = s3
    client.put_object(Bucket=BUCKET, Key="fetch-only/a.ngt", Body=sample_trie.read_bytes())
    loc = f"s3://{BUCKET}/fetch-only/a.ngt"
    r = run_serve([loc, "--cache-dir", str(tmp_path), "--fetch-only", "--port", "1"], env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(cache_path(loc, tmp_path))
    NgramIndex.open(r.stdout.strip(), verify=True)
    done = [json.loads(x) for x in r.stderr.splitlines() if '"trie_fetched"' in x]
    assert len(done) == 1 and done[0]["bytes"] == done[0]["file_bytes"] == sample_trie.stat().st_size


@pytest.mark.parametrize("damage", ["crc", "truncated", "not_a_trie"])
def test_damaged_object_is_refused_and_not_cached(s3, sample_trie: Path, tmp_path: Path, damage: str) -> None:
    client, env = s3
    data = sample_trie.read_bytes()
    body = {"crc": flip_byte_in_section(data, sample_trie, "tokens"),
            "truncated": data[: len(data) * 2 // 3],
            "not_a_trie": b"<html>Access denied</html>\n"}[damage]
    key = f"bad/{damage}.ngt"
    client.put_object(Bucket=BUCKET, Key=key, Body=body)
    loc = f"s3://{BUCKET}/{key}"
    r = run_serve([loc, "--cache-dir", str(tmp_path), "--port", "0", "--host", "127.0.0.1"], env)
    assert r.returncode == 1
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith(f"ngram-serve: {loc}: refused, not an intact trie (") and "nothing was cached" in last
    expected = {"crc": r"section tokens.*(checksum|CRC)", "truncated": r"truncat", "not_a_trie": r"magic|not a trie"}
    assert re.search(expected[damage], last, re.I), last
    assert "listening" not in r.stderr
    assert list(tmp_path.iterdir()) in ([], [tmp_path / f".{cache_path(loc, tmp_path).name}.lock"])


def test_missing_object_and_unknown_bucket(s3, tmp_path: Path) -> None:
    _, env = s3
    r = run_serve([f"s3://{BUCKET}/nope.ngt", "--cache-dir", str(tmp_path), "--port", "0"], env)
    assert r.returncode == 1 and f"ngram-serve: s3://{BUCKET}/nope.ngt: no such object" in r.stderr
    r = run_serve(["s3://no-such-bucket-here/x.ngt", "--cache-dir", str(tmp_path), "--port", "0"], env)
    assert r.returncode == 1 and "ngram-serve: s3://no-such-bucket-here/x.ngt: " in r.stderr


def test_corrupted_cached_copy_is_fetched_again(s3, sample_trie: Path, tmp_path: Path) -> None:
    client, env = s3
    client.put_object(Bucket=BUCKET, Key="recache/a.ngt", Body=sample_trie.read_bytes())
    loc = f"s3://{BUCKET}/recache/a.ngt"
    local = cache_path(loc, tmp_path)
    tmp_path.mkdir(exist_ok=True)
    local.write_bytes(flip_byte_in_section(sample_trie.read_bytes(), sample_trie, "count_values"))
    r = run_serve([loc, "--cache-dir", str(tmp_path), "--fetch-only"], env)
    assert r.returncode == 0, r.stderr
    assert events(r.stderr) == ["trie_cache_refused", "trie_fetch", "trie_fetched"]
    assert local.read_bytes() == sample_trie.read_bytes()


# ---- https -------------------------------------------------------------------------

def _tls_files(tmp: Path) -> tuple[Path, Path, Path]:
    """A CA and a certificate for 127.0.0.1 signed by it (PEM files)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    import ipaddress

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(1).not_valid_before(now - datetime.timedelta(hours=1))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(2)
            .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = tmp / "ca.pem", tmp / "cert.pem", tmp / "key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return paths


class _Files(http.server.BaseHTTPRequestHandler):
    """Serves a dict of path -> bytes; "/short/..." announces more bytes than it sends."""
    files: dict[str, bytes] = {}

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        short = self.path.startswith("/short/")
        body = self.files.get(self.path.removeprefix("/short") if short else self.path)
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body[: len(body) // 2] if short else body)
        if short:
            self.close_connection = True

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def https(tmp_path_factory: pytest.TempPathFactory, sample_trie: Path) -> Iterator[tuple[str, dict[str, str]]]:
    tmp = tmp_path_factory.mktemp("https")
    ca, cert, key = _tls_files(tmp)
    packed = tmp / "sample.ngt.zst"
    compress_file(sample_trie, packed)
    _Files.files = {"/tries/sample.ngt": sample_trie.read_bytes(), "/tries/sample.ngt.zst": packed.read_bytes()}
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Files)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"https://127.0.0.1:{httpd.server_address[1]}", {"SSL_CERT_FILE": str(ca)}
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_https_compressed_trie_is_decompressed_into_the_cache(https, sample_trie: Path, tmp_path: Path) -> None:
    base, env = https
    for name in ("sample.ngt", "sample.ngt.zst"):
        loc = f"{base}/tries/{name}"
        r = run_serve([loc, "--cache-dir", str(tmp_path), "--fetch-only"], env)
        assert r.returncode == 0, r.stderr
        local = Path(r.stdout.strip())
        assert local == cache_path(loc, tmp_path) and local.name.endswith("-sample.ngt")
        assert local.read_bytes() == sample_trie.read_bytes()


def test_https_errors(https, tmp_path: Path) -> None:
    base, env = https
    r = run_serve([f"{base}/short/tries/sample.ngt", "--cache-dir", str(tmp_path), "--fetch-only"], env)
    assert r.returncode == 1
    assert re.search(r"download (truncated|failed after)", r.stderr), r.stderr
    r = run_serve([f"{base}/tries/missing.ngt", "--cache-dir", str(tmp_path), "--fetch-only"], env)
    assert r.returncode == 1 and f"ngram-serve: {base}/tries/missing.ngt: HTTP 404" in r.stderr
    # Without the CA the server's certificate is not trusted.
    r = run_serve([f"{base}/tries/sample.ngt", "--cache-dir", str(tmp_path), "--fetch-only"], {})
    assert r.returncode == 1 and "CERTIFICATE_VERIFY_FAILED" in r.stderr
    assert not [p for p in tmp_path.iterdir() if not p.name.endswith(".lock")]


# ---- a local compressed trie (ngram-build --compress) ------------------------------

@needs_native
def test_serves_a_local_compressed_trie_decompressed_into_memory(sample_trie: Path, tmp_path: Path) -> None:
    from ngram_service.client import NgramClient

    zst = tmp_path / "sample.ngt.zst"
    compress_file(sample_trie, zst)
    proc = subprocess.Popen([sys.executable, "-m", "ngram_service.serve", str(zst), "--verify", "--host",
                             "127.0.0.1", "--port", "0"], stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        seen = []
        for line in proc.stderr:
            seen.append(json.loads(line))
            if seen[-1]["event"] in ("listening", "startup_failed"):
                break
        assert [e["event"] for e in seen] == ["trie_decompressed", "index_loaded", "listening"], seen
        assert seen[0]["path"] == str(zst) and seen[0]["bytes"] == sample_trie.stat().st_size
        assert seen[1]["index"] == "sample"  # the file's name less .zst, not the in-memory copy's
        want = NgramIndex.open(sample_trie)
        with NgramClient(f"127.0.0.1:{seen[-1]['port']}", index="sample") as c:
            assert c.info()["ngrams"] == want.info()["ngrams"]
            got = c.topk([1, 2], 5)
            assert got.tokens.tolist() == want.topk([1, 2], 5).tokens.tolist()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert sorted(tmp_path.iterdir()) == [zst]  # nothing written to disk


@needs_native
@pytest.mark.parametrize("damage", ["not_a_trie", "cut_in_first_block", "cut_near_the_end"])
def test_a_damaged_local_compressed_trie_is_refused(sample_trie: Path, tmp_path: Path, damage: str) -> None:
    import zstandard

    zst = tmp_path / "sample.ngt.zst"
    compress_file(sample_trie, zst)
    data = zst.read_bytes()
    zst.write_bytes(zstandard.ZstdCompressor().compress(b"<html>no</html>" * 100) if damage == "not_a_trie"
                    else data[:40] if damage == "cut_in_first_block" else data[: len(data) * 9 // 10])
    r = run_serve([str(zst), "--host", "127.0.0.1", "--port", "0"], {})
    assert r.returncode == 1 and "listening" not in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    if damage == "not_a_trie":
        assert last == f"ngram-serve: {zst}: not a trie file (bad magic)"
    else:  # refused before the server starts, as a cut stream, not as what the cut left
        assert last == f"ngram-serve: {zst}: zstd-compressed trie: truncated zstd stream (the file ends inside a frame)"


@needs_native
def test_a_compressed_trie_failing_its_checksums_is_named_by_its_index(sample_trie: Path, tmp_path: Path) -> None:
    """Served from /proc/self/fd/N, a compressed trie that fails --verify is named in startup_failed by its
    index, the stem of the FILE given, among several FILEs."""
    flipped = tmp_path / "flipped.ngt"
    flipped.write_bytes(flip_byte_in_section(sample_trie.read_bytes(), sample_trie, "tokens"))
    zst = tmp_path / "flipped.ngt.zst"
    compress_file(flipped, zst)
    r = run_serve([str(sample_trie), str(zst), "--verify", "--host", "127.0.0.1", "--port", "0"], {})
    assert r.returncode == 1 and "listening" not in r.stderr
    failed = json.loads(r.stderr.strip().splitlines()[-1])
    assert failed["event"] == "startup_failed" and failed["index"] == "flipped", failed
    assert failed["path"].startswith("/proc/self/fd/") and "checksum mismatch" in failed["error"]


def test_fetch_only_leaves_a_local_compressed_trie_as_it_is(sample_trie: Path, tmp_path: Path) -> None:
    zst = tmp_path / "a.ngt.zst"
    compress_file(sample_trie, zst)
    r = run_serve([str(zst), "--fetch-only"], {})
    assert r.returncode == 0 and r.stdout.strip() == str(zst) and "trie_decompressed" not in r.stderr


@pytest.mark.parametrize("what", ["missing", "text", "folder", "scheme"])
def test_fetch_only_refuses_what_would_not_serve(tmp_path: Path, what: str) -> None:
    """An init container's --fetch-only says at once that a FILE will not serve (exit 1, naming it), instead
    of printing it for the server to refuse later; a scheme it cannot fetch is refused by the server too."""
    text = tmp_path / "notes.ngt"
    text.write_text("hello")
    loc, said = {"missing": (str(tmp_path / "gone.ngt"), "cannot open: No such file or directory"),
                 "text": (str(text), "not a trie file: 5 bytes, shorter than the 64-byte header"),
                 "folder": (str(tmp_path), "is a directory, not a regular file"),
                 "scheme": ("ftp://h/c.ngt", "not a location ngram-serve can fetch (s3://, gs://, gcs://, https://, "
                                             "http://, or a local path)")}[what]
    for extra in (["--fetch-only"], ["--port", "0"]) if what == "scheme" else (["--fetch-only"],):
        r = run_serve([loc, *extra], {})
        assert r.returncode == 1 and r.stdout == ""
        assert r.stderr.strip().splitlines()[-1] == f"ngram-serve: {loc}: {said}"


# ---- the command line --------------------------------------------------------------

def test_file_arguments_are_told_from_option_values() -> None:
    assert [index_name(x) for x in ("s3://b/v1/corpus.ngt", "https://h/c.ngt.zst?x=1", "dir/x.y.ngt", "noext",
                                    "dir/c.ngt.zst")] == ["corpus", "c", "x.y", "noext", "c"]
    a = ServeArgs(["--port", "5", "s3://b/x.ngt", "--ram", "local.ngt", "--name=a", "--name", "b",
                   "--cache-dir", "/c", "--threads", "2", "https://h/y.ngt", "--fetch-only"])
    assert a.files() == ["s3://b/x.ngt", "local.ngt", "https://h/y.ngt"]
    assert a.cache_dir == Path("/c") and a.fetch_only and a.names == 2
    assert a.native == ["--port", "5", "s3://b/x.ngt", "--ram", "local.ngt", "--name=a", "--name", "b",
                        "--threads", "2", "https://h/y.ngt"]


@needs_native
def test_native_switches_match_the_native_help() -> None:
    usage = subprocess.run([str(find_native_binary()), "--help"], capture_output=True, text=True).stdout
    options = re.findall(r"^  (--[a-z-]+)( [A-Z]+)?\s", usage, re.M)
    assert options, usage
    assert {name for name, metavar in options if not metavar} == NATIVE_SWITCHES


def test_local_files_need_no_cache_and_help_lists_the_fetch_options(sample_trie: Path, tmp_path: Path) -> None:
    r = run_serve([str(sample_trie), "--fetch-only"], {"HOME": str(tmp_path)})
    assert r.returncode == 0 and r.stdout.strip() == str(sample_trie)
    assert not list(tmp_path.iterdir())  # no cache made for a local file
    if find_native_binary() is not None:
        r = run_serve(["--help"], {})
        assert r.returncode == 0 and "--drain-seconds" in r.stdout
        # the wrapper's options in the native --help's format: the help text from column 28
        assert re.search(r"^  --cache-dir DIR {10}where fetched tries are kept", r.stdout, re.M), r.stdout

