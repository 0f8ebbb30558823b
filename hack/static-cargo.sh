#!/usr/bin/env bash
# cargo for the static (musl) target of this machine's architecture: the one build that the
# images, the tests, the fault tests, the demo and clippy share (hack/README.md, "One build of
# the dependencies"). Every call gets the same target, C compiler and flags, so that no call
# invalidates another's build and the build scripts' outputs (aws-lc's C library) are shared.
#   hack/static-cargo.sh SUBCOMMAND [ARGS...]    e.g. hack/static-cargo.sh test --release --locked
#   hack/static-cargo.sh --release-dir           prints <target dir>/<target>/release
# STATIC_TARGET overrides the target (default: $(uname -m)-unknown-linux-musl).
#
# The flags remap only the cargo home and the target directory: the binaries' bytes do not
# depend on where those are (panic messages name the sources of dependencies and of build
# scripts' outputs), so the Dockerfile's build, in /src, gives the same bytes. Cargo names the
# workspace's own sources by their path in the clone (host/src/...); flags that named the clone
# would make every fresh clone rebuild every dependency.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target="${STATIC_TARGET:-$(uname -m)-unknown-linux-musl}"
# As cargo reads CARGO_TARGET_DIR: relative to the directory it runs in.
target_dir="$(realpath -m "${CARGO_TARGET_DIR:-$repo/target}")"
cargo_home="$(realpath -m "${CARGO_HOME:-$HOME/.cargo}")"

if [[ "${1:-}" == --release-dir ]]; then
  echo "$target_dir/$target/release"
  exit 0
fi
[[ $# -ge 1 ]] || { echo "usage: hack/static-cargo.sh SUBCOMMAND [ARGS...] | --release-dir" >&2; exit 2; }
command -v musl-gcc >/dev/null \
  || { echo "static-cargo: musl-gcc is missing: install Debian's musl-tools (apt-get install musl-tools)" >&2; exit 1; }
rustup target list --installed | grep -qx "$target" || rustup target add "$target" >&2

name="${target//-/_}"
export "CC_$name=musl-gcc"
export "CARGO_TARGET_${name^^}_RUSTFLAGS=--remap-path-prefix=$cargo_home=/cargo --remap-path-prefix=$target_dir=/target"
subcommand="$1"
shift
exec "${CARGO:-cargo}" "$subcommand" --target "$target" "$@"
