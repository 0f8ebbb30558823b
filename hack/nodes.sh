#!/usr/bin/env bash
# Real nodes for the local control plane of hack/local-up.sh: each a network namespace on a LAN
# of its own, running containerd (runc), kubelet, kube-proxy (nftables), DRANET (the DRA network
# driver) and, on the first, CoreDNS; kube-scheduler places the pods; Multus over the CNI plugins
# wires them, called by containerd's CRI. Each node also has DRA NICs on a second LAN, which
# DRANET publishes and moves into the pods that claim one. See hack/README.md ("The nodes").
#
#   hack/nodes.sh up     build what is missing (first time: minutes), start the nodes, wait until
#                        every node is Ready, kube-proxy and CoreDNS answer, and each node's DRANET
#                        answers and has published its ResourceSlice. Idempotent.
#   hack/nodes.sh down   stop the nodes, their containers (by their cgroups) and the scheduler,
#                        remove their namespaces and files, restore the kernel settings kubelet
#                        needs. hack/local-down.sh runs it.
#   hack/nodes.sh load LAYOUT:TAG REFERENCE
#                        import the image TAG of OCI layout LAYOUT (`make image-oci` builds the
#                        controller's and the prober's) into every node's containerd as
#                        REFERENCE, as `kind load` does: pods then run it without a registry.
#   hack/nodes.sh check  what this machine lacks for nodes; exit 1 if anything.
#   hack/nodes.sh preflight
#                        what this machine lacks that no package brings (root, overlayfs,
#                        cgroups), one line, and exit 1; nothing if the nodes can run once
#                        hack/system-packages.sh installed the rest. The demo asks it first.
#
# `up` writes <state>/nodes/images: one "image <reference>" line per image the nodes hold
# (hack/nodes/images.sh builds them: the sandbox, nginx, netutils), for tests and the demo.
#
# This machine is not a normal node, and each difference is one setting here:
#   - cgroup v1 (the hybrid layout): kubelet's failCgroupV1 is false; each node's cgroupRoot
#     (/nsc-node-<n>) is made in every v1 hierarchy first and removed at the end;
#   - no systemd: cgroupfs as the cgroup driver, for kubelet and runc;
#   - swap is allowed (failSwapOn: false);
#   - raising oom_score_adj is denied in this VM: containerd's restrict_oom_score_adj;
#   - no AppArmor: containerd's disable_apparmor;
#   - kubelet wants vm.overcommit_memory=1, vm.panic_on_oom=0, kernel.panic=10,
#     kernel.panic_on_oops=1, kernel.keys.root_maxkeys=1000000, kernel.keys.root_maxbytes=25000000
#     (machine-wide: not per namespace). `up` saves this machine's values, sets kubelet's, and
#     kubelet runs with protectKernelDefaults (it checks, never writes); `down` restores them.
#   - no registry: the images are built here and imported into each node's containerd.
#
# Environment: NAD_LOCAL_DIR [<repo>/.local], NAD_NODES [2], NAD_READY_TIMEOUT [240] seconds,
# NAD_SCHEDULER_PORT [16259], NAD_DRA_DEVICES [4] DRA NICs per node (at most 9).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
state="${NAD_LOCAL_DIR:-$repo/.local}"
nodes_dir="$state/nodes"
pids="$state/pids"
logs="$state/logs"
count="${NAD_NODES:-2}"
ready_timeout="${NAD_READY_TIMEOUT:-240}"
scheduler_port="${NAD_SCHEDULER_PORT:-16259}"
lan_netns=nsc-lan
lan_address=172.30.0.1 # the API server's advertised address (hack/local-up.sh)
cluster_cidrs="10.244.0.0/16,fd00:10:244::/56"
zones=(zone-a zone-b zone-c)
# The DRA LAN: a second bridge in nsc-lan, without an address (nothing on it but the NICs). Each
# node has an uplink on it (a veth, which DRANET's filter leaves out) and, as an SR-IOV NIC has
# VFs, macvlan children of that uplink (bridge mode: pods on one node reach each other through
# it, pods on others through the bridge), named dra0, dra1, ..., with an address of their own.
dra_bridge=br-dra
dra_uplink=dra-up
dra_devices="${NAD_DRA_DEVICES:-4}"
dra_subnet=192.168.70.0/24
# The port of DRANET's /healthz and /metrics, on 127.0.0.1 in each node (its default, 9177; below
# the ephemeral range, where containerd's streaming server takes its port).
dranet_port=9177
# The machine-wide settings kubelet insists on (see above).
kernel_settings=(vm.overcommit_memory=1 vm.panic_on_oom=0 kernel.panic=10 kernel.panic_on_oops=1
  kernel.keys.root_maxkeys=1000000 kernel.keys.root_maxbytes=25000000)
