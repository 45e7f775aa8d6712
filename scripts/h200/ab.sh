#!/usr/bin/env bash
# scripts/h200/ab.sh OUT BASE VARIANT...: a kernel change measured beside
# the kernels before it, on one NVIDIA GPU, in one run. Each of BASE and
# VARIANT... is a folder that holds the gdn binary and the metal.test binary
# of one tree (gdn.metal and the CUDA prelude are embedded, so each variant
# is its own build, made where Go is):
#
#   CGO_ENABLED=0 go build -o DIR/gdn ./cmd/gdn
#   CGO_ENABLED=0 go test -c -o DIR/metal.test ./metal
#
# (git apply a patch, build into one folder, git checkout the files back,
# build the base into another.) It runs, into OUT/ab.log:
#
#   1. per round (ROUNDS, default 2), per folder in the order given, per gate
#      (scalar, KDA): gdn bench -backend metal:cuda -algo ALGO -count 10 at
#      the 27B shape (T, default 8192; ALGO, default chunk), so that the
#      machine's drift falls on every folder alike;
#   2. per VARIANT: gdn verify -backend metal:cuda -algo ALGO (the case
#      matrix against the float64 reference), then TestCUDARealShape at T
#      (both gates against the float64 CPU reference: the worst error).
#
# A variant whose checks fail is not faster, whatever its times. Then
#   grep -E '^(==|  (forward|backward)|.*<- local memory)' OUT/ab.log
# gives the times side by side, and the kernels that hold values in local
# memory (spills, or arrays the compiler did not keep in registers).
set -uo pipefail
usage="usage: ab.sh OUT BASE VARIANT..."
OUT=$(mkdir -p "${1:?$usage}" && cd "$1" && pwd)
shift
[ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }
dirs=()
for d in "$@"; do
  if [ ! -x "$d/gdn" ] || [ ! -x "$d/metal.test" ]; then
    echo "ab.sh: $d lacks gdn or metal.test" >&2
    exit 2
  fi
  dirs+=("$(cd "$d" && pwd)")
done
ROUNDS=${ROUNDS:-2}
T=${T:-8192}
ALGO=${ALGO:-chunk}
log="$OUT/ab.log"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee "$log"
status=0
for round in $(seq "$ROUNDS"); do
  for d in "${dirs[@]}"; do
    for gate in "" -kda; do
      label=scalar
      [ -z "$gate" ] || label=kda
      echo "== round $round, $(basename "$d"), gate $label" | tee -a "$log"
      echo "\$ gdn bench -backend metal:cuda -algo $ALGO -T $T $gate -count 10" >>"$log"
      "$d/gdn" bench -backend metal:cuda -algo "$ALGO" -T "$T" $gate -count 10 >>"$log" 2>&1 || status=1
    done
  done
done
for d in "${dirs[@]:1}"; do
  echo "== checks of $(basename "$d")" | tee -a "$log"
  echo "\$ gdn verify -backend metal:cuda -algo $ALGO" >>"$log"
  "$d/gdn" verify -backend metal:cuda -algo "$ALGO" >>"$log" 2>&1 || status=1
  tail -n 3 "$log"
  echo "\$ metal.test -test.run TestCUDARealShape -test.v -cuda.realT $T -cuda.algo $ALGO" >>"$log"
  "$d/metal.test" -test.run 'TestCUDARealShape' -test.v -cuda.realT "$T" -cuda.algo "$ALGO" -test.timeout 20m 2>&1 |
    grep -E "float32 against|^(--- |ok|FAIL|PASS)" | tee -a "$log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
done
grep -E '^(==|  (forward|backward)|.*<- local memory)' "$log"
exit $status
