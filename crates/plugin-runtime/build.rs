//! Builds the WebAssembly plugins the host embeds (the default policy) and tests against (a
//! deliberately misbehaving guest), so that one `cargo build` builds everything.
//!
//! The plugins are built by a nested cargo for `wasm32-wasip2` in a target directory of their
//! own (beside the host's), because the outer cargo holds the lock on the host's.

// A build script may fail loudly: cargo shows the message to whoever builds.
#![allow(clippy::expect_used)]

use std::{
    env,
    path::{Path, PathBuf},
    process::Command,
};

const PLUGINS: [(&str, &str, &str); 9] = [
    (
        "nad-default-plugin",
        "nad_default_plugin",
        "NSC_DEFAULT_PLUGIN_WASM",
    ),
    (
        "nad-test-misbehaving",
        "nad_test_misbehaving",
        "NSC_TEST_MISBEHAVING_WASM",
    ),
    (
        "nad-plugin-opt-out",
        "nad_plugin_opt_out",
        "NSC_EXAMPLE_OPT_OUT_WASM",
    ),
    (
        "nad-plugin-preferred-zones",
        "nad_plugin_preferred_zones",
        "NSC_EXAMPLE_PREFERRED_ZONES_WASM",
    ),
    (
        "nad-test-contract-1-0",
        "nad_test_contract_1_0",
        "NSC_TEST_CONTRACT_1_0_WASM",
    ),
    (
        "nad-test-contract-1-1",
        "nad_test_contract_1_1",
        "NSC_TEST_CONTRACT_1_1_WASM",
    ),
    (
        "nad-test-contract-1-2",
        "nad_test_contract_1_2",
        "NSC_TEST_CONTRACT_1_2_WASM",
    ),
    (
        "nad-test-stale-wit",
        "nad_test_stale_wit",
        "NSC_TEST_STALE_WIT_WASM",
    ),
    (
        "nad-test-imports-filesystem",
        "nad_test_imports_filesystem",
        "NSC_TEST_IMPORTS_FILESYSTEM_WASM",
    ),
];

/// The version of the WIT package in `wit/`, which this host speaks: `package
/// isim:nad-endpoints@X.Y.Z;` becomes the constant `HOST_WIT_VERSION`.
fn wit_version(workspace: &Path, out_dir: &Path) {
    let wit = workspace.join("wit").join("nad-endpoints.wit");
    let text = std::fs::read_to_string(&wit).expect("read wit/nad-endpoints.wit");
    let version = text
        .lines()
        .find_map(|line| {
            line.trim()
                .strip_prefix("package isim:nad-endpoints@")?
                .strip_suffix(';')
        })
        .expect("wit/nad-endpoints.wit declares package isim:nad-endpoints@<version>");
    let parts: Vec<u64> = version
        .split('.')
        .map(|p| p.parse().expect("a numeric version"))
        .collect();
    let [major, minor, patch] = parts[..] else {
        panic!("package version {version} is not major.minor.patch");
    };
    std::fs::write(
        out_dir.join("wit_version.rs"),
        format!("pub const HOST_WIT_VERSION: (u64, u64, u64) = ({major}, {minor}, {patch});\n"),
    )
    .expect("write wit_version.rs");
}

fn main() {
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let workspace = manifest_dir
        .ancestors()
        .nth(2)
        .expect("crates/plugin-runtime/ is inside the workspace");
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    // Relative to this crate, so that a target directory shared by two clones (CI reuses one)
    // checks the clone being built, not the one that ran this script last.
    println!("cargo:rerun-if-changed=../../wit");
    println!("cargo:rerun-if-changed=../../plugins");
    wit_version(workspace, &out_dir);

    // <target>/<profile>/build/<pkg>/out: the target root is the ancestor cargo tags.
    let target_root = out_dir
        .ancestors()
        .find(|p| p.join("CACHEDIR.TAG").exists())
        .unwrap_or(&out_dir);
    let plugin_target = target_root.join("plugins");

    let mut cargo = Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cargo
        .current_dir(workspace)
        .args([
            "build",
            "--target",
            "wasm32-wasip2",
            "--profile",
            "wasm-release",
            "--locked",
        ])
        .env("CARGO_TARGET_DIR", &plugin_target)
        // Flags meant for the host (and clippy's driver) do not apply to the guests.
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTFLAGS")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("CARGO_BUILD_TARGET");
    for (package, _, _) in PLUGINS {
        cargo.args(["-p", package]);
    }
    let status = cargo.status().expect("run cargo for the plugins");
    if !status.success() {
        panic!(
            "building the plugins for wasm32-wasip2 failed (see above). If the target is missing, \
             run `rustup target add wasm32-wasip2` (make build and make test do this)."
        );
    }
    for (_, artifact, var) in PLUGINS {
        let path = plugin_target
            .join("wasm32-wasip2")
            .join("wasm-release")
            .join(format!("{artifact}.wasm"));
        assert!(
            Path::new(&path).exists(),
            "{} was not built",
            path.display()
        );
        println!("cargo:rustc-env={var}={}", path.display());
        // For the crates that depend on this one: DEP_NAD_PLUGINS_<var>.
        println!("cargo::metadata={var}={}", path.display());
    }
}
