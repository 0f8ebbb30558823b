#!/usr/bin/env bash
# Builds the Go parts a command needs into the shared caches, each skipped if already there,
# and prints how long each took. hack/test.sh and hack/demo.sh run it in the background while
# cargo builds the Rust parts, so that neither waits on the other.
#   hack/go-builds.sh GROUP...
# GROUP: control-plane (etcd, kube-apiserver, kube-controller-manager, kubectl, nsc-net), data-plane
# (the nodes: kubelet, kube-scheduler, kube-proxy, containerd, Multus, the CNI plugins,
# whereabouts, CoreDNS), test-tools (helm, the registry, oras, promtool, cosign).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# One at a time per cache: a second run (.ci/run starts one before lint, hack/test.sh its own)
# waits for the first and then finds its parts built, rather than building them beside it.
cache="${NAD_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nad-service-controller/bin}"
mkdir -p "$cache"
exec 9>"$cache/.go-builds.lock"
if ! flock -n 9; then
  echo "go-builds: another go-builds is building into $cache; waiting for it" >&2
  flock 9
fi

timed() {
  local start=$SECONDS
  "$@" >/dev/null
  echo "go-builds: $* took $((SECONDS - start)) s"
}
for group in "$@"; do
  case "$group" in
    control-plane) timed hack/controlplane/build.sh etcd kube-apiserver kube-controller-manager kubectl nsc-net ;;
    data-plane)
      timed hack/controlplane/build.sh kubelet kube-scheduler kube-proxy
      timed hack/dataplane/build.sh
      ;;
    test-tools)
      for tool in helm registry oras promtool cosign; do timed hack/tools.sh "$tool"; done
      ;;
    *) echo "usage: hack/go-builds.sh control-plane|data-plane|test-tools..." >&2; exit 2 ;;
  esac
done
