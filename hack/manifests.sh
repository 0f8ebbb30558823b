#!/usr/bin/env bash
# The deploy/ manifests, rendered and checked with the kustomize inside the kubectl pinned with
# the local control plane (v1.37.2, built by hack/controlplane/build.sh), so that every machine
# renders the same bytes.
#
#   hack/manifests.sh render [IMAGE [OVERLAY]]
#                                     deploy/overlays/OVERLAY (default: default) rendered to
#                                     stdout; IMAGE (repository:tag) replaces the image
#                                     (releases, KinD), and the prober's with PROBER_IMAGE
#                                     (default: its repository at IMAGE's tag). MANIFEST_KUBECTL=kubectl renders with
#                                     that kubectl's kustomize instead of the pinned one.
#   hack/manifests.sh plugins         put the example plugin into deploy/overlays/with-plugins
#   hack/manifests.sh check           deploy/deploy.yaml matches the default overlay, and both
#                                     overlay and deploy/deploy.yaml pass a server-side dry run
#                                     on the cluster of KUBECONFIG, without warnings
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

IMAGE_REPOSITORY=ghcr.io/ihcsim/nad-service-controller
PROBER_IMAGE_REPOSITORY=ghcr.io/ihcsim/nad-network-prober
HEADER="# nad-service-controller: generated from deploy/overlays/default by \`make release-manifest\`.
# Do not edit; edit deploy/base or the overlay and run \`make release-manifest\` again."

kubectl_pinned() {
  if [[ -n "${MANIFEST_KUBECTL:-}" ]]; then
    echo "$MANIFEST_KUBECTL"
  else
    hack/controlplane/build.sh kubectl | awk '$1 == "kubectl" {print $2}'
  fi
}

render() {
  local kubectl image="${1:-}" overlay="${2:-default}"
  kubectl="$(kubectl_pinned)"
  [[ -d "deploy/overlays/$overlay" ]] || { echo "manifests: no overlay deploy/overlays/$overlay" >&2; return 1; }
  if [[ -z "$image" ]]; then
    [[ "$overlay" == default ]] && echo "$HEADER"
    "$kubectl" kustomize "deploy/overlays/$overlay"
    return
  fi
  # A throwaway overlay on top of the default one (kustomize takes relative paths only).
  local tmp
  tmp="$(mktemp -d deploy/.render.XXXXXX)"
  trap 'rm -rf "$tmp"' RETURN
  cat >"$tmp/kustomization.yaml" <<YAML
resources:
  - ../overlays/$overlay
images:
  - name: $IMAGE_REPOSITORY
    newName: ${image%:*}
    newTag: ${image##*:}
YAML
  # The prober's image (overlays with the prober): PROBER_IMAGE, else the same tag as IMAGE's.
  local prober="${PROBER_IMAGE:-$PROBER_IMAGE_REPOSITORY:${image##*:}}"
  cat >>"$tmp/kustomization.yaml" <<YAML
  - name: $PROBER_IMAGE_REPOSITORY
    newName: ${prober%:*}
    newTag: ${prober##*:}
YAML
  [[ "$overlay" == default ]] && echo "$HEADER"
  "$kubectl" kustomize "$tmp"
}

plugins() {
  local target_dir="${CARGO_TARGET_DIR:-$repo/target}"
  ${CARGO:-cargo} build --quiet --locked --target wasm32-wasip2 --profile wasm-release -p nad-plugin-opt-out
  cp "$target_dir/wasm32-wasip2/wasm-release/nad_plugin_opt_out.wasm" \
    deploy/overlays/with-plugins/plugins/opt-out.wasm
  echo "manifests: deploy/overlays/with-plugins/plugins/opt-out.wasm" >&2
}

# Server-side dry run of `kubectl apply` with the given source arguments; warnings fail it,
# except kubectl's about a live object made without it (no last-applied-configuration: a
# server-side apply, as the RBAC tests install the roles with), which says nothing of the
# manifests.
dry_run() {
  local kubectl="$1" out warnings
  shift
  if ! out="$("$kubectl" apply --dry-run=server "$@" 2>&1)"; then
    echo "$out" >&2
    echo "manifests: FAIL: kubectl apply --dry-run=server $*" >&2
    return 1
  fi
  warnings="$(grep '^Warning:' <<<"$out" | grep -v 'is missing the kubectl.kubernetes.io/last-applied-configuration annotation' || true)"
  if [[ -n "$warnings" ]]; then
    echo "$out" >&2
    echo "manifests: FAIL: the API server warned about kubectl apply --dry-run=server $*" >&2
    return 1
  fi
  echo "manifests: ok: kubectl apply --dry-run=server $* ($(grep -vc '^Warning:' <<<"$out") objects)" >&2
}

check() {
  local kubectl rendered status=0
  kubectl="$(kubectl_pinned)"
  rendered="$(render)"
  if ! diff -u deploy/deploy.yaml <(echo "$rendered") >&2; then
    echo "manifests: FAIL: deploy/deploy.yaml differs from deploy/overlays/default; run \`make release-manifest\` and commit it" >&2
    status=1
  else
    echo "manifests: ok: deploy/deploy.yaml matches deploy/overlays/default" >&2
  fi
  [[ -n "${KUBECONFIG:-}" ]] || { echo "manifests: KUBECONFIG is not set (start the control plane: make local-up)" >&2; return 1; }
  [[ -f deploy/overlays/with-plugins/plugins/opt-out.wasm ]] || plugins
  # A dry run does not create the namespace, so the namespaced objects need it to exist; and
  # created from its manifest, it enforces the restricted Pod Security profile it declares.
  "$kubectl" apply -f deploy/base/namespace.yaml >/dev/null
  dry_run "$kubectl" -k deploy/overlays/default || status=1
  dry_run "$kubectl" -k deploy/overlays/with-plugins || status=1
  dry_run "$kubectl" -k deploy/overlays/with-image-volume || status=1
  dry_run "$kubectl" -k deploy/overlays/with-prober || status=1
  dry_run "$kubectl" -f deploy/deploy.yaml || status=1
  return "$status"
}

case "${1:-}" in
  render) shift; render "$@" ;;
  plugins) plugins ;;
  check) check ;;
  *) sed -n '2,16p' "$0" >&2; exit 2 ;;
esac
