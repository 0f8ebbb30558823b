#!/usr/bin/env bash
# The system packages the project's commands need, installed where they are missing: one list,
# one install path, for `make demo`, `make test`, `make test-faults`, `make lint` and .ci/run
# alike (each calls this first), so that CI installs exactly what a new user's command does.
#
#   hack/system-packages.sh COMMAND...       install what COMMAND needs and is missing
#   hack/system-packages.sh --list COMMAND...  print what COMMAND needs, one package a line
#
# COMMAND: demo, test, test-faults, lint, c-plugins (hack/c-plugin-toolchain.sh), or ci (all).
# What is installed: Debian packages (apt-get: one update and one install, of the missing ones
# only), the PyPI packages of the Python checks (pip, pinned) and rustup components/targets.
# As root, or with sudo, it installs them; otherwise (or without apt-get) it names each missing
# package, what needs it, and the command that installs them, and exits 1.
# The demo's data plane needs root: not as root, the demo runs without it (the node simulator,
# no traffic), so its data-plane packages are not asked for.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# package|command that proves it (- : ask dpkg)|commands that need it|what for
DEBIAN=(
  "openssl|openssl|demo test test-faults|the local control plane's certificates (hack/local-up.sh)"
  "curl|curl|demo test test-faults|health checks of the local control plane and the data plane"
  "ca-certificates|-|demo test test-faults lint|HTTPS to crates.io and the Go module proxy"
  "iproute2|ip|dataplane|the data plane: nodes as network namespaces, veth and macvlan links"
  "nftables|nft|dataplane|the data plane: kube-proxy's nftables mode"
  "file|file|test|the image's check that its binary is static (hack/image-oci.sh)"
  "musl-tools|musl-gcc|demo test test-faults lint dataplane|the static (musl) build the images, the tests, the demo and clippy share (hack/static-cargo.sh), the nodes' sandbox image (hack/nodes/images.sh)"
  "umoci|umoci|test dataplane|the images as OCI layouts (make image-oci, hack/nodes/images.sh)"
  "runc|runc|test dataplane|the nodes' container runtime (hack/nodes.sh), the image in the RBAC test (host/tests/rbac.rs)"
  "clang-19|-|test c-plugins|C plugins: the compiler (hack/c-plugin-toolchain.sh)"
  "lld-19|-|test c-plugins|C plugins: wasm-ld"
  "libclang-rt-19-dev-wasm32|-|test c-plugins|C plugins: compiler-rt's builtins for wasm32"
  "wasi-libc|-|test c-plugins|C plugins: the C library for wasm32-wasi"
  "shellcheck|shellcheck|lint|actionlint's check of the workflows' shell scripts"
)
# package==version|import that proves it|the Debian package of it|commands|what for
# (Debian's package where python3 is Debian's own, whose pip refuses to install: PEP 668.)
PYPI=("PyYAML==6.0.3|yaml|python3-yaml|lint|hack/check-workflows.py and hack/monitoring.sh read YAML")
RUSTUP_COMPONENTS=("rustfmt|lint" "clippy|lint")

list=false
if [[ "${1:-}" == --list ]]; then
  list=true
  shift
fi
(($#)) || { echo "usage: hack/system-packages.sh [--list] demo|test|test-faults|lint|c-plugins|ci..." >&2; exit 2; }

root=false
[[ "$(id -u)" == 0 ]] && root=true
wanted=()
for command in "$@"; do
  case "$command" in
    ci) wanted+=(demo test test-faults lint dataplane) ;;
    test) wanted+=(test dataplane) ;; # make test runs the data-plane tests: root is required
    demo)
      wanted+=(demo)
      [[ "$root" == true ]] && wanted+=(dataplane)
      ;;
    test-faults | lint | c-plugins) wanted+=("$command") ;;
    *) echo "system-packages: unknown command $command (demo, test, test-faults, lint, c-plugins, ci)" >&2; exit 2 ;;
  esac
done
needed_by() { # $1: the package's commands; true if one of them is wanted
  local want cmd
  for want in "${wanted[@]}"; do
    for cmd in $1; do [[ "$cmd" == "$want" ]] && return 0; done
  done
  return 1
}
installed() { # $1 package, $2 command or -
  if [[ "$2" != - ]]; then
    command -v "$2" >/dev/null
  else
    dpkg-query -W -f '${Status}' "$1" 2>/dev/null | grep -q 'ok installed'
  fi
}

missing=() missing_why=()
for entry in "${DEBIAN[@]}"; do
  IFS='|' read -r package probe commands why <<<"$entry"
  needed_by "$commands" || continue
  if [[ "$list" == true ]]; then
    echo "debian $package"
  elif ! installed "$package" "$probe"; then
    missing+=("$package")
    missing_why+=("$package: $why")
  fi
done
missing_pypi=()
system_python=false
python3 -c 'import os, sysconfig; raise SystemExit(not os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")))' 2>/dev/null \
  && system_python=true
for entry in "${PYPI[@]}"; do
  IFS='|' read -r package module debian commands why <<<"$entry"
  needed_by "$commands" || continue
  if [[ "$list" == true ]]; then
    [[ "$system_python" == true ]] && echo "debian $debian" || echo "pypi $package"
  elif ! python3 -c "import $module" 2>/dev/null; then
    if [[ "$system_python" == true ]]; then
      missing+=("$debian")
      missing_why+=("$debian: $why")
    else
      missing_pypi+=("$package")
    fi
  fi
done
missing_rustup=()
for entry in "${RUSTUP_COMPONENTS[@]}"; do
  IFS='|' read -r component commands <<<"$entry"
  needed_by "$commands" || continue
  if [[ "$list" == true ]]; then
    echo "rustup $component"
  elif ! rustup component list --installed 2>/dev/null | grep -q "^$component"; then
    missing_rustup+=("$component")
  fi
done
[[ "$list" == true ]] && exit 0

if ((${#missing[@]})); then
  sudo=()
  if [[ "$root" == false ]] && command -v sudo >/dev/null && { sudo -n true 2>/dev/null || [[ -t 0 ]]; }; then
    sudo=(sudo)
  fi
  if ! command -v apt-get >/dev/null || [[ "$root" == false && ${#sudo[@]} == 0 ]]; then
    echo "system-packages: missing, and this needs root (or sudo) and apt-get to install:" >&2
    printf '  %s\n' "${missing_why[@]}" >&2
    echo "install them with: sudo apt-get install -y ${missing[*]}   (Debian/Ubuntu names)" >&2
    exit 1
  fi
  echo "system-packages: installing ${missing[*]}" >&2
  printf '  %s\n' "${missing_why[@]}" >&2
  "${sudo[@]}" apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if ((${#missing_pypi[@]})); then
  echo "system-packages: installing ${missing_pypi[*]} (pip)" >&2
  python3 -m pip install --quiet --disable-pip-version-check "${missing_pypi[@]}" >&2
fi
if ((${#missing_rustup[@]})); then
  echo "system-packages: installing the rustup components ${missing_rustup[*]}" >&2
  rustup component add "${missing_rustup[@]}" >&2
fi
