#!/usr/bin/env bash
# Installs the system packages the native gRPC server (cpp/server) builds
# against: grpc++, protobuf (+ compilers), prometheus-cpp, pkg-config.
# Idempotent and non-interactive: does nothing when everything is present.
set -euo pipefail

PKGS=(
  pkg-config
  libgrpc++-dev
  protobuf-compiler-grpc
  libprotobuf-dev
  protobuf-compiler
  prometheus-cpp-dev
  zlib1g-dev
  libssl-dev
  libc-ares-dev
  libre2-dev
  # clang + libFuzzer: the sanitized fuzz targets (fuzz/, tests/test_fuzz_smoke.py)
  clang
  libclang-rt-dev
)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-system-deps: all present" >&2
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-system-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
