#!/usr/bin/env bash
# Builds the data plane's networking parts, each from its own Go module at a pinned version, into
# the shared binary cache (like hack/controlplane/build.sh), skipping any already there:
#   ${NAD_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nad-service-controller/bin}/<part>-<version>/
# Parts: multus (thin plugin), the CNI reference plugins (bridge, macvlan, host-local, loopback),
# whereabouts (IPAM, with its CRDs in crds/), coredns (with the Corefile's plugins only: coredns/),
# containerd (with ctr and the runc shim; runc itself is Debian's), dranet (Google's DRA network
# driver, which publishes the nodes' DRA NICs and moves one into each pod that claims it; it links
# no C: its eBPF and netlink code is pure Go). kubelet, kube-proxy and
# kube-scheduler come from hack/controlplane/build.sh (the same k8s.io/kubernetes module as the
# control plane).
# Prints one line per part: "<part> <directory holding its binaries>". Used by hack/nodes.sh.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NAD_BIN_CACHE="${NAD_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nad-service-controller/bin}"
MULTUS_VERSION=v4.2.4        # the proxy serves this exact version but refuses to list versions
CNI_PLUGINS_VERSION=v1.10.0
WHEREABOUTS_VERSION=v0.9.2
COREDNS_VERSION=v1.14.7
# coredns/ is this directory's module (main.go and the go.mod that pins CoreDNS): its build's
# version is CoreDNS's and its sources'.
COREDNS_BUILD="$COREDNS_VERSION-$(cat "$here"/coredns/go.mod "$here"/coredns/go.sum "$here"/coredns/*.go | sha256sum | cut -c1-12)"
CONTAINERD_VERSION=v2.4.2
DRANET_VERSION=v1.0.1

command -v go >/dev/null || { echo "dataplane/build.sh: go is required (Go >= 1.26)" >&2; exit 1; }
export CGO_ENABLED=0 GOFLAGS=-mod=readonly
# The compiler's garbage collection less often (as hack/controlplane/build.sh).
export GOGC="${GOGC:-400}"

# part:version:module:package[,package...][:build tags] (packages relative to the module; "." is
# its root). containerd is built as its release is, less the btrfs snapshotter (cgo) and the CLI's
# generated docs.
parts=(
  "multus:${MULTUS_VERSION}:gopkg.in/k8snetworkplumbingwg/multus-cni.v4:cmd/multus"
  "cni-plugins:${CNI_PLUGINS_VERSION}:github.com/containernetworking/plugins:plugins/main/bridge,plugins/main/macvlan,plugins/main/loopback,plugins/ipam/host-local"
  "whereabouts:${WHEREABOUTS_VERSION}:github.com/k8snetworkplumbingwg/whereabouts:cmd"
  "coredns:${COREDNS_BUILD}:./coredns:."
  "containerd:${CONTAINERD_VERSION}:github.com/containerd/containerd/v2:cmd/containerd,cmd/containerd-shim-runc-v2,cmd/ctr:urfave_cli_no_docs,no_btrfs"
  "dranet:${DRANET_VERSION}:github.com/google/dranet:cmd/dranet"
)

# Builds each package of $3 into directory $1, naming a binary after its package's last element
# (`cmd` packages after the part $2). Runs in the module's own directory, with its own go.mod
# and go.sum, so its pinned dependencies and replace directives apply as upstream builds them
# (`go install pkg@version` refuses modules with replace directives).
build_in() {
  local out="$1" part="$2" source="$3" packages="$4" tags="$5" version="$6" pkg name ldflags='-s -w'
  # containerd reports its version (`containerd --version`, the CRI's runtime version) from here.
  [[ "$part" == containerd ]] && ldflags+=" -X github.com/containerd/containerd/v2/version.Version=$version"
  IFS=, read -ra pkgs <<<"$packages"
  for pkg in "${pkgs[@]}"; do
    name="${pkg##*/}"
    [[ "$name" == cmd || "$name" == . ]] && name="$part"
    # No debug information, compiled or linked (as hack/controlplane/build.sh).
    (cd "$source" && go build -trimpath -gcflags=all=-dwarf=false -tags="$tags" -ldflags="$ldflags" -o "$out/$name" "./$pkg")
  done
  # whereabouts keeps its allocations in custom resources: keep their definitions beside it.
  if [[ "$part" == whereabouts ]]; then
    mkdir -p "$out/crds"
    cp "$source"/doc/crds/whereabouts.cni.cncf.io_*.yaml "$out/crds/"
  fi
}

build_part() {
  local part="$1" version="$2" source="$3" packages="$4" tags="${5:-}"
  local dir="$NAD_BIN_CACHE/$part-$version"
  if [[ ! -f "$dir/.complete" ]]; then
    echo "dataplane/build.sh: building $part $version" >&2
    local start=$SECONDS tmp
    mkdir -p "$NAD_BIN_CACHE"
    tmp="$(mktemp -d "$NAD_BIN_CACHE/.$part-$version.XXXXXX")"
    if ! build_in "$tmp" "$part" "$source" "$packages" "$tags" "$version"; then
      rm -rf "$tmp"
      echo "dataplane/build.sh: building $part failed" >&2
      exit 1
    fi
    touch "$tmp/.complete"
    # Publish atomically so a concurrent or interrupted run never sees half a part.
    rm -rf "$dir"
    mv "$tmp" "$dir"
    echo "dataplane/build.sh: built $part in $((SECONDS - start)) s" >&2
  fi
  echo "$part $dir"
}

for spec in "${parts[@]}"; do
  IFS=: read -r part version module packages tags <<<"$spec"
  if (($#)) && [[ " $* " != *" $part "* ]]; then
    continue
  fi
  dir=""
  if [[ "$module" == ./* ]]; then
    dir="$here/${module#./}"
  elif [[ ! -f "$NAD_BIN_CACHE/$part-$version/.complete" ]]; then
    dir="$(go mod download -json "$module@$version" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')"
    [[ -d "$dir" ]] || { echo "dataplane/build.sh: could not download $module@$version" >&2; exit 1; }
  fi
  build_part "$part" "$version" "$dir" "$packages" "$tags"
done
