#!/usr/bin/env bash
# The checkers around the tests, each shown failing on a broken copy of what it checks (a
# checker that cannot fail guards nothing); hack/test-scripts.sh runs it:
# - hack/check-layers.py, on `cargo metadata` of this workspace with one crate given a crate
#   above it, on copies of its crates' `cargo tree` with a part a floor keeps out reached deep
#   down, on a copy of the controller's sources that imports the CLI, and on a copy of nad-core
#   whose Book reads the clock;
# - hack/module-graph.py, on a copy of the controller's sources given an arrow back up (a watch
#   naming a constant of watch/mod.rs) and one given a circle (two watches importing each other);
# - hack/check-clean.sh, on a made-up /proc (CHECK_CLEAN_PROC) of the processes it must name: the
#   controller, the network prober, the node simulator, a test binary that runs
#   it (cluster_wide among them) and the registry; and not a process of the machine's own;
# - hack/monitoring.sh lint, on a copy of deploy/monitoring whose one alert has lost its unit
#   tests, and on one whose dashboard has a query off the $datasource variable.
# Each works on copies in a temporary directory; nothing of the repository changes.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failed=0
fail() { echo "test-checkers: FAIL: $*" >&2; failed=1; }
pass() { echo "test-checkers: ok: $*" >&2; }

# check-layers: the real metadata passes; a broken copy fails naming the break.
cargo metadata --format-version 1 --no-deps --locked >"$work/metadata.json"
if out="$(CHECK_LAYERS_METADATA="$work/metadata.json" python3 hack/check-layers.py 2>&1)"; then
  pass "check-layers passes this workspace"
else
  fail "check-layers on this workspace: $out"
fi
broken_layers() {
  python3 - "$work/metadata.json" "$1" "$2" >"$work/broken.json" <<'PY'
import json, sys
meta = json.load(open(sys.argv[1]))
crate, dependency = sys.argv[2], sys.argv[3]
for package in meta["packages"]:
    if package["name"] == crate:
        package["dependencies"].append({"name": dependency, "kind": None})
json.dump(meta, sys.stdout)
PY
}
for case in "nad-prober nad-service-controller" "nad-core nad-plugin-runtime" \
  "nad-plugin-runtime nad-plugin-fetcher"; do
  read -r crate dependency <<<"$case"
  broken_layers "$crate" "$dependency"
  status=0
  out="$(CHECK_LAYERS_METADATA="$work/broken.json" python3 hack/check-layers.py 2>&1)" || status=$?
  if [[ "$status" == 1 && "$out" == *"$crate depends on $dependency, which is not below it"* ]]; then
    pass "check-layers refuses $crate depending on $dependency"
  else
    fail "check-layers with $crate depending on $dependency: exit $status, said: $out"
  fi
done
# The floors hold however deep: each crate's real `cargo tree` passes; a copy of one crate's tree
# with a part its floor keeps out, reached through its dependencies, fails naming it.
mkdir -p "$work/trees"
for crate in nad-model nad-core nad-plugin-runtime nad-plugin-fetcher nad-process nad-prober \
  nad-plugin-policy nad-cli nad-service-controller; do
  cargo tree -p "$crate" -e normal,build --prefix none --locked >"$work/trees/$crate.txt"
done
if out="$(CHECK_LAYERS_TREES="$work/trees" python3 hack/check-layers.py 2>&1)"; then
  pass "check-layers passes this workspace's trees"
else
  fail "check-layers on this workspace's trees: $out"
fi
for case in "nad-core tokio" "nad-model kube-client" "nad-prober wasmtime" \
  "nad-prober aws-lc-sys" "nad-plugin-runtime sigstore" "nad-plugin-fetcher cranelift-codegen"; do
  read -r crate dependency <<<"$case"
  rm -rf "$work/broken-trees"
  cp -r "$work/trees" "$work/broken-trees"
  echo "$dependency v1.0.0" >>"$work/broken-trees/$crate.txt"
  status=0
  out="$(CHECK_LAYERS_TREES="$work/broken-trees" python3 hack/check-layers.py 2>&1)" || status=$?
  if [[ "$status" == 1 && "$out" == *"$crate builds with $dependency, which its floor keeps out (reached through its dependencies"* ]]; then
    pass "check-layers refuses $crate building with $dependency through its dependencies"
  else
    fail "check-layers with $crate building with $dependency: exit $status, said: $out"
  fi
