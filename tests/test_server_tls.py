"""TLS and mutual TLS of the trie host: certificates made here (cryptography)."""
from __future__ import annotations

import datetime
import json
import ipaddress
import subprocess
from pathlib import Path

import pytest

import grpc

from conftest import require_module

x509 = require_module("cryptography.x509")

from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import NameOID  # noqa: E402

from ngram_service import NgramIndex  # noqa: E402
from ngram_service.client import NgramClient  # noqa: E402
from test_server import BINARY, ServerProcess  # noqa: E402

pytestmark = pytest.mark.needs_server


def _cert(name: str, issuer: tuple | None, *, ca: bool = False, server: bool = False):
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    b = (x509.CertificateBuilder().subject_name(subject)
         .issuer_name(issuer[0].subject if issuer else subject)
         .public_key(key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if server:
        b = b.add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
    cert = b.sign(issuer[1] if issuer else key, hashes.SHA256())
    return cert, key


def _write(d: Path, name: str, cert, key) -> tuple[Path, Path]:
    c, k = d / f"{name}.crt", d / f"{name}.key"
    c.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    k.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()))
    return c, k


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("pki")
    ca = _cert("test-ca", None, ca=True)
    other_ca = _cert("other-ca", None, ca=True)
    out: dict[str, Path] = {}
    out["ca"], _ = _write(d, "ca", *ca)
    out["server_crt"], out["server_key"] = _write(d, "server", *_cert("localhost", ca, server=True))
    out["client_crt"], out["client_key"] = _write(d, "client", *_cert("worker-1", ca))
    out["rogue_crt"], out["rogue_key"] = _write(d, "rogue", *_cert("rogue", other_ca))
    return out


def _refused(c: NgramClient) -> None:
    with pytest.raises(grpc.RpcError) as e:
        c.topk([1], 1, timeout=3)
    assert e.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


def test_tls(sample_trie: Path, pki: dict[str, Path]) -> None:
    with ServerProcess([sample_trie], "--tls-cert", str(pki["server_crt"]), "--tls-key", str(pki["server_key"])) as s:
        assert s.listening["tls"] and not s.listening["mtls"]
        with NgramClient(s.target, root_certificates=pki["ca"]) as c:
            got, want = c.topk([1], 2), NgramIndex.open(sample_trie).topk([1], 2)
            assert got.matched == want.matched and got.tokens.tolist() == want.tokens.tolist()
        with NgramClient(s.target, retry_attempts=2) as c:  # plaintext against TLS
            _refused(c)
        with NgramClient(s.target, root_certificates=pki["rogue_crt"], retry_attempts=2) as c:  # untrusted server
            _refused(c)


def test_mutual_tls(sample_trie: Path, pki: dict[str, Path]) -> None:
    with ServerProcess([sample_trie], "--tls-cert", str(pki["server_crt"]), "--tls-key", str(pki["server_key"]),
                       "--tls-client-ca", str(pki["ca"])) as s:
        assert s.listening["mtls"]
        with NgramClient(s.target, root_certificates=pki["ca"], certificate_chain=pki["client_crt"],
                         private_key=pki["client_key"], server_name="localhost") as c:
            assert c.info()["order"] == 3
        with NgramClient(s.target, root_certificates=pki["ca"], retry_attempts=2) as c:  # no client certificate
            _refused(c)
        with NgramClient(s.target, root_certificates=pki["ca"], certificate_chain=pki["rogue_crt"],
                         private_key=pki["rogue_key"], retry_attempts=2) as c:  # certificate of another CA
            _refused(c)


def test_dart_generate_over_mutual_tls(sample_trie: Path, pki: dict[str, Path]) -> None:
    """dart-generate connects as ngram-query does: --target with --ca, --cert, --key, --server-name."""
    require_module("torch")
    import json

    from click.testing import CliRunner

    from dart_client.cli import main

    base = ["--random-models", "--drafter", "none", "--max-new-tokens", "6", "-p", "This PEP proposes", "--json",
            "--deadline-ms", "5000"]
    with ServerProcess([sample_trie], "--tls-cert", str(pki["server_crt"]), "--tls-key", str(pki["server_key"]),
                       "--tls-client-ca", str(pki["ca"])) as s:
        tls = ["--ca", str(pki["ca"]), "--cert", str(pki["client_crt"]), "--key", str(pki["client_key"]),
               "--server-name", "localhost"]
        r = CliRunner().invoke(main, [*base, "--target", s.target, *tls])
        assert r.exit_code == 0, r.output
        out = json.loads(r.stdout)
        assert out["remote_steps"] == out["steps"] > 0 and out["pruner"]["fallbacks"] == 0
        r = CliRunner().invoke(main, [*base, "--target", s.target, "--ca", str(pki["ca"]), "--cert",
                                      str(pki["client_crt"])])
        assert r.exit_code == 2 and "--cert and --key go together" in r.stderr
    r = CliRunner().invoke(main, [*base, *tls])  # no --target: the TLS options do not apply
    assert r.exit_code == 2
    assert "--deadline-ms, --ca, --cert, --key, --server-name: only with --target (a trie host)" in r.stderr


@pytest.mark.parametrize("flag", ["--tls-cert", "--tls-key", "--tls-client-ca"])
def test_a_file_that_is_not_pem_is_named(sample_trie: Path, pki: dict[str, Path], tmp_path: Path, flag: str) -> None:
    """A TLS flag given a file that holds no PEM block of its kind (a key for the certificate, text) is refused
    at start naming the flag and the file; gRPC alone says "Invalid cert chain file" and nothing of which."""
    files = {"--tls-cert": pki["server_crt"], "--tls-key": pki["server_key"], "--tls-client-ca": pki["ca"]}
    wrong = pki["server_key"] if flag != "--tls-key" else pki["server_crt"]
    files[flag] = wrong
    args = [a for f, path in files.items() for a in (f, str(path))]
    p = subprocess.run([str(BINARY), str(sample_trie), "--host", "127.0.0.1", "--port", "0", *args],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 1
    kind = "PRIVATE KEY" if flag == "--tls-key" else "CERTIFICATE"
    assert json.loads(p.stderr.splitlines()[-1])["error"] == f"{flag} {wrong}: no PEM {kind} in it"
