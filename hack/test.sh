#!/usr/bin/env bash
# Runs every test: unit, plugin and (on the local control plane) integration tests.
# Starts the local control plane if it is not running, and stops it afterwards (even when tests
# fail) unless it was already running before. Each step prints its wall time, and the table of
# them comes at the end (hack/steps.sh; hack/README.md keeps the measured cold and warm times).
#
# The builds come first, in two streams that do not wait on each other: the Go parts (control
# plane, data plane, helm, registry, oras) in the background, the Rust ones (the release build,
# the C plugin toolchain, the images' binaries, the test binaries) in the foreground. Where one
# stream waits on the network, a linker or one crate's long compile, the other has the core.
# The Rust builds are one build: the static (musl) target of the images, which the tests are
# built for too (hack/static-cargo.sh), so that no crate is compiled for two targets.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
# shellcheck source=hack/steps.sh
source hack/steps.sh
steps_init test
target_dir="${CARGO_TARGET_DIR:-$repo/target}"
logs="$repo/.local/logs"

was_up=false
if [[ -f .local/kubeconfig ]] && [[ -x .local/bin/kubectl ]] \
  && .local/bin/kubectl --kubeconfig .local/kubeconfig get --raw /readyz >/dev/null 2>&1; then
  was_up=true
fi
# shellcheck source=hack/proc.sh
source hack/proc.sh
started_cluster=false started_nodes=false
cleanup() {
  local status=$?
  background_stop
  if [[ "$started_cluster" == true ]]; then
    echo "== stopping the local control plane" >&2
    # After a failure the logs stay, to read (.local/logs).
    NAD_KEEP_LOGS="$((status != 0))" hack/local-down.sh || status=1
  elif [[ "$started_nodes" == true ]]; then
    echo "== stopping the nodes" >&2
    NAD_KEEP_LOGS="$((status != 0))" hack/nodes.sh down || status=1
  fi
  steps_report
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

step "system packages" "system packages (hack/system-packages.sh test: installs what is missing)"
hack/system-packages.sh test

step "rust: release build" "builds: the Go parts in the background (hack/go-builds.sh, log: .local/logs/go-builds-test.log); here the static (musl) release build of the controller, the prober and the node simulator, which the images and the tests share (hack/static-cargo.sh)"
mkdir -p "$logs"
background_start "$logs/go-builds-test.log" hack/go-builds.sh control-plane data-plane test-tools

make --no-print-directory wasm-target
# The same packages and target as make build-static, hack/demo.sh and hack/test-faults.sh: one
# build of the dependencies for all. Its crates are recorded, and the test build below must reuse
# them (hack/one-build.py).
hack/static-cargo.sh build --release --locked -p nad-service-controller -p nad-prober -p node-sim \
  --message-format=json-render-diagnostics | python3 hack/one-build.py record "$logs/release-build.json"

step "rust: tools" "the C plugin toolchain (hack/c-plugin-toolchain.sh: clang, wasi-libc, wit-bindgen, wasm-tools) and cargo-sbom (the image's SBOM)"
# The CLI tests build the C example and a `plugin new --lang c` project with it.
hack/c-plugin-toolchain.sh >/dev/null
hack/tools.sh cargo-sbom >/dev/null

step "rust: image binaries" "the images' binaries (make build-static): the controller's from the build above, the prober's built on its own"
image_layout="$target_dir/image/oci"
image_tag="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)"
make --no-print-directory build-static >/dev/null
prober_image_layout="$target_dir/image/prober-oci"
export NSC_IMAGE_LAYOUT="$image_layout:$image_tag" NSC_PROBER_IMAGE_LAYOUT="$prober_image_layout:$image_tag"

step "rust: test binaries" "cargo test --no-run (unit, plugin-runtime, plugin-CLI, cluster, RBAC, node and data-plane tests), on the release build's dependencies (hack/one-build.py)"
# The fault tests kill the API server: they run on a control plane of their own
# (make test-faults, hack/test-faults.sh).
hack/static-cargo.sh test --release --locked --workspace --exclude nad-fault-tests --no-run \
  --message-format=json-render-diagnostics | python3 hack/one-build.py check "$logs/release-build.json"

background_wait "go: waiting" "waiting for the Go builds (.local/logs/go-builds-test.log)"

step "image" "the images' OCI layouts, the controller's and the prober's (umoci), with their SBOMs (cargo-sbom, oras)"
make --no-print-directory image-oci IMAGE_LAYOUT="$image_layout" PROBER_IMAGE_LAYOUT="$prober_image_layout" \
  IMAGE_TAG="$image_tag" >/dev/null

step "control plane" "starting the local control plane"
exports="$(step_repeatable "starting the local control plane" "make local-up" hack/local-up.sh)" || exit 1
eval "$exports"
[[ "$was_up" == true ]] || started_cluster=true

step "manifests" "deploy/ manifests: deploy.yaml up to date, server-side dry runs of every overlay"
hack/manifests.sh check

step "helm chart" "the Helm chart: lint, its defaults equal deploy.yaml, server-side dry runs of its value sets (hack/helm.sh)"
hack/helm.sh check

step "monitoring" "deploy/monitoring: promtool check/test rules, the dashboard's queries (hack/monitoring.sh)"
hack/monitoring.sh check

step "scripts" "the scripts every command starts with (hack/test-scripts.sh: system-packages, nodes preflight, steps, the start race, the checkers failing on broken copies)"
hack/test-scripts.sh

step "cargo test" "cargo test (unit, plugin-runtime, plugin-CLI, cluster and RBAC tests)"
# The tests of the nodes and the data plane run below, once the nodes are up (kube-scheduler would
# bind the simulated pods of the cluster tests to them). Leaving them out selects no other
# features: nothing is built again.
hack/static-cargo.sh test --release --locked --workspace --exclude nad-fault-tests --exclude nad-node-tests

step "nodes" "the data plane on real nodes (hack/nodes.sh: kubelet, containerd, kube-scheduler, Multus, CNI plugins, whereabouts, kube-proxy, CoreDNS, DRANET), the images loaded, and its tests (testing/nodes: kubelet, node loss, the stock install, the Helm chart, the data plane, the DRA network)"
proc_running .local/pids/nodes-relay.pid || started_nodes=true
step_repeatable "starting the nodes" "hack/nodes.sh up" hack/nodes.sh up || exit 1
for image in "$image_layout:$image_tag=localhost/isim/nad-service-controller:$image_tag" \
  "$prober_image_layout:$image_tag=localhost/isim/nad-network-prober:$image_tag"; do
  hack/nodes.sh load "${image%%=*}" "${image#*=}"
done
# The same packages selected as above: the test binaries built then are run.
hack/static-cargo.sh test --release --locked --workspace --exclude nad-fault-tests --test kubelet --test node_loss --test stock \
  --test helm --test dataplane --test dra
