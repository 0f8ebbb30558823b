//! The plugin author's kit and `explain`, the commands of `nad-service-controller` besides
//! `run`: plugins evaluated, tested, benchmarked, inspected, scaffolded, pushed and verified
//! offline through the controller's own pipeline, sandbox and plan ([`plugin`]), and a Service
//! explained on the live cluster, read-only ([`explain()`]).
//!
//! Below it are the crates the controller uses too: the pure step (`nad_core`), the plugin
//! runtime, policy and fetcher. The controller does not import this crate; the binary's `main`
//! dispatches to it.

mod explain;
pub mod plugin;

pub use explain::{ExplainArgs, explain};
