#!/usr/bin/env bash
# scripts/h200/chunk_sweep.sh BIN OUT [all|ours|fla|warm [DTYPES]]: the chunk kernels
# beside the token-serial ones and fla on one NVIDIA GPU, at the 27B shape
# (S 128, H_k 16, H_v 48, one sequence), T 1024, 2048, 4096 and 8192, scalar
# gate and KDA, in one run, with binaries built elsewhere (the GPU machine
# has no Go):
#
#   CGO_ENABLED=0 go build -o BIN/gdn ./cmd/gdn
#   CGO_ENABLED=0 go test -c -o BIN/metal.test ./metal
#
# and fla (flash-linear-attention at commit bc3b101d, the folder that holds
# its fla/ package) on PYTHONPATH, or in BIN/fla-bc3b101d when PYTHONPATH is
# unset. What it runs, by the third argument:
#
#   ours  gdn bench -backend metal:cuda -algo recurrent, then -algo chunk -kept (two
#         processes, so that each pass's peak is its own algorithm's; -kept
#         adds the forward that keeps A, P and X and the backward that reads
#         them), per
#         gate and T, -json OUT/ours.jsonl, text in OUT/ours.log; then
#         TestCUDARealShape -cuda.realT 8192 -cuda.algo all: both kernels'
#         outputs and gradients against the float64 CPU reference, scalar
#         gate and KDA (OUT/grad.log).
#   fla   scripts/h200/fla_bench.py: chunk_kda, bf16 and float32, forward and
#         forward + backward, peak extra memory, then its gradient error
#         against a float64 token loop at T 8192 (--ops grad_error), both
#         dtypes; OUT/fla.jsonl, text in OUT/fla.log.
#   all   ours, then fla (the default).
#   warm  fla_bench.py --warm only: chunk_kda's first calls compile and
#         autotune Triton kernels for minutes (about 5 per dtype on an H200,
#         4 to 4.5 on an H100); run this first, on the same machine, one
#         call per dtype to stay within a 10-minute limit: warm bfloat16,
#         then warm float32 (warm DTYPE, then fla DTYPE, about 30 s, fit
#         one such call).
#
# DTYPES (fla and warm): fla's input dtypes, bfloat16,float32 by default.
#
# The Triton caches go to TRITON_CACHE_DIR (default /tmp/gdn-triton-cache,
# outside the repository so that a copied tree does not replace it), with
# TRITON_CACHE_AUTOTUNING=1 so that the autotuner's choices are kept too.
# After warm, ours takes about 3 minutes and fla about 2 on an H200 (the
# first_calls_s of fla.jsonl say whether the warm-up held). Then
#   python3 scripts/h200/chunk_table.py OUT
# prints the README table.
set -uo pipefail
usage="usage: chunk_sweep.sh BIN OUT [all|ours|fla|warm [DTYPES]]"
BIN=$(cd "${1:?$usage}" && pwd)
OUT=$(mkdir -p "${2:?$usage}" && cd "$2" && pwd)
what=${3:-all}
dtypes=${4:-bfloat16,float32}
case $what in all | ours | fla | warm) ;; *) echo "$usage" >&2; exit 2 ;; esac
HERE=$(cd "$(dirname "$0")" && pwd)
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/gdn-triton-cache}
export TRITON_CACHE_AUTOTUNING=${TRITON_CACHE_AUTOTUNING:-1}
if [ -z "${PYTHONPATH:-}" ] && [ -d "$BIN/fla-bc3b101d/fla" ]; then
  export PYTHONPATH="$BIN/fla-bc3b101d"
fi
Ts="1024 2048 4096 8192"
status=0
t0=$SECONDS
note() { echo "== $* ($((SECONDS - t0)) s)" | tee -a "$OUT/sweep.log"; }

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv |
  tee -a "$OUT/sweep.log"

if [ "$what" = warm ]; then
  note "fla warm-up, $dtypes (TRITON_CACHE_DIR $TRITON_CACHE_DIR)"
  python3 "$HERE/fla_bench.py" --warm --T "${Ts// /,}" --dtypes "$dtypes" 2>&1 | tee -a "$OUT/fla-warm.log"
  rc=${PIPESTATUS[0]}
  note "fla warm-up: rc $rc"
  exit "$rc"
fi

if [ "$what" = all ] || [ "$what" = ours ]; then
  for gate in "" -kda; do
    for T in $Ts; do
      for algo in recurrent chunk; do
        kept=$([ "$algo" = chunk ] && echo -kept)
        cmd=(gdn bench -backend metal:cuda -algo "$algo" $kept -S 128 -hk 16 -hv 48 -T "$T" $gate -count 5 -json "$OUT/ours.jsonl")
        echo "\$ ${cmd[*]}" >>"$OUT/ours.log"
        "$BIN/${cmd[0]}" "${cmd[@]:1}" >>"$OUT/ours.log" 2>&1 || status=1
      done
      note "ours: T $T, gate $([ -n "$gate" ] && echo kda || echo scalar)"
    done
  done
  echo "\$ metal.test -test.run TestCUDARealShape -test.v -cuda.realT 8192 -cuda.algo all" >>"$OUT/grad.log"
  "$BIN/metal.test" -test.run 'TestCUDARealShape' -test.v -cuda.realT 8192 -cuda.algo all -test.timeout 20m >>"$OUT/grad.log" 2>&1 || status=1
  note "ours: gradient error at T 8192 against the float64 reference"
  grep -E "worst relative RMS|^(--- |ok|FAIL|PASS)" "$OUT/grad.log" | cut -c1-300 | tee -a "$OUT/sweep.log"
fi

if [ "$what" = all ] || [ "$what" = fla ]; then
  python3 "$HERE/fla_bench.py" --ops chunk_kda,grad_error --T "${Ts// /,}" --grad-T 8192 \
    --dtypes "$dtypes" --runs 10 --json "$OUT/fla.jsonl" >>"$OUT/fla.log" 2>&1 || status=1
  note "fla: chunk_kda timed, and its gradient error at T 8192"
  grep -E "grad_error|skipping|failed" "$OUT/fla.log" | tee -a "$OUT/sweep.log"
fi
note "done, status $status"
exit $status
