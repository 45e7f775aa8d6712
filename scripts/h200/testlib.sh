# scripts/h200/testlib.sh: what the H200 scripts' tests share, sourced by
# each (test_ab.sh, test_chunk_proof.sh): here (the scripts' folder), tmp
# (a folder removed at exit), and check DESC COND..., which runs COND and,
# when it fails, reports DESC under the test's name and sets fail to 1.
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { # check DESC COND...
  local desc=$1
  shift
  if ! "$@"; then
    echo "$(basename "$0"): FAIL: $desc" >&2
    fail=1
  fi
}
