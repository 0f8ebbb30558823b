#!/usr/bin/env bash
# Installs a pinned development tool into the shared cache (outside the clone, so fresh clones
# reuse it) and prints its path:
#   ${XDG_CACHE_HOME:-$HOME/.cache}/nad-service-controller/tools/bin/<tool>-<version>
# Tools: actionlint (Go module proxy), cargo-deny, wasm-tools and wit-bindgen (crates.io, built
# with cargo install --locked), kind, registry (the CNCF distribution registry, which the OCI
# plugin and image tests run on loopback), helm (the chart's checks) and oras (the image's SBOM,
# pushing and pulling the image), cosign (signing plugin artifacts), all five from the Go module
# proxy, promtool (the alert rules'
# checks and unit tests: Debian's, see debian_promtool, else from the Go module proxy),
# cargo-sbom (the SBOM; crates.io), and wasi-adapter: not a program but the
# WASI preview1-to-preview2 reactor adapter of wasmtime (the .crate of
# wasi-preview1-component-adapter-provider from crates.io, checked against a pinned sha256),
# placed as tools/lib/wasi_snapshot_preview1.reactor-<version>.wasm. C plugins need the last
# three (hack/c-plugin-toolchain.sh).
set -euo pipefail

ACTIONLINT_VERSION=v1.7.12
CARGO_DENY_VERSION=0.20.2
KIND_VERSION=v0.33.0
REGISTRY_VERSION=v3.0.0
HELM_VERSION=v3.22.0
# Where Debian's prometheus package is not to be had. Prometheus v3.x is the Go module's v0.3xx
# line: v0.316.0 is Prometheus 3.16.0.
PROMTOOL_VERSION=v0.316.0
# The image's SBOM (make image-oci): cargo-sbom writes it from Cargo.lock as SPDX JSON, oras
# attaches it to the image in its OCI layout and copies both to a registry.
CARGO_SBOM_VERSION=0.10.0
ORAS_VERSION=v1.3.6
# cosign, to sign plugin artifacts in the signature tests (with a key, offline) and as the
# documented way to sign them. The v2 line writes the `.sig` tag signatures the controller
# verifies.
COSIGN_VERSION=v2.6.1
# wasm-tools with the subcommands a plugin build and its checks use (component new/wit/embed,
# validate, print, parse, strip, objdump, dump, metadata); the fuzzers and the rest are left out
# to halve the build.
WASM_TOOLS_VERSION=1.263.0
WASM_TOOLS_FEATURES=component,validate,print,parse,strip,objdump,dump,metadata
# The wit-bindgen of the Rust plugins (plugins/sdk), with its C generator only.
WIT_BINDGEN_VERSION=0.63.0
# The wasmtime version of the host (host/Cargo.toml), and the sha256 of that .crate (the
# "cksum" of the crates.io index).
WASI_ADAPTER_VERSION=48.0.8
WASI_ADAPTER_SHA256=d3a1674fffec103c1d4367d4417a3bd5423cde3cfd56ff3b326b5fc72c0a8ebd

root="${XDG_CACHE_HOME:-$HOME/.cache}/nad-service-controller/tools"
bin="$root/bin"
mkdir -p "$bin"

# cargo install of one binary into a versioned name: <crate> <binary> <version> [cargo args].
# These tools run a few times on small inputs, so they are built for build speed, not run speed:
# no optimisation, no debug info, and one target directory for all of them (kept in the cache),
# so that the crates they share (clap, serde, wasmparser, ...) are compiled once.
cargo_install() {
  local crate="$1" binary="$2" version="$3" path="$bin/$2-$3"
  shift 3
  CARGO_PROFILE_RELEASE_OPT_LEVEL=0 CARGO_PROFILE_RELEASE_DEBUG=false CARGO_PROFILE_RELEASE_LTO=false \
    CARGO_PROFILE_RELEASE_CODEGEN_UNITS=256 CARGO_PROFILE_RELEASE_STRIP=true \
    ${CARGO:-cargo} install --quiet --locked --version "$version" --root "$root/$crate-$version" \
    --target-dir "$root/cargo-target" "$@" "$crate"
  mv "$root/$crate-$version/bin/$binary" "$path"
  rm -rf "${root:?}/$crate-$version"
}

# go install of one command into a versioned name: <package path> <version>; the binary is
# the path's last element. Without debug information or a symbol table, compiled or linked (as
# hack/controlplane/build.sh, with its GOGC): nobody debugs these here, and it saves build time.
go_install() {
  local package="$1" version="$2" binary="${1##*/}"
  GOGC="${GOGC:-400}" GOBIN="$root/go-$binary-$version" go install -trimpath -gcflags=all=-dwarf=false -ldflags='-s -w' "$package@$version"
  mv "$root/go-$binary-$version/$binary" "$bin/$binary-$version"
  rm -rf "${root:?}/go-$binary-$version"
}

