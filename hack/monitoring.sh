#!/usr/bin/env bash
# The monitoring bundle in deploy/monitoring/, checked:
#
#   hack/monitoring.sh lint     what needs no promtool: every alert of rules.yaml has a unit test
#                               in rules-test.yaml, and one in which it fires (promtool test
#                               rules passes an alert no test names, and a test of an alert that
#                               does not exist); the Grafana dashboard is valid JSON, has panels
#                               (those in collapsed rows count, and are checked alike), each
#                               with a unique id and each query on the $datasource variable
#   hack/monitoring.sh check    lint, then promtool check rules on rules.yaml, promtool test rules
#                               on rules-test.yaml (each alert firing and not firing), and every
#                               dashboard query valid PromQL (promtool check rules on the queries
#                               as recording rules, Grafana's variables replaced by sample values)
#
# MONITORING_DIR [deploy/monitoring] checks another copy of the bundle (rules.yaml,
# rules-test.yaml, dashboard.json), e.g. a broken one to see a check fail.
#
# promtool is hack/tools.sh's: Debian 12's (Prometheus 2.42, taken from its .deb the first
# time), or where apt-get has none, built from the pinned Prometheus Go module. That the dashboard's and the rules' metric names are the ones the controller exports
# is checked against a running controller by the cluster test
# dashboards_and_alerts_name_only_exported_metrics (host/tests/cluster.rs).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir=deploy/monitoring
if [[ -n "${MONITORING_DIR:-}" ]]; then
  # Relative to where it is run from, before the cd.
  dir="$(cd "$MONITORING_DIR" 2>/dev/null && pwd)" || { echo "monitoring: MONITORING_DIR=$MONITORING_DIR is not a directory" >&2; exit 1; }
fi
cd "$repo"

# The checks without promtool; the dashboard's queries, as recording rules, go to $1 (for check).
lint() {
  local queries="$1"
  python3 -c 'import yaml' 2>/dev/null \
    || { echo "monitoring: python3 has no PyYAML, which reads the rules: apt-get install python3-yaml (or pip install PyYAML)" >&2; exit 1; }
  echo "== $dir: each alert's unit tests, the dashboard's panels" >&2
  python3 - "$dir" "$queries" <<'PY'
import json, sys

import yaml

bundle, queries = sys.argv[1], sys.argv[2]
problems = []


def load(name, parse):
    path = f"{bundle}/{name}"
    try:
        with open(path) as f:
            return parse(f)
    except (OSError, ValueError, yaml.YAMLError) as e:
        # json.JSONDecodeError is a ValueError and names the line.
        print(f"{path}: {e}", file=sys.stderr)
        sys.exit(1)


# ---- the alerts and their unit tests
rules = load("rules.yaml", yaml.safe_load) or {}
alerts = [
    rule["alert"]
    for group in rules.get("groups") or []
    for rule in group.get("rules") or []
    if "alert" in rule
]
if not alerts:
    problems.append("rules.yaml: no alert")
tests = load("rules-test.yaml", yaml.safe_load) or {}
tested, fired = set(), set()
for test in tests.get("tests") or []:
    for case in test.get("alert_rule_test") or []:
        tested.add(case.get("alertname"))
        if case.get("exp_alerts"):
            fired.add(case.get("alertname"))
for alert in alerts:
    if alert not in tested:
        problems.append(f"rules-test.yaml: no test of alert {alert} (no alert_rule_test with alertname: {alert}): add one in which it fires and one in which it does not")
    elif alert not in fired:
        problems.append(f"rules-test.yaml: alert {alert} fires in none of its tests (every exp_alerts is empty): add one in which it fires")
for name in sorted(tested - set(alerts), key=str):
    problems.append(f"rules-test.yaml: a test of alert {name}, which rules.yaml does not define (promtool passes it, expecting no alert): fix the alertname")

# ---- the dashboard
dashboard = load("dashboard.json", json.load)
variables = {v.get("name") for v in dashboard.get("templating", {}).get("list", [])}
if "datasource" not in variables:
    problems.append("dashboard.json: no datasource template variable")


def panels_of(dashboard):
    # A collapsed row holds its panels; an expanded one is followed by them.
    for panel in dashboard.get("panels") or []:
        if panel.get("type") == "row":
            yield from panel.get("panels") or []
        else:
            yield panel


ids = set()
panels = 0
records = []
for panel in panels_of(dashboard):
    panels += 1
    title = panel.get("title", "?")
    if panel.get("id") in ids:
        problems.append(f"dashboard.json: panel {title!r}: id {panel.get('id')} used twice")
    ids.add(panel.get("id"))
    datasource = panel.get("datasource")
    if (datasource.get("uid") if isinstance(datasource, dict) else datasource) != "${datasource}":
        problems.append(f"dashboard.json: panel {title!r}: datasource is not ${{datasource}}")
    targets = panel.get("targets", [])
    if not targets or not all(t.get("expr") for t in targets):
        problems.append(f"dashboard.json: panel {title!r}: a query without expr")
    for target in targets:
        expr = target.get("expr", "")
        for variable, value in [("$__rate_interval", "5m"), ("$namespace", ".*"), ("$pod", ".*")]:
            expr = expr.replace(variable, value)
        records.append({"record": f"dashboard:panel_{panel.get('id')}:{target.get('refId')}", "expr": expr})
if not panels:
    problems.append("dashboard.json: no panels (rows only, or none): add the panels it is for")

for p in problems:
    print(f"{bundle}/{p}", file=sys.stderr)
if problems:
    sys.exit(1)
with open(queries, "w") as f:
    json.dump({"groups": [{"name": "dashboard", "rules": records}]}, f, indent=1)
print(f"{bundle}: {len(alerts)} alerts, each tested; {panels} panels, {len(records)} queries")
PY
}

check() {
  local queries promtool
  queries="$(mktemp --suffix=.yaml)"
  # shellcheck disable=SC2064 # expand now: the trap runs after check returns
  trap "rm -f '$queries'" EXIT
  lint "$queries"
  promtool="$(hack/tools.sh promtool)"
  echo "== promtool check rules $dir/rules.yaml" >&2
  "$promtool" check rules "$dir/rules.yaml"
  echo "== promtool test rules $dir/rules-test.yaml" >&2
  "$promtool" test rules "$dir/rules-test.yaml"
  echo "== the dashboard's queries as PromQL (promtool check rules)" >&2
  "$promtool" check rules "$queries"
}

case "${1:-}" in
  lint) lint /dev/null ;;
  check) check ;;
  *) echo "usage: hack/monitoring.sh lint|check" >&2; exit 2 ;;
esac
