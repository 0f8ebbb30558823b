#!/usr/bin/env bash
# Checks that nothing of the local control plane or data plane is left on the machine (after
# `make local-down`; .ci/run calls it after the tests and after the demo): no nsc-* network
# namespace, no /etc/netns/nsc-* file, no nsc-* cgroup (a node's cgroupRoot, which holds its
# containers, hack/nodes.sh), and no process
# - run from the binary cache (etcd, the API server, kubelet, containerd, kube-proxy, CoreDNS,
#   the CNI plugins), or of a node's container (in a node's cgroup, /nsc-node-*);
# - of the controller or the network prober: any executable named nad-service-controller or
#   nad-network-prober (a cargo build's release/, the static build's static/, or an image's
#   binary run by runc);
# - of the node simulator: testing/node-sim's binary (release/ or debug/node-sim, as the demo runs
#   it), or a test or bench binary that runs it in-process (cluster, cluster_wide, rbac, faults,
#   controller_scale, controller_envelope in a cargo deps/ directory beside node-sim's library);
# - of the CNCF distribution registry of hack/tools.sh (tools/bin/registry-<version>, which the
#   OCI plugin tests and the RBAC test start).
# Exit 1 naming what is left. Exit 2 when it cannot look (no `ip`, `ip netns list` failing, no
# readable /proc, or processes whose executable it may not read, when not root): a check that
# sees nothing must not pass.
#
# CHECK_CLEAN_PROC [/proc] is where processes are read from (another directory shows the exit 2;
# hack/test-checkers.sh gives it one of made-up processes, to see each kind named).
set -euo pipefail
cache="${NAD_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nad-service-controller/bin}"
proc_root="${CHECK_CLEAN_PROC:-/proc}"
left=()

cannot_check() {
  echo "check-clean: cannot check: $*" >&2
  exit 2
}

command -v ip >/dev/null \
  || cannot_check "ip (iproute2) is not installed, so the network namespaces cannot be listed: install iproute2 (apt-get install iproute2)"
if ! namespaces="$(ip netns list 2>&1)"; then
  cannot_check "\`ip netns list\` failed ($namespaces): run it by hand to see why"
fi
while read -r ns _; do
  [[ "$ns" == nsc-* ]] && left+=("network namespace $ns")
done <<<"$namespaces"
for f in /etc/netns/nsc-*; do
  [[ -e "$f" ]] && left+=("file $f")
done
while read -r _ hierarchy type _; do
  [[ "$type" == cgroup || "$type" == cgroup2 ]] || continue
  for f in "$hierarchy"/nsc-*; do
    [[ -d "$f" ]] && left+=("cgroup $f")
  done
done </proc/mounts

shopt -s nullglob
procs=("$proc_root"/[0-9]*)
shopt -u nullglob
((${#procs[@]})) \
  || cannot_check "$proc_root holds no process entries (not mounted, or not readable), so no leftover process can be seen: mount procfs there (mount -t proc proc /proc)"

# This script and the ones that run it (which may have a pod's environment) are no leftovers.
ancestors=" "
pid=$$
while [[ -n "$pid" && "$pid" != 0 && -r "$proc_root/$pid/status" ]]; do
  ancestors+="$pid "
  pid="$(sed -n 's/^PPid:[[:space:]]*//p' "$proc_root/$pid/status")"
done
# A process that exits during the scan is no leftover; one whose executable may not be read (another
# user's, when not root) could be one. Kernel threads and zombies have no executable and an empty
# command line. Root is not refused by the kernel but may be by a sandbox (pid 1 of some VMs).
unreadable=()
for proc in "${procs[@]}"; do
  pid="${proc##*/}"
  [[ "$ancestors" == *" $pid "* ]] && continue
  if ! exe="$(readlink "$proc/exe" 2>/dev/null)"; then
    first=""
    IFS= read -r -d '' -n 1 first 2>/dev/null <"$proc/cmdline" || true
    [[ -n "$first" && -d "$proc" ]] && unreadable+=("$pid")
    continue
  fi
  # A process whose binary was rebuilt since it started.
  exe="${exe% (deleted)}"
  what=""
  if [[ "$exe" == "$cache"/* ]]; then
    what="the binary cache's"
  elif [[ "${exe##*/}" == nad-service-controller ]]; then
    what="the controller"
  elif [[ "${exe##*/}" == nad-network-prober ]]; then
    what="the network prober"
  elif [[ "$exe" == */release/node-sim || "$exe" == */debug/node-sim ]]; then
    what="the node simulator"
  elif [[ "$exe" =~ /deps/(cluster|cluster_wide|rbac|faults|controller_scale|controller_envelope)-[0-9a-f]{16}$ ]] \
    && compgen -G "${exe%/*}/libnode_sim-*" >/dev/null; then
    what="a test running the node simulator"
  elif [[ "$exe" == */nad-service-controller/tools/bin/registry-* ]]; then
    what="the CNCF distribution registry"
  elif grep -q ':/nsc-node-' "$proc/cgroup" 2>/dev/null; then
    what="a node's container"
  fi
  [[ -n "$what" ]] && left+=("process $pid ($what: $exe)")
done
if ((EUID != 0 && ${#unreadable[@]})); then
  cannot_check "the executables of ${#unreadable[@]} processes (pids ${unreadable[*]:0:5}${unreadable[5]:+ ...}) may not be read by uid $EUID, and the data plane's are root's: run it as root (sudo hack/check-clean.sh)"
fi

if ((${#left[@]})); then
  printf 'check-clean: left behind: %s\n' "${left[@]}" >&2
  exit 1
fi
echo "check-clean: no namespace, file or process of the control plane or data plane is left" >&2