# What marks a node of these (the tests select them by it).
node_label=nodes.isim.dev/local

log() { echo "nodes: $*" >&2; }
die() { echo "nodes: error: $*" >&2; exit 1; }

# shellcheck source=hack/proc.sh
source "$repo/hack/proc.sh"
# shellcheck source=hack/pki.sh
source "$repo/hack/pki.sh"
proc_prefix="nodes: "

node_name() { echo "nsc-node-$1"; }
node_ip() { echo "172.30.0.$((10 + $1))"; }
node_ip6() { printf 'fd00:172:30::%x\n' $((0x10 + $1)); }
pod_cidr() { echo "10.244.$1.0/24"; }
pod_cidr6() { printf 'fd00:10:244:%x::/64\n' "$1"; }
gateway() { echo "10.244.$1.1"; }
gateway6() { printf 'fd00:10:244:%x::1\n' "$1"; }
# Node i's DRA NIC j: 192.168.70.<10 (i + 1) + j>/24 (node 0: .10 to .13, node 1: .20 to .23).
dra_ip() { echo "192.168.70.$((10 * ($1 + 1) + $2))"; }
# "dra0=192.168.70.10/24 dra1=..." for node i: what node.sh keeps on its NICs.
dra_nics() {
  local j out=()
  for ((j = 0; j < dra_devices; j++)); do out+=("dra$j=$(dra_ip "$1" "$j")/${dra_subnet#*/}"); done
  echo "${out[*]}"
}

# The cgroup hierarchies: the v1 ones and, in the hybrid layout, the v2 one (runc makes its paths there too).
cgroup_hierarchies() {
  awk '$3 == "cgroup" || $3 == "cgroup2" {print $2}' /proc/mounts
}

# What this machine lacks, one line each; empty if nothing.
missing() {
  [[ "$(id -u)" == 0 ]] || echo "root: nodes make network namespaces, mounts and cgroups (run as root)"
  command -v ip >/dev/null || echo "ip (iproute2): apt-get install iproute2"
  command -v nsenter >/dev/null && command -v unshare >/dev/null || echo "nsenter and unshare: apt-get install util-linux"
  command -v runc >/dev/null || echo "runc: apt-get install runc"
  command -v umoci >/dev/null || echo "umoci, which builds the images: apt-get install umoci"
  command -v musl-gcc >/dev/null || echo "musl-gcc, which builds the sandbox image's program: apt-get install musl-tools"
  command -v nft >/dev/null || echo "nft, which kube-proxy's nftables mode runs: apt-get install nftables"
  grep -qw overlay /proc/filesystems || echo "overlayfs in the kernel (modprobe overlay): containerd's snapshotter and the nodes' /etc"
  [[ -n "$(cgroup_hierarchies)" || -f /sys/fs/cgroup/cgroup.controllers ]] || echo "cgroups mounted under /sys/fs/cgroup"
}

check() {
  local lacks
  lacks="$(missing)"
  if [[ -n "$lacks" ]]; then
    while read -r line; do echo "missing: $line"; done <<<"$lacks"
    return 1
  fi
  echo "ok: root, iproute2, util-linux, runc, umoci, musl-gcc, nft, overlayfs, cgroups"
}

preflight() {
  local lacks
  lacks="$(missing | { grep -v 'apt-get install' || true; } | paste -sd ';' - | sed 's/;/; /g')"
  [[ -z "$lacks" ]] && return 0
  echo "missing: $lacks"
  return 1
}

# --- building ----------------------------------------------------------------------------------

declare -A bin part
build() {
  local name path
  while read -r name path; do bin[$name]="$path"; done < <("$repo/hack/controlplane/build.sh" kubelet kube-proxy kube-scheduler nsc-net)
  while read -r name path; do part[$name]="$path"; done < <("$repo/hack/dataplane/build.sh" multus cni-plugins whereabouts coredns containerd dranet)
  images="$("$repo/hack/nodes/images.sh")"
}

