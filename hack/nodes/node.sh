#!/usr/bin/env bash
# One local node: containerd, its kubelet, kube-proxy, DRANET and (on the first node) CoreDNS, run by
# hack/nodes.sh inside the node's network namespace and a mount namespace of its own:
#   nsenter --net=/run/netns/<node> unshare --mount --propagation slave hack/nodes/node.sh <dir>
# <dir> holds node.env (written by hack/nodes.sh) and everything the node keeps. In this mount
# namespace overlays put <dir>/etc/upper over /etc (whereabouts reads its settings from
# /etc/cni/net.d/whereabouts.d/ only) and <dir>/var/upper over /var, and /run is a tmpfs: the
# machine's /etc, /var and /run are never written. containerd, its
# shims and kubelet share the namespace, so kubelet's volume mounts are the containers' too; DRANET
# too, so it opens the pods' network namespaces where containerd mounted them. /var/lib/kubelet is
# <dir>/kubelet (DRANET's paths are fixed), and /sys/class/net the node's own interfaces.
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
# DRANET registers with kubelet in /var/lib/kubelet/plugins_registry and serves in
# /var/lib/kubelet/plugins, fixed paths; kubelet's root directory is <dir>/kubelet.
mkdir -p /var/lib/kubelet
mount --bind "$dir/kubelet" /var/lib/kubelet
# /sys is the machine's, whose class/net lists the machine's interfaces (its eth0, a PCI NIC, not
# the node's veth eth0). A sysfs mounted in the node's network namespace lists the node's: its net
# directories over the machine's, the rest of /sys (the cgroups kubelet and runc use) unchanged.
# DRANET's inventory reads them (what is virtual, what is on PCI); cadvisor lists the node's too.
mkdir -p /run/sysfs
mount -t sysfs -o nosuid,nodev,noexec sysfs /run/sysfs
mount --bind /run/sysfs/class/net /sys/class/net
mount --bind /run/sysfs/devices/virtual/net /sys/devices/virtual/net

children=()
# run NAME PROGRAM ARGS...: in the background, logging to <dir>/logs/NAME.log.
run() {
  local name="$1"
  shift
  "$@" </dev/null >>"$dir/logs/$name.log" 2>&1 &
  children+=("$!")
  log "started $name (pid $!)"
}

# The node's DRA NICs keep their addresses: a NIC loses its addresses when it moves into a pod's
# network namespace, and DRANET moves it back without them, though the next pod to claim it gets
# the addresses it has on the node (DRANET reads them when kubelet prepares the claim). Puts each
# back (without a prefix route, as hack/nodes.sh made it) on a NIC that is on the node without
# it, as a node's network configuration (systemd-networkd, NetworkManager) does for a VF that
# comes back. Polls twice a second: a NIC is prepared for another pod seconds after its return
# at the soonest (its claim must be released first).
keep_dra_addresses() {
  local spec name address links addresses
  while :; do
    links="$(ip -o link show 2>/dev/null)"
    addresses="$(ip -o -4 addr show 2>/dev/null)"
    for spec in $DRA_NICS; do
      name="${spec%%=*}" address="${spec#*=}"
      grep -qE "^[0-9]+: $name@" <<<"$links" || continue
      grep -qE "^[0-9]+: $name +inet $address " <<<"$addresses" && continue
      ip addr add "$address" dev "$name" noprefixroute && log "$(date +%T.%3N) $name is back: gave it $address"
    done
    sleep 0.5
  done
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
run dra-addresses keep_dra_addresses
# DRANET: publishes the node's DRA NICs (only those: the filter, a CEL expression on the
# interface's attributes) in a ResourceSlice of the driver dra.net, pool <node>, and, as an NRI
# plugin, moves each into the pod whose claim has it (and back when the pod's sandbox stops),
# writing the claim's status.devices (networkData, conditions). It extracts the PCI ID database
# into TMPDIR at each start: the node's /run, not the machine's /tmp. It looks for GCE's metadata
# server (169.254.169.254, metadata.google.internal): the node's blackhole default route makes
# that fail at once; the machine has no DMI "Google" product name that makes it wait.
dranet_filter="\"dra.net/ifName\" in attributes && attributes[\"dra.net/ifName\"].StringValue in [$(
  for spec in $DRA_NICS; do printf '"%s",' "${spec%%=*}"; done | sed 's/,$//')]"
# Its registrar's socket goes into plugins_registry, which kubelet may not have made yet.
mkdir -p /run/dranet /var/lib/kubelet/plugins_registry
run dranet env TMPDIR=/run/dranet "$DRANET" \
  --kubeconfig="$COMPONENT_KUBECONFIG" \
  --hostname-override="$NODE" \
  --bind-address="127.0.0.1:$DRANET_PORT" \
  --filter="$dranet_filter" \
  --v=2
wait
