//! nad-service-controller: EndpointSlices for Services on Multus secondary networks, with the
//! selection policy in WebAssembly plugins.
//!
//! The parts, in the order a reconcile uses them:
//! - [`target`]: which Services are managed (the `isim.dev/network` annotation, shape checks);
//! - [`network_status`]: a pod's IPs on a network, from the Multus annotation, checked by
//!   [`address`] as the EndpointSlice API would;
//! - [`observe`]: the candidate pods of a Service, from the caches;
//! - [`plugin`]: the Wasm runtime that asks the Service's policy about each candidate;
//! - [`plan`]: the pure function from decisions to EndpointSlices, and the diff to what exists;
//! - [`apply`]: the only writer (server-side apply, deletes);
//! - [`controller`]: watches, caches, the reconcile loop and its error policy.

pub mod address;
pub mod apply;
pub mod cli;
pub mod controller;
pub mod error;
pub mod expectations;
pub mod leader;
pub mod metrics;
pub mod network_status;
pub mod observe;
pub mod offline;
pub mod plan;
pub mod plugin;
pub mod recovery;
pub mod scope;
pub mod server;
pub mod service_state;
pub mod target;
pub mod telemetry;
pub mod triggers;
pub mod validate;
pub mod watch;

mod app;
pub use app::run;
