#!/usr/bin/env bash
# The H200 scripts, which CI cannot run (no GPU): their shell syntax, ab.sh
# and chunk_proof.sh against fake binaries (scripts/h200/test_ab.sh,
# test_chunk_proof.sh), the README table's
# formatter (scripts/h200/chunk_table.py) on the logs in docs/h200 and on
# files of chunk_sweep.sh's format, the per-line profile's reader
# (scripts/h200/ncu_lines.py) on docs/h200/ncu-source, and the SASS
# counter's reading of cuobjdump's text (scripts/h200/sass_counts.py).
set -euo pipefail
cd "$(dirname "$0")/../.."
for f in scripts/h200/*.sh; do
  bash -n "$f"
done
bash scripts/h200/test_ab.sh
bash scripts/h200/test_chunk_proof.sh
if ! command -v python3 >/dev/null 2>&1; then
  echo "scripts/ci.d/25-h200-scripts.sh: no python3; the Python scripts' tests skipped"
  exit 0
fi
python3 -m py_compile scripts/h200/fla_bench.py scripts/h200/chunk_table.py scripts/h200/ncu_lines.py scripts/h200/sass_counts.py
(cd scripts/h200 && python3 -B -m unittest test_chunk_table test_ncu_lines test_sass_counts)
