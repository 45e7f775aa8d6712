#!/usr/bin/env bash
# scripts/setup-notebooks.sh: install what the notebooks need, idempotently.
#
#   - Jupyter, from Debian's packages (apt-get): jupyter-core, jupyter-client,
#     jupyter-nbconvert (the `jupyter nbconvert` command),
#     python3-nbconvert, python3-nbclient, python3-nbformat, python3-ipykernel;
#   - GoNB v0.11.4 (the Go kernel), goimports and gopls v0.23.0, built by
#     `go install` into $(go env GOPATH)/bin, at the versions pinned in
#     tools/go.mod (a tools file: `go install mod@vX` can be refused by a
#     module proxy's deprecation check, which a tools module avoids);
#   - the GoNB kernel spec, by `gonb --install` (into ~/.local/share/jupyter).
#
# It touches nothing but Debian's package tree, Go's GOPATH (bin and module
# cache) and the user's Jupyter kernel directory. Run it again at any time:
# each step is skipped when what it installs is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
  export PATH="/usr/local/go/bin:$PATH"
fi
command -v go >/dev/null 2>&1 || { echo "setup-notebooks: Go is needed (https://go.dev/dl/)" >&2; exit 1; }
GOBIN_DIR="$(go env GOBIN)"
[ -n "$GOBIN_DIR" ] || GOBIN_DIR="$(go env GOPATH)/bin"
export PATH="$GOBIN_DIR:$PATH"

# 1. Jupyter from Debian.
debs=(jupyter-core jupyter-client jupyter-nbconvert python3-nbconvert python3-nbclient python3-nbformat python3-ipykernel)
missing=()
for p in "${debs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup-notebooks: apt-get not found; install Jupyter (${missing[*]}) by hand" >&2
    exit 1
  fi
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "setup-notebooks: need root or sudo for apt-get install ${missing[*]}" >&2; exit 1; }
    SUDO="sudo"
  fi
  echo "setup-notebooks: apt-get install ${missing[*]}"
  # env, not a prefix assignment: sudo drops the caller's environment.
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "setup-notebooks: Jupyter packages already installed"
fi

# 2. GoNB, goimports, gopls at tools/go.mod's versions.
want_version() { # module path -> version required in tools/go.mod
  (cd tools && go list -m -f '{{.Version}}' "$1")
}
have_version() { # binary -> module version it was built from, or nothing
  [ -x "$GOBIN_DIR/$1" ] || return 0
  go version -m "$GOBIN_DIR/$1" 2>/dev/null | awk '$1 == "mod" { print $3; exit }'
}
need=()
for tool in "gonb github.com/janpfeifer/gonb github.com/janpfeifer/gonb" \
            "goimports golang.org/x/tools golang.org/x/tools/cmd/goimports" \
            "gopls golang.org/x/tools/gopls golang.org/x/tools/gopls"; do
  read -r bin mod pkg <<<"$tool"
  if [ "$(have_version "$bin")" != "$(want_version "$mod")" ]; then
    need+=("$pkg")
  fi
done
if [ ${#need[@]} -gt 0 ]; then
  echo "setup-notebooks: go install ${need[*]}"
  (cd tools && go install "${need[@]}")
else
  echo "setup-notebooks: gonb, goimports and gopls already installed"
fi

# 3. The GoNB kernel spec.
kernel_json=""
for d in "${JUPYTER_DATA_DIR:-}" "$HOME/.local/share/jupyter"; do
  if [ -n "$d" ] && [ -f "$d/kernels/gonb/kernel.json" ]; then
    kernel_json="$d/kernels/gonb/kernel.json"
    break
  fi
done
if [ -n "$kernel_json" ] && grep -q "\"$GOBIN_DIR/gonb\"" "$kernel_json"; then
  echo "setup-notebooks: GoNB kernel already installed ($kernel_json)"
else
  echo "setup-notebooks: gonb --install"
  gonb --install
fi
