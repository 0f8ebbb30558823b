#!/usr/bin/env bash
# make bench: measures the plugin boundary (Criterion), the controller at scale (the real local
# control plane with the node simulator; beside it kube-controller-manager's own EndpointSlice
# controller on the same pods), what one slice write costs the API server and etcd by
# server-side apply and by create/update, and the network prober (on the local data plane, when this
# machine can run it: root), then writes BENCHMARKS.md and benchmarks.json, each target beside
# the committed benchmarks.json's figure. The results record the commit measured (`-dirty` for
# a work tree with changes other than these report files) and the machine.
# Takes about 12 minutes on 2 cores, plus the first build. Not part of `make test`.
# Starts the local control plane if it is not running, and stops it afterwards unless it was.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
target_dir="${CARGO_TARGET_DIR:-$repo/target}"
cargo="${CARGO:-cargo}"

echo "== building the benchmarks (release profile)" >&2
$cargo bench --locked -p nad-service-controller --bench plugin_boundary --bench plugin_pull --bench controller_scale --bench slice_writes --no-run

echo "== 1/3 plugin boundary (Criterion: evaluate at 1..10 000 pods, Wasm and native; loading; fields)" >&2
# Only this run's results feed the report.
export CRITERION_HOME="$target_dir/criterion"
rm -rf "$CRITERION_HOME"
$cargo bench --locked -p nad-service-controller --bench plugin_boundary
$cargo bench --locked -p nad-service-controller --bench plugin_pull

echo "== heap per cached pod (pod index and observations, dhat)" >&2
memory_json="$target_dir/bench/pod_memory.json"
mkdir -p "$target_dir/bench"
NSC_BENCH_OUT="$memory_json" $cargo bench --locked -p nad-core --bench pod_memory >&2

echo "== 2/3 controller at scale, on the local control plane" >&2
was_up=false
if [[ -f .local/kubeconfig ]] && [[ -x .local/bin/kubectl ]] \
  && .local/bin/kubectl --kubeconfig .local/kubeconfig get --raw /readyz >/dev/null 2>&1; then
  was_up=true
fi
exports="$(hack/local-up.sh)" || { echo "bench: the local control plane did not start" >&2; exit 1; }
eval "$exports"
if [[ "$was_up" == false ]]; then
  trap 'echo "== stopping the local control plane" >&2; hack/local-down.sh' EXIT
fi
scale_json="$target_dir/bench/controller_scale.json"
NSC_BENCH_OUT="$scale_json" $cargo bench --locked -p nad-service-controller --bench controller_scale >/dev/null
echo "== what one slice write costs: server-side apply against create/update" >&2
writes_json="$target_dir/bench/slice_writes.json"
NSC_BENCH_OUT="$writes_json" $cargo bench --locked -p nad-service-controller --bench slice_writes >/dev/null

echo "== 3/3 the network prober: 110 pods x 3 ports on the local nodes" >&2
prober_json="$target_dir/bench/prober.json"
rm -f "$prober_json"
if hack/nodes.sh preflight >&2; then
  nodes_were_up=false
  [[ -f .local/pids/nodes-relay.pid ]] && nodes_were_up=true
  $cargo build --release --locked -p nad-service-controller -p nad-prober -p node-sim >&2
  hack/nodes.sh up >&2
  hack/bench/prober.sh "$prober_json"
  [[ "$nodes_were_up" == true ]] || hack/nodes.sh down >&2
else
  echo "bench: this machine cannot run the nodes (above): the prober's figures are left out" >&2
fi

echo "== report" >&2
python3 hack/bench/report.py --criterion "$target_dir/criterion" --scale "$scale_json" \
  --prober "$prober_json" --memory "$memory_json" --writes "$writes_json" --markdown BENCHMARKS.md --json benchmarks.json
sed -n '/^## Targets/,/^## Plugin/p' BENCHMARKS.md | head -n -1