done

# A copy of crate $1's sources (in $2) at $work/$3, and $work/broken.json: the metadata with
# that crate pointing at the copy.
copy_crate() {
  mkdir -p "$work/$3"
  cp -r "$2/src" "$work/$3/src"
  python3 - "$work/metadata.json" "$1" "$work/$3/Cargo.toml" >"$work/broken.json" <<'PY'
import json, sys
meta = json.load(open(sys.argv[1]))
for package in meta["packages"]:
    if package["name"] == sys.argv[2]:
        package["manifest_path"] = sys.argv[3]
json.dump(meta, sys.stdout)
PY
}

# check-layers' program rule: a copy of the controller's sources with a module that imports the
# CLI.
copy_crate nad-service-controller host host
printf 'use nad_cli::plugin::PluginCommand;\n' >"$work/host/src/watch/sideways.rs"
status=0
out="$(CHECK_LAYERS_METADATA="$work/broken.json" python3 hack/check-layers.py 2>&1)" || status=$?
if [[ "$status" == 1 && "$out" == *"the controller's watch/sideways.rs names nad_cli"* ]]; then
  pass "check-layers refuses the controller importing the CLI"
else
  fail "check-layers with the controller importing the CLI: exit $status, said: $out"
fi

# check-layers' clock rule: a copy of nad-core's sources whose Book reads the clock.
copy_crate nad-core crates/core core
{
  printf 'pub fn stamp() -> k8s_openapi::jiff::Timestamp {\n    k8s_openapi::jiff::Timestamp::now()\n}\n'
  cat crates/core/src/book.rs
} >"$work/core/src/book.rs"
status=0
out="$(CHECK_LAYERS_METADATA="$work/broken.json" python3 hack/check-layers.py 2>&1)" || status=$?
if [[ "$status" == 1 && "$out" == *"nad-core's book.rs:"*"reads the clock"* ]]; then
  pass "check-layers refuses nad-core reading the clock"
else
  fail "check-layers with nad-core reading the clock: exit $status, said: $out"
fi

# module-graph: the workspace passes; a copy of the controller's sources with a watch naming a
# constant of its parent fails on the arrow back up, one with two watches importing each other
# on the circle, each named.
if out="$(python3 hack/module-graph.py 2>&1)"; then
  pass "module-graph passes this workspace"
else
  fail "module-graph on this workspace: $out"
