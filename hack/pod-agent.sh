#!/usr/bin/env bash
# The local data plane: the pod agent (testing/pod-agent) with real networking parts, on the local
# control plane of hack/local-up.sh. See hack/README.md ("The data plane").
#
#   hack/pod-agent.sh preflight  why the data plane cannot run here at all (not root, no network
#                             namespaces, no overlayfs), without building anything; exit 1 if so
#   hack/pod-agent.sh check   what this machine lacks (root, ip netns, nft, overlayfs); exit 1 if any
#   hack/pod-agent.sh up      build the parts (first time: minutes), start the agent, wait until its
#                             nodes, kube-proxy and CoreDNS are ready. Idempotent.
#   hack/pod-agent.sh down    stop the agent (it removes its pods, namespaces and files), then sweep
#                             whatever a crashed one left. hack/local-down.sh runs this.
#
# Environment: NAD_LOCAL_DIR [<repo>/.local], KUBECONFIG [<state>/kubeconfig],
# NAD_DATAPLANE_NODES [2], NAD_READY_TIMEOUT [180] seconds.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
state="${NAD_LOCAL_DIR:-$repo/.local}"
dataplane="$state/dataplane"
pidfile="$state/pids/pod-agent.pid"
log_file="$state/logs/pod-agent.log"
target_dir="${CARGO_TARGET_DIR:-$repo/target}"
agent="$target_dir/release/pod-agent"
# What images named …/nad-service-controller and …/nad-network-prober run in pods (build_agent
# builds them).
controller="$target_dir/release/nad-service-controller"
prober="$target_dir/release/nad-network-prober"
ready_timeout="${NAD_READY_TIMEOUT:-180}"

log() { echo "pod-agent: $*" >&2; }
die() { echo "pod-agent: error: $*" >&2; exit 1; }

# shellcheck source=hack/proc.sh
source "$repo/hack/proc.sh"
proc_prefix="pod-agent: "

# The agent as recorded when it started: its pid and start time (hack/proc.sh).
running() { proc_running "$pidfile"; }

# A start that failed: says what was seen, stops the agent (its pods and namespaces with it; the
# log kept) and names the command that repeats this step alone.
failed_start() {
  echo "pod-agent: error: $1" >&2
  proc_log_tail "$log_file" 30 >&2
  log "stopping what this start began (hack/pod-agent.sh down); the log stays in $log_file"
  down
  log "to repeat this step alone: hack/pod-agent.sh up (the builds are kept: nothing is rebuilt)"
  exit 1
}

# The same packages as hack/demo.sh builds: cargo then resolves the same features for the
# dependencies, and the demo and the tests share one build of them.
build_agent() {
  log "building the pod agent (cargo build --release -p pod-agent, with the controller, the prober and node-sim)"
  ${CARGO:-cargo} build --release --locked -p nad-service-controller -p nad-prober -p pod-agent -p node-sim >&2
}

in_node() { ip netns exec nsc-node-0 "$@"; }

# Each check keeps what it got, and ready() which one failed, for not_ready.
nodes_answer="" kube_proxy_answer="" coredns_answer="" failed_check=""
nodes_ready() {
  nodes_answer="$(kubectl get nodes -l pod-agent.isim.dev/local=true -o jsonpath='{range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status} {end}' 2>&1)"
  [[ "$nodes_answer" == *=True* ]]
}
kube_proxy_healthy() { kube_proxy_answer="$(in_node curl -fsS --max-time 2 http://127.0.0.1:10256/healthz 2>&1)"; }
coredns_ready() { coredns_answer="$(in_node curl -fsS --max-time 2 http://127.0.0.1:8181/ready 2>&1)"; }
ready() {
  local check
  for check in nodes_ready kube_proxy_healthy coredns_ready; do
    failed_check="$check"
    "$check" || return 1
  done
}

# What the check of ready() that failed last answered.
not_ready() {
  local answer
  case "$failed_check" in
    nodes_ready) echo "no node is Ready (${nodes_answer:-no node})"; return ;;
    kube_proxy_healthy) answer="kube-proxy's /healthz in nsc-node-0: ${kube_proxy_answer:-no answer}" ;;
    coredns_ready) answer="CoreDNS's /ready in nsc-node-0: ${coredns_answer:-no answer}" ;;
  esac
  head -c 300 <<<"$answer" | tr '\n' ' '
}