# promtool from Debian's prometheus package: the same program as the Go module's, without
# building the whole of Prometheus (minutes). Only promtool is taken from the .deb (apt-get
# download, dpkg-deb -x): no server is installed or started, and no root is needed. Debian 12
# ships Prometheus 2.42, whose promtool checks and tests deploy/monitoring/ alike (make
# check-monitoring). Installed as tools/bin/promtool-debian-<package version>; where apt-get
# has no prometheus package, the pinned Go module's is built instead.
debian_promtool() {
  command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null || return 1
  local tmp version path
  for path in "$bin"/promtool-debian-*; do
    [[ -x "$path" ]] && { echo "$path"; return 0; }
  done
  tmp="$(mktemp -d "$root/promtool-deb.XXXXXX")"
  if ! (cd "$tmp" && apt-get download prometheus >/dev/null 2>&1); then
    rm -rf "$tmp"
    echo "tools: apt-get download prometheus failed (no package list? apt-get update); building promtool from its Go module" >&2
    return 1
  fi
  dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/root"
  version="$(dpkg-deb -f "$tmp"/prometheus_*.deb Version)"
  path="$bin/promtool-debian-$version"
  echo "tools: installing promtool from Debian's prometheus $version into $bin" >&2
  mv "$tmp/root/usr/bin/promtool" "$path"
  rm -rf "$tmp"
  echo "$path"
}

# Installs into a versioned name, so that a version bump here installs the new one.
install() {
  local tool="$1" version="$2" path="$bin/$1-$2"
  if [[ ! -x "$path" ]]; then
    echo "tools: installing $tool $version into $bin" >&2
    case "$tool" in
      actionlint) go_install github.com/rhysd/actionlint/cmd/actionlint "$version" ;;
      kind) go_install sigs.k8s.io/kind "$version" ;;
      registry) go_install github.com/distribution/distribution/v3/cmd/registry "$version" ;;
      helm) go_install helm.sh/helm/v3/cmd/helm "$version" ;;
      promtool) go_install github.com/prometheus/prometheus/cmd/promtool "$version" ;;
      oras) go_install oras.land/oras/cmd/oras "$version" ;;
      cosign) go_install github.com/sigstore/cosign/v2/cmd/cosign "$version" ;;
      cargo-sbom) cargo_install cargo-sbom cargo-sbom "$version" ;;
      cargo-deny) cargo_install cargo-deny cargo-deny "$version" ;;
      wasm-tools) cargo_install wasm-tools wasm-tools "$version" --no-default-features --features "$WASM_TOOLS_FEATURES" ;;
      wit-bindgen) cargo_install wit-bindgen-cli wit-bindgen "$version" --no-default-features --features c ;;
    esac
  fi
  echo "$path"
}

# The reactor adapter, extracted from the verified .crate into a versioned name.
wasi_adapter() {
  local version="$1" crate=wasi-preview1-component-adapter-provider
  local path="$root/lib/wasi_snapshot_preview1.reactor-$version.wasm"
  if [[ ! -f "$path" ]]; then
    echo "tools: installing wasi-adapter $version into $root/lib" >&2
    local tmp
    tmp="$(mktemp -d "$root/wasi-adapter.XXXXXX")"
    curl -fsSL --retry 3 -o "$tmp/adapter.crate" "https://static.crates.io/crates/$crate/$version/download"
    if ! echo "$WASI_ADAPTER_SHA256  $tmp/adapter.crate" | sha256sum --check --quiet --status; then
      echo "tools: $crate $version does not have the pinned sha256 $WASI_ADAPTER_SHA256" >&2
      rm -rf "$tmp"
      exit 1
    fi
    tar -xzf "$tmp/adapter.crate" -C "$tmp" "$crate-$version/artefacts/wasi_snapshot_preview1.reactor.wasm"
    mkdir -p "$root/lib"
    mv "$tmp/$crate-$version/artefacts/wasi_snapshot_preview1.reactor.wasm" "$path"
    rm -rf "$tmp"
  fi
  echo "$path"
}

case "${1:-}" in
  actionlint) install actionlint "$ACTIONLINT_VERSION" ;;
  cargo-deny) install cargo-deny "$CARGO_DENY_VERSION" ;;
  kind) install kind "$KIND_VERSION" ;;
  registry) install registry "$REGISTRY_VERSION" ;;
  helm) install helm "$HELM_VERSION" ;;
  promtool) debian_promtool || install promtool "$PROMTOOL_VERSION" ;;
  oras) install oras "$ORAS_VERSION" ;;
  cosign) install cosign "$COSIGN_VERSION" ;;
  cargo-sbom) install cargo-sbom "$CARGO_SBOM_VERSION" ;;
  wasm-tools) install wasm-tools "$WASM_TOOLS_VERSION" ;;
  wit-bindgen) install wit-bindgen "$WIT_BINDGEN_VERSION" ;;
  wasi-adapter) wasi_adapter "$WASI_ADAPTER_VERSION" ;;
  *) echo "usage: hack/tools.sh actionlint|cargo-deny|kind|registry|helm|promtool|oras|cargo-sbom|wasm-tools|wit-bindgen|wasi-adapter" >&2; exit 2 ;;
esac