# --- the network -------------------------------------------------------------------------------

in_ns() { ip -n "$1" "${@:2}"; }

network_up() {
  local i node
  ip netns add "$lan_netns"
  in_ns "$lan_netns" link set lo up
  in_ns "$lan_netns" link add br0 type bridge
  in_ns "$lan_netns" addr add "$lan_address/24" dev br0
  in_ns "$lan_netns" link set br0 up
  in_ns "$lan_netns" link add "$dra_bridge" type bridge
  in_ns "$lan_netns" link set "$dra_bridge" up
  for ((i = 0; i < count; i++)); do
    node="$(node_name "$i")"
    ip netns add "$node"
    in_ns "$node" link set lo up
    # Both ends are made in their namespaces: nothing appears in the machine's own.
    ip link add eth0 netns "$node" type veth peer name "n$i" netns "$lan_netns"
    in_ns "$lan_netns" link set "n$i" master br0 up
    in_ns "$node" addr add "$(node_ip "$i")/24" dev eth0
    in_ns "$node" -6 addr add "$(node_ip6 "$i")/64" dev eth0 nodad
    in_ns "$node" link set eth0 up
    local j
    for ((j = 0; j < count; j++)); do
      ((j == i)) && continue
      in_ns "$node" route add "$(pod_cidr "$j")" via "$(node_ip "$j")"
      in_ns "$node" -6 route add "$(pod_cidr6 "$j")" via "$(node_ip6 "$j")"
    done
    # Anywhere else is unreachable, as an unrouted network is: a packet dies silently.
    in_ns "$node" route add blackhole default
    in_ns "$node" -6 route add blackhole default
    ip netns exec "$node" sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1
    # The relay's answers to the node's pods.
    in_ns "$lan_netns" route add "$(pod_cidr "$i")" via "$(node_ip "$i")"
    dra_nics_up "$i"
  done
}

# Node i's DRA NICs: its uplink on the DRA LAN and the macvlan children DRANET publishes, each up
# with its address. The address has no prefix route (noprefixroute): the node itself has no route
# to the DRA LAN, so only a pod holding a NIC reaches it (a pod without one times out, as on the
# macvlan network of testdata/). DRANET hands the address to the pod with its prefix, where the
# kernel adds the route. node.sh puts an address back when DRANET returns a NIC without it.
dra_nics_up() {
  local i="$1" node spec
  node="$(node_name "$i")"
  ip link add "$dra_uplink" netns "$node" type veth peer name "d$i" netns "$lan_netns"
  in_ns "$lan_netns" link set "d$i" master "$dra_bridge" up
  in_ns "$node" link set "$dra_uplink" up
  for spec in $(dra_nics "$i"); do
    in_ns "$node" link add "${spec%%=*}" link "$dra_uplink" type macvlan mode bridge
    in_ns "$node" addr add "${spec#*=}" dev "${spec%%=*}" noprefixroute
    in_ns "$node" link set "${spec%%=*}" up
  done
}

# --- certificates and configuration -----------------------------------------------------------

# sign_node DIR NODE IP IP6: the node's client certificate (system:node:<node>, as the Node
# authorizer and NodeRestriction know it) and its kubelet's serving certificate, by the local CA.
sign_node() {
  local dir="$1" node="$2" ip4="$3" ip6="$4"
  mkdir -p "$dir/pki"
  (
    cd "$dir/pki"
    umask 077
    pki_sign "$state/pki" node "/O=system:nodes/CN=system:node:$node" "extendedKeyUsage=clientAuth"
    pki_sign "$state/pki" kubelet "/CN=$node" "extendedKeyUsage=serverAuth
subjectAltName=DNS:$node,IP:$ip4,IP:$ip6"
  )
}

