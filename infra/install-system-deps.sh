#!/usr/bin/env bash
# Installs the system packages the native gRPC server (cpp/server) builds
# against: grpc++, protobuf (+ compilers), prometheus-cpp, pkg-config; and
# mimalloc, which ngram-build runs under when present (indexer/allocator.py).
# Idempotent and non-interactive: does nothing when everything is present.
# Exits non-zero when a package cannot be installed or the server's build
# inputs are still not found afterwards (CI must not go on without them).
set -euo pipefail

PKGS=(
  pkg-config
  libgrpc++-dev
  protobuf-compiler-grpc
  libprotobuf-dev
  protobuf-compiler
  prometheus-cpp-dev
  # the server reads the trie's meta JSON with it (cpp/server/meta_json.cc)
  nlohmann-json3-dev
  zlib1g-dev
  libssl-dev
  libc-ares-dev
  libre2-dev
  # clang + libFuzzer: the sanitized fuzz targets (fuzz/, tests/test_fuzz_smoke.py)
  clang
  libclang-rt-dev
  # ngram-build's allocator (docs/BUILD.md, "Allocator"): about a fifth less CPU with the HF tokenizer
  libmimalloc2.0
)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# What cpp/server/CMakeLists.txt looks for; a package can be installed and
# still not provide it (a broken or partial install).
check_build_inputs() {
  local ok=0
  for mod in grpc++ protobuf; do
    if ! pkg-config --exists "$mod" 2>/dev/null; then
      echo "install-system-deps: pkg-config cannot find $mod" >&2
      ok=1
    fi
  done
  if [ ! -f /usr/include/nlohmann/json.hpp ]; then
    echo "install-system-deps: nlohmann/json.hpp is missing (nlohmann-json3-dev)" >&2
    ok=1
  fi
  for tool in protoc grpc_cpp_plugin; do
    if ! command -v "$tool" >/dev/null; then
      echo "install-system-deps: $tool is not on PATH" >&2
      ok=1
    fi
  done
  return $ok
}

if [ ${#missing[@]} -eq 0 ]; then
  check_build_inputs
  echo "install-system-deps: all present" >&2
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-system-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
check_build_inputs
