#!/usr/bin/env bash
# Stops the local control plane that hack/local-up.sh started (by the PIDs it recorded: TERM, then
# KILL after a grace period) and removes its state under .local/. Idempotent: with nothing
# running and no state it does nothing and exits 0. Leaves the binary cache alone.
#
# Environment: NAD_LOCAL_DIR (state directory, default <repo>/.local), NAD_STOP_GRACE (seconds
# to wait after TERM, default 10), NAD_KEEP_LOGS (1: leave .local/logs).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
state="${NAD_LOCAL_DIR:-$repo/.local}"
grace="${NAD_STOP_GRACE:-10}"

log() { echo "local-down: $*" >&2; }

# shellcheck source=hack/proc.sh
source "$repo/hack/proc.sh"
proc_prefix="local-down: "

# Controller manager first, etcd last, so that the API server does not lose its storage first.
# Each is known by the pid and start time recorded when it started (hack/proc.sh), so a pid
# reused by another process since is left alone.
stop_all() {
  local name
  for name in kube-controller-manager kube-apiserver nsc-net-egress etcd; do
    proc_stop "$state/pids/$name.pid" "$name" "$grace"
  done
}

remove_state() {
  # Only what local-up.sh creates; anything else someone put in .local/ stays.
  local d="$state"
  # NAD_KEEP_LOGS=1 (hack/local-up.sh after a failed start) keeps the logs to read.
  [[ "${NAD_KEEP_LOGS:-}" == 1 ]] || rm -rf "${d:?}/logs"
  rm -rf "${d:?}/pids" "$d/etcd" "$d/pki" "${d:?}/bin" \
    "$d/kube-controller-manager" \
    "$d/kubeconfig" "$d/kube-controller-manager.kubeconfig" "$d/kube-scheduler.kubeconfig" "$d/ports" \
    "$d/egress-selector.yaml" "$d/egress.sock"
}

[[ -d "$state" ]] || exit 0

# The nodes first (hack/nodes.sh): their pods stop while the API server is up.
if [[ -d "$state/nodes" || -f "$state/pids/nodes-relay.pid" ]]; then
  NAD_LOCAL_DIR="$state" "$repo/hack/nodes.sh" down || log "the nodes did not stop cleanly"
fi

if [[ "${NAD_LOCK_HELD:-}" == 1 ]] || ! command -v flock >/dev/null; then
  stop_all
  remove_state
else
  exec 9>>"$state/lock"
  # Wait for a concurrent local-up.sh; a lock held far longer is stale, so go on regardless.
  flock -w 60 9 || log "could not take $state/lock in 60s; stopping anyway"
  stop_all
  remove_state
  rm -f "$state/lock"
fi
rmdir "$state" 2>/dev/null || true
[[ "${NAD_LOCK_HELD:-}" == 1 ]] || log "stopped; state removed"
