#!/usr/bin/env bash
# The monitoring bundle in deploy/monitoring/, checked:
#
#   hack/monitoring.sh check    promtool check rules on rules.yaml, promtool test rules on
#                               rules-test.yaml (each alert firing and not firing), and the
#                               Grafana dashboard: valid JSON, each panel with a unique id and
#                               each query on the $datasource variable, and every query valid
#                               PromQL (promtool check rules on the queries as recording rules,
#                               Grafana's variables replaced by sample values)
#
# promtool is the pinned one of hack/tools.sh (built from the Prometheus Go module the first
# time). That the dashboard's and the rules' metric names are the ones the controller exports
# is checked against a running controller by the cluster test
# dashboards_and_alerts_name_only_exported_metrics (host/tests/cluster.rs).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
dir=deploy/monitoring

check() {
  local promtool
  promtool="$(hack/tools.sh promtool)"
  echo "== promtool check rules $dir/rules.yaml" >&2
  "$promtool" check rules "$dir/rules.yaml"
  echo "== promtool test rules $dir/rules-test.yaml" >&2
  "$promtool" test rules "$dir/rules-test.yaml"
  echo "== $dir/dashboard.json" >&2
  local queries
  queries="$(mktemp --suffix=.yaml)"
  # shellcheck disable=SC2064 # expand now: the trap runs after check returns
  trap "rm -f '$queries'" EXIT
  python3 - "$dir/dashboard.json" "$queries" <<'PY'
import json, sys

path, queries = sys.argv[1], sys.argv[2]
with open(path) as f:
    dashboard = json.load(f)  # fails on invalid JSON, naming the line
problems = []
variables = {v.get("name") for v in dashboard.get("templating", {}).get("list", [])}
if "datasource" not in variables:
    problems.append("no datasource template variable")
ids = set()
panels = 0
rules = []
for panel in dashboard.get("panels", []):
    if panel.get("type") == "row":
        continue
    panels += 1
    title = panel.get("title", "?")
    if panel.get("id") in ids:
        problems.append(f"panel {title!r}: id {panel.get('id')} used twice")
    ids.add(panel.get("id"))
    if panel.get("datasource", {}).get("uid") != "${datasource}":
        problems.append(f"panel {title!r}: datasource is not ${{datasource}}")
    targets = panel.get("targets", [])
    if not targets or not all(t.get("expr") for t in targets):
        problems.append(f"panel {title!r}: a query without expr")
    for target in targets:
        expr = target.get("expr", "")
        for variable, value in [("$__rate_interval", "5m"), ("$namespace", ".*"), ("$pod", ".*")]:
            expr = expr.replace(variable, value)
        rules.append({"record": f"dashboard:panel_{panel.get('id')}:{target.get('refId')}", "expr": expr})
for p in problems:
    print(f"{path}: {p}", file=sys.stderr)
if problems:
    sys.exit(1)
with open(queries, "w") as f:
    json.dump({"groups": [{"name": "dashboard", "rules": rules}]}, f, indent=1)
print(f"{path}: {panels} panels, {len(rules)} queries")
PY
  echo "== the dashboard's queries as PromQL (promtool check rules)" >&2
  "$promtool" check rules "$queries"
}

case "${1:-}" in
  check) check ;;
  *) echo "usage: hack/monitoring.sh check" >&2; exit 2 ;;
esac
