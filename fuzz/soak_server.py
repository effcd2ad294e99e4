"""Soak: random request bodies against ngram-serve-native, its RSS sampled as it goes.

    python fuzz/soak_server.py TRIE --calls 120000 --every 10000 [--json bench/results/soak.json]
    python fuzz/soak_server.py TRIE --calls 20000 --wrap "heaptrack -o /tmp/soak"   # under a tool

One server on 127.0.0.1 (a free port), one client; each call picks a method
and sends 0-300 random bytes as its body (most are refused as unparsable,
some parse into requests with random fields). Prints RSS after every
--every calls and the growth per call over the first and the second half;
a leak grows both halves alike, allocator caching grows the first and stops.
"""
from __future__ import annotations

import argparse
import json
import random
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

METHODS = ["GetInfo", "ConditionalProbs", "TopK", "PruneTree"]


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def server_pid(proc: subprocess.Popen) -> int:
    """The server's own pid (under --wrap, the wrapped process's child)."""
    try:
        kids = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    except OSError:
        kids = []
    return int(kids[-1]) if kids else proc.pid


def main(argv: list[str] | None = None) -> int:
    import grpc

    from ngram_service.serve import find_native_binary

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trie", type=Path)
    ap.add_argument("--calls", type=int, default=60000)
    ap.add_argument("--every", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--binary", type=Path, help="default: the installed ngram-serve-native")
    ap.add_argument("--wrap", default="", help="a command to run the server under (heaptrack, valgrind ...)")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    binary = a.binary or find_native_binary()
    if binary is None:
        raise SystemExit("ngram-serve-native was not built")
    cmd = [*shlex.split(a.wrap), str(binary), str(a.trie), "--host", "127.0.0.1", "--port", "0", "--threads", "1"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, errors="replace")
    port: list[int] = []
    stray: list[str] = []

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            try:
                ev = json.loads(line)
            except ValueError:
                stray.append(line)
                continue
            if ev.get("event") == "listening":
                port.append(ev["port"])

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + 120
    while not port:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"server did not start: {stray[-5:]}")
        time.sleep(0.05)
    pid = server_pid(proc)
    rng = random.Random(a.seed)
    samples = []
    codes: dict[str, int] = {}
    t0 = time.monotonic()
    with grpc.insecure_channel(f"127.0.0.1:{port[0]}") as ch:
        calls = {m: ch.unary_unary(f"/ngram.v1.NgramService/{m}") for m in METHODS}
        samples.append((0, rss_bytes(pid)))
        for i in range(1, a.calls + 1):
            body = rng.randbytes(rng.choice([0, 1, 2, 5, 17, 64, 300]))
            try:
                calls[rng.choice(METHODS)](body, timeout=10)
                code = "OK"
            except grpc.RpcError as e:
                code = e.code().name
            codes[code] = codes.get(code, 0) + 1
            if i % a.every == 0:
                samples.append((i, rss_bytes(pid)))
                print(f"{i:>9} calls  RSS {samples[-1][1] / 1e6:8.2f} MB", flush=True)
    seconds = time.monotonic() - t0
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
    half = len(samples) // 2
    (c0, r0), (c1, r1), (c2, r2) = samples[0], samples[half], samples[-1]
    result = {
        "calls": a.calls, "seconds": round(seconds, 1), "codes": codes,
        "rss_samples": samples,
        "bytes_per_call_first_half": round((r1 - r0) / max(1, c1 - c0), 2),
        "bytes_per_call_second_half": round((r2 - r1) / max(1, c2 - c1), 2),
        "non_json_stderr_lines": len(stray),
    }
    print(json.dumps({k: v for k, v in result.items() if k != "rss_samples"}))
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
