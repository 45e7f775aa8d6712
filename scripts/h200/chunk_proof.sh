#!/usr/bin/env bash
# scripts/h200/chunk_proof.sh BIN OUT: the chunk kernels' proof through
# metal:cuda on one NVIDIA GPU, with binaries built elsewhere (the GPU
# machine has no Go):
#
#   CGO_ENABLED=0 go build -o BIN/gdn ./cmd/gdn
#   CGO_ENABLED=0 go test -c -o BIN/cmdgdn/cmdgdn.test ./cmd/gdn
#   cp -r cmd/gdn/testdata BIN/cmdgdn/
#
# It writes, into OUT:
#
#   proof.log       gdn verify -backend metal:cuda -algo chunk (the default
#                   matrix), the PyTorch fixtures through gdn grad -backend
#                   metal:cuda -algo chunk (TestGradTorchCUDAChunk, cmd/gdn's
#                   test binary, at the default chunk length and at L 4), and
#                   the long matrix (-long) at its own chunk lengths and at L 64;
#   sanitizers.log  compute-sanitizer memcheck, racecheck and synccheck, each
#                   on two sets of the matrix: the long cases and partial
#                   chunks at L 64, and head sizes 32 and 128 with broadcast
#                   heads over strided q/k at the matrix's own L.
#
# About two minutes on an H200. Exit status 0 when every step passed and
# every sanitizer reported nothing, 1 otherwise; then
#   grep -E '^== |tests passed|worst relative|SUMMARY' OUT/*.log
# gives the outcome.
set -uo pipefail
usage="usage: chunk_proof.sh BIN OUT"
BIN=$(cd "${1:?$usage}" && pwd)
OUT=$(mkdir -p "${2:?$usage}" && cd "$2" && pwd)
[ -x "$BIN/gdn" ] && [ -x "$BIN/cmdgdn/cmdgdn.test" ] || {
  echo "chunk_proof.sh: $BIN lacks gdn or cmdgdn/cmdgdn.test" >&2
  exit 2
}
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
P="$OUT/proof.log"
S="$OUT/sanitizers.log"
: >"$P"
: >"$S"
status=0
step() { # step LOG TITLE CMD...: run CMD, its output into LOG, BIN written as BIN
  local log=$1 title=$2
  shift 2
  echo "== $title" | tee -a "$log"
  echo "\$ ${*//"$BIN"/BIN}" >>"$log"
  local t0=$SECONDS
  "$@" >>"$log" 2>&1
  local rc=$?
  echo "== rc $rc, $((SECONDS - t0)) s" | tee -a "$log"
  [ $rc -eq 0 ] || status=1
}

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv >>"$P" 2>&1
step "$P" "the default matrix" "$BIN/gdn" verify -backend metal:cuda -algo chunk
step "$P" "the PyTorch fixtures through gdn grad -backend metal:cuda -algo chunk (L 0: the default, and L 4)" \
  bash -c "cd '$BIN/cmdgdn' && ./cmdgdn.test -test.run 'TestGradTorchCUDAChunk' -test.v"
step "$P" "the long matrix at its own chunk lengths" "$BIN/gdn" verify -backend metal:cuda -algo chunk -long
step "$P" "the long matrix at L 64" "$BIN/gdn" verify -backend metal:cuda -algo chunk -L 64 -long

long='long|seq_len:sk=16,sv=16,hk=1,hv=1,T=(65|100),'
heads='head_size:sk=32|head_size:sk=128|broadcast_strided:sk=32'
for tool in memcheck racecheck synccheck; do
  step "$S" "$tool: the long cases and partial chunks at L 64" \
    "$CS" --tool "$tool" --error-exitcode 9 "$BIN/gdn" verify -backend metal:cuda -algo chunk -L 64 -long -run "$long"
  step "$S" "$tool: head sizes 32 and 128, broadcast heads over strided q/k" \
    "$CS" --tool "$tool" --error-exitcode 9 "$BIN/gdn" verify -backend metal:cuda -algo chunk -run "$heads"
done
grep -hE 'tests passed|worst relative|ERROR SUMMARY|RACECHECK SUMMARY' "$P" "$S" | cut -c1-200
exit $status
