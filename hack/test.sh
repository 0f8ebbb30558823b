#!/usr/bin/env bash
# Runs every test: unit, plugin and (on the local control plane) integration tests.
# Starts the local control plane if it is not running, and stops it afterwards (even when tests
# fail) unless it was already running before.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

was_up=false
if [[ -f .local/kubeconfig ]] && [[ -x .local/bin/kubectl ]] \
  && .local/bin/kubectl --kubeconfig .local/kubeconfig get --raw /readyz >/dev/null 2>&1; then
  was_up=true
fi

echo "== starting the local control plane (the first run builds it from source: minutes)" >&2
if ! exports="$(hack/local-up.sh)"; then
  echo "test: the local control plane did not start; see the messages above and .local/logs/" >&2
  exit 1
fi
eval "$exports"
if [[ "$was_up" == false ]]; then
  trap 'echo "== stopping the local control plane" >&2; hack/local-down.sh' EXIT
fi

echo "== the data plane (hack/pod-agent.sh: nodes as network namespaces, Multus, CNI plugins, whereabouts, kube-proxy, CoreDNS)" >&2
dataplane_was_up=false
[[ -f .local/pids/pod-agent.pid ]] && kill -0 "$(<.local/pids/pod-agent.pid)" 2>/dev/null && dataplane_was_up=true
if ! hack/pod-agent.sh up; then
  echo "test: the data plane did not start (above); the data-plane tests (host/tests/dataplane.rs) need it: run as root" >&2
  exit 1
fi
if [[ "$was_up" == true && "$dataplane_was_up" == false ]]; then
  trap 'echo "== stopping the data plane" >&2; hack/pod-agent.sh down' EXIT
fi

echo "== deploy/ manifests: deploy.yaml up to date, server-side dry runs of every overlay" >&2
hack/manifests.sh check

echo "== the Helm chart: lint, its defaults equal deploy.yaml, server-side dry runs of its value sets (hack/helm.sh; helm built from its Go module the first time)" >&2
hack/helm.sh check

echo "== deploy/monitoring: promtool check/test rules (hack/tools.sh promtool; built from its Go module the first time), the dashboard's queries" >&2
hack/monitoring.sh check

echo "== the C plugin toolchain (hack/c-plugin-toolchain.sh: clang, wasi-libc, wit-bindgen, wasm-tools; minutes the first time)" >&2
# The CLI tests build the C example and a `plugin new --lang c` project with it.
hack/c-plugin-toolchain.sh >/dev/null

echo "== the CNCF distribution registry (hack/tools.sh registry; built from its Go module the first time), for the OCI plugin tests" >&2
hack/tools.sh registry >/dev/null

echo "== the image (make image-oci: the static binary in an OCI layout, by umoci), which the RBAC test runs with runc" >&2
image_layout="${CARGO_TARGET_DIR:-$repo/target}/image/oci"
image_tag="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)"
make --no-print-directory image-oci IMAGE_LAYOUT="$image_layout" IMAGE_TAG="$image_tag" >/dev/null
export NSC_IMAGE_LAYOUT="$image_layout:$image_tag"

echo "== cargo test (unit, plugin-runtime, plugin-CLI, cluster, data-plane and RBAC tests)" >&2
# The fault tests kill the API server: they run on a control plane of their own
# (make test-faults, hack/test-faults.sh).
${CARGO:-cargo} test --release --locked --workspace --exclude nad-fault-tests
