#!/usr/bin/env bash
# Builds the local control-plane binaries (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl), the nodes' (kubelet, kube-proxy) and nsc-net (this directory's: the API
# server's way to the nodes' namespaces and theirs to it) from the Go module in this directory into
# the shared cache, skipping any already there:
#   ${XDG_CACHE_HOME:-$HOME/.cache}/nad-service-controller/bin/<component>-<version>/<component>
# Prints one line per component: "<component> <path>". Used by hack/local-up.sh; may be run alone.
# Arguments, if any, name the components to build (e.g. `build.sh kubectl`); default: all.
# The versions are the ones pinned in go.mod; keep the two in step.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KUBE_VERSION=v1.37.2
ETCD_VERSION=v3.7.0
# nsc-net is this module's own: its version is its sources'.
NSC_NET_VERSION="$(cat "$here/go.mod" "$here/go.sum" "$here"/nsc-net/*.go | sha256sum | cut -c1-12)"
NAD_BIN_CACHE="${NAD_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nad-service-controller/bin}"

command -v go >/dev/null || { echo "build.sh: go is required (Go >= 1.26)" >&2; exit 1; }

# Version stamps, as the Kubernetes release build sets them (so /version and `kubectl version`
# report v1.37.2 instead of v0.0.0-master).
kube_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  kube_ldflags+=" -X ${pkg}.gitVersion=${KUBE_VERSION}"
  kube_ldflags+=" -X ${pkg}.gitMajor=$(cut -d. -f1 <<<"${KUBE_VERSION#v}")"
  kube_ldflags+=" -X ${pkg}.gitMinor=$(cut -d. -f2 <<<"${KUBE_VERSION#v}")"
  kube_ldflags+=" -X ${pkg}.gitTreeState=clean"
  kube_ldflags+=" -X ${pkg}.buildDate=1970-01-01T00:00:00Z"
done

# component:version:package
components=(
  "etcd:${ETCD_VERSION}:go.etcd.io/etcd/server/v3"
  "kube-apiserver:${KUBE_VERSION}:k8s.io/kubernetes/cmd/kube-apiserver"
  "kube-controller-manager:${KUBE_VERSION}:k8s.io/kubernetes/cmd/kube-controller-manager"
  "kubectl:${KUBE_VERSION}:k8s.io/kubernetes/cmd/kubectl"
  "kube-proxy:${KUBE_VERSION}:k8s.io/kubernetes/cmd/kube-proxy"
  "kube-scheduler:${KUBE_VERSION}:k8s.io/kubernetes/cmd/kube-scheduler"
  "kubelet:${KUBE_VERSION}:k8s.io/kubernetes/cmd/kubelet"
  "nsc-net:${NSC_NET_VERSION}:./nsc-net"
)

export CGO_ENABLED=0
export GOFLAGS=-mod=readonly
# -gcflags=all=-dwarf=false: the compiler writes no debug information, which the linker's -w
# would drop anyway (8 % of a cold etcd build's CPU time). The binaries run alike.
# GOGC=400: the compiler collects its garbage less often, for 9 % less CPU time in a cold etcd
# build, at 365 MB rather than 295 MB for its largest package (GOGC, if set, is kept).
export GOGC="${GOGC:-400}"
cd "$here"
for spec in "${components[@]}"; do
  IFS=: read -r name version pkg <<<"$spec"
  if (($#)) && [[ " $* " != *" $name "* ]]; then
    continue
  fi
  dir="$NAD_BIN_CACHE/$name-$version"
  if [[ ! -x "$dir/$name" ]]; then
    if [[ -z "${hinted:-}" ]]; then
      hinted=1
      echo "build.sh: building into $NAD_BIN_CACHE; a first build with an empty Go cache takes ~10 min on 2 cores" >&2
    fi
    echo "build.sh: building $name $version" >&2
    start=$SECONDS
    tmp="$(mktemp -d "$NAD_BIN_CACHE/.$name-$version.XXXXXX" 2>/dev/null || { mkdir -p "$NAD_BIN_CACHE" && mktemp -d "$NAD_BIN_CACHE/.$name-$version.XXXXXX"; })"
    ldflags="-s -w"
    [[ "$pkg" == k8s.io/* ]] && ldflags="$kube_ldflags"
    if ! go build -trimpath -gcflags=all=-dwarf=false -ldflags="$ldflags" -o "$tmp/$name" "$pkg"; then
      rm -rf "$tmp"
      echo "build.sh: building $name failed" >&2
      exit 1
    fi
    # Publish atomically so a concurrent or interrupted run never sees a half-written binary.
    mkdir -p "$dir"
    mv -f "$tmp/$name" "$dir/$name"
    rmdir "$tmp"
    echo "build.sh: built $name in $((SECONDS - start)) s" >&2
  fi
  echo "$name $dir/$name"
done
