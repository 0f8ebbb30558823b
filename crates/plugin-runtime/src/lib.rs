//! The plugin runtime: Wasm components that decide which pods a Service publishes.
//!
//! One [`Engine`](wasmtime::Engine) for the process ([`Runtime`]); each component compiled
//! once and pre-instantiated ([`Plugin`]); a fresh store per call, on an instance from a
//! [`pool`] of reused slots, with an epoch deadline and a memory limit ([`sandbox`]); WASI
//! linked with an empty context (no files, environment, clocks or network). A plugin that traps, loops, runs out of memory or answers malformed
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
mod pool;
mod registry;
mod reload;
mod runtime;
mod sandbox;
mod selections;
mod service;

pub use bindings::{HOST_WIT_VERSION, WIT_PACKAGE, isim::nad_endpoints::types as wit};
pub use convert::{conditions_view, pod_view};
pub use errors::{CallError, GuestTrap, InvalidConfig, LoadError, Rejected};
pub use pipeline::{
    Configured, Inspection, PipelineError, Step, inspect, name_mismatch, prepare, self_test,
};
pub use registry::{BUILT_IN, FailurePolicy, Plugins, SharedPlugins, UnknownPlugin, annotated};
pub use reload::{Component, Entry, Loader, PluginDir, Scan};
pub use runtime::{CallStats, DEFAULT_PLUGIN_WASM, DecisionScope, Plugin, Runtime, decision};
pub use sandbox::{Limits, PLUGIN_LOG_TARGET};
pub use service::service_view;
