#!/usr/bin/env bash
# scripts/h200/proof.sh BIN OUT: the CUDA runner's proof on an NVIDIA GPU,
# with binaries built elsewhere (the GPU machine has no Go):
#
#   CGO_ENABLED=0 go build -o BIN/gdn ./cmd/gdn
#   CGO_ENABLED=0 go test -c -o BIN/metal.test ./metal
#   CGO_ENABLED=0 go test -c -o BIN/cmdgdn/cmdgdn.test ./cmd/gdn
#   cp -r cmd/gdn/testdata BIN/cmdgdn/
#
# It writes tests.log (the default and long matrix, head sizes, scratch,
# the compile log, the PyTorch fixtures through gdn grad, the 27B shape
# against the float64 CPU reference) and sanitizers.log (compute-sanitizer
# memcheck, racecheck and synccheck on a representative set, and racecheck
# with barrier:stage or barrier:replay removed) into OUT.
set -uo pipefail
BIN=$(cd "${1:?usage: proof.sh BIN OUT}" && pwd)
OUT=$(mkdir -p "${2:?usage: proof.sh BIN OUT}" && cd "$2" && pwd)
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
T="$OUT/tests.log"
S="$OUT/sanitizers.log"
status=0
step() { # step LOG TITLE CMD...: run CMD, its output into LOG
  local log=$1 title=$2
  shift 2
  echo "== $title" | tee -a "$log"
  echo "\$ $*" >>"$log"
  local t0=$SECONDS
  "$@" >>"$log" 2>&1
  local rc=$?
  echo "== rc $rc, $((SECONDS - t0)) s" | tee -a "$log"
  [ $rc -eq 0 ] || status=1
}

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$T"
step "$T" "the default matrix, head sizes, scratch, compile log" \
  "$BIN/metal.test" -test.run 'TestCUDA(Matrix|HeadSizes|Scratch|CompileError)' -test.v
step "$T" "the long matrix" "$BIN/metal.test" -test.run 'TestCUDAMatrix' -test.v -cuda.long
step "$T" "PyTorch fixtures through gdn grad -backend metal:cuda" \
  bash -c "cd '$BIN/cmdgdn' && ./cmdgdn.test -test.run 'TestGradTorchCUDA' -test.v"
step "$T" "gdn grad -backend metal:cuda on one fixture" \
  "$BIN/gdn" grad -in "$BIN/cmdgdn/testdata/torch/kda_broadcast_f32.npz" -out /tmp/kda_broadcast_cuda.npz -backend metal:cuda

set="head_size|broadcast_strided|n_seqs|snapshots"
for tool in memcheck racecheck synccheck; do
  step "$S" "compute-sanitizer --tool $tool: gdn verify -run '$set'" \
    "$CS" --tool "$tool" --error-exitcode 9 "$BIN/gdn" verify -backend metal:cuda -run "$set"
  step "$S" "compute-sanitizer --tool $tool: S_k 256 and S_k != S_v" \
    "$CS" --tool "$tool" --error-exitcode 9 "$BIN/metal.test" -test.run 'TestCUDAHeadSizes' -test.v
done
for b in stage replay; do
  # Expected to report hazards: rc 9 is the finding, not a failure.
  echo "== racecheck with barrier:$b removed" | tee -a "$S"
  "$CS" --tool racecheck --error-exitcode 9 "$BIN/metal.test" -test.run 'TestCUDAPlantedBarrier' -test.v -cuda.drop "$b" >>"$S" 2>&1
  echo "== rc $? (9: racecheck reported hazards)" | tee -a "$S"
done
step "$T" "the 27B shape at T 8192 against the float64 CPU reference" \
  "$BIN/metal.test" -test.run 'TestCUDARealShape' -test.v -cuda.realT 8192 -test.timeout 20m
grep -E "^(--- |ok|PASS|FAIL)|tests passed|relative RMS|worst relative|ERROR SUMMARY|RACECHECK SUMMARY|hazard" "$T" "$S" | cut -c1-400 | tail -60
exit $status
