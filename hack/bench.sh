#!/usr/bin/env bash
# make bench: measures the plugin boundary (Criterion) and the controller at scale (the real
# local control plane with the node simulator), then writes BENCHMARKS.md and benchmarks.json.
# Takes about 10 minutes on 2 cores, plus the first build. Not part of `make test`.
# Starts the local control plane if it is not running, and stops it afterwards unless it was.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
target_dir="${CARGO_TARGET_DIR:-$repo/target}"
cargo="${CARGO:-cargo}"

echo "== building the benchmarks (release profile)" >&2
$cargo bench --locked -p nad-service-controller --bench plugin_boundary --bench controller_scale --no-run

echo "== 1/2 plugin boundary (Criterion: evaluate at 1..10 000 pods, Wasm and native; loading; fields)" >&2
# Only this run's results feed the report.
export CRITERION_HOME="$target_dir/criterion"
rm -rf "$CRITERION_HOME"
$cargo bench --locked -p nad-service-controller --bench plugin_boundary

echo "== 2/2 controller at scale, on the local control plane" >&2
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

echo "== report" >&2
python3 hack/bench/report.py --criterion "$target_dir/criterion" --scale "$scale_json" \
  --markdown BENCHMARKS.md --json benchmarks.json
sed -n '/^## Targets/,/^## Plugin/p' BENCHMARKS.md | head -n -1
