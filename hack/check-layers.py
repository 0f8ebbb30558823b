#!/usr/bin/env python3
"""The crates' floors: each crate depends (normal and build dependencies) only on the workspace
crates below it, from `cargo metadata`; and nothing it builds with, however deep, is one of the
heavy parts its floor keeps out, from `cargo tree -p <crate> -e normal,build`, which resolves the
features that crate alone turns on (tokio or the kube client reached through kube's features
counts). The compiler then keeps every import pointing down. `make lint` runs it.
CHECK_LAYERS_METADATA names a file of `cargo metadata` output to check instead, and
CHECK_LAYERS_TREES a directory of `<crate>.txt` files of `cargo tree --prefix none` output
(hack/test-checkers.sh gives them broken copies, to see the check fail).

    nad-model            the vocabulary; no Kubernetes client or runtime, no Wasm, no async, no HTTP
    nad-core             indexes and the pure step; the same
    nad-plugin-runtime   the Wasm runtime; no Kubernetes client, no plugin fetcher, no HTTP
    nad-plugin-fetcher   plugins from OCI registries, and their signatures; no Wasm, no Kubernetes client
    nad-process          what every program does alike (logs, client errors, signals); no Wasm, no fetcher
    nad-plugin-policy    the plugins as the core's Policy; no Kubernetes client, no plugin fetcher, no HTTP
    nad-cli              the plugin author's kit and explain: all of the above but the controller
    nad-prober           the network prober (nad-network-prober); no Wasm, no plugin fetcher or its
                         parts (sigstore's TLS backend aws-lc among them)
    nad-service-controller  the controller, and the binary's main that dispatches to the CLI

Program rules: no crate depends on the controller (testing/ harnesses aside), of the
controller's sources only its binary's main.rs names the CLI crate, and nad-model and nad-core
read no clock (whoever calls them says when: `Timestamp::now()`, `Instant::now()` and
`SystemTime::now()` appear in their tests only, after `#[cfg(test)]`).
"""
import json
import os
import re
import subprocess
import sys

KUBE_CLIENT = {"kube", "kube-client", "kube-runtime"}
WASM = {"wasmtime", "wasmtime-wasi", "cranelift-codegen"}
FETCHER = {"sigstore", "oci-client"}
# Workspace crates each one may depend on, and outside crates nothing it builds with may be.
FLOORS = {
    "nad-model": (set(), KUBE_CLIENT | WASM | {"tokio", "hyper"}),
    "nad-core": ({"nad-model"}, KUBE_CLIENT | WASM | {"tokio", "hyper"}),
    "nad-plugin-runtime": ({"nad-model"}, KUBE_CLIENT | FETCHER | {"reqwest", "hyper"}),
    "nad-plugin-fetcher": ({"nad-model"}, KUBE_CLIENT | WASM),
    "nad-process": (set(), WASM | FETCHER),
    "nad-prober": ({"nad-model", "nad-process"}, WASM | FETCHER | {"aws-lc-rs", "aws-lc-sys"}),
    "nad-plugin-policy": ({"nad-model", "nad-core", "nad-plugin-runtime"}, KUBE_CLIENT | FETCHER | {"reqwest", "hyper"}),
    "nad-cli": ({"nad-model", "nad-core", "nad-plugin-runtime", "nad-plugin-fetcher", "nad-plugin-policy"}, set()),
    "nad-service-controller": ({"nad-model", "nad-core", "nad-plugin-runtime", "nad-plugin-fetcher", "nad-plugin-policy", "nad-process", "nad-cli"}, set()),
}


def reached(crate: str) -> set:
    """Every package `crate` builds with (normal and build dependencies, however deep), with the
    features it turns on itself."""
    given = os.environ.get("CHECK_LAYERS_TREES")
    if given:
        with open(os.path.join(given, f"{crate}.txt"), encoding="utf-8") as f:
            text = f.read()
    else:
        text = subprocess.run(
            ["cargo", "tree", "-p", crate, "-e", "normal,build", "--prefix", "none", "--locked"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    return {line.split()[0] for line in text.splitlines() if line.strip()} - {crate}


def program_rules(meta) -> list:
    """Of the controller's sources, only main.rs (the binary's dispatch) may name the CLI crate."""
    failures = []
    for package in meta["packages"]:
        if package["name"] != "nad-service-controller":
            continue
        src = os.path.join(os.path.dirname(package["manifest_path"]), "src")
        for root, _, files in os.walk(src):
            for name in sorted(files):
                path = os.path.join(root, name)
                if not name.endswith(".rs") or path == os.path.join(src, "main.rs"):
                    continue
                with open(path, encoding="utf-8") as f:
                    if "nad_cli" in f.read():
                        failures.append(f"the controller's {os.path.relpath(path, src)} names nad_cli: "
                                        "the controller never imports the CLI (only main.rs dispatches to it)")
    return failures


CLOCKLESS = {"nad-model", "nad-core"}
CLOCK = re.compile(r"\b(Timestamp|Instant|SystemTime|Utc|Zoned)::now\(\)")


def clock_rules(meta) -> list:
    """nad-model and nad-core read no clock outside their tests (a file's `#[cfg(test)]` and
    what follows it)."""
    failures = []
    for package in meta["packages"]:
        if package["name"] not in CLOCKLESS:
            continue
        src = os.path.join(os.path.dirname(package["manifest_path"]), "src")
        for root, _, files in os.walk(src):
            for name in sorted(files):
                path = os.path.join(root, name)
                if not name.endswith(".rs") or name == "tests.rs":
                    continue
                with open(path, encoding="utf-8") as f:
                    text = f.read().split("#[cfg(test)]")[0]
                for number, line in enumerate(text.splitlines(), 1):
                    if CLOCK.search(line):
                        failures.append(f"{package['name']}'s {os.path.relpath(path, src)}:{number} reads the clock: "
                                        "take the time from the caller")
    return failures


def main() -> int:
    given = os.environ.get("CHECK_LAYERS_METADATA")
    if given:
        with open(given, encoding="utf-8") as f:
            meta = json.load(f)
    else:
        meta = json.loads(
            subprocess.run(
                ["cargo", "metadata", "--format-version", "1", "--no-deps", "--locked"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        )
    workspace = {p["name"] for p in meta["packages"]}
    missing = set(FLOORS) - workspace
    if missing:
        print(f"check-layers: no such crates: {sorted(missing)}", file=sys.stderr)
        return 1
    failures = []
    for package in meta["packages"]:
        name = package["name"]
        deps = {d["name"] for d in package["dependencies"] if d["kind"] in (None, "build")}
        if name in FLOORS:
            allowed, banned = FLOORS[name]
            for dep in sorted(deps & workspace - allowed):
                failures.append(f"{name} depends on {dep}, which is not below it")
            for dep in sorted(reached(name) & banned):
                failures.append(f"{name} builds with {dep}, which its floor keeps out"
                                + ("" if dep in deps else f" (reached through its dependencies: cargo tree -p {name} -i {dep})"))
        elif "nad-service-controller" in deps and not package["manifest_path"].split("/")[-3] == "testing":
            failures.append(f"{name} depends on the controller crate")
    failures += program_rules(meta)
    failures += clock_rules(meta)
    for failure in failures:
        print(f"check-layers: {failure}", file=sys.stderr)
    if not failures:
        print("check-layers: nad-model < nad-core, nad-plugin-runtime, nad-plugin-fetcher < "
              "nad-plugin-policy < nad-cli < the binary; nad-core, nad-plugin-* < nad-service-controller; "
              "nad-model, nad-process < nad-prober; the controller names no nad_cli; nad-model and "
              "nad-core read no clock: ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
