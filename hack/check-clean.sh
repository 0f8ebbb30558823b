#!/usr/bin/env bash
# Checks that nothing of the local control plane or data plane is left on the machine (after
# `make local-down`; .ci/run calls it after the tests and after the demo): no nsc-* network
# namespace, no /etc/netns/nsc-* file, no process run from the binary cache (etcd, the API
# server, kube-proxy, CoreDNS, cni-run, the CNI plugins), of the pod agent or of a pod's
# container. Exit 1 naming what is left.
set -euo pipefail
cache="${NAD_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nad-service-controller/bin}"
left=()

while read -r ns _; do
  [[ "$ns" == nsc-* ]] && left+=("network namespace $ns")
done < <(ip netns list 2>/dev/null)
for f in /etc/netns/nsc-*; do
  [[ -e "$f" ]] && left+=("file $f")
done
for proc in /proc/[0-9]*; do
  pid="${proc#/proc/}"
  [[ "$pid" == "$$" ]] && continue
  exe="$(readlink "$proc/exe" 2>/dev/null)" || continue
  if [[ "$exe" == "$cache"/* || "$exe" == */release/pod-agent ]]; then
    left+=("process $pid ($exe)")
  elif tr '\0' '\n' <"$proc/environ" 2>/dev/null | grep -q '^POD_DIR='; then
    left+=("process $pid ($exe, a pod's container)")
  fi
done

if ((${#left[@]})); then
  printf 'check-clean: left behind: %s\n' "${left[@]}" >&2
  exit 1
fi
echo "check-clean: no namespace, file or process of the control plane or data plane is left" >&2
