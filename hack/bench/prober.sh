#!/usr/bin/env bash
# The network prober under load (make bench, step 3): one prober probing 110 pods x 3 ports,
# every second, on the local data plane; writes $1 (JSON) with its probes per second, CPU,
# RSS, probe latency and the condition writes per 1 000 probes while nothing changes.
#
# The prober is the release binary, run as `nad-network-prober` in node
# nsc-node-0's network namespace (where hack/nodes.sh relays the API server to 127.0.0.1).
# The 110 "pods" are API objects bound to nsc-bench-node, a Node object no kubelet runs (so
# nothing runs them, and the pod garbage collector does not take them for orphans; they
# tolerate the node's not-ready taints), whose pods the prober probes, each with an address 192.0.2.<n> on a bridge (with no ports) this script adds to
# the node's namespace, where Python's HTTP server answers on ports 8080-8082 of every address;
# an EndpointSlice of this controller's publishes them for the Service (as the controller
# would: the prober probes what is published).
# Everything it adds (link, processes, namespace) is removed on exit, also on failure.
#
#   hack/bench/prober.sh OUT.json      needs the control plane and the nodes (root)
#
# Environment: NSC_BENCH_PROBER_SECONDS [60] (the measured window), KUBECONFIG.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="${1:?usage: hack/bench/prober.sh OUT.json}"
target_dir="${CARGO_TARGET_DIR:-$repo/target}"
bin="$target_dir/release/nad-network-prober"
export KUBECONFIG="${KUBECONFIG:-$repo/.local/kubeconfig}"
kubectl="$repo/.local/bin/kubectl"
[[ -x "$kubectl" ]] || kubectl=kubectl
node=nsc-node-0
pods_node=nsc-bench-node
ns=nsc-bench-prober
link=nscbench0
pods=110
window="${NSC_BENCH_PROBER_SECONDS:-60}"
metrics_port=19090

log() { echo "prober bench: $*" >&2; }
die() { echo "prober bench: error: $*" >&2; exit 1; }

ip netns list | grep -qw "$node" || die "no nodes (network namespace $node): run hack/nodes.sh up"
[[ -x "$bin" ]] || die "build first: cargo build --release -p nad-prober"

pids=()
cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  ip -n "$node" link del "$link" 2>/dev/null || true
  "$kubectl" delete namespace "$ns" --wait=false >/dev/null 2>&1 || true
  "$kubectl" delete node "$pods_node" --wait=false >/dev/null 2>&1 || true
  if [[ "$policy_was_there" == false ]]; then
    "$kubectl" delete -f "$repo/deploy/prober/admission-policy.yaml" --wait=false >/dev/null 2>&1 || true
  fi
}
policy_was_there=true
trap cleanup EXIT

# The prober writes nothing until the admission policy that confines probers is in force
# (crates/prober/src/guard.rs); it confines ServiceAccounts bound as probers, not this
# administrator the benchmark's prober runs as, so the figures are the same either way.
if ! "$kubectl" get -f "$repo/deploy/prober/admission-policy.yaml" >/dev/null 2>&1; then
  policy_was_there=false
  log "the prober's admission policy (deploy/prober/admission-policy.yaml), removed afterwards"
  "$kubectl" apply -f "$repo/deploy/prober/admission-policy.yaml" >/dev/null
fi

log "the pods' addresses and their server, in $node"
ip -n "$node" link add "$link" type bridge
ip -n "$node" link set "$link" up
for i in $(seq 1 "$pods"); do
  ip -n "$node" addr add "192.0.2.$i/32" dev "$link"
done
root="$(mktemp -d)"
mkdir -p "$root/www"
echo ok >"$root/www/index.html"
for port in 8080 8081 8082; do
  ip netns exec "$node" python3 -m http.server "$port" --bind 0.0.0.0 --directory "$root/www" \
    >/dev/null 2>&1 &
  pids+=("$!")
done

log "namespace $ns: a Service with 3 ports, probed every second, and $pods pods on $pods_node"
"$kubectl" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Node
metadata:
  name: $pods_node
---
apiVersion: v1
kind: Namespace
metadata:
  name: $ns
---
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: macvlan
  namespace: $ns
spec:
  config: '{"cniVersion": "0.3.1", "name": "macvlan", "type": "macvlan"}'
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: $ns
  annotations:
    isim.dev/network: macvlan
    isim.dev/probe: '{"periodSeconds": 1}'
spec:
  clusterIP: None
  ports:
  - {name: a, port: 80, targetPort: 8080}
  - {name: b, port: 81, targetPort: 8081}
  - {name: c, port: 82, targetPort: 8082}
EOF
until "$kubectl" -n "$ns" get serviceaccount default >/dev/null 2>&1; do sleep 0.2; done
manifest=""
for i in $(seq 1 "$pods"); do
  manifest+="---
apiVersion: v1
kind: Pod
metadata:
  name: web-$i
  namespace: $ns
  annotations:
    k8s.v1.cni.cncf.io/network-status: '[{\"name\": \"$ns/macvlan\", \"interface\": \"net1\", \"ips\": [\"192.0.2.$i\"]}]'
