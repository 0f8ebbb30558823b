#!/usr/bin/env bash
# One local node: containerd, its kubelet, kube-proxy and (on the first node) CoreDNS, run by
# hack/nodes.sh inside the node's network namespace and a mount namespace of its own:
#   nsenter --net=/run/netns/<node> unshare --mount --propagation slave hack/nodes/node.sh <dir>
# <dir> holds node.env (written by hack/nodes.sh) and everything the node keeps. In this mount
# namespace overlays put <dir>/etc/upper over /etc (whereabouts reads its settings from
# /etc/cni/net.d/whereabouts.d/ only) and <dir>/var/upper over /var, and /run is a tmpfs: the
# machine's /etc, /var and /run are never written. containerd, its
# shims and kubelet share the namespace, so kubelet's volume mounts are the containers' too.
# Runs until SIGTERM: then stops kubelet, the components and containerd, in that order (the
# containers themselves hack/nodes.sh stops by their cgroups).
set -euo pipefail
dir="${1:?usage: node.sh <node directory>}"
# shellcheck source=/dev/null
source "$dir/node.env"

log() { echo "node.sh[$NODE]: $*" >&2; }

# The node's own /etc (over the machine's), /var (containerd's CNI cache in /var/lib/cni) and
# /run (the shims' sockets, NRI's): what the node writes there stays in <dir> or vanishes with it.
mount -t overlay overlay -o "lowerdir=/etc,upperdir=$dir/etc/upper,workdir=$dir/etc/work" /etc
mkdir -p "$dir/var/upper" "$dir/var/work"
mount -t overlay overlay -o "lowerdir=/var,upperdir=$dir/var/upper,workdir=$dir/var/work" /var
mount -t tmpfs -o mode=0755 tmpfs /run

children=()
# run NAME PROGRAM ARGS...: in the background, logging to <dir>/logs/NAME.log.
run() {
  local name="$1"
  shift
  "$@" </dev/null >>"$dir/logs/$name.log" 2>&1 &
  children+=("$!")
  log "started $name (pid $!)"
}

stop() {
  local pid i
  # Newest first: kubelet before containerd, which it talks to.
  for ((i = ${#children[@]} - 1; i >= 0; i--)); do
    pid="${children[i]}"
    kill -TERM "$pid" 2>/dev/null || continue
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  done
  exit 0
}
trap stop TERM INT

export PATH="$CONTAINERD_DIR:$PATH"
run containerd "$CONTAINERD_DIR/containerd" --config "$dir/containerd.toml"
for _ in $(seq 300); do
  [[ -S "$dir/containerd.sock" ]] && "$CONTAINERD_DIR/ctr" -a "$dir/containerd.sock" version >/dev/null 2>&1 && break
  sleep 0.1
done
ctr=("$CONTAINERD_DIR/ctr" -a "$dir/containerd.sock" -n k8s.io)
for image in "$IMAGES"/*.tar; do
  [[ -e "$image" ]] || continue
  name="$(basename "$image" .tar)"
  # Files are named <repository with / as _>.tar; the layout's one tag follows.
  out="$("${ctr[@]}" images import --base-name "localhost/${name//_//}" "$image" 2>&1)" || { log "importing $image: $out"; exit 1; }
done
log "images: $("${ctr[@]}" images list -q 2>/dev/null | tr '\n' ' ')"

run kubelet "$KUBELET" \
  --config="$dir/kubelet.yaml" \
  --kubeconfig="$dir/kubeconfig" \
  --hostname-override="$NODE" \
  --node-ip="$NODE_IPS" \
  --node-labels="$NODE_LABELS" \
  --root-dir="$dir/kubelet" \
  --cert-dir="$dir/pki" \
  --v=2
run kube-proxy "$KUBE_PROXY" \
  --kubeconfig="$COMPONENT_KUBECONFIG" \
  --hostname-override="$NODE" \
  --proxy-mode=nftables \
  --cluster-cidr="$CLUSTER_CIDRS" \
  --conntrack-max-per-core=0 \
  --conntrack-tcp-timeout-established=0 \
  --conntrack-tcp-timeout-close-wait=0 \
  --healthz-bind-address=127.0.0.1:10256 \
  --metrics-bind-address=127.0.0.1:10249
if [[ -n "${COREDNS:-}" ]]; then
  run coredns "$COREDNS" -conf "$dir/Corefile"
fi
wait
