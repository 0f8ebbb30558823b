//! nad-service-controller: EndpointSlices for Services on Multus secondary networks, with the
//! selection policy in WebAssembly plugins.
//!
//! The parts, in the order data flows through them:
//! - [`input`]: what the controller reads of Kubernetes objects: which Services are managed
//!   (the `isim.dev/network` annotation), a pod's IPs on a network (the Multus
//!   `network-status` annotation), and which addresses the EndpointSlice API accepts;
//! - [`watch`]: the watches that feed the caches and [`index`]es and request reconciles;
//! - [`index`]: pods reduced to what planning reads, by network; node zones; Services by
//!   network;
//! - [`reconcile`]: one Service's reconcile: observe, decide (the [`plugin`]), plan, place;
//! - [`apply`]: the only writer (server-side apply, deletes), and the API's rules it checks;
//! - [`plugin`]: the Wasm runtime that asks a Service's policy about its pods;
//! - [`controller`]: the watches wired to the reconcile, for one term as leader;
//! - [`reason`]: the one vocabulary of a Service's problems (Event reasons, metric labels);
//! - the operational parts: [`args`] (the flags of `run`), [`leader`], [`metrics`], [`server`]; logging and
//!   shutdown come from `nad_process`, shared with the network prober (`nad_prober`).

pub mod apply;
pub mod args;
pub mod controller;
pub mod error;
pub mod leader;
pub mod metrics;
pub mod reconcile;
pub mod server;
pub mod watch;

// The crates below, under the names the controller's modules use.
pub use nad_core::index;
pub use nad_model::{input, reason};
pub use nad_plugin_runtime as plugin;

mod app;
pub use app::run;