up() {
  export KUBECONFIG="${KUBECONFIG:-$state/kubeconfig}"
  [[ -s "$KUBECONFIG" ]] || die "no control plane: run hack/local-up.sh first"
  export PATH="$state/bin:$PATH"
  build_agent
  "$agent" check >&2 || die "this machine cannot run the data plane (above)"
  if running && ready; then
    log "already running (pid $(proc_pid "$pidfile"))"
    return 0
  fi
  running && down

  log "building the networking parts from the Go module proxy (first time: minutes)"
  local kube_proxy parts
  kube_proxy="$("$repo/hack/controlplane/build.sh" kube-proxy | awk '{print $2}')"
  parts="$("$repo/hack/dataplane/build.sh")"
  part() { awk -v p="$1" '$1 == p {print $2}' <<<"$parts"; }

  mkdir -p "$dataplane/cni-bin" "$state/pids" "$state/logs"
  local plugin
  for plugin in bridge macvlan host-local loopback; do
    ln -sfn "$(part cni-plugins)/$plugin" "$dataplane/cni-bin/$plugin"
  done
  ln -sfn "$(part multus)/multus" "$dataplane/cni-bin/multus"
  ln -sfn "$(part whereabouts)/whereabouts" "$dataplane/cni-bin/whereabouts"

  log "installing whereabouts' CRDs"
  kubectl apply --server-side -f "$(part whereabouts)/crds/" >&2
  kubectl wait --for=condition=Established --timeout=60s -f "$(part whereabouts)/crds/" >/dev/null

  log "starting the pod agent (log: $log_file)"
  proc_start "$pidfile" "$log_file" "$agent" run \
    --state "$dataplane" --nodes "${NAD_DATAPLANE_NODES:-2}" --kubeconfig "$KUBECONFIG" \
    --cni-bin "$dataplane/cni-bin" --cni-run "$(part cni-run)/cni-run" \
    --kube-proxy "$kube_proxy" --coredns "$(part coredns)/coredns" --controller "$controller" --prober "$prober"
  local deadline=$((SECONDS + ready_timeout))
  until ready; do
    if ! running; then
      proc_exited "$pidfile"
      failed_start "the pod agent $proc_how before its nodes were ready"
    fi
    ((SECONDS < deadline)) || failed_start "the pod agent is running (pid $(proc_pid "$pidfile")) but \
not ready after ${ready_timeout}s: $(not_ready)"
    sleep 0.5
  done
  log "ready: nodes $(kubectl get nodes -l pod-agent.isim.dev/local=true -o name | tr '\n' ' ')"
}

down() {
  # TERM: it stops its pods and removes its namespaces.
  proc_stop "$pidfile" "the pod agent" 40
  rm -f "$pidfile"
  sweep
}

# What a crashed agent may leave: processes in its namespaces, the namespaces, /etc/netns/nsc-*.
# Those it noted in $dataplane/created first, then any other by the prefix.
sweep() {
  command -v ip >/dev/null || return 0
  local ns pid kind what
  if [[ -f "$dataplane/created" ]]; then
    while read -r kind what; do
      case "$kind:$what" in
        file:/etc/netns/nsc-*) rm -rf "$what" ;;
      esac
    done <"$dataplane/created"
  fi
  for ns in $( (awk '$1 == "netns" {print $2}' "$dataplane/created" 2>/dev/null; ip netns list 2>/dev/null | awk '{print $1}') | grep '^nsc-' | sort -u); do
    ip netns list | awk '{print $1}' | grep -qx "$ns" || continue
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
    ip netns delete "$ns" 2>/dev/null || log "could not delete network namespace $ns"
  done
  rm -rf /etc/netns/nsc-* 2>/dev/null || true
  rmdir /etc/netns 2>/dev/null || true # only if empty: then it was ours
  rm -rf "$dataplane"
}

# Why the data plane cannot run here at all, on stdout, exit 1; nothing and exit 0 if it can. What
# a package would fix (nft) is not asked: hack/system-packages.sh installs it. The pod agent's own
# check, after the build, has the last word.
preflight() {
  local err
  if [[ "$(id -u)" != 0 ]]; then
    echo "not root: the data plane makes network namespaces, veth links and mounts (run it as root)"
  elif ! command -v ip >/dev/null; then
    echo "no ip (iproute2), so no network namespaces: apt-get install iproute2"
  elif ! err="$(ip netns add nsc-preflight 2>&1)"; then
    echo "network namespaces cannot be made here (ip netns add: $err)"
  elif ! ip netns delete nsc-preflight 2>/dev/null; then
    echo "a network namespace could not be removed (ip netns delete nsc-preflight)"
  elif ! grep -qw overlay /proc/filesystems; then
    echo "no overlayfs in the kernel (modprobe overlay), which whereabouts' settings need"
  else
    return 0
  fi
  return 1
}

case "${1:-}" in
  preflight) preflight ;;
  check) build_agent && exec "$agent" check ;;
  up) up ;;
  down) down ;;
  *) echo "usage: hack/pod-agent.sh preflight|check|up|down" >&2; exit 2 ;;
esac
