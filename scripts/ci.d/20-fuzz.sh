#!/usr/bin/env bash
# scripts/ci.d/20-fuzz.sh: fuzz gdn's readers of untrusted files for a few
# seconds each, run by scripts/test after go test (which replays the seed
# corpora): FuzzReadNPZ (gdn grad's .npz reader and input checks, seeded
# with cmd/gdn/testdata/torch/*.npz) and FuzzPlanGGUF (gdn plan's GGUF
# reader and planner). A failing input lands in cmd/gdn/testdata/fuzz/.
# FUZZTIME sets the budget per target, a count of inputs by default
# (10000x, a few seconds each here): a time budget (5s) ends by cancelling
# a running input, which go test's fuzzing can report as "context deadline
# exceeded", a failure with no failing input. GDN_FUZZ_COUNT=PATH makes
# each fuzzing process write its execution count to PATH.PID.
set -euo pipefail
cd "$(dirname "$0")/../.."
for target in FuzzReadNPZ FuzzPlanGGUF; do
  go test ./cmd/gdn -run '^$' -fuzz "^${target}\$" -fuzztime "${FUZZTIME:-10000x}" -parallel 1
done
