//! The plugin runtime: Wasm components that decide which pods a Service publishes.
//!
//! One [`Engine`](wasmtime::Engine) for the process ([`Runtime`]); each component compiled
//! once and pre-instantiated ([`Plugin`]); a fresh store per call with an epoch deadline and
//! a memory limit ([`sandbox`]); WASI linked with an empty context (no files, environment,
//! clocks or network). A plugin that traps, loops, runs out of memory or answers malformed
//! fails only the call it was in ([`CallError`]); its own `err(...)` is a verdict
//! ([`Rejected`]). Every file goes through one load [`pipeline`] before it serves. Plugins a
//! source names by `oci://` reference are fetched by a [`Fetch`](nad_model::fetch::Fetch)
//! the [`Loader`] is given (the registry fetcher is another crate, `nad-plugin-fetcher`).

mod bindings;
pub mod conditions;
pub mod configmap;
mod convert;
pub mod diagnose;
mod errors;
mod pipeline;
mod registry;
mod reload;
mod runtime;
mod sandbox;

use std::time::Duration;

pub use bindings::isim::nad_endpoints::types as wit;
pub use convert::{conditions_view, decision, pod_view, service_view};
pub use errors::{CallError, GuestTrap, InvalidConfig, LoadError, Rejected};
pub use pipeline::{
    HOST_WIT_VERSION, Inspection, PipelineError, Step, WIT_PACKAGE, inspect, name_mismatch,
    prepare, self_test,
};
pub use registry::{
    BUILT_IN, Configured, FailurePolicy, POLICY_ANNOTATION, Plugins, SharedPlugins, UnknownPlugin,
    annotated,
};
pub use reload::{Component, Entry, Loader, PluginDir, Scan};
pub use runtime::{CallStats, DecisionScope, Plugin, Runtime};
pub use sandbox::PLUGIN_LOG_TARGET;

/// The default plugin, built from `plugins/default` by the build script.
pub const DEFAULT_PLUGIN_WASM: &[u8] = include_bytes!(env!("NSC_DEFAULT_PLUGIN_WASM"));

/// Limits every call runs under.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub deadline: Duration,
    pub memory_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            deadline: Duration::from_millis(100),
            memory_bytes: 64 << 20,
        }
    }
}
