#!/usr/bin/env bash
# Runs the fault tests (testing/faults): the release controller binary against a control plane of
# its own, whose API server and etcd the tests kill, pause and compact. That control plane
# lives in .local-faults/ on ports of its own, so it never disturbs the one of `make test`,
# and is stopped afterwards, also when a test fails.
#
# Arguments are passed to the test binary: `hack/test-faults.sh etcd` runs the etcd tests only.
#
# Environment: NSC_CONTROLLER_BIN [the release build] (the binary under test), NAD_FAULTS_DIR [<repo>/.local-faults], NAD_FAULTS_PORT_BASE [a free set:
# etcd 23792/23802, API server 16444, controller manager 16258], NSC_FAULT_REPORT [where the
# measurements go, default $CARGO_TARGET_DIR/fault-report.md], NSC_FAULT_LOGS [the controllers'
# logs, one file per process, and the control plane's, default $CARGO_TARGET_DIR/fault-logs;
# emptied at the start].
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
target="${CARGO_TARGET_DIR:-$repo/target}"

export NAD_LOCAL_DIR="${NAD_FAULTS_DIR:-$repo/.local-faults}"
export NAD_ETCD_CLIENT_PORT=23792 NAD_ETCD_PEER_PORT=23802 NAD_APISERVER_PORT=16444 NAD_KCM_PORT=16258
export NSC_FAULT_REPORT="${NSC_FAULT_REPORT:-$target/fault-report.md}"
export NSC_FAULT_LOGS="${NSC_FAULT_LOGS:-$target/fault-logs}"
rm -rf "$NSC_FAULT_LOGS" && mkdir -p "$NSC_FAULT_LOGS"
# shellcheck source=hack/steps.sh
source hack/steps.sh
steps_init test-faults
trap steps_report EXIT

step "system packages" "system packages (hack/system-packages.sh test-faults: installs what is missing)"
hack/system-packages.sh test-faults

step "builds" "building the controller (release) and the fault tests"
# The same packages as hack/test.sh and hack/demo.sh: the same features, so the same build.
# The static target of hack/static-cargo.sh, as the images and hack/test.sh: one build for all.
hack/static-cargo.sh build --release --locked -p nad-service-controller -p nad-prober -p node-sim
# The whole workspace selected, its test target alone built: the features of hack/test.sh's test
# build, whose dependencies are the release build's (hack/one-build.py).
hack/static-cargo.sh test --release --locked --workspace --test faults --no-run
export NSC_CONTROLLER_BIN="${NSC_CONTROLLER_BIN:-$(hack/static-cargo.sh --release-dir)/nad-service-controller}"

step "control plane" "starting the fault control plane in $NAD_LOCAL_DIR"
# Left over by an interrupted run: start from nothing.
hack/local-down.sh
stop() {
  local status=$?
  # The control plane's logs outlive it, beside the controllers' (a failed run needs them).
  cp -r "$NAD_LOCAL_DIR/logs" "$NSC_FAULT_LOGS/control-plane" 2>/dev/null || true
  echo "== stopping the fault control plane" >&2
  hack/local-down.sh || status=1
  steps_report
  exit "$status"
}
trap stop EXIT
eval "$(hack/local-up.sh)"

printf '| scenario | measured |\n|---|---|\n' >"$NSC_FAULT_REPORT"
step "fault tests" "fault tests (one at a time: they share the control plane)"
hack/static-cargo.sh test --release --locked --workspace --test faults -- --test-threads=1 "$@"
echo "== measurements ($NSC_FAULT_REPORT; the controllers' logs are in $NSC_FAULT_LOGS)" >&2
cat "$NSC_FAULT_REPORT" >&2
