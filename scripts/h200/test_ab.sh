#!/usr/bin/env bash
# scripts/h200/test_ab.sh: ab.sh against fake gdn and metal.test binaries
# (CI has no GPU): the rounds and folders in order, the checks of each
# variant, the summary with the kernels marked for local memory, and the
# exit status: 0, 1 when a variant's check fails, 2 on a folder without
# binaries.
set -uo pipefail
. "$(dirname "$0")/testlib.sh"
# fake DIR VERIFY_STATUS: a gdn whose bench prints a pass table and a kernel
# list (one kernel in local memory) and whose verify exits VERIFY_STATUS,
# and a metal.test that prints an error line and PASS.
fake() {
  mkdir -p "$1"
  cat >"$1/gdn" <<FAKE
#!/usr/bin/env bash
case "\$1" in
bench)
  echo "  forward, chunk L 64    8.000 ms   0.050 ms 200.000 ms   2.296 GiB"
  echo "  backward, chunk L 64  24.000 ms   0.100 ms 400.000 ms   2.614 GiB"
  echo "  kernels as compiled: registers and local memory a thread, static shared memory a block, most threads a block"
  echo "    gdn_chunk_prep                 64 regs      0 B local      0 B shared   256 threads"
  echo "    gdn_chunk_dpairs               64 regs     64 B local      0 B shared   256 threads   <- local memory: spills or arrays outside the registers"
  ;;
verify) echo "54/54 tests passed"; exit $2 ;;
esac
FAKE
  cat >"$1/metal.test" <<'FAKE'
#!/usr/bin/env bash
echo "    cuda_gpu_test.go:175: 27B shape, T 8192, algo chunk, gate scalar, float32 against float64: worst relative RMS y 2.2e-07"
echo "--- PASS: TestCUDARealShape (1.00s)"
echo PASS
FAKE
  chmod +x "$1/gdn" "$1/metal.test"
}
fake "$tmp/base" 0
fake "$tmp/good" 0
fake "$tmp/bad" 1

out=$(ROUNDS=2 T=8192 ALGO=chunk bash "$here/ab.sh" "$tmp/out1" "$tmp/base" "$tmp/good" 2>&1)
st=$?
check "two good folders: status $st, want 0" test "$st" -eq 0
log="$tmp/out1/ab.log"
order=$(grep -E '^== round' "$log" | tr '\n' '|')
want="== round 1, base, gate scalar|== round 1, base, gate kda|== round 1, good, gate scalar|== round 1, good, gate kda|== round 2, base, gate scalar|== round 2, base, gate kda|== round 2, good, gate scalar|== round 2, good, gate kda|"
check "rounds and folders in order: got $order" test "$order" = "$want"
check "the variant's checks run, the base's do not" test "$(grep -c '^== checks of' "$log")" -eq 1
check "the summary lists the kernel in local memory" grep -q 'gdn_chunk_dpairs.*<- local memory' <<<"$out"
check "the summary leaves out the kernel in registers" bash -c "! grep -q gdn_chunk_prep <<<\"\$1\"" _ "$out"

ROUNDS=2 T=8192 ALGO=chunk bash "$here/ab.sh" "$tmp/out2" "$tmp/base" "$tmp/bad" >/dev/null 2>&1
st=$?
check "a variant whose verify fails: status $st, want 1" test "$st" -eq 1

mkdir -p "$tmp/empty"
ROUNDS=2 T=8192 ALGO=chunk bash "$here/ab.sh" "$tmp/out3" "$tmp/base" "$tmp/empty" >/dev/null 2>&1
st=$?
check "a folder without binaries: status $st, want 2" test "$st" -eq 2

[ "$fail" -eq 0 ] && echo "test_ab.sh: ok"
exit "$fail"
