//! nad-service-controller: EndpointSlices for Services on Multus secondary networks, with the
//! selection policy in WebAssembly plugins. This crate is the controller; each part it builds on
//! is named by its own crate where it is used.
//!
//! The parts, in the order data flows through them:
//! - [`watch`]: the watches that feed the caches and the indexes (`nad_core::index`) and
//!   request reconciles; what they read of objects is `nad_model::input`;
//! - [`reconcile`]: one Service's reconcile: the pure step (`nad_core::step`) with the plugins
//!   as its policy (`nad_plugin_policy`, on `nad_plugin_runtime`), and its effects;
//! - [`apply`]: the only writer (creates, updates at the version seen, deletes), and the API's
//!   rules it checks;
//! - [`controller`]: the watches wired to the reconcile, for one term as leader;
//! - the operational parts: [`args`] (the flags of `run`), [`leader`], [`metrics`], [`server`],
//!   [`error`]; logging and shutdown come from `nad_process`, shared with the network prober
//!   (`nad_prober`); plugins named by reference are fetched by `nad_plugin_fetcher`.

pub mod apply;
pub mod args;
pub mod controller;
pub mod error;
pub mod leader;
pub mod metrics;
pub mod reconcile;
pub mod server;
pub mod watch;

mod app;
#[cfg(test)]
mod mock_api;
pub use app::run;
