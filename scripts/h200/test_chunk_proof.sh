#!/usr/bin/env bash
# scripts/h200/test_chunk_proof.sh: chunk_proof.sh against fake gdn,
# cmdgdn.test, compute-sanitizer and nvidia-smi (CI has no GPU): every step
# in its log with BIN in place of the folder, the sanitizers' three tools on
# both sets, and the exit status: 0, 1 when a verify fails or a sanitizer
# reports, 2 on a folder without binaries.
set -uo pipefail
. "$(dirname "$0")/testlib.sh"
# fake BIN: a gdn whose verify exits $FAKE_VERIFY (0 by default), a
# cmdgdn.test that passes; on PATH, an nvidia-smi and a compute-sanitizer
# that runs its command and reports $FAKE_HAZARDS errors (exit 9 if any).
fake() {
  mkdir -p "$1/cmdgdn" "$tmp/path"
  cat >"$1/gdn" <<'FAKE'
#!/usr/bin/env bash
echo "args: $*"
echo "54/54 tests passed"
exit "${FAKE_VERIFY:-0}"
FAKE
  cat >"$1/cmdgdn/cmdgdn.test" <<'FAKE'
#!/usr/bin/env bash
echo "    grad_test.go:415: -backend metal:cuda -algo chunk -L 0: worst relative RMS error against PyTorch: 2.0e-07"
echo PASS
FAKE
  cat >"$tmp/path/nvidia-smi" <<'FAKE'
#!/usr/bin/env bash
echo "NVIDIA H200, 580, 143771 MiB, 1980 MHz"
FAKE
  cat >"$tmp/path/compute-sanitizer" <<'FAKE'
#!/usr/bin/env bash
tool=$2
shift 4
"$@"
rc=$?
echo "========= $tool: ERROR SUMMARY: ${FAKE_HAZARDS:-0} errors"
[ "${FAKE_HAZARDS:-0}" -eq 0 ] || exit 9
exit $rc
FAKE
  chmod +x "$1/gdn" "$1/cmdgdn/cmdgdn.test" "$tmp/path/nvidia-smi" "$tmp/path/compute-sanitizer"
}
fake "$tmp/bin"
run() { PATH="$tmp/path:$PATH" bash "$here/chunk_proof.sh" "$tmp/bin" "$@" >"$tmp/out" 2>&1; }

run "$tmp/ok"
check "a clean run exits 0" [ $? -eq 0 ]
check "proof.log has its four steps" [ "$(grep -c '^== rc 0' "$tmp/ok/proof.log")" -eq 4 ]
check "proof.log names the folder BIN" grep -q '^\$ BIN/gdn verify -backend metal:cuda -algo chunk -L 64 -long$' "$tmp/ok/proof.log"
check "proof.log has no path of the folder" bash -c "! grep -q '$tmp/bin' '$tmp/ok/proof.log'"
check "proof.log has the fixtures' errors" grep -q 'worst relative RMS error against PyTorch' "$tmp/ok/proof.log"
for tool in memcheck racecheck synccheck; do
  check "sanitizers.log runs $tool on both sets" [ "$(grep -c "^== $tool:" "$tmp/ok/sanitizers.log")" -eq 2 ]
done
check "every sanitizer step passed" [ "$(grep -c '^== rc 0' "$tmp/ok/sanitizers.log")" -eq 6 ]
check "the long set runs at L 64" grep -q -- "-L 64 -long -run long|seq_len" "$tmp/ok/sanitizers.log"

FAKE_VERIFY=1 run "$tmp/bad"
check "a failing verify exits 1" [ $? -eq 1 ]
FAKE_HAZARDS=3 run "$tmp/hazard"
check "a sanitizer's report exits 1" [ $? -eq 1 ]
check "the report is in sanitizers.log" grep -q 'ERROR SUMMARY: 3 errors' "$tmp/hazard/sanitizers.log"

mkdir -p "$tmp/empty"
PATH="$tmp/path:$PATH" bash "$here/chunk_proof.sh" "$tmp/empty" "$tmp/none" >/dev/null 2>&1
check "a folder without binaries exits 2" [ $? -eq 2 ]

[ $fail -eq 0 ] && echo "test_chunk_proof.sh: ok"
exit $fail
