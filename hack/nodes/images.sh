#!/usr/bin/env bash
# Builds the images the local nodes run without a registry, as OCI layouts packed as tar files
# that hack/nodes/node.sh imports into each node's containerd (`ctr images import`), into the
# shared cache, skipping any already there:
#   ${NAD_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nad-service-controller/bin}/images-<hash>/
# A file <repository with / as _>.tar holds localhost/<repository>:<tag>. Images:
#   nsc/pause     the pods' sandbox: hack/nodes/pause.c, static (musl-gcc);
#   nsc/netutils  the clients and tenants of the tests and the demo: bash, coreutils, curl,
#                 iproute2, getent (glibc), python3 and procps, from Debian's packages;
#   nsc/nginx     Debian's nginx, serving its default page on port 80 (IPv4 and IPv6).
# The Debian images are this machine's Debian release's packages, unpacked (no maintainer script
# runs); their tag is the version of the package named first, and the cache's name changes with
# any package's version. /usr/share/nsc/packages in each lists them.
# Prints "dir <directory>", "sandbox <the sandbox image's reference>" and one "image <reference>"
# per image.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NAD_BIN_CACHE="${NAD_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nad-service-controller/bin}"

die() { echo "images: $*" >&2; exit 1; }
for tool in umoci musl-gcc; do
  command -v "$tool" >/dev/null || die "$tool is missing (hack/system-packages.sh nodes installs it)"
done

# What a Debian image never holds: package management, perl, init, debconf, and the
# alternatives to what it holds (mawk is its awk, libsystemd0 its logind library).
EXCLUDED=" apt base-files cdebconf debconf debianutils dpkg gawk init-system-helpers install-info
  libdebian-installer4 libelogind0 libfile-find-rule-perl libgdbm-compat4 libgdbm6 libmpfr6 libnewt0.52
  libnumber-compare-perl libperl5.36 libsigsegv2 libslang2 libtext-glob-perl libtextwrap1 mailcap
  mime-support original-awk perl perl-base perl-modules-5.36 usr-is-merged usrmerge "
NETUTILS=(python3.11 bash coreutils curl iproute2 libc-bin grep sed procps mawk)
NGINX=(nginx nginx-common)

