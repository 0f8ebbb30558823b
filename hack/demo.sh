#!/usr/bin/env bash
# The main job end to end: the controller publishes the nginx-nad Service's pods' macvlan IPs,
# and clients on that network reach them by name.
#
# By default on the local control plane (hack/local-up.sh) with the real data plane of
# hack/pod-agent.sh (as root): nodes as network namespaces, Multus writing network-status,
# whereabouts, kube-proxy, CoreDNS, and the seed's four curls from inside the netutils pods.
# Without root (or ip netns, nft) it says what is missing and falls back to the node simulator
# (slices only, no traffic). DEMO_CLUSTER=existing uses the cluster in KUBECONFIG instead (a
# real one, with Multus). DEMO_ONESHOT=1 exits right after the checks.
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
started=$SECONDS

pids=()
started_cluster=false
started_dataplane=false
cleanup() {
  local status=$?
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [[ "$started_cluster" == true ]]; then
    step "stopping the data plane and the local control plane"
    hack/local-down.sh || true
  elif [[ "$started_dataplane" == true ]]; then
    step "stopping the data plane"
    hack/pod-agent.sh down || true
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

step "building the controller, the pod agent and the node simulator (cargo build --release; the first build takes minutes)"
make --no-print-directory wasm-target >&2
# The same packages as hack/pod-agent.sh builds (one build of the dependencies for both).
${CARGO:-cargo} build --release --locked -p nad-service-controller -p pod-agent -p node-sim >&2

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

dataplane=false
if [[ "$cluster" == local ]]; then
  if "$target_dir/release/pod-agent" check >"$logs/pod-agent-check.log" 2>&1; then
    dataplane=true
  fi
  if [[ "$dataplane" == true ]]; then
    step "starting the data plane (hack/pod-agent.sh up: 2 nodes as network namespaces, Multus, whereabouts, kube-proxy, CoreDNS; the first run builds them from the Go module proxy)"
    [[ -f .local/pids/pod-agent.pid ]] && kill -0 "$(<.local/pids/pod-agent.pid)" 2>/dev/null || started_dataplane=true
    hack/pod-agent.sh up
  else
    step "no data plane on this machine; falling back to the node simulator (slices only, no traffic)"
    sed 's/^/  /' "$logs/pod-agent-check.log" >&2
    "$target_dir/release/node-sim" --range macvlan=192.168.2.0/24 >"$logs/node-sim.log" 2>&1 &
    pids+=($!)
  fi
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

if [[ "$dataplane" == true ]]; then
  for app in nginx-basic nginx-nad netutils-base netutils-nad; do
    kubectl rollout status "deploy/$app" --timeout="${timeout}s" >/dev/null || die "deploy/$app did not become ready"
  done
fi

step "kubectl get deploy,svc,po"
kubectl get deploy,svc,po
step "kubectl get endpointslices -l kubernetes.io/service-name=nginx-nad"
kubectl get endpointslices -l kubernetes.io/service-name=nginx-nad
step "the endpoints' addresses"
kubectl get endpointslices -l kubernetes.io/service-name=nginx-nad -o jsonpath='{.items[*].endpoints[*].addresses}'
echo
step "the nginx-nad pods' k8s.v1.cni.cncf.io/network-status (written by $([[ "$dataplane" == true ]] && echo Multus || echo the node simulator))"
kubectl get pods -l app=nginx-nad -o json | python3 -c '
import json, sys
for pod in json.load(sys.stdin)["items"]:
    status = json.loads(pod["metadata"].get("annotations", {}).get("k8s.v1.cni.cncf.io/network-status", "[]"))
    print(pod["metadata"]["name"] + ": " + json.dumps(status, separators=(",", ":")))
'
step "OK: the slice holds exactly the pods' secondary-network IPs"

if [[ "$dataplane" == true ]]; then
  step "the seed's four curls, from inside the netutils pods (hack/pod-exec stands in for kubectl exec)"
  pod_of() { kubectl get pods -l "app=$1" -o jsonpath='{.items[0].metadata.name}'; }
  failed=0
  curl_from() {
    local pod="$1" service="$2" want="$3" code out
    local args=(curl -s -o /dev/null -w "%{http_code}")
    [[ "$want" == 000 ]] && args+=(--connect-timeout 10)
    # Shown as the seed's README shows its kubectl exec lines.
    echo "\$ hack/pod-exec default/$pod -- curl -s -o /dev/null -w \"%{http_code}\"${args[6]:+ ${args[*]:6}} $service"
    code=0
    out="$(hack/pod-exec "default/$pod" -- "${args[@]}" "$service")" || code=$?
    if ((code)); then echo "${out}command terminated with exit code $code"; else echo "$out"; fi
    echo
    if [[ "$want" == 000 ]]; then
      [[ "$out" == 000 && "$code" == 28 ]] || { echo "demo: expected 000 and exit code 28" >&2; failed=1; }
    else
      [[ "$out" == "$want" && "$code" == 0 ]] || { echo "demo: expected $want" >&2; failed=1; }
    fi
  }
  nad="$(pod_of netutils-nad)" base="$(pod_of netutils-base)"
  curl_from "$nad" nginx-nad 200
  curl_from "$nad" nginx-basic 200
  curl_from "$base" nginx-basic 200
  curl_from "$base" nginx-nad 000
  ((failed == 0)) || die "the curls did not answer as in the seed's README"
  step "OK: netutils-nad reaches both Services; netutils-base reaches nginx-basic only (demo took $((SECONDS - started)) s)"
fi

if [[ "$oneshot" == 1 ]]; then
  exit 0
fi
echo "The controller keeps running (Ctrl-C stops the demo and tears down what it started)." >&2
echo "Try: kubectl scale deploy nginx-nad --replicas=4; kubectl get endpointslices -w" >&2
if [[ "$dataplane" == true ]]; then
  echo "     hack/pod-exec default/$(kubectl get pods -l app=netutils-nad -o jsonpath='{.items[0].metadata.name}') -- curl -s nginx-nad" >&2
fi
tail -n +1 -f "$logs/controller.log" &
pids+=($!)
wait "$controller"
