"""infra/k8s: the manifests validate against the Kubernetes API schemas and agree
with the server, the image and the smoke test.

No cluster runs here. What is checked for real: every object against the
API's OpenAPI schemas (kubernetes-validate, strict: unknown fields refused),
the probes against a running server's health service, and every value that
two files must share (ports, image, user, trie location, drain time) between
them.
"""
from __future__ import annotations

import copy
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import require_module
import yaml

kv = require_module("kubernetes_validate")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "infra"))
import manifest  # noqa: E402  (infra/manifest.py)

from ngram_service.serve import ServeArgs, find_native_binary  # noqa: E402

K8S = REPO / "infra" / "k8s"
K8S_VERSION = "1.37.0"
HEALTH_SERVICE = "ngram.v1.NgramService"


def docs(path: Path) -> list[dict[str, Any]]:
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def validate(obj: dict[str, Any]) -> None:
    kv.validate(obj, K8S_VERSION, strict=True)


def option(args: list[str], name: str) -> str:
    """The value of --name in args (either --name V or --name=V)."""
    for i, a in enumerate(args):
        if a == name:
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    raise KeyError(name)


def quantity(q: str | int) -> float:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "M": 1e6, "G": 1e9, "m": 1e-3}
    m = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(q))
    assert m, q
    return float(m.group(1)) * units.get(m.group(2), 1)