# closure PACKAGE...: the packages and those they depend on, recursively, one per line.
closure() {
  apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
    --no-replaces --no-enhances "$@" | grep -v '^[ <]' | sort -u \
    | while read -r package; do [[ "$EXCLUDED" == *" $package "* ]] || echo "$package"; done
}
# versions PACKAGE...: "<package>=<version>" of each, as apt would install it.
versions() {
  apt-cache show --no-all-versions "$@" | awk '/^Package:/ {p = $2} /^Version:/ {print p "=" $2}'
}
command -v apt-cache >/dev/null || die "apt-cache is missing: the Debian images are Debian's packages"
# shellcheck disable=SC2046 # one package a word
mapfile -t netutils < <(versions $(closure "${NETUTILS[@]}"))
# shellcheck disable=SC2046
mapfile -t nginx < <(versions $(closure "${NGINX[@]}"))
[[ ${#netutils[@]} -gt 0 && ${#nginx[@]} -gt 0 ]] || die "apt-cache knows none of ${NETUTILS[*]} ${NGINX[*]}: run apt-get update"
# tag_of PACKAGE PACKAGE=VERSION...: PACKAGE's version as an image tag.
tag_of() {
  local p="$1" v
  shift
  for v in "$@"; do
    if [[ "${v%%=*}" == "$p" ]]; then
      v="${v#*=}"
      echo "${v//[:+~]/_}"
    fi
  done
}

version="$(cat "$here/images.sh" "$here/pause.c" <(printf '%s\n' "${netutils[@]}" "${nginx[@]}") | sha256sum | cut -c1-12)"
out="$NAD_BIN_CACHE/images-$version"
sandbox="localhost/nsc/pause:$version"
netutils_ref="localhost/nsc/netutils:$(tag_of python3.11 "${netutils[@]}")"
nginx_ref="localhost/nsc/nginx:$(tag_of nginx "${nginx[@]}")"

# image FILE TAG ROOTFS-FILLER USER ENTRYPOINT [CMD...]: the layout of one image, packed into
# FILE.tar.
image() {
  local file="$1" tag="$2" fill="$3" user="$4" entrypoint="$5" work arg cmd=()
  shift 5
  for arg in "$@"; do cmd+=(--config.cmd "$arg"); done
  work="$(mktemp -d)"
  umoci init --layout "$work/layout"
  umoci new --image "$work/layout:$tag"
  umoci unpack --image "$work/layout:$tag" "$work/bundle" >/dev/null
  "$fill" "$work/bundle/rootfs"
  find "$work/bundle/rootfs" -exec touch -h -d @0 {} +
  umoci repack --image "$work/layout:$tag" --history.created 1970-01-01T00:00:00Z "$work/bundle"
  umoci config --image "$work/layout:$tag" --no-history --created 1970-01-01T00:00:00Z \
    --os linux --architecture "$arch" --config.user "$user" --config.entrypoint "$entrypoint" "${cmd[@]}" \
    --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
  umoci gc --layout "$work/layout"
  tar -C "$work/layout" -cf "$tmp/$file.tar" .
  rm -rf "$work"
}

pause_rootfs() { musl-gcc -static -Os -s -o "$1/pause" "$here/pause.c"; }

# debian_rootfs ROOT PACKAGE=VERSION...: the packages downloaded (apt-get download, Debian's
# archive) and unpacked into ROOT, with what their maintainer scripts would have made that the
# programs need: /bin/sh, python3, the users, the dynamic linker's cache.
debian_rootfs() {
  local root="$1" debs deb
  shift
  debs="$(mktemp -d)"
  if ! (cd "$debs" && apt-get download -qq -o APT::Sandbox::User=root "$@" 2>/dev/null); then
    echo "images: apt-get download failed; updating the package lists once" >&2
    apt-get update -qq >/dev/null
    (cd "$debs" && apt-get download -qq -o APT::Sandbox::User=root "$@") || die "could not download $*"
  fi
  for deb in "$debs"/*.deb; do dpkg-deb -x "$deb" "$root"; done
  rm -rf "$debs"
  mkdir -p "$root/usr/share/nsc" "$root/tmp" "$root/var/log/nginx" "$root/var/lib/nginx" "$root/run"
  chmod 1777 "$root/tmp"
  printf '%s\n' "$@" >"$root/usr/share/nsc/packages"
  [[ -e "$root/bin/sh" ]] || ln -s bash "$root/bin/sh"
  [[ ! -e "$root/usr/bin/python3.11" ]] || ln -sfn python3.11 "$root/usr/bin/python3"
  printf '%s\n' "root:x:0:0:root:/root:/bin/bash" "www-data:x:33:33:www-data:/var/www:/usr/sbin/nologin" \
    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin" >"$root/etc/passwd"
  printf '%s\n' "root:x:0:" "www-data:x:33:" "nogroup:x:65534:" >"$root/etc/group"
  ldconfig -r "$root"
}
netutils_rootfs() { debian_rootfs "$1" "${netutils[@]}"; }
nginx_rootfs() {
  debian_rootfs "$1" "${nginx[@]}"
  # The packaged default site (its postinst enables it and its page) listens on port 80 of both families;
  # the logs go to the container's.
  mkdir -p "$1/etc/nginx/sites-enabled" "$1/var/www/html"
  ln -sfn /etc/nginx/sites-available/default "$1/etc/nginx/sites-enabled/default"
  cp "$1/usr/share/nginx/html/index.html" "$1/var/www/html/index.nginx-debian.html"
  ln -sfn /dev/stdout "$1/var/log/nginx/access.log"
  ln -sfn /dev/stderr "$1/var/log/nginx/error.log"
}

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
  image nsc_pause "$version" pause_rootfs 65535:65535 /pause
  image nsc_netutils "${netutils_ref##*:}" netutils_rootfs 0:0 /bin/bash
  image nsc_nginx "${nginx_ref##*:}" nginx_rootfs 0:0 /usr/sbin/nginx -g "daemon off;"
  touch "$tmp/.complete"
  rm -rf "$out"
  mv "$tmp" "$out"
  trap - EXIT
fi
echo "dir $out"
echo "sandbox $sandbox"
echo "image $sandbox"
echo "image $netutils_ref"
echo "image $nginx_ref"
