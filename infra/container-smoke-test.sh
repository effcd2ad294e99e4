#!/usr/bin/env bash
# Builds the trie host's image (infra/Containerfile) and smoke-tests it the way
# the Deployment (infra/k8s/deployment.yaml) runs it, with podman on this machine:
#
#  1. a Debian bookworm base image from Debian's packages (debootstrap
#     --variant=minbase, podman import), made once and reused;
#  2. the image, named as the Deployment names it;
#  3. a trie (the bundled sample, or $TRIE) in a local S3 server (moto, 127.0.0.1)
#     at the location the Deployment serves;
#  4. the init container: the Deployment's fetch args (download, CRC check) into
#     a volume, read-only root filesystem, non-root;
#  5. the server container: the Deployment's args, the volume mounted read-only,
#     read-only root filesystem, ports published on 127.0.0.1; then grpc.health.v1
#     SERVING, trees pruned through the published port equal to the in-process
#     engine's, /metrics scraped, ngram-info --verify in the image;
#  6. SIGTERM: drained, exit status 0.
# The last line: the image size and the time from `podman run` to SERVING.
#
#   bash infra/container-smoke-test.sh         (as root; minutes: it compiles the server)
#
# Needs: podman, runc, debootstrap (apt-get install podman runc debootstrap), and
# $PYTHON (default python3) with this project, moto, boto3, grpcio-health-checking.
# REBUILD_BASE=1 makes the base image again. Not part of the default test run.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3}
BASE_IMAGE=${BASE_IMAGE:-localhost/ngram-base:bookworm}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
RUN_OPTS=(--runtime runc --ulimit nofile=1024:1024 --ulimit nproc=1024:1024)
NAME=ngram-smoke-$$

say() { echo "container-smoke: $*" >&2; }
fail() { say "FAILED: $*"; exit 1; }
now() { date +%s.%N; }

# The Deployment is the one definition of the image name and the arguments.
IMAGE=$("$PYTHON" "$REPO/infra/manifest.py" image)
mapfile -t SERVE_ARGS < <("$PYTHON" "$REPO/infra/manifest.py" args)
mapfile -t FETCH_ARGS < <("$PYTHON" "$REPO/infra/manifest.py" init-args)
LOCATION=$("$PYTHON" -c 'import sys; from ngram_service.serve import ServeArgs; print(*ServeArgs(sys.argv[1:]).files())' "${SERVE_ARGS[@]}")
opt() {  # opt NAME ARGS...: the value of --NAME in ARGS
  local name=$1; shift
  while [ $# -gt 0 ]; do
    case $1 in "$name") echo "$2"; return ;; "$name"=*) echo "${1#*=}"; return ;; esac
    shift
  done
  fail "no $name in the Deployment's args"
}
GRPC_PORT=$(opt --port "${SERVE_ARGS[@]}")
METRICS_PORT=$(opt --metrics-port "${SERVE_ARGS[@]}")
CACHE_DIR=$(opt --cache-dir "${SERVE_ARGS[@]}")
USER_ID=$(sed -n 's/^USER \([0-9]*:[0-9]*\)$/\1/p' "$REPO/infra/Containerfile" | tail -1)  # the last stage's

