//! The plugin tests that need no control plane, in one test binary: the runtime and its load
//! pipeline with components built from source (runtime.rs, pipeline.rs), the `plugin` commands
//! (cli.rs), and plugins as OCI artifacts in the CNCF distribution registry on loopback: pulls
//! and the cache (oci.rs), credentials and tokens (registry_auth.rs), hostile registries
//! (registry_hostile.rs), signatures by cosign (signatures.rs) and keyless ones (keyless.rs).
//! One binary rather than eight: each was the same dependencies linked again (hack/README.md,
//! "One build of the dependencies"). Run one file's tests with a filter, e.g.
//! `cargo test --test plugins oci::`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code

#[path = "../support/hostile.rs"]
mod hostile;
#[path = "../support/registry.rs"]
mod registry;
#[path = "../support/sigstore.rs"]
mod sigstore;
#[path = "../support/token_server.rs"]
mod token_server;

mod cli;
mod keyless;
mod oci;
mod pipeline;
mod registry_auth;
mod registry_hostile;
mod runtime;
mod signatures;

use std::time::Duration;

use nad_plugin_runtime::{Limits, Runtime};

/// The runtime of the runtime and pipeline tests: limits tight enough that a misbehaving guest
/// meets them within a test's time (50 ms a call, 16 MiB of memory).
fn runtime_with_tight_limits() -> Runtime {
    Runtime::new(Limits {
        deadline: Duration::from_millis(50),
        memory_bytes: 16 << 20,
    })
    .unwrap()
}