configure_node() {
  local i="$1" node dir
  node="$(node_name "$i")"
  dir="$nodes_dir/$node"
  mkdir -p "$dir"/{logs,etc/upper/cni/net.d/whereabouts.d,etc/work,cni/net.d,kubelet,pod-logs,volume-plugins,containerd,state}
  sign_node "$dir" "$node" "$(node_ip "$i")" "$(node_ip6 "$i")"
  # The API server through the node's relay (127.0.0.1 in the node).
  pki_kubeconfig "$dir/kubeconfig" "https://127.0.0.1:$apiserver_port" "$state/pki/ca.crt" \
    "system:node:$node" "$dir/pki/node.crt" "$dir/pki/node.key"

  # whereabouts' settings, where it looks (/etc, through the node's overlay).
  cat >"$dir/etc/upper/cni/net.d/whereabouts.d/whereabouts.conf" <<EOF
{"datastore": "kubernetes", "kubernetes": {"kubeconfig": "$state/kubeconfig"},
 "log_file": "$dir/logs/whereabouts.log", "log_level": "verbose"}
EOF
  # The cluster network: Multus, delegating to a bridge (cni0) with host-local addresses of the
  # node's pod ranges of both families, IPv4 first.
  cat >"$dir/cni/net.d/00-multus.conflist" <<EOF
{"cniVersion": "0.3.1", "name": "multus-cni-network", "plugins": [{
  "type": "multus", "kubeconfig": "$state/kubeconfig", "cniDir": "$dir/cni/multus",
  "binDir": "$dir/cni/bin", "logFile": "$dir/logs/multus.log", "logLevel": "verbose",
  "delegates": [{"cniVersion": "0.3.1", "name": "nsc-pods", "plugins": [{
    "type": "bridge", "bridge": "cni0", "isGateway": true, "hairpinMode": true,
    "ipam": {"type": "host-local",
      "ranges": [[{"subnet": "$(pod_cidr "$i")", "gateway": "$(gateway "$i")"}],
                 [{"subnet": "$(pod_cidr6 "$i")", "gateway": "$(gateway6 "$i")"}]],
      "routes": [{"dst": "0.0.0.0/0", "gw": "$(gateway "$i")"}, {"dst": "::/0", "gw": "$(gateway6 "$i")"}],
      "dataDir": "$dir/cni/host-local"}}]}]}]}
EOF
  mkdir -p "$dir/cni/bin"
  local plugin
  for plugin in bridge macvlan host-local loopback; do ln -sfn "${part[cni-plugins]}/$plugin" "$dir/cni/bin/$plugin"; done
  ln -sfn "${part[multus]}/multus" "$dir/cni/bin/multus"
  ln -sfn "${part[whereabouts]}/whereabouts" "$dir/cni/bin/whereabouts"

  cat >"$dir/containerd.toml" <<EOF
version = 3
root = "$dir/containerd"
state = "$dir/state"
imports = []
[grpc]
  address = "$dir/containerd.sock"
[ttrpc]
  address = "$dir/containerd.sock.ttrpc"
[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "$sandbox_image"
[plugins."io.containerd.cri.v1.runtime"]
  disable_apparmor = true
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  cdi_spec_dirs = []
[plugins."io.containerd.cri.v1.runtime".cni]
  bin_dirs = ["$dir/cni/bin"]
  conf_dir = "$dir/cni/net.d"
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
  BinaryName = "$(command -v runc)"
  Root = "$dir/state/runc"
  SystemdCgroup = false
# NRI, where DRANET connects as a plugin (containerd 2's default, said here because DRANET's path
# is fixed: /var/run is /run, the node's own tmpfs, see node.sh).
[plugins."io.containerd.nri.v1.nri"]
  disable = false
  socket_path = "/var/run/nri/nri.sock"
EOF
  echo "nameserver $(node_ip 0)" >"$dir/resolv.conf"
  cat >"$dir/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $(node_ip "$i")
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
tlsCertFile: $dir/pki/kubelet.crt
tlsPrivateKeyFile: $dir/pki/kubelet.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $state/pki/ca.crt}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://$dir/containerd.sock
cgroupDriver: cgroupfs
cgroupRoot: /$node
failCgroupV1: false
failSwapOn: false
protectKernelDefaults: true
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
clusterDNS: [$(node_ip 0)]
clusterDomain: cluster.local
resolvConf: $dir/resolv.conf
podLogsDir: $dir/pod-logs
volumePluginDir: $dir/volume-plugins
serializeImagePulls: false
shutdownGracePeriod: 0s
EOF
  if ((i == 0)); then
    cat >"$dir/Corefile" <<EOF
.:53 {
    errors
    ready 127.0.0.1:8181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $state/kubeconfig
        pods insecure
        ttl 5
    }
    loadbalance
}
EOF
  fi
  cat >"$dir/node.env" <<EOF
