#!/usr/bin/env bash
# Makes sure the toolchain for C plugins (plugins/examples/default-c) is on this machine, and
# prints it as NAME=value lines, one a line (paths without spaces), for make or a shell:
#   make -C plugins/examples/default-c $(hack/c-plugin-toolchain.sh)   # or: eval "$(...)"
#
# What it installs, and where:
# - Debian packages (hack/system-packages.sh c-plugins, only those missing): clang-19 and lld-19
#   (the compiler and wasm-ld, under /usr/lib/llvm-19/bin), libclang-rt-19-dev-wasm32
#   (compiler-rt's builtins for wasm32, which clang links into every wasm32 program) and
#   wasi-libc (the C library for wasm32-wasi, headers and libraries under /usr). LLVM 19 is
#   the newest of Debian 12's main suite (22 is only in bookworm-security); tested with 1:19.1.7-3~deb12u1 and wasi-libc
#   0.0~git20220510.9886d3d-2.
# - Through hack/tools.sh, into ${XDG_CACHE_HOME:-$HOME/.cache}/nad-service-controller/tools:
#   wasm-tools and wit-bindgen (bin/, built by cargo install) and the WASI reactor adapter
#   (lib/), all at pinned versions.
# Debian 12's wasi-libc and compiler-rt are laid out for the triple wasm32-wasi (the older name
# of wasm32-wasip1, which clang 19 compiles alike), so the plugin's Makefile uses
# --target=wasm32-wasi with WASI_SYSROOT=/usr. A cold install takes a few minutes on 2 cores
# (the packages' download, cargo building wasm-tools and wit-bindgen; hack/README.md has the
# measured times); every later call is a few file checks.
set -euo pipefail
cd "$(dirname "$0")/.."

LLVM_VERSION=19
# The packages above, where missing (the one install path of every command's packages).
hack/system-packages.sh c-plugins

llvm_bin="/usr/lib/llvm-$LLVM_VERSION/bin"
wit_bindgen="$(hack/tools.sh wit-bindgen)"
wasm_tools="$(hack/tools.sh wasm-tools)"
wasi_adapter="$(hack/tools.sh wasi-adapter)"

echo "CLANG=$llvm_bin/clang"
echo "WASI_SYSROOT=/usr"
echo "WIT_BINDGEN=$wit_bindgen"
echo "WASM_TOOLS=$wasm_tools"
echo "WASI_ADAPTER=$wasi_adapter"
