#!/usr/bin/env bash
# Builds the images the local nodes run without a registry, as OCI layouts packed as tar files
# that hack/nodes/node.sh imports into each node's containerd (`ctr images import`), into the
# shared cache, skipping any already there:
#   ${NAD_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nad-service-controller/bin}/images-<hash>/
# A file <repository with / as _>.tar holds localhost/<repository>:<tag>. Images:
#   nsc/pause   the pods' sandbox: hack/nodes/pause.c, static (musl-gcc).
# Prints "dir <directory>" and "sandbox <the sandbox image's reference>".
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NAD_BIN_CACHE="${NAD_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nad-service-controller/bin}"

die() { echo "images: $*" >&2; exit 1; }
for tool in umoci musl-gcc; do
  command -v "$tool" >/dev/null || die "$tool is missing (hack/system-packages.sh nodes installs it)"
done

version="$(cat "$here/images.sh" "$here/pause.c" | sha256sum | cut -c1-12)"
out="$NAD_BIN_CACHE/images-$version"
sandbox="localhost/nsc/pause:$version"

# image NAME TAG ROOTFS-FILLER ENTRYPOINT...: the layout of one image, packed into $1.tar.
image() {
  local file="$1" tag="$2" fill="$3" work
  shift 3
  work="$(mktemp -d)"
  umoci init --layout "$work/layout"
  umoci new --image "$work/layout:$tag"
  umoci unpack --image "$work/layout:$tag" "$work/bundle" >/dev/null
  "$fill" "$work/bundle/rootfs"
  find "$work/bundle/rootfs" -exec touch -h -d @0 {} +
  umoci repack --image "$work/layout:$tag" --history.created 1970-01-01T00:00:00Z "$work/bundle"
  umoci config --image "$work/layout:$tag" --no-history --created 1970-01-01T00:00:00Z \
    --os linux --architecture "$arch" --config.user 65535:65535 --config.entrypoint "$@"
  umoci gc --layout "$work/layout"
  tar -C "$work/layout" -cf "$tmp/$file.tar" .
  rm -rf "$work"
}

pause_rootfs() { musl-gcc -static -Os -s -o "$1/pause" "$here/pause.c"; }

if [[ ! -f "$out/.complete" ]]; then
  case "$(uname -m)" in
    x86_64) arch=amd64 ;;
    aarch64) arch=arm64 ;;
    *) die "no OCI architecture name for $(uname -m)" ;;
  esac
  echo "images: building the nodes' images into $out" >&2
  mkdir -p "$NAD_BIN_CACHE"
  tmp="$(mktemp -d "$NAD_BIN_CACHE/.images-$version.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  image nsc_pause "$version" pause_rootfs /pause
  touch "$tmp/.complete"
  rm -rf "$out"
  mv "$tmp" "$out"
  trap - EXIT
fi
echo "dir $out"
echo "sandbox $sandbox"