spec:
  nodeName: $pods_node
  tolerations:
  - {operator: Exists, effect: NoExecute}
  containers:
  - {name: web, image: nginx}
"
done
endpoints=""
for i in $(seq 1 "$pods"); do
  endpoints+="
- addresses: [\"192.0.2.$i\"]
  conditions: {ready: true, serving: true, terminating: false}
  nodeName: $pods_node
  targetRef: {kind: Pod, name: web-$i, namespace: $ns}"
done
manifest+="---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-ipv4-0
  namespace: $ns
  labels:
    kubernetes.io/service-name: web
    endpointslice.kubernetes.io/managed-by: nad-service-controller.isim.dev
addressType: IPv4
ports:
- {name: a, port: 8080, protocol: TCP}
- {name: b, port: 8081, protocol: TCP}
- {name: c, port: 8082, protocol: TCP}
endpoints:$endpoints
"
"$kubectl" apply -f - >/dev/null <<<"$manifest"

log "the prober, in $node"
NODE_NAME="$pods_node" ip netns exec "$node" "$bin" --network "$ns/macvlan" \
  --address "127.0.0.1:$metrics_port" --log-filter warn >"$root/prober.log" 2>&1 &
prober="$!"
pids+=("$prober")
scrape() { ip netns exec "$node" curl -fsS --max-time 2 "http://127.0.0.1:$metrics_port/metrics"; }
# The sum of a metric's series (all labels).
value() { awk -v m="$2" '$1 == m || index($1, m "{") == 1 { s += $NF } END { printf "%.6f\n", s + 0 }' <<<"$1"; }
deadline=$((SECONDS + 120))
until [[ "$(value "$(scrape 2>/dev/null || true)" nad_prober_condition_writes_total)" == "$pods.000000" ]]; do
  ((SECONDS < deadline)) || die "the prober did not mark the $pods pods ready within 120 s: $(tail -5 "$root/prober.log")"
  kill -0 "$prober" 2>/dev/null || die "the prober exited: $(tail -5 "$root/prober.log")"
  sleep 1
done
log "every pod marked ready; measuring ${window}s of steady probing"
sleep 3
ticks="$(getconf CLK_TCK)"
cpu() { awk '{ print $14 + $15 }' "/proc/$prober/stat"; }
before="$(scrape)"
cpu_before="$(cpu)"
start="$(date +%s.%N)"
sleep "$window"
after="$(scrape)"
cpu_after="$(cpu)"
end="$(date +%s.%N)"
rss="$(awk '/^VmRSS/ { print $2 }' "/proc/$prober/status")"
hwm="$(awk '/^VmHWM/ { print $2 }' "/proc/$prober/status")"

python3 - "$out" "$pods" "$window" "$ticks" "$start" "$end" "$cpu_before" "$cpu_after" "$rss" "$hwm" \
  <(echo "$before") <(echo "$after") <<'PY'
import json, re, sys
out, pods, window, ticks, start, end, cpu0, cpu1, rss, hwm, before, after = sys.argv[1:]
def parse(path):
    series = {}
    for line in open(path):
        if line.startswith("#") or not line.strip():
            continue
        name, value = line.rsplit(" ", 1)
        series[name] = float(value)
    return series
b, a = parse(before), parse(after)
def total(s, metric, match=""):
    return sum(v for k, v in s.items() if (k == metric or k.startswith(metric + "{")) and match in k)
elapsed = float(end) - float(start)
probes = total(a, "nad_prober_probes_total") - total(b, "nad_prober_probes_total")
failures = total(a, "nad_prober_probes_total", 'result="failure"') - total(b, "nad_prober_probes_total", 'result="failure"')
writes = total(a, "nad_prober_condition_writes_total") - total(b, "nad_prober_condition_writes_total")
# Latency quantiles from the histogram's buckets over the window.
buckets = {}
for k, v in a.items():
    m = re.match(r'nad_prober_probe_duration_seconds_bucket\{.*le="([^"]+)"', k)
    if m:
        buckets[m.group(1)] = v - b.get(k, 0.0)
def quantile(q):
    ordered = sorted(((float("inf") if le == "+Inf" else float(le)), n) for le, n in buckets.items())
    count = ordered[-1][1] if ordered else 0
    for le, n in ordered:
        if count and n >= q * count:
            return le
    return None
cpu = (float(cpu1) - float(cpu0)) / float(ticks) / elapsed
result = {
    "pods": int(pods), "targets": int(total(a, "nad_prober_targets")), "ports": 3, "period_seconds": 1, "window_seconds": round(elapsed, 1),
    "probes": int(probes), "probes_per_second": round(probes / elapsed, 1),
    "connects_per_second": round(3 * probes / elapsed, 1),
    "failures": int(failures),
    "cpu_cores": round(cpu, 4), "rss_mib": round(int(rss) / 1024, 1), "peak_rss_mib": round(int(hwm) / 1024, 1),
    "writes": int(writes), "writes_per_1000_probes": round(1000 * writes / probes, 3) if probes else None,
    "probe_p50_seconds": quantile(0.5), "probe_p99_seconds": quantile(0.99),
}
json.dump(result, open(out, "w"), indent=2)
print(json.dumps(result))
PY
