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