fi
# graph_refuses WHAT EXPECTED FILE TEXT [FILE TEXT]: a copy of the controller's sources with TEXT
# appended to each FILE (under host/src) fails the graph, saying EXPECTED.
graph_refuses() {
  local what="$1" expected="$2" status=0 out
  shift 2
  rm -rf "$work/graph"
  mkdir -p "$work/graph/host" "$work/graph/crates"
  cp -r host/src host/Cargo.toml "$work/graph/host/"
  while (($#)); do
    printf '\n%s\n' "$2" >>"$work/graph/host/src/$1"
    shift 2
  done
  out="$(python3 hack/module-graph.py --root "$work/graph" --crate host 2>&1)" || status=$?
  if [[ "$status" == 1 && "$out" == *"$expected"* ]]; then
    pass "module-graph refuses $what"
  else
    fail "module-graph with $what: exit $status, said: $out"
  fi
}
graph_refuses "an arrow back up" "back up: host/src/watch/nodes.rs -> host/src/watch/mod.rs: UP" \
  watch/mod.rs 'pub const UP: u8 = 1;' watch/nodes.rs 'const _: u8 = super::UP;'
graph_refuses "a circle" "circle: host/src/watch/named.rs, host/src/watch/nodes.rs" \
  watch/named.rs 'use super::nodes::watch as _nodes;' watch/nodes.rs 'use super::named::Named as _Named;'

# check-clean: a /proc of made-up processes, each a symlink `exe` to where such a binary lives.
proc="$work/proc"
fake() {
  local pid="$1" exe="$2"
  mkdir -p "$proc/$pid" "$(dirname "$exe")"
  : >"$exe"
  ln -s "$exe" "$proc/$pid/exe"
  printf 'x\0' >"$proc/$pid/cmdline"
  : >"$proc/$pid/environ"
}
target="$work/target"
cache="$work/cache/nad-service-controller"
fake 101 "$target/release/nad-service-controller"
fake 102 "$target/static/nad-network-prober"
fake 104 "$target/release/node-sim"
fake 105 "$target/release/deps/cluster_wide-0123456789abcdef"
fake 106 "$target/release/deps/rbac-fedcba9876543210"
: >"$target/release/deps/libnode_sim-0123456789abcdef.rlib"
fake 107 "$cache/tools/bin/registry-3.0.0"
fake 108 "$cache/bin/etcd-3.6.0/etcd"
fake 109 "$work/usr/bin/sleep"
status=0
out="$(CHECK_CLEAN_PROC="$proc" NAD_BIN_CACHE="$cache/bin" hack/check-clean.sh 2>&1)" || status=$?
named=true
for expected in "process 101 (the controller:" "process 102 (the network prober:" \
  "process 104 (the node simulator:" \
  "process 105 (a test running the node simulator:" "process 106 (a test running the node simulator:" \
  "process 107 (the CNCF distribution registry:" "process 108 (the binary cache's:"; do
  [[ "$out" == *"$expected"* ]] || { named=false; fail "check-clean did not name ${expected%%:*}): $out"; }
done
[[ "$out" == *"process 109 "* ]] && { named=false; fail "check-clean named the machine's own sleep: $out"; }
if [[ "$status" == 1 && "$named" == true ]]; then
  pass "check-clean names every kind of leftover process, cluster_wide and the prober among them"
elif [[ "$named" == true ]]; then
  fail "check-clean named the leftovers but exited $status, not 1"
fi

# monitoring lint: the bundle passes; a copy with an alert untested, or a query off $datasource,
# fails naming it.
if out="$(hack/monitoring.sh lint 2>&1)"; then
  pass "monitoring lint passes deploy/monitoring"
else
  fail "monitoring lint on deploy/monitoring: $out"
fi
untested="$(python3 - deploy/monitoring "$work/untested" <<'PY'
import os, shutil, sys
import yaml
src, dst = sys.argv[1], sys.argv[2]
shutil.copytree(src, dst)
rules = yaml.safe_load(open(os.path.join(src, "rules.yaml")))
alert = next(r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r)
tests = yaml.safe_load(open(os.path.join(src, "rules-test.yaml")))
for test in tests["tests"]:
    test["alert_rule_test"] = [t for t in test.get("alert_rule_test", []) if t["alertname"] != alert]
yaml.safe_dump(tests, open(os.path.join(dst, "rules-test.yaml"), "w"))
print(alert)
PY
)"
status=0
out="$(MONITORING_DIR="$work/untested" hack/monitoring.sh lint 2>&1)" || status=$?
if [[ "$status" != 0 && "$out" == *"$untested"* ]]; then
  pass "monitoring lint refuses alert $untested without a unit test"
else
  fail "monitoring lint with alert $untested untested: exit $status, said: $out"
fi
python3 - deploy/monitoring "$work/off-datasource" <<'PY'
import json, os, shutil, sys
src, dst = sys.argv[1], sys.argv[2]
shutil.copytree(src, dst)
dashboard = json.load(open(os.path.join(src, "dashboard.json")))
def panels(items):
    for p in items:
        yield p
        yield from panels(p.get("panels", []))
for panel in panels(dashboard["panels"]):
    if panel.get("targets"):
        panel["datasource"] = {"type": "prometheus", "uid": "some-fixed-uid"}
        for target in panel["targets"]:
            target["datasource"] = {"type": "prometheus", "uid": "some-fixed-uid"}
        break
json.dump(dashboard, open(os.path.join(dst, "dashboard.json"), "w"))
PY
status=0
out="$(MONITORING_DIR="$work/off-datasource" hack/monitoring.sh lint 2>&1)" || status=$?
if [[ "$status" != 0 && "$out" == *datasource* ]]; then
  pass "monitoring lint refuses a dashboard query off the \$datasource variable"
else
  fail "monitoring lint with a query off \$datasource: exit $status, said: $out"
fi

exit "$failed"