NODE=$node
NODE_IPS=$(node_ip "$i"),$(node_ip6 "$i")
NODE_LABELS=topology.kubernetes.io/zone=${zones[i % ${#zones[@]}]},$node_label=true
CONTAINERD_DIR=${part[containerd]}
KUBELET=${bin[kubelet]}
KUBE_PROXY=${bin[kube-proxy]}
COREDNS=$( ((i == 0)) && echo "${part[coredns]}/coredns")
COMPONENT_KUBECONFIG=$state/kubeconfig
CLUSTER_CIDRS=$cluster_cidrs
IMAGES=$images
DRANET=${part[dranet]}/dranet
DRANET_PORT=$dranet_port
DRA_NICS="$(dra_nics "$i")"
EOF
  local h
  for h in $(cgroup_hierarchies); do mkdir -p "$h/$node"; done
}

# --- up and down -------------------------------------------------------------------------------

running() { proc_running "$pids/$1.pid"; }

nodes_ready() {
  answer="$(kubectl get nodes -l "$node_label=true" -o jsonpath='{range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status} {end}' 2>&1)"
  [[ "$(grep -o '=True' <<<"$answer" | wc -l)" == "$count" ]]
}
in_first() { nsenter --net="/run/netns/$(node_name 0)" "$@"; }
kube_proxy_healthy() { answer="$(in_first curl -fsS --max-time 2 http://127.0.0.1:10256/healthz 2>&1)"; }
coredns_ready() { answer="$(in_first curl -fsS --max-time 2 http://127.0.0.1:8181/ready 2>&1)"; }
# DRANET answers /healthz once kubelet has registered it as a DRA driver (it connects to
# containerd's NRI right after, in the background).
dranet_healthy() {
  local i node
  for ((i = 0; i < count; i++)); do
    node="$(node_name "$i")"
    answer="$node: $(nsenter --net="/run/netns/$node" curl -fsS --max-time 2 "http://127.0.0.1:$dranet_port/healthz" 2>&1)" || return 1
  done
}
# A ResourceSlice of dra.net's for every node (its first one lists every NIC: they exist before
# DRANET starts; later ones leave out those pods hold, so only the slice's presence is asked).
dra_slices_published() {
  answer="$(kubectl get resourceslices --field-selector spec.driver=dra.net -o jsonpath='{range .items[*]}{.spec.nodeName} {end}' 2>&1)" || return 1
  local i
  for ((i = 0; i < count; i++)); do
    [[ " $answer " == *" $(node_name "$i") "* ]] || { answer="no dra.net ResourceSlice of $(node_name "$i") (slices of: $answer)"; return 1; }
  done
}
ready() {
  local check
  for check in nodes_ready kube_proxy_healthy coredns_ready dranet_healthy dra_slices_published; do
    failed_check="$check"
    "$check" || return 1
  done
}

failed_start() {
  # Once: its own exit below would run the EXIT trap (this function) again.
  trap - EXIT
  echo "nodes: error: $1" >&2
  local node
  for ((i = 0; i < count; i++)); do
    node="$(node_name "$i")"
    for f in "$nodes_dir/$node/logs/kubelet.log" "$nodes_dir/$node/logs/containerd.log" "$nodes_dir/$node/logs/dranet.log"; do
      [[ -f "$f" ]] && proc_log_tail "$f" 15 >&2
    done
  done
  log "stopping what this start began (hack/nodes.sh down); the logs stay in $nodes_dir/*/logs"
  NAD_KEEP_LOGS=1 down
  exit 1
}

up() {
  export KUBECONFIG="${KUBECONFIG:-$state/kubeconfig}"
  [[ -s "$state/kubeconfig" ]] || die "no control plane: run hack/local-up.sh first"
  export PATH="$state/bin:$PATH"
  local lacks
  lacks="$(missing)"
  [[ -z "$lacks" ]] || die "this machine cannot run nodes: $(tr '\n' ';' <<<"$lacks")"
  [[ "$dra_devices" =~ ^[1-9]$ ]] || die "NAD_DRA_DEVICES must be 1 to 9 (each node's NICs are 192.168.70.<10 (node + 1) + NIC>)"
  if running nodes-relay && ready 2>/dev/null; then
    log "already running"
    return 0
  fi
  down
  log "building what is missing (kubelet, containerd, the networking parts, the images)"
  build
  apiserver_port="$(sed -n 's/^apiserver=//p' "$state/ports")"
  sandbox_image="$(sed -n 's/^sandbox //p' <<<"$images")"
  mkdir -p "$nodes_dir" "$pids" "$logs"
  grep '^image ' <<<"$images" >"$nodes_dir/images"
  images="$(sed -n 's/^dir //p' <<<"$images")"
  trap 'failed_start "stopped with exit status $? (the messages above say why)"' EXIT

  log "kernel settings for kubelet (restored by down): ${kernel_settings[*]}"
  if [[ ! -f "$nodes_dir/sysctl.saved" ]]; then
    local setting
    for setting in "${kernel_settings[@]}"; do sysctl "${setting%%=*}"; done | tr -d ' ' >"$nodes_dir/sysctl.saved"
  fi
  sysctl -qw "${kernel_settings[@]}"

  log "the LAN and $count nodes' network namespaces"
  network_up
  local relays=("$lan_netns" "$lan_address:$apiserver_port" "127.0.0.1:$apiserver_port")
  for ((i = 0; i < count; i++)); do
    relays+=("$(node_name "$i")" "127.0.0.1:$apiserver_port" "127.0.0.1:$apiserver_port")
  done
  proc_start "$pids/nodes-relay.pid" "$logs/nodes-relay.log" "${bin[nsc-net]}" relay "${relays[@]}"

  kubectl apply --server-side -f "${part[whereabouts]}/crds/" >/dev/null
  # Node objects of these names left by an earlier run whose kubelets were killed: a kubelet
  # would adopt them without its labels.
  local names=()
  for ((i = 0; i < count; i++)); do names+=("$(node_name "$i")"); done
  kubectl delete nodes "${names[@]}" --ignore-not-found >/dev/null
  for ((i = 0; i < count; i++)); do
    configure_node "$i"
    local node
    node="$(node_name "$i")"
    log "starting $node (containerd, kubelet, kube-proxy$( ((i == 0)) && echo ", CoreDNS"), DRANET; logs: $nodes_dir/$node/logs)"
    proc_start "$pids/$node.pid" "$nodes_dir/$node/logs/node.log" \
      nsenter --net="/run/netns/$node" unshare --mount --propagation slave "$repo/hack/nodes/node.sh" "$nodes_dir/$node"
  done
  log "starting kube-scheduler"
  proc_start "$pids/kube-scheduler.pid" "$logs/kube-scheduler.log" "${bin[kube-scheduler]}" \
    --kubeconfig="$state/kube-scheduler.kubeconfig" \
    --authentication-kubeconfig="$state/kube-scheduler.kubeconfig" \
    --authorization-kubeconfig="$state/kube-scheduler.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port="$scheduler_port" --leader-elect=false

  local deadline=$((SECONDS + ready_timeout))
  until ready; do
    for name in nodes-relay kube-scheduler $(for ((i = 0; i < count; i++)); do node_name "$i"; done); do
      running "$name" || { proc_exited "$pids/$name.pid"; failed_start "$name $proc_how before the nodes were ready"; }
    done
    ((SECONDS < deadline)) || failed_start "not ready after ${ready_timeout}s: $failed_check: $(head -c 300 <<<"$answer")"
    sleep 1
  done
  trap - EXIT
  log "ready: $(kubectl get nodes -l "$node_label=true" -o jsonpath='{range .items[*]}{.metadata.name} {.status.nodeInfo.kubeletVersion}, {end}' | sed 's/, $//')"
}

# Every process in the cgroups under the node's cgroupRoot (its containers, whichever namespace
# they are in), then the cgroups.
stop_cgroups() {
  local node="$1" h
  for _ in 1 2 3 4 5; do
    local left=0
    for h in $(cgroup_hierarchies); do
      [[ -d "$h/$node" ]] || continue
      while read -r pid; do
        kill -KILL "$pid" 2>/dev/null && left=1
      done < <(find "$h/$node" -name cgroup.procs -exec cat {} + 2>/dev/null)
    done
    ((left)) || break
    sleep 0.2
  done
  for h in $(cgroup_hierarchies); do
    [[ -d "$h/$node" ]] && find "$h/$node" -depth -type d -exec rmdir {} + 2>/dev/null
    [[ -d "$h/$node" ]] && log "could not remove cgroup $h/$node"
  done
  return 0
}

down() {
  local node ns pid i
  proc_stop "$pids/kube-scheduler.pid" kube-scheduler 10
  for node in $(ip netns list 2>/dev/null | awk '$1 ~ /^nsc-node-/ {print $1}'); do
    proc_stop "$pids/$node.pid" "$node" 20
  done
  for ns in $(ip netns list 2>/dev/null | awk '$1 ~ /^nsc-/ {print $1}'); do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
  done
  for ((i = 0; i < 16; i++)); do stop_cgroups "$(node_name "$i")"; done
  proc_stop "$pids/nodes-relay.pid" "the relay" 5
  for ns in $(ip netns list 2>/dev/null | awk '$1 ~ /^nsc-/ {print $1}'); do
    ip netns delete "$ns" 2>/dev/null || log "could not delete network namespace $ns"
  done
  if [[ -f "$nodes_dir/sysctl.saved" ]]; then
    # shellcheck disable=SC2046 # one word per setting
    if sysctl -qw $(cat "$nodes_dir/sysctl.saved"); then
      rm -f "$nodes_dir/sysctl.saved"
    else
      log "could not restore the kernel settings in $nodes_dir/sysctl.saved"
    fi
  fi
  if command -v kubectl >/dev/null || [[ -x "$state/bin/kubectl" ]]; then
    PATH="$state/bin:$PATH" KUBECONFIG="${KUBECONFIG:-$state/kubeconfig}" \
      kubectl delete nodes -l "$node_label=true" --wait=false >/dev/null 2>&1 || true
  fi
  rm -f "$pids"/nsc-node-*.pid "$pids/nodes-relay.pid" "$pids/kube-scheduler.pid"
  if [[ "${NAD_KEEP_LOGS:-}" == 1 ]]; then
    find "$nodes_dir" -mindepth 2 -maxdepth 2 ! -name logs -exec rm -rf {} + 2>/dev/null || true
  else
    rm -rf "$nodes_dir"
  fi
}

load() {
  local source="${1:?usage: hack/nodes.sh load LAYOUT:TAG REFERENCE}" reference="${2:?usage: hack/nodes.sh load LAYOUT:TAG REFERENCE}"
  local layout="${source%:*}" tag="${source##*:}" work node ctr
  [[ -f "$layout/index.json" ]] || die "$layout is not an OCI layout (make image-oci builds them)"
  [[ "${reference##*:}" == "$tag" ]] || die "the reference $reference must end in the layout's tag :$tag"
  ctr="$("$repo/hack/dataplane/build.sh" containerd | awk '{print $2}')/ctr"
  work="$(mktemp -d)"
  # The one image of that tag: the layout may hold others (an SBOM attached as a referrer).
  mkdir -p "$work/layout"
  cp -r "$layout/blobs" "$layout/oci-layout" "$work/layout/"
  python3 - "$layout/index.json" "$tag" >"$work/layout/index.json" <<'EOF'
import json, sys
index = json.load(open(sys.argv[1]))
index["manifests"] = [m for m in index["manifests"]
                      if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == sys.argv[2]]
json.dump(index, sys.stdout)
EOF
  tar -C "$work/layout" -cf "$work/image.tar" .
  local loaded=0
  for node in $(ip netns list 2>/dev/null | awk '$1 ~ /^nsc-node-/ {print $1}'); do
    [[ -S "$nodes_dir/$node/containerd.sock" ]] || continue
    local out
    out="$("$ctr" -a "$nodes_dir/$node/containerd.sock" -n k8s.io images import --base-name "${reference%:*}" "$work/image.tar" 2>&1)" \
      || { rm -rf "$work"; die "importing $source into $node failed: $out"; }
    loaded=$((loaded + 1))
  done
  rm -rf "$work"
  ((loaded)) || die "no node is running (hack/nodes.sh up)"
  grep -qxF "image $reference" "$nodes_dir/images" 2>/dev/null || echo "image $reference" >>"$nodes_dir/images"
  log "loaded $reference into $loaded nodes"
}

answer="" failed_check=""
case "${1:-}" in
  check) check ;;
  preflight) preflight ;;
  up) up ;;
  down) down ;;
  load) load "${@:2}" ;;
  *) echo "usage: hack/nodes.sh up|down|load LAYOUT:TAG REFERENCE|check|preflight" >&2; exit 2 ;;
esac