def apply_json_patch(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 add/replace, what the mTLS overlay uses (kustomize applies the same)."""
    doc = copy.deepcopy(doc)
    for op in ops:
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        node: Any = doc
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        if op["op"] == "add" and isinstance(node, list):
            node.insert(len(node) if last == "-" else int(last), op["value"])
        elif op["op"] in ("add", "replace"):
            if op["op"] == "replace":
                assert (int(last) < len(node)) if isinstance(node, list) else last in node, op["path"]
            node[int(last) if isinstance(node, list) else last] = op["value"]
        else:
            raise AssertionError(f"unsupported op {op['op']}")
    return doc


@pytest.fixture(scope="module")
def deployment() -> dict[str, Any]:
    return manifest.load()


@pytest.fixture(scope="module")
def pod(deployment: dict[str, Any]) -> dict[str, Any]:
    return deployment["spec"]["template"]["spec"]


# ---- the schemas -------------------------------------------------------------------

@pytest.mark.parametrize("name", ["deployment.yaml", "service.yaml", "pdb.yaml", "hpa.yaml"])
def test_manifest_validates(name: str) -> None:
    objs = docs(K8S / name)
    assert objs
    for obj in objs:
        validate(obj)


def test_kustomization_lists_every_manifest() -> None:
    (k,) = docs(K8S / "kustomization.yaml")
    assert sorted(k["resources"]) == sorted(p.name for p in K8S.glob("*.yaml")
                                           if p.name not in ("kustomization.yaml", "rayjob-build.yaml"))


def test_the_schema_check_catches_mistakes(deployment: dict[str, Any]) -> None:
    bad = copy.deepcopy(deployment)
    bad["spec"]["template"]["spec"]["containers"][0]["startupProbe"]["grpc"]["port"] = "grpc"  # must be a number
    with pytest.raises(kv.ValidationError):
        validate(bad)
    bad = copy.deepcopy(deployment)
    bad["spec"]["template"]["spec"]["containers"][0]["readOnlyRootFs"] = True  # unknown field
    with pytest.raises(kv.ValidationError):
        validate(bad)


def test_mtls_overlay_validates_and_serves_tls(deployment: dict[str, Any]) -> None:
    overlay = K8S / "overlays" / "mtls"
    (k,) = docs(overlay / "kustomization.yaml")
    assert k["resources"] == ["../.."]
    (patch,) = k["patches"]
    assert patch["target"]["kind"] == "Deployment" and patch["target"]["name"] == deployment["metadata"]["name"]
    with open(overlay / patch["path"]) as f:
        patched = apply_json_patch(deployment, yaml.safe_load(f))
    validate(patched)
    spec = patched["spec"]["template"]["spec"]
    serve = manifest.serve_container(patched)
    mount = next(m for m in serve["volumeMounts"] if m["name"] == "tls")
    secret = next(v for v in spec["volumes"] if v["name"] == "tls")["secret"]
    assert mount["readOnly"] and secret["secretName"] == "ngram-trie-host-tls"
    for flag, key in (("--tls-cert", "tls.crt"), ("--tls-key", "tls.key"), ("--tls-client-ca", "ca.crt")):
        assert option(serve["args"], flag) == f"{mount['mountPath']}/{key}"
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        cmd = serve[probe]["exec"]["command"]
        assert cmd[0] == "ngram-query" and cmd[-1] == "info"
        assert option(cmd, "--target") == f"127.0.0.1:{option(serve['args'], '--port')}"
        assert {option(cmd, "--ca"), option(cmd, "--cert"), option(cmd, "--key")} == {
            f"{mount['mountPath']}/{k}" for k in ("ca.crt", "tls.crt", "tls.key")}


def test_rayjob_pods_validate_and_write_the_trie_the_host_serves(pod: dict[str, Any]) -> None:
    (job,) = docs(K8S / "rayjob-build.yaml")
    assert job["apiVersion"] == "ray.io/v1" and job["kind"] == "RayJob"
    spec = job["spec"]
    cluster = spec["rayClusterSpec"]
    # The CRD's schema is not in kubernetes-validate: its pod templates are core PodTemplates.
    templates = [cluster["headGroupSpec"]["template"]] + [g["template"] for g in cluster["workerGroupSpecs"]]
    for t in templates:
        validate({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": t})
    argv = spec["entrypoint"].split()
    assert argv[0] == "ngram-build" and option(argv, "--executor") == "ray"
    assert option(argv, "--tmp-dir").startswith("s3://") and argv[1].startswith("s3://")
    trie = ServeArgs(manifest.serve_container()["args"]).files()
    assert trie == [option(argv, "--out")]
    assert spec["shutdownAfterJobFinishes"] is True
    # The image of the Containerfile's indexer target, beside the serving image.
    repo, tag = manifest.image().rsplit(":", 1)
    assert {c["image"] for t in templates for c in t["spec"]["containers"]} == {f"{repo}-indexer:{tag}"}
    containerfile = (REPO / "infra" / "Containerfile").read_text()
    assert f"--target indexer -t {repo}-indexer:{tag}" in containerfile


# ---- one value, one place --------------------------------------------------------------

def test_probes_name_the_served_port_and_health_service(pod: dict[str, Any]) -> None:
    serve = manifest.serve_container()
    port = int(option(serve["args"], "--port"))
    assert {p["name"]: p["containerPort"] for p in serve["ports"]}["grpc"] == port
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert serve[probe]["grpc"] == {"port": port, "service": HEALTH_SERVICE}


@pytest.mark.needs_server
def test_the_server_answers_the_probes_health_service(sample_trie: Path) -> None:
    """What kubelet asks: grpc.health.v1.Health/Check for the probes' service, on the real server."""
    grpc = require_module("grpc")
    health = require_module("grpc_health.v1.health_pb2")
    health_grpc = require_module("grpc_health.v1.health_pb2_grpc")
    import json
    import signal

    serve = manifest.serve_container()
    service = serve["readinessProbe"]["grpc"]["service"]
    proc = subprocess.Popen([str(find_native_binary()), str(sample_trie), "--host", "127.0.0.1", "--port", "0"],
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        port = next(json.loads(x)["port"] for x in proc.stderr if '"listening"' in x)
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = health_grpc.HealthStub(ch)
            resp = stub.Check(health.HealthCheckRequest(service=service), timeout=5)
            assert resp.status == health.HealthCheckResponse.SERVING
            with pytest.raises(grpc.RpcError) as e:  # a misspelt service would never be ready
                stub.Check(health.HealthCheckRequest(service=service + "x"), timeout=5)
            assert e.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)


def test_metrics_port_and_scrape_annotations(deployment: dict[str, Any]) -> None:
    serve = manifest.serve_container()
    ann = deployment["spec"]["template"]["metadata"]["annotations"]
    metrics = int(option(serve["args"], "--metrics-port"))
    assert ann["prometheus.io/scrape"] == "true" and int(ann["prometheus.io/port"]) == metrics
    assert ann["prometheus.io/path"] == "/metrics"
    assert {p["name"]: p["containerPort"] for p in serve["ports"]}["metrics"] == metrics


def test_drain_fits_in_the_termination_grace(pod: dict[str, Any]) -> None:
    serve = manifest.serve_container()
    drain = float(option(serve["args"], "--drain-seconds"))
    pre_stop = serve["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pod["terminationGracePeriodSeconds"] > pre_stop + drain


def test_trie_volume_is_read_only_and_filled_by_the_init_container(pod: dict[str, Any]) -> None:
    serve, fetch = manifest.serve_container(), manifest.fetch_container()
    s, f = ServeArgs(serve["args"]), ServeArgs(fetch["args"])
    assert f.fetch_only and not s.fetch_only
    assert s.files() == f.files() and len(s.files()) == 1 and s.files()[0].startswith("s3://")
    (smount,) = [m for m in serve["volumeMounts"] if m["name"] == "trie"]
    (fmount,) = [m for m in fetch["volumeMounts"] if m["name"] == "trie"]
    assert smount["readOnly"] is True and not fmount.get("readOnly")
    assert str(s.cache_dir) == smount["mountPath"] and str(f.cache_dir) == fmount["mountPath"]
    assert serve["image"] == fetch["image"] == manifest.image()


def test_non_root_and_read_only_root_filesystem(pod: dict[str, Any]) -> None:
    assert pod["securityContext"]["runAsNonRoot"] is True
    containerfile = (REPO / "infra" / "Containerfile").read_text()
    user = re.findall(r"^USER (\d+):(\d+)$", containerfile, re.M)[-1:]  # the runtime stage: the last
    user = re.match(r"(\d+):(\d+)", ":".join(user[0])) if user else None
    assert user and pod["securityContext"]["runAsUser"] == int(user.group(1))
    assert pod["securityContext"]["runAsGroup"] == int(user.group(2))
    for c in pod["containers"] + pod["initContainers"]:
        sc = c["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"]["drop"] == ["ALL"]
    exposed = {int(p) for p in re.findall(r"(\d+)/tcp", re.search(r"^EXPOSE (.*)$", containerfile, re.M).group(1))}
    assert exposed == {p["containerPort"] for p in manifest.serve_container()["ports"]}


def test_resources_follow_the_trie_size(deployment: dict[str, Any]) -> None:
    serve = manifest.serve_container()
    trie_bytes = int(deployment["metadata"]["annotations"]["ngram-trie-host/trie-bytes"])
    in_ram = "--ram" in serve["args"]
    want = manifest.memory_request(trie_bytes, in_ram=in_ram)
    res = serve["resources"]
    assert quantity(res["requests"]["memory"]) == quantity(res["limits"]["memory"]) == want
    assert int(option(serve["args"], "--threads")) == quantity(res["requests"]["cpu"])
    assert manifest.memory_request(10 << 30, in_ram=True) > manifest.memory_request(10 << 30) > 10 << 30


def test_service_pdb_and_hpa_select_the_deployment(deployment: dict[str, Any]) -> None:
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    (svc,) = docs(K8S / "service.yaml")
    assert svc["spec"]["clusterIP"] == "None"  # headless: clients balance across the pods
    assert svc["spec"]["selector"].items() <= labels.items()
    names = {p["name"] for p in manifest.serve_container()["ports"]}
    assert {p["targetPort"] for p in svc["spec"]["ports"]} <= names
    (pdb,) = docs(K8S / "pdb.yaml")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    (hpa,) = docs(K8S / "hpa.yaml")
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])
    assert hpa["spec"]["metrics"][0]["resource"]["name"] == "cpu"
    assert hpa["spec"]["minReplicas"] >= 2  # the PDB's one-at-a-time keeps a replica up


