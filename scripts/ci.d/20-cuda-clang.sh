#!/usr/bin/env bash
# The CUDA path without a GPU: gdn.metal behind the CUDA prelude
# (metal/cuda/include/metal_stdlib) and the generated trampolines, compiled
# for sm_90 by Debian's clang-16 in CUDA mode with no CUDA toolkit
# (metal/cuda_clang_test.go has the flags). Installs clang-16 when missing.
set -euo pipefail
cd "$(dirname "$0")/../.."
CLANG=${GDN_CLANG_CUDA:-clang-16}
if ! command -v "$CLANG" >/dev/null 2>&1; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "20-cuda-clang.sh: $CLANG is needed (Debian: apt-get install clang-16)" >&2
    exit 1
  fi
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "apt-get install clang-16"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends clang-16 >/dev/null
fi
GDN_CLANG_CUDA="$CLANG" GDN_REQUIRE_CLANG_CUDA=1 go test -count=1 -run '^TestCUDAClang$' -v ./metal
