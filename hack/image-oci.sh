#!/usr/bin/env bash
# Assembles one of the project's images as an OCI image layout, without a container engine: the
# same image the Dockerfile describes (`scratch`, the static binary, the CA bundle, user 65532),
# from a binary `make build-static` built, with its SBOM attached. `make image-oci` runs it for
# both: the controller (nad-service-controller) and the network prober (nad-network-prober); the
# binary's name says which.
#   hack/image-oci.sh <static binary> <layout directory> <tag>
# prints the image manifest's digest (sha256:…) on stdout. The layout is replaced whole.
#
# umoci (Debian's) writes the layer and the configuration; every timestamp is the last commit's
# (SOURCE_DATE_EPOCH overrides it) and every file belongs to root, so the same binary gives the
# same digest. The labels are the ones the release workflow's docker/metadata-action sets. The
# SBOM is the release's: SPDX 2.3 JSON of the crates of the binary's package and its dependencies
# (cargo-sbom --cargo-package), attached to the image as an OCI referrer (artifact type application/spdx+json) by oras. Both tools are
# pinned in hack/tools.sh. Push the image and its SBOM with
#   oras copy -r --from-oci-layout <layout>:<tag> <registry>/<repository>:<tag>
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

binary="${1:?usage: hack/image-oci.sh <static binary> <layout directory> <tag>}"
layout="${2:?usage: hack/image-oci.sh <static binary> <layout directory> <tag>}"
tag="${3:?usage: hack/image-oci.sh <static binary> <layout directory> <tag>}"
ca_bundle="${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"

die() { echo "image-oci: $*" >&2; exit 1; }
command -v umoci >/dev/null || die "umoci is missing: apt-get install umoci"
command -v python3 >/dev/null || die "python3 is missing"
[[ -x "$binary" ]] || die "$binary is not there: run \`make build-static\` first (\`make image-oci\` does)"
[[ -f "$ca_bundle" ]] || die "$ca_bundle is missing: apt-get install ca-certificates"
if file_type="$(file -b "$binary" 2>/dev/null)" && [[ "$file_type" == *"dynamically linked"* ]]; then
  die "$binary is dynamically linked; the image is \`scratch\`, so it needs the static (musl) binary of \`make build-static\`"
fi

case "$(uname -m)" in
  x86_64) arch=amd64 ;;
  aarch64) arch=arm64 ;;
  *) die "no OCI architecture name for $(uname -m)" ;;
esac

# Each image: its binary's package (the manifest with its description and the SBOM's package),
# its CMD, and its ports.
program="$(basename "$binary")"
case "$program" in
  nad-service-controller) package=nad-service-controller manifest="$repo/host/Cargo.toml" cmd=(--config.cmd run)
    ports=(--config.exposedports 8080/tcp --config.exposedports 8081/tcp) ;;
  nad-network-prober) package=nad-prober manifest="$repo/crates/prober/Cargo.toml" cmd=()
    ports=(--config.exposedports 9090/tcp) ;;
  *) die "$binary is none of the project's programs (nad-service-controller, nad-network-prober)" ;;
esac

epoch="${SOURCE_DATE_EPOCH:-$(git -C "$repo" log -1 --format=%ct 2>/dev/null || echo 0)}"
created="$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)"
revision="$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)"
field() { sed -n "s/^$1 = \"\(.*\)\"/\1/p" "$2" | head -n1; }
description="$(field description "$manifest")"
licenses="$(field license "$repo/Cargo.toml")"
source_url="$(field repository "$repo/Cargo.toml")"

cargo_sbom="$("$repo/hack/tools.sh" cargo-sbom)"
oras="$("$repo/hack/tools.sh" oras)"

work="$(mktemp -d "${TMPDIR:-/tmp}/nsc-image-oci.XXXXXX")"
trap 'rm -rf "$work"' EXIT
bundle="$work/bundle"

rm -rf "$layout"
mkdir -p "$(dirname "$layout")"
umoci init --layout "$layout"
umoci new --image "$layout:$tag"
umoci unpack --image "$layout:$tag" "$bundle" >/dev/null
root="$bundle/rootfs"
install -D -m 0755 "$binary" "$root/$program"
install -D -m 0644 "$ca_bundle" "$root/etc/ssl/certs/ca-certificates.crt"
find "$root" -exec touch -h -d "@$epoch" {} +
umoci repack --image "$layout:$tag" --history.created "$created" \
  --history.created_by "make image-oci (hack/image-oci.sh)" "$bundle"
umoci config --image "$layout:$tag" --no-history --created "$created" \
  --os linux --architecture "$arch" \
  --config.user 65532:65532 \
  --config.entrypoint "/$program" "${cmd[@]}" "${ports[@]}" \
  --config.label "org.opencontainers.image.title=$program" \
  --config.label "org.opencontainers.image.description=$description" \
  --config.label "org.opencontainers.image.url=$source_url" \
  --config.label "org.opencontainers.image.source=$source_url" \
  --config.label "org.opencontainers.image.version=$tag" \
  --config.label "org.opencontainers.image.created=$created" \
  --config.label "org.opencontainers.image.revision=$revision" \
  --config.label "org.opencontainers.image.licenses=$licenses"
umoci gc --layout "$layout"
digest="$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["manifests"][0]["digest"])' "$layout/index.json")"

"$cargo_sbom" --project-directory "$repo" --cargo-package "$package" >"$work/sbom.spdx.json"
(cd "$work" && "$oras" attach --oci-layout --no-tty --artifact-type application/spdx+json \
  "$layout@$digest" sbom.spdx.json:application/spdx+json >/dev/null)
echo "image-oci: $layout:$tag is $digest (linux/$arch), its SBOM attached" >&2
echo "$digest"
