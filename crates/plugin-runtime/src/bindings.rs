//! Host bindings generated from the WIT package in `wit/`, and which version of it this host runs.

wasmtime::component::bindgen!({
    path: "../../wit",
    world: "endpoint-policy",
});

/// The WIT package plugins implement.
pub const WIT_PACKAGE: &str = "isim:nad-endpoints";
// The version of the WIT package this host was built with, read from `wit/` by the build
// script. A plugin built for `1.y` runs here when its major version is the same and its minor
// version is not newer.
include!(concat!(env!("OUT_DIR"), "/wit_version.rs"));
