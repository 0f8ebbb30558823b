#!/usr/bin/env bash
# Installs a pinned development tool into the shared cache (outside the clone, so fresh clones
# reuse it) and prints its path:
#   ${XDG_CACHE_HOME:-$HOME/.cache}/nad-service-controller/tools/bin/<tool>
# Tools: actionlint (Go module proxy), cargo-deny (crates.io), kind (Go module proxy).
set -euo pipefail

ACTIONLINT_VERSION=v1.7.12
CARGO_DENY_VERSION=0.20.2
KIND_VERSION=v0.33.0

root="${XDG_CACHE_HOME:-$HOME/.cache}/nad-service-controller/tools"
bin="$root/bin"
mkdir -p "$bin"

# Installs into a versioned name, so that a version bump here installs the new one.
install() {
  local tool="$1" version="$2" path="$bin/$1-$2"
  if [[ ! -x "$path" ]]; then
    echo "tools: installing $tool $version into $bin" >&2
    case "$tool" in
      actionlint) GOBIN="$root/go-$version" go install "github.com/rhysd/actionlint/cmd/actionlint@$version"
        mv "$root/go-$version/actionlint" "$path" ;;
      kind) GOBIN="$root/go-$version" go install "sigs.k8s.io/kind@$version"
        mv "$root/go-$version/kind" "$path" ;;
      cargo-deny) ${CARGO:-cargo} install --quiet --locked --version "$version" --root "$root/cargo-deny-$version" cargo-deny
        mv "$root/cargo-deny-$version/bin/cargo-deny" "$path" ;;
    esac
  fi
  echo "$path"
}

case "${1:-}" in
  actionlint) install actionlint "$ACTIONLINT_VERSION" ;;
  cargo-deny) install cargo-deny "$CARGO_DENY_VERSION" ;;
  kind) install kind "$KIND_VERSION" ;;
  *) echo "usage: hack/tools.sh actionlint|cargo-deny|kind" >&2; exit 2 ;;
esac