def test_smoke_test_runs_the_manifest_image_and_args() -> None:
    """The smoke script takes the image name and both containers' args from the
    Deployment (infra/manifest.py), never its own copies."""
    script = (REPO / "infra" / "container-smoke-test.sh").read_text()
    for what in ("image", "args", "init-args"):
        assert re.search(rf"manifest\.py\"? {what}\b", script), what
    assert "localhost/ngram-trie-host" not in script
    out = subprocess.run([sys.executable, str(REPO / "infra" / "manifest.py"), "args"], capture_output=True,
                         text=True, check=True).stdout.splitlines()
    assert out == manifest.serve_container()["args"]


@pytest.mark.needs_server
def test_mtls_overlay_probe_passes_against_an_mtls_server(deployment: dict[str, Any], sample_trie: Path,
                                                          tmp_path: Path) -> None:
    """The overlay's server flags and its probe command, run for real: the
    Secret's files (a certificate for server and client auth, as the overlay's
    comment asks) in a folder standing in for /tls."""
    import datetime
    import json
    import signal

    x509 = require_module("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    valid = {"not_valid_before": now - datetime.timedelta(hours=1), "not_valid_after": now + datetime.timedelta(days=1)}
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "cluster CA")])
    ca = (x509.CertificateBuilder(issuer_name=ca_name, subject_name=ca_name, public_key=ca_key.public_key(),
                                  serial_number=1, **valid)
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(ca_key, hashes.SHA256()))
    cert = (x509.CertificateBuilder(issuer_name=ca_name, public_key=key.public_key(), serial_number=2,
                                    subject_name=x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ngram-trie-host")]),
                                    **valid)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("ngram-trie-host")]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    (tmp_path / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "tls.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "tls.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                         serialization.NoEncryption()))

    overlay = K8S / "overlays" / "mtls"
    with open(overlay / "deployment-mtls.yaml") as f:
        serve = manifest.serve_container(apply_json_patch(deployment, yaml.safe_load(f)))
    mount = next(m["mountPath"] for m in serve["volumeMounts"] if m["name"] == "tls")
    tls_args = [a.replace(mount + "/", f"{tmp_path}/") for a in serve["args"] if a.startswith("--tls-")]
    proc = subprocess.Popen([str(find_native_binary()), str(sample_trie), "--host", "127.0.0.1", "--port", "0",
                             *tls_args], stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        lines = iter(proc.stderr)
        listening = next((json.loads(x) for x in lines if x.startswith("{") and "\"listening\"" in x), None)
        assert listening, f"no listening event: {tls_args} rc={proc.wait()}"
        assert listening["mtls"] is True
        bin_dir = Path(sys.executable).parent
        for name in ("startupProbe", "readinessProbe", "livenessProbe"):
            probe = [a.replace(mount + "/", f"{tmp_path}/") for a in serve[name]["exec"]["command"]]
            probe[probe.index("--target") + 1] = f"127.0.0.1:{listening['port']}"
            ok = subprocess.run([str(bin_dir / probe[0]), *probe[1:]], capture_output=True, text=True, timeout=60)
            assert ok.returncode == 0, (name, ok.stderr)
            assert json.loads(ok.stdout)["order"] == 3
        # Without the client certificate the same probe fails: the server requires it.
        i = probe.index("--cert")
        no_cert = probe[:i] + probe[i + 4:]  # drop --cert X --key Y
        bad = subprocess.run([str(bin_dir / probe[0]), *no_cert[1:]], capture_output=True, text=True, timeout=60)
        assert bad.returncode != 0
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
