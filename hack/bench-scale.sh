#!/usr/bin/env bash
# make bench-scale: the Kubernetes scalability envelope on the local control plane: 150 000
# pods and 10 000 Services on 100 networks (host/benches/controller_envelope.rs). Not part of
# `make bench`: setting up the pods alone takes about 12 minutes on 2 cores, the whole run about
# 20. After the controller, a plain client makes the cold start's slice writes again in a
# scratch namespace (bench-envelope-plain, deleted afterwards): the API's own time for them. Its
# raw result goes to hack/bench/envelope.json (committed, so that `make bench` keeps showing
# it), then BENCHMARKS.md and benchmarks.json are written again.
#
# NSC_BENCH_KEEP=1 keeps the namespace and its pods afterwards; a run that finds them complete
# skips the setup (stop the control plane with hack/local-down.sh to free the memory).
# NSC_BENCH_VARIANT=claims runs the claim variant instead (the pods' addresses from a
# ResourceClaim each, the Services on DeviceClasses) and the Multus one after it at the same
# scale (NSC_BENCH_SCALE divides both), side by side in hack/bench/envelope-claims.json.
# Starts the local control plane if it is not running, and stops it afterwards unless it was.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
target_dir="${CARGO_TARGET_DIR:-$repo/target}"
cargo="${CARGO:-cargo}"

echo "== building the benchmark (release profile)" >&2
$cargo bench --locked -p nad-service-controller --bench controller_envelope --no-run

was_up=false
if [[ -f .local/kubeconfig ]] && [[ -x .local/bin/kubectl ]] \
  && .local/bin/kubectl --kubeconfig .local/kubeconfig get --raw /readyz >/dev/null 2>&1; then
  was_up=true
fi
exports="$(hack/local-up.sh)" || { echo "bench-scale: the local control plane did not start" >&2; exit 1; }
eval "$exports"
if [[ "$was_up" == false ]]; then
  trap 'echo "== stopping the local control plane" >&2; hack/local-down.sh' EXIT
fi

if [[ "${NSC_BENCH_VARIANT:-}" == claims ]]; then
  # The claim variant beside Multus, one after the other at the same scale on the same control
  # plane: the pods' addresses from one ResourceClaim each, then from network-status.
  scale="${NSC_BENCH_SCALE:-1}"
  echo "== the claim variant and Multus: $((10000 / scale)) Services x 15 pods on $((100 / scale > 0 ? 100 / scale : 1)) networks each" >&2
  for source in claims multus; do
    NSC_BENCH_SOURCE="$source" NSC_BENCH_OUT="$target_dir/bench/controller_envelope_$source.json" \
      $cargo bench --locked -p nad-service-controller --bench controller_envelope >/dev/null
  done
  python3 - "$target_dir/bench" >hack/bench/envelope-claims.json <<'PY'
import json, sys
runs = {s: json.load(open(f"{sys.argv[1]}/controller_envelope_{s}.json")) for s in ("claims", "multus")}
print(json.dumps(runs, indent=2))
PY
else
  echo "== the envelope: 10 000 Services x 15 pods on 100 networks" >&2
  raw="$target_dir/bench/controller_envelope.json"
  NSC_BENCH_OUT="$raw" $cargo bench --locked -p nad-service-controller --bench controller_envelope >/dev/null
  cp "$raw" hack/bench/envelope.json
fi

echo "== report" >&2
python3 hack/bench/report.py --markdown BENCHMARKS.md --json benchmarks.json
sed -n '/^## Scalability envelope/,/^## Analysis/p' BENCHMARKS.md | head -n -1
