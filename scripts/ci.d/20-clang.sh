#!/usr/bin/env bash
# gdn.metal checked by Debian's clang-16 where no GPU, CUDA toolkit or Metal
# compiler is (installs clang-16 when missing):
#   TestCUDAClang  behind the CUDA prelude (metal/cuda/include/metal_stdlib)
#                  and the generated trampolines, compiled for sm_90 in CUDA
#                  mode (metal/cuda_clang_test.go has the flags);
#   TestMSLClang   type-checked behind declarations of MSL's library, under
#                  C++ for OpenCL (Metal's address spaces kept apart) and as
#                  C++14 (metal/msl_clang_test.go).
set -euo pipefail
cd "$(dirname "$0")/../.."
CLANG=${GDN_CLANG:-clang-16}
if ! command -v "$CLANG" >/dev/null 2>&1; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "20-clang.sh: $CLANG is needed (Debian: apt-get install clang-16)" >&2
    exit 1
  fi
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "apt-get install clang-16"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends clang-16 >/dev/null
fi
GDN_CLANG="$CLANG" GDN_REQUIRE_CLANG=1 go test -count=1 -run '^(TestCUDAClang|TestMSLClang)$' -v ./metal
