#!/usr/bin/env bash
# Stops the local control plane that hack/local-up.sh started (by the PIDs it recorded: TERM, then
# KILL after a grace period) and removes its state under .local/. Idempotent: with nothing
# running and no state it does nothing and exits 0. Leaves the binary cache alone.
#
# Environment: NAD_LOCAL_DIR (state directory, default <repo>/.local), NAD_STOP_GRACE (seconds
# to wait after TERM, default 10).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
state="${NAD_LOCAL_DIR:-$repo/.local}"
grace="${NAD_STOP_GRACE:-10}"

log() { echo "local-down: $*" >&2; }

# True if $1 is a live process running the component named $2 (guards against PID reuse).
is_ours() {
  local pid="$1" name="$2"
  [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
  local argv0
  argv0="$(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | head -n1)" || return 1
  [[ "${argv0##*/}" == "$name" ]]
}

stop_all() {
  local pids=() names=() f pid name
  # Controller manager first, etcd last, so that the API server does not lose its storage first.
  for name in kube-controller-manager kube-apiserver etcd; do
    f="$state/pids/$name.pid"
    [[ -f "$f" ]] || continue
    pid="$(<"$f")"
    if is_ours "$pid" "$name"; then
      log "stopping $name (pid $pid)"
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$pid")
      names+=("$name")
    fi
  done
  local deadline=$((SECONDS + grace)) i
  for i in "${!pids[@]}"; do
    while is_ours "${pids[$i]}" "${names[$i]}" && ((SECONDS < deadline)); do sleep 0.2; done
    if is_ours "${pids[$i]}" "${names[$i]}"; then
      log "${names[$i]} (pid ${pids[$i]}) did not exit after ${grace}s; killing it"
      kill -KILL "${pids[$i]}" 2>/dev/null || true
    fi
  done
  for i in "${!pids[@]}"; do
    while is_ours "${pids[$i]}" "${names[$i]}"; do sleep 0.1; done
  done
}

remove_state() {
  # Only what local-up.sh creates; anything else someone put in .local/ stays.
  local d="$state"
  rm -rf "${d:?}/pids" "$d/logs" "$d/etcd" "$d/pki" "${d:?}/bin" \
    "$d/kube-controller-manager" \
    "$d/kubeconfig" "$d/kube-controller-manager.kubeconfig" "$d/ports"
}

[[ -d "$state" ]] || exit 0

# The data plane first (hack/pod-agent.sh): its agent stops its pods while the API server is up.
if [[ -d "$state/dataplane" || -f "$state/pids/pod-agent.pid" ]]; then
  NAD_LOCAL_DIR="$state" "$repo/hack/pod-agent.sh" down || log "the data plane did not stop cleanly"
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
