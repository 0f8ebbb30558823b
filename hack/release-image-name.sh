#!/usr/bin/env bash
# The registry name of one of the project's images, as the release workflow pushes it, printed as
# IMAGE_NAME=<name> (for $GITHUB_ENV), lower case as OCI requires:
#   nad-service-controller  ghcr.io/<owner>/<repository> (the repository's own name)
#   nad-network-prober      ghcr.io/<owner>/nad-network-prober
# From the workflow's REGISTRY, GITHUB_REPOSITORY and GITHUB_REPOSITORY_OWNER.
set -euo pipefail
image="${1:?usage: hack/release-image-name.sh nad-service-controller|nad-network-prober}"
case "$image" in
  nad-service-controller) echo "IMAGE_NAME=${REGISTRY}/${GITHUB_REPOSITORY,,}" ;;
  nad-network-prober) echo "IMAGE_NAME=${REGISTRY}/${GITHUB_REPOSITORY_OWNER,,}/nad-network-prober" ;;
  *) echo "release-image-name: no such image: $image" >&2; exit 2 ;;
esac
