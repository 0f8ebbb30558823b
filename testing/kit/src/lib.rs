//! What nad-service-controller's tests and benchmarks share, so that each is written once:
//!
//! - [`wait`]: polling until something holds, with a bound;
//! - [`metrics`]: one reader of the Prometheus text format, which fails on a series that is
//!   missing instead of reading it as 0;
//! - [`wit`]: builders of the WIT records a plugin receives;
//! - [`native`]: the default policy run natively on those records, the baseline of the plugin
//!   boundary's benchmark.

// A test kit: a broken expectation is a failed test, told with what was expected.
#![allow(clippy::expect_used, clippy::unwrap_used)]

pub mod metrics;
pub mod native;
pub mod wait;
pub mod wit;

/// Makes ring the process's TLS provider, before any client is made (see the function).
pub use nad_plugin_fetcher::install_crypto_provider;
