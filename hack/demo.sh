#!/usr/bin/env bash
# The main job end to end: the controller publishes the nginx-nad Service's pods' macvlan IPs.
#
# By default on the local control plane (hack/local-up.sh), with the node simulator playing
# scheduler, kubelet and Multus. DEMO_CLUSTER=existing uses the cluster in KUBECONFIG instead
# (a real one, with Multus: no simulator). DEMO_ONESHOT=1 exits right after the checks.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

cluster="${DEMO_CLUSTER:-local}"
oneshot="${DEMO_ONESHOT:-0}"
timeout="${DEMO_TIMEOUT:-120}"
target_dir="${CARGO_TARGET_DIR:-$repo/target}"
logs="$repo/.local/logs"
step() { printf '\n\033[1m== %s\033[0m\n' "$*" >&2; }
die() { echo "demo: error: $*" >&2; exit 1; }

pids=()
started_cluster=false
cleanup() {
  local status=$?
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [[ "$started_cluster" == true ]]; then
    step "stopping the local control plane"
    hack/local-down.sh || true
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

step "building the controller and the node simulator (cargo build --release; the first build takes minutes)"
make --no-print-directory wasm-target >&2
${CARGO:-cargo} build --release --locked -p nad-service-controller -p node-sim >&2

if [[ "$cluster" == local ]]; then
  if ! [[ -f .local/kubeconfig ]] || ! .local/bin/kubectl --kubeconfig .local/kubeconfig get --raw /readyz >/dev/null 2>&1; then
    started_cluster=true
  fi
  step "starting the local control plane (etcd, kube-apiserver, kube-controller-manager)"
  eval "$(hack/local-up.sh)"
  export PATH="$repo/.local/bin:$PATH"
else
  [[ -n "${KUBECONFIG:-}" ]] || die "DEMO_CLUSTER=existing needs KUBECONFIG"
fi
mkdir -p "$logs"

if [[ "$cluster" == local ]]; then
  step "starting the node simulator (binds pods to simulated nodes, fills status and network-status)"
  "$target_dir/release/node-sim" --range macvlan=192.168.2.0/24 >"$logs/node-sim.log" 2>&1 &
  pids+=($!)
fi

step "starting the controller (log: .local/logs/controller.log)"
"$target_dir/release/nad-service-controller" --leader-election=false \
  --metrics-address 127.0.0.1:18080 --health-address 127.0.0.1:18081 \
  >"$logs/controller.log" 2>&1 &
controller=$!
pids+=("$controller")

step "kubectl apply -f testdata/"
kubectl apply -f testdata/

step "waiting for the nginx-nad EndpointSlice to list both pods (at most ${timeout}s)"
endpoints() {
  kubectl get endpointslices -l kubernetes.io/service-name=nginx-nad \
    -o jsonpath='{range .items[*].endpoints[*]}{.addresses[0]}{"\n"}{end}' 2>/dev/null | sort
}
pod_ips() {
  kubectl get pods -l app=nginx-nad -o json | python3 -c '
import json, sys
for pod in json.load(sys.stdin)["items"]:
    if pod["metadata"].get("deletionTimestamp"):
        continue
    status = json.loads(pod["metadata"].get("annotations", {}).get("k8s.v1.cni.cncf.io/network-status", "[]"))
    for net in status:
        if net.get("name", "").endswith("/macvlan"):
            print("\n".join(net.get("ips", [])))
' | sort
}
deadline=$((SECONDS + timeout))
until [[ "$(endpoints | wc -l)" -ge 2 && "$(endpoints)" == "$(pod_ips)" ]]; do
  kill -0 "$controller" 2>/dev/null || { tail -20 "$logs/controller.log" >&2; die "the controller exited"; }
  if ((SECONDS > deadline)); then
    kubectl get pods -o wide >&2 || true
    tail -20 "$logs/controller.log" >&2
    die "the nginx-nad EndpointSlice did not show both pods' macvlan IPs within ${timeout}s"
  fi
  sleep 1
done

step "kubectl get deploy,svc,po -l app=nginx-nad"
kubectl get deploy,svc,po -l app=nginx-nad
step "kubectl get endpointslices -l kubernetes.io/service-name=nginx-nad"
kubectl get endpointslices -l kubernetes.io/service-name=nginx-nad
step "the endpoints' addresses"
kubectl get endpointslices -l kubernetes.io/service-name=nginx-nad -o jsonpath='{.items[*].endpoints[*].addresses}'
echo
step "the pods' macvlan IPs from k8s.v1.cni.cncf.io/network-status"
pod_ips
step "OK: the slice holds exactly the pods' secondary-network IPs"

if [[ "$oneshot" == 1 ]]; then
  exit 0
fi
echo "The controller keeps running (Ctrl-C stops the demo and tears down what it started)." >&2
echo "Try: kubectl scale deploy nginx-nad --replicas=4; kubectl get endpointslices -w" >&2
tail -n +1 -f "$logs/controller.log" &
pids+=($!)
wait "$controller"