WORK=$(mktemp -d /tmp/ngram-smoke.XXXXXX)
S3_PID=""
cleanup() {
  podman rm -f "$NAME" >/dev/null 2>&1 || true
  [ -n "$S3_PID" ] && kill "$S3_PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

# ---- 1. the base image ------------------------------------------------------------
if [ -n "${REBUILD_BASE:-}" ] || ! podman image exists "$BASE_IMAGE"; then
  say "making $BASE_IMAGE with debootstrap --variant=minbase bookworm"
  debootstrap --variant=minbase bookworm "$WORK/rootfs" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 \
    || { tail -20 "$WORK/debootstrap.log" >&2; fail "debootstrap"; }
  tar -C "$WORK/rootfs" -c . | podman import - "$BASE_IMAGE" >/dev/null
  rm -rf "$WORK/rootfs"
fi

# ---- 2. the image --------------------------------------------------------------------
# The build context: the checkout's files that git tracks or does not ignore (no build/).
mkdir "$WORK/context"
(cd "$REPO" && git ls-files -z -co --exclude-standard | tar --null -T - -cf -) | tar -C "$WORK/context" -xf -
BUILD_OPTS=()
CA=${PIP_CERT:-${SSL_CERT_FILE:-}}
if [ -n "$CA" ] && [ -f "$CA" ]; then  # a TLS-intercepting proxy between the build and PyPI
  BUILD_OPTS+=(-v "$CA:/run/host-ca.crt:ro" --build-arg PIP_CERT=/run/host-ca.crt)
fi
say "building $IMAGE (compiles the server: minutes)"
t_build=$(now)
podman build "${RUN_OPTS[@]}" "${BUILD_OPTS[@]}" --build-arg BASE_IMAGE="$BASE_IMAGE" \
  -f "$WORK/context/infra/Containerfile" -t "$IMAGE" "$WORK/context" >"$WORK/build.log" 2>&1 \
  || { tail -40 "$WORK/build.log" >&2; fail "podman build"; }
# The runtime stage holds what serving needs and nothing to build with.
podman run --rm "${RUN_OPTS[@]}" --read-only --network none --entrypoint /bin/sh "$IMAGE" -c '
  for t in ngram-serve ngram-info ngram-query; do command -v "$t" >/dev/null || { echo "no $t"; exit 1; }; done
  for t in ngram-build dart-generate g++ cc cmake pip; do command -v "$t" >/dev/null && { echo "has $t"; exit 1; }; done
  python3 -c "import duckdb" 2>/dev/null && { echo "has duckdb"; exit 1; }
  [ "$(id -u)" != 0 ] || { echo "runs as root"; exit 1; }' >&2 || fail "the runtime image's contents"
say "built in $(awk "BEGIN {printf \"%.0f\", $(now) - $t_build}") s"

# ---- 3. the trie in a local S3 --------------------------------------------------------
if [ -n "${TRIE:-}" ]; then
  cp "$TRIE" "$WORK/trie.ngt"
else
  (cd "$WORK" && "$PYTHON" -m indexer.cli --out "$WORK/trie.ngt" >/dev/null 2>&1) \
    || fail "building the sample trie (ngram-build --out)"
fi
"$PYTHON" "$REPO/infra/container_smoke.py" s3 "$LOCATION" "$WORK/trie.ngt" >"$WORK/s3.endpoint" 2>"$WORK/s3.log" &
S3_PID=$!
for _ in $(seq 200); do [ -s "$WORK/s3.endpoint" ] && break; sleep 0.1; done
ENDPOINT=$(head -1 "$WORK/s3.endpoint")
[ -n "$ENDPOINT" ] || { cat "$WORK/s3.log" >&2; fail "the local S3 server did not start"; }
say "$LOCATION in moto at $ENDPOINT"

# ---- 4. the init container: fetch and verify into the trie volume -----------------------
mkdir "$WORK/trie-volume"
chown "$USER_ID" "$WORK/trie-volume"
LOCAL=$(podman run --rm "${RUN_OPTS[@]}" --read-only --network host \
  -e AWS_ENDPOINT_URL="$ENDPOINT" -e AWS_ACCESS_KEY_ID=smoke -e AWS_SECRET_ACCESS_KEY=smoke \
  -e AWS_DEFAULT_REGION=us-east-1 -v "$WORK/trie-volume:$CACHE_DIR:rw" "$IMAGE" "${FETCH_ARGS[@]}") \
  || fail "the init container (${FETCH_ARGS[*]})"
cmp -s "$WORK/trie.ngt" "$WORK/trie-volume/$(basename "$LOCAL")" || fail "the fetched trie differs from the uploaded one"
say "init container fetched $LOCATION to $LOCAL"
podman run --rm "${RUN_OPTS[@]}" --read-only --network none -v "$WORK/trie-volume:$CACHE_DIR:ro" \
  --entrypoint ngram-info "$IMAGE" "$LOCAL" --verify >/dev/null || fail "ngram-info --verify in the image"

# ---- 5. the server container ----------------------------------------------------------------
# No S3 endpoint or credentials: the verified copy in the read-only volume must do.
# Host ports picked first, so that the health poller is already waiting when podman starts:
# start to SERVING is then from `podman run` to the first SERVING answer.
read -r HOST_GRPC HOST_METRICS < <("$PYTHON" -c '
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))')
"$PYTHON" "$REPO/infra/container_smoke.py" wait-serving "$HOST_GRPC" 120 >"$WORK/serving.at" &
POLLER=$!
sleep 1  # the poller's own start (Python, grpc) is not the container's
t0=$(now)
podman run -d --name "$NAME" "${RUN_OPTS[@]}" --read-only -v "$WORK/trie-volume:$CACHE_DIR:ro" \
  -p "127.0.0.1:$HOST_GRPC:$GRPC_PORT" -p "127.0.0.1:$HOST_METRICS:$METRICS_PORT" "$IMAGE" "${SERVE_ARGS[@]}" >/dev/null
wait "$POLLER" || { podman logs "$NAME" >&2; fail "not SERVING"; }
t_serving=$(awk "BEGIN {printf \"%.2f\", $(cat "$WORK/serving.at") - $t0}")
say "SERVING on 127.0.0.1:$HOST_GRPC after $t_serving s (container args: ${SERVE_ARGS[*]})"
"$PYTHON" "$REPO/infra/container_smoke.py" check "$HOST_GRPC" "$HOST_METRICS" "$WORK/trie.ngt" \
  || { podman logs "$NAME" >&2; fail "answers or metrics"; }
podman logs "$NAME" >"$WORK/server.log" 2>&1
grep -q '"event": *"trie_cached"' "$WORK/server.log" || fail "the server did not use the cached copy"
if grep -q '"event": *"trie_fetch"' "$WORK/server.log"; then fail "the server downloaded the trie again"; fi

# ---- 6. SIGTERM: drain and exit 0 -------------------------------------------------------------
podman kill --signal TERM "$NAME" >/dev/null
status=$(timeout 60 podman wait "$NAME") || fail "the container did not stop after SIGTERM"
podman logs "$NAME" >"$WORK/server.log" 2>&1
grep -q '"event":"draining"' "$WORK/server.log" && grep -q '"event":"stopped"' "$WORK/server.log" \
  || { cat "$WORK/server.log" >&2; fail "no drain"; }
[ "$status" = 0 ] || { cat "$WORK/server.log" >&2; fail "exit status $status after SIGTERM"; }
say "SIGTERM: drained, exit status 0"

size=$(podman image inspect "$IMAGE" --format '{{.Size}}')
awk -v image="$IMAGE" -v size="$size" -v t="$t_serving" \
  'BEGIN {printf "container-smoke-test: OK image %s size %.1f MB, start to SERVING %s s\n", image, size / 1e6, t}'
