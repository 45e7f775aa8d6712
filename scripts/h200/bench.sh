#!/usr/bin/env bash
# scripts/h200/bench.sh BIN OUT: gdn bench -backend metal:cuda at the 27B
# shape (S 128, H_k 16, H_v 48) for T = 1, 1024, 2048, 4096 and 8192, scalar
# gate and KDA, with the gdn binary in BIN (CGO_ENABLED=0 go build -o
# BIN/gdn ./cmd/gdn); the log goes to OUT/bench.log.
set -uo pipefail
BIN=$(cd "${1:?usage: bench.sh BIN OUT}" && pwd)
OUT=$(mkdir -p "${2:?usage: bench.sh BIN OUT}" && cd "$2" && pwd)
log="$OUT/bench.log"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee "$log"
status=0
for gate in "" -kda; do
  for T in 1 1024 2048 4096 8192; do
    echo "\$ gdn bench -backend metal:cuda -S 128 -hk 16 -hv 48 -T $T $gate -count 10" | tee -a "$log"
    "$BIN/gdn" bench -backend metal:cuda -S 128 -hk 16 -hv 48 -T "$T" $gate -count 10 2>&1 | tee -a "$log" || status=1
  done
done
exit $status
