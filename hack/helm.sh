#!/usr/bin/env bash
# The Helm chart deploy/helm/nad-service-controller, rendered, checked and packaged with the helm
# pinned in hack/tools.sh (v3.22.0, built from its Go module on first use).
#
#   hack/helm.sh template [HELM ARGS...]
#                                     the chart rendered to stdout (`helm template
#                                     nad-service-controller <chart> HELM ARGS...`)
#   hack/helm.sh check                Chart.yaml's version and appVersion are Cargo.toml's;
#                                     helm lint --strict with the default values and with each
#                                     value set of the chart's ci/; the defaults render exactly
#                                     the objects of deploy/deploy.yaml, and with the prober on
#                                     (prober.enabled, prober.networks [default/macvlan]) those
#                                     of deploy/overlays/with-prober; the defaults and every
#                                     value set pass a server-side dry run on the cluster of
#                                     KUBECONFIG without warnings, their pods too (where Pod
#                                     Security admission enforces the namespace's restricted
#                                     profile), after the prometheus-operator CRDs (pinned, from
#                                     the Go module proxy) are applied. KUBECTL: the kubectl to
#                                     use (default: the one pinned with the local control plane;
#                                     its kustomize renders the overlay)
#   hack/helm.sh package OUTDIR [IMAGE_REPOSITORY [PROBER_IMAGE_REPOSITORY]]
#                                     the chart packaged into OUTDIR (links into
#                                     deploy/monitoring/ resolved); IMAGE_REPOSITORY replaces
#                                     the default image.repository, PROBER_IMAGE_REPOSITORY the
#                                     default prober.image.repository (a release of a fork).
#                                     Prints the .tgz path
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

CHART=deploy/helm/nad-service-controller
RELEASE=nad-service-controller
DEFAULT_IMAGE_REPOSITORY=ghcr.io/ihcsim/nad-service-controller
DEFAULT_PROBER_IMAGE_REPOSITORY=ghcr.io/ihcsim/nad-network-prober
# ServiceMonitor and PrometheusRule; the Go module proxy serves this version of the module,
# whose example/prometheus-operator-crd/ holds the CRDs.
PROMETHEUS_OPERATOR_MODULE=github.com/prometheus-operator/prometheus-operator
PROMETHEUS_OPERATOR_VERSION=v0.85.0
PROMETHEUS_OPERATOR_CRDS=(monitoring.coreos.com_servicemonitors.yaml monitoring.coreos.com_podmonitors.yaml monitoring.coreos.com_prometheusrules.yaml)
# The values that render deploy/overlays/with-prober (with the other defaults).
PROBER_OVERLAY_ARGS=(--set prober.enabled=true --set 'prober.networks={default/macvlan}')

log() { echo "helm: $*" >&2; }

helm_bin() { hack/tools.sh helm; }

# helm, without the line it logs for each symbolic link it follows (files/ links into
# deploy/monitoring/, on purpose).
helm_() {
  local helm
  helm="$(helm_bin)"
  "$helm" "$@" 2> >(grep -v 'found symbolic link in path' >&2 || true)
}

