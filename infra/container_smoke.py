"""The checks of infra/container-smoke-test.sh that speak gRPC, HTTP or S3.

Runs on the host, in a Python with this project installed (the in-process
engine is the reference the container's answers are compared with), moto and
boto3, grpcio-health-checking.

    python3 infra/container_smoke.py s3 LOCATION TRIE   # moto S3 on 127.0.0.1, LOCATION holds TRIE; prints the endpoint
    python3 infra/container_smoke.py wait-serving PORT TIMEOUT   # prints the time it saw SERVING
    python3 infra/container_smoke.py check GRPC_PORT METRICS_PORT TRIE
"""
from __future__ import annotations

import signal
import sys
import time
import urllib.parse
import urllib.request

HEALTH_SERVICE = "ngram.v1.NgramService"


def serve_s3(location: str, trie: str) -> None:
    """moto's S3 server on a free port of 127.0.0.1 holding TRIE at LOCATION,
    until SIGTERM; prints its endpoint URL (one line) once ready."""
    import boto3
    from moto.server import ThreadedMotoServer

    stop = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)  # before the server's threads exist: they inherit it
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    url = urllib.parse.urlsplit(location)
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="smoke",
                      aws_secret_access_key="smoke")
    s3.create_bucket(Bucket=url.netloc)
    s3.upload_file(trie, url.netloc, url.path.lstrip("/"))
    print(endpoint, flush=True)
    signal.sigwait(stop)
    server.stop()


def wait_serving(port: int, timeout: float) -> None:
    """Polls grpc.health.v1 for the service the Deployment's probes name until
    SERVING (connection refused meanwhile: the container is not up yet);
    prints the wall-clock time it saw SERVING."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    deadline = time.monotonic() + timeout
    # Reconnect every 20 ms: gRPC's default backoff (1 s, growing) would add to the time measured.
    fast = [("grpc.initial_reconnect_backoff_ms", 20), ("grpc.min_reconnect_backoff_ms", 20),
            ("grpc.max_reconnect_backoff_ms", 20)]
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=fast) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        while True:
            try:
                r = stub.Check(health_pb2.HealthCheckRequest(service=HEALTH_SERVICE), timeout=1)
                if r.status == health_pb2.HealthCheckResponse.SERVING:
                    print(f"{time.time():.6f}")  # when, for the start-to-SERVING time
                    return
            except grpc.RpcError:
                pass
            if time.monotonic() > deadline:
                sys.exit(f"container-smoke: no SERVING on 127.0.0.1:{port} within {timeout} s")
            time.sleep(0.02)


def check(port: int, metrics_port: int, trie: str) -> None:
    """Prunes draft lattices through the published port and compares every tree
    with the in-process engine's; then scrapes /metrics for those calls."""
    import numpy as np

    from ngram_service import NgramClient, NgramIndex

    idx = NgramIndex.open(trie)
    rng = np.random.default_rng(7)
    fields = ("tokens", "parents", "depths", "scores", "tree_mask", "retrieve_indices")
    n = 20
    with NgramClient(f"127.0.0.1:{port}", timeout=10) as client:
        assert client.info()["ngrams"] == idx.info()["ngrams"], "the container serves another trie"
        for _ in range(n):
            prefix = rng.integers(0, idx.vocab_size, 12)
            tokens = np.stack([rng.choice(idx.vocab_size, 20, replace=False) for _ in range(6)])
            probs = rng.dirichlet(np.ones(20), 6).astype(np.float32)
            got, want = client.prune(prefix, tokens, probs), idx.prune(prefix, tokens, probs)
            for f in fields:
                np.testing.assert_array_equal(getattr(got, f), getattr(want, f), err_msg=f)
    body = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    line = next((x for x in body.splitlines()
                 if x.startswith("ngram_requests_total{") and 'method="PruneTree"' in x and 'code="OK"' in x), None)
    if line is None or float(line.rsplit(" ", 1)[1]) < n:
        sys.exit(f"container-smoke: /metrics has no ngram_requests_total for {n} PruneTree calls: {line}")
    print(f"container-smoke: {n} trees equal to the in-process engine; /metrics: {line}")


def main(argv: list[str]) -> None:
    if argv[:1] == ["s3"] and len(argv) == 3:
        serve_s3(argv[1], argv[2])
    elif argv[:1] == ["wait-serving"] and len(argv) == 3:
        wait_serving(int(argv[1]), float(argv[2]))
    elif argv[:1] == ["check"] and len(argv) == 4:
        check(int(argv[1]), int(argv[2]), argv[3])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
