//! The plugins the plugin runtime's build script built (once, for the whole workspace), as
//! `NSC_*_WASM` variables for this package's tests: cargo hands a `links` package's metadata
//! to the build scripts of the packages that depend on it.

fn main() {
    for (key, path) in std::env::vars() {
        if let Some(var) = key.strip_prefix("DEP_NAD_PLUGINS_") {
            println!("cargo:rustc-env={var}={path}");
        }
    }
}