# The links of files/ resolve: without deploy/monitoring/, helm cannot load the chart at all.
links_resolve() {
  local link
  for link in "$CHART"/files/*; do
    if [[ -L "$link" && ! -e "$link" ]]; then
      log "$link links to $(readlink "$link"), which is missing: the chart's PrometheusRule and dashboard read deploy/monitoring/ (and helm loads no chart with a broken link)"
      return 1
    fi
  done
}

cargo_version() { sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1; }
chart_field() { sed -n "s/^$1: *\"\{0,1\}\([^\"]*\)\"\{0,1\}$/\1/p" "$CHART/Chart.yaml"; }

versions_match() {
  local cargo version app
  cargo="$(cargo_version)" version="$(chart_field version)" app="$(chart_field appVersion)"
  if [[ "$version" != "$cargo" || "$app" != "$cargo" ]]; then
    log "FAIL: $CHART/Chart.yaml has version $version and appVersion $app; Cargo.toml has $cargo: set both to it"
    return 1
  fi
  log "ok: Chart.yaml version and appVersion are Cargo.toml's ($cargo)"
}

template() {
  links_resolve
  helm_ template "$RELEASE" "$CHART" "$@"
}

kubectl_pinned() {
  if [[ -n "${KUBECTL:-}" ]]; then
    echo "$KUBECTL"
  else
    hack/controlplane/build.sh kubectl | awk '$1 == "kubectl" {print $2}'
  fi
}

# The value sets of the checks: "defaults", then each ci/*-values.yaml.
value_sets() {
  echo defaults
  local file
  for file in "$CHART"/ci/*-values.yaml; do
    basename "$file" -values.yaml
  done
}

# The helm arguments of value set $1.
values_args() {
  [[ "$1" == defaults ]] || echo "--values=$CHART/ci/$1-values.yaml"
}

lint() {
  local set out status=0
  for set in $(value_sets); do
    # shellcheck disable=SC2046 # one argument or none
    if out="$(helm_ lint --strict "$CHART" $(values_args "$set") 2>&1)"; then
      log "ok: helm lint --strict ($set)"
    else
      echo "$out" >&2
      log "FAIL: helm lint --strict ($set)"
      status=1
    fi
  done
  return "$status"
}

matches_deploy_yaml() {
  local rendered
  rendered="$(template)"
  if python3 hack/manifest-objects.py diff deploy/deploy.yaml - <<<"$rendered"; then
    log "ok: the chart's defaults render the objects of deploy/deploy.yaml"
  else
    log "FAIL: the chart's defaults differ from deploy/deploy.yaml (above); change the chart, or deploy/base and the chart together"
    return 1
  fi
}

matches_with_prober_overlay() {
  local kubectl="$1" overlay rendered
  overlay="$(MANIFEST_KUBECTL="$kubectl" hack/manifests.sh render "" with-prober)"
  rendered="$(template "${PROBER_OVERLAY_ARGS[@]}")"
  if python3 hack/manifest-objects.py diff <(echo "$overlay") - <<<"$rendered"; then
    log "ok: the chart with ${PROBER_OVERLAY_ARGS[*]} renders the objects of deploy/overlays/with-prober"
  else
    log "FAIL: the chart with ${PROBER_OVERLAY_ARGS[*]} differs from deploy/overlays/with-prober (above); change the chart, or deploy/prober and the chart together"
    return 1
  fi
}

# The CRDs of ServiceMonitor, PodMonitor and PrometheusRule, applied (server-side: idempotent).
prometheus_operator_crds() {
  local kubectl="$1" dir crd
  dir="$(cd "${TMPDIR:-/tmp}" && GOFLAGS=-mod=mod go mod download -json "$PROMETHEUS_OPERATOR_MODULE@$PROMETHEUS_OPERATOR_VERSION" \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')"
  for crd in "${PROMETHEUS_OPERATOR_CRDS[@]}"; do
    "$kubectl" apply --server-side --field-manager=hack-helm -f "$dir/example/prometheus-operator-crd/$crd" >/dev/null
  done
  "$kubectl" wait --for=condition=Established --timeout=60s crd/servicemonitors.monitoring.coreos.com crd/podmonitors.monitoring.coreos.com crd/prometheusrules.monitoring.coreos.com >/dev/null
  log "ok: prometheus-operator $PROMETHEUS_OPERATOR_VERSION CRDs (ServiceMonitor, PodMonitor, PrometheusRule) applied"
}

# Server-side dry run of the manifests on stdin, described by $2; an error or any warning of
# the API server (such as a Deployment's "would violate PodSecurity") fails it. It forces
# conflicts: fields another manager holds (a test's apply, an earlier install) are not what it
# checks.
dry_run() {
  local kubectl="$1" what="$2" out err status=0
  out="$(mktemp)" err="$(mktemp)"
  "$kubectl" apply --server-side --field-manager=hack-helm --force-conflicts --dry-run=server -f - >"$out" 2>"$err" || status=$?
  if ((status)) || grep -q '^Warning:' "$err"; then
    cat "$out" "$err" >&2
    log "FAIL: server-side dry run of $what"
    rm -f "$out" "$err"
    return 1
  fi
  log "ok: server-side dry run of $what ($(wc -l <"$out") objects)"
  rm -f "$out" "$err"
}

# The namespace's restricted profile refuses a privileged pod (a check that can fail).
restricted_enforced() {
  local kubectl="$1" rendered="$2" namespace="$3" label out
  label="$("$kubectl" get namespace "$namespace" -o jsonpath='{.metadata.labels.pod-security\.kubernetes\.io/enforce}')"
  if [[ "$label" != restricted ]]; then
    log "FAIL: namespace $namespace has pod-security.kubernetes.io/enforce=${label:-<none>}, not restricted"
    return 1
  fi
  if out="$(python3 hack/manifest-objects.py pods --privileged <<<"$rendered" \
    | "$kubectl" apply --server-side --field-manager=hack-helm --force-conflicts --dry-run=server -f - 2>&1)"; then
    echo "$out" >&2
    log "FAIL: namespace $namespace admitted a privileged pod: its restricted profile is not enforced"
    return 1
  fi
  if ! grep -q 'violates PodSecurity "restricted' <<<"$out"; then
    echo "$out" >&2
    log "FAIL: the privileged pod was refused, but not by Pod Security admission"
    return 1
  fi
  log "ok: namespace $namespace enforces the restricted Pod Security profile (a privileged pod is refused)"
}

check() {
  local start=$SECONDS status=0 kubectl defaults namespace set rendered
  links_resolve
  versions_match || status=1
  lint || status=1
  matches_deploy_yaml || status=1
  kubectl="$(kubectl_pinned)"
  matches_with_prober_overlay "$kubectl" || status=1

  [[ -n "${KUBECONFIG:-}" ]] || { log "KUBECONFIG is not set (start the control plane: make local-up)"; return 1; }
  prometheus_operator_crds "$kubectl"
  # A dry run does not create the namespace, so the namespaced objects need it to exist; made
  # from the chart's own Namespace, it enforces the restricted profile the chart declares.
  defaults="$(template)"
  namespace="$(python3 -c 'import sys, yaml; print(next(d["metadata"]["name"] for d in yaml.safe_load_all(sys.stdin) if d and d["kind"] == "Namespace"))' <<<"$defaults")"
  python3 -c 'import sys, yaml; yaml.safe_dump_all([d for d in yaml.safe_load_all(sys.stdin) if d and d["kind"] == "Namespace"], sys.stdout)' <<<"$defaults" \
    | "$kubectl" apply --server-side --field-manager=hack-helm -f - >/dev/null
  # The pods' dry runs run as the namespace's default ServiceAccount, which the controller
  # manager makes.
  local deadline=$((SECONDS + 60))
  until "$kubectl" -n "$namespace" get serviceaccount default >/dev/null 2>&1; do
    ((SECONDS < deadline)) || { log "FAIL: no default ServiceAccount in $namespace after 60 s"; return 1; }
    sleep 0.5
  done
  restricted_enforced "$kubectl" "$defaults" "$namespace" || status=1

  for set in $(value_sets); do
    # shellcheck disable=SC2046 # one argument or none
    if ! rendered="$(template $(values_args "$set"))"; then
      log "FAIL: helm template ($set)"
      status=1
      continue
    fi
    dry_run "$kubectl" "the chart ($set)" <<<"$rendered" || status=1
    python3 hack/manifest-objects.py pods <<<"$rendered" | dry_run "$kubectl" "its pods ($set)" || status=1
  done
  if ((status)); then
    log "check FAILED (above) after $((SECONDS - start)) s"
  else
    log "check passed in $((SECONDS - start)) s"
  fi
  return "$status"
}

# replace_value FILE PREFIX DEFAULT VALUE NAME: in FILE, the one line PREFIX+DEFAULT becomes
# PREFIX+VALUE (nothing to do for an empty VALUE or the default); fails if there is not exactly
# one such line.
replace_value() {
  local file="$1" prefix="$2" default="$3" value="$4" name="$5"
  [[ -n "$value" && "$value" != "$default" ]] || return 0
  if [[ "$(grep -c "^$prefix$default$" "$file")" != 1 ]]; then
    log "FAIL: $CHART/$(basename "$file") has no single line '$prefix$default' to replace ($name)"
    return 1
  fi
  sed -i "s|^$prefix$default$|$prefix$value|" "$file"
  log "$name: $value"
}

package() {
  local outdir="${1:?usage: hack/helm.sh package OUTDIR [IMAGE_REPOSITORY [PROBER_IMAGE_REPOSITORY]]}" image="${2:-}" prober="${3:-}" stage out
  links_resolve
  versions_match
  mkdir -p "$outdir"
  # A copy with the links resolved (the .tgz would hold the files anyway), so that the
  # image repository can be replaced without touching the tree.
  stage="$(mktemp -d)"
  trap 'rm -rf "$stage"' RETURN
  cp -RL "$CHART" "$stage/"
  local values="$stage/nad-service-controller/values.yaml"
  replace_value "$values" "  repository: " "$DEFAULT_IMAGE_REPOSITORY" "$image" image.repository || return 1
  replace_value "$values" "    repository: " "$DEFAULT_PROBER_IMAGE_REPOSITORY" "$prober" prober.image.repository || return 1
  helm_ lint --strict "$stage/nad-service-controller" >/dev/null
  out="$(helm_ package "$stage/nad-service-controller" --destination "$outdir")"
  log "$out"
  echo "$outdir/nad-service-controller-$(chart_field version).tgz"
}

case "${1:-}" in
  template) shift; template "$@" ;;
  check) check ;;
  package) shift; package "$@" ;;
  *) sed -n '2,24p' "$0" >&2; exit 2 ;;
esac
