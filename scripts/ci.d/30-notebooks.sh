#!/usr/bin/env bash
# scripts/ci.d/30-notebooks.sh: the literate layer's suite, run by
# scripts/test after go test.
#
#   1. install Jupyter, GoNB, goimports and gopls (scripts/setup-notebooks.sh,
#      idempotent);
#   2. the drift checks: derivation/ and notebooks/ against a regeneration
#      from the Markdown and the Go source (go run ./internal/nbgen -check), and
#      figures/*.png against a regeneration (go run ./cmd/figures -check);
#   3. execute every notebook headless with jupyter nbconvert into a temporary
#      directory (the committed notebooks are not touched), failing on any
#      error in any cell;
#   4. on linux/amd64, where the committed outputs were made, require the
#      fresh outputs to be the committed ones (go run ./internal/nbgen
#      -compare). Elsewhere a difference is only reported: Go fuses
#      multiply-adds on arm64, which moves the last digits of some numbers.
set -euo pipefail
cd "$(dirname "$0")/../.."

bash scripts/setup-notebooks.sh
export PATH="$(go env GOPATH)/bin:$PATH"

echo "-- nbgen -check"
go run ./internal/nbgen -check
echo "-- figures -check"
go run ./cmd/figures -check

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for nb in notebooks/[0-9]*.ipynb; do
  echo "-- executing $nb"
  start=$SECONDS
  # The kernel starts in the notebook's directory (GoNB's $GONB_DIR), so the
  # notebooks find the repository at "$GONB_DIR/..".
  log="$out/$(basename "$nb" .ipynb).log"
  if ! (cd notebooks && jupyter nbconvert --to notebook --execute \
          --ExecutePreprocessor.kernel_name=gonb \
          --ExecutePreprocessor.timeout=1200 \
          --output-dir "$out" "$(basename "$nb")") >"$log" 2>&1; then
    # ipykernel's debugger warnings are noise; the cell's error is what matters.
    grep -v -e 'Debugger warning' -e 'frozen modules' -e 'frozen_modules' -e 'PYDEVD_DISABLE' "$log" >&2 || true
    echo "30-notebooks: $nb failed (an error in a cell, or a cell over 1200 s)" >&2
    exit 1
  fi
  echo "   $((SECONDS - start)) s"
done

echo "-- nbgen -compare"
if [ "$(go env GOOS)/$(go env GOARCH)" = "linux/amd64" ]; then
  go run ./internal/nbgen -compare "$out"
else
  go run ./internal/nbgen -compare "$out" || echo "30-notebooks: outputs differ on $(go env GOOS)/$(go env GOARCH); not a failure here"
fi
