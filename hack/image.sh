#!/usr/bin/env bash
# Builds the project's images from the Dockerfile with the container engine at hand: the
# controller's (IMAGE, repository:tag) and the network prober's (PROBER_IMAGE).
#   hack/image.sh local   this machine's platform, into the engine's image store
#   hack/image.sh push    linux/amd64 and linux/arm64 (PLATFORMS), pushed to the registry
# CONTAINER_ENGINE picks docker or podman.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

mode="${1:-}"
image="${IMAGE:?IMAGE (repository:tag) is not set}"
prober_image="${PROBER_IMAGE:?PROBER_IMAGE (repository:tag) is not set}"
platforms="${PLATFORMS:-linux/amd64,linux/arm64}"
engine="${CONTAINER_ENGINE:-}"
if [[ -z "$engine" ]]; then
  for candidate in docker podman; do
    command -v "$candidate" >/dev/null && { engine="$candidate"; break; }
  done
fi

no_engine() {
  cat >&2 <<MSG
image: $1
  Building the image needs a running container engine: Docker with BuildKit, or Podman
  (CONTAINER_ENGINE=podman). Without one, \`make build-static\` builds the same static binary
  the image holds, and \`make run\` runs the controller against your kubeconfig.
MSG
  exit 2
}
[[ -n "$engine" ]] || no_engine "neither docker nor podman is installed"
if ! err="$("$engine" info 2>&1 >/dev/null)"; then
  no_engine "\`$engine info\` failed, so no engine is running: $(head -n1 <<<"$err")"
fi

build() {
  local target="$1" image="$2"
  case "$mode" in
    local)
      echo "image: building $image ($target) for this machine with $engine" >&2
      if [[ "$engine" == docker ]] && docker buildx version >/dev/null 2>&1; then
        # --load: a buildx builder of its own (docker-container driver) keeps results otherwise.
        docker buildx build --load --target "$target" --tag "$image" .
      else
        "$engine" build --target "$target" --tag "$image" .
      fi
      ;;
    push)
      echo "image: building $image ($target) for $platforms with $engine and pushing it" >&2
      if [[ "$engine" == podman ]]; then
        "$engine" build --target "$target" --platform "$platforms" --manifest "$image" .
        "$engine" manifest push --all "$image" "docker://$image"
      else
        "$engine" buildx build --target "$target" --platform "$platforms" --tag "$image" --push .
      fi
      ;;
    *) echo "usage: IMAGE=repository:tag PROBER_IMAGE=repository:tag hack/image.sh local|push" >&2; exit 2 ;;
  esac
}
build nad-service-controller "$image"
build nad-network-prober "$prober_image"
