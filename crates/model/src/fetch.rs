//! What the plugin runtime's loader asks of a fetcher of plugin artifacts, so that neither
//! crate depends on the other: the loader (`nad_plugin_runtime::Loader`) holds a [`Fetch`],
//! and the registry fetcher (`nad_plugin_fetcher::Puller`) is one.
//!
//! A reference is the text a source gives (`oci://<registry>/<repository>@sha256:<digest>`,
//! or with a tag); the fetcher answers with the component and the reference pinned to the
//! digest it fetched, which is what the loader verifies again when the policy changes.

use std::{future::Future, pin::Pin};

/// The largest plugin component, from any source (a file, a ConfigMap, a registry): the
/// runtime refuses a larger one before compiling it, the fetcher before downloading it.
pub const MAX_PLUGIN_BYTES: u64 = 16 << 20;

/// A component fetched by reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    pub component: Vec<u8>,
    /// The reference, pinned to the digest fetched (`oci://…@sha256:…`).
    pub pinned: String,
}

/// Why a reference's component could not be had, or does not pass the verification policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchFailure {
    /// What went wrong and what to do, naming the reference.
    pub message: String,
    /// It was had (or could have been), but its signatures do not pass the verification policy.
    pub unverified: bool,
    /// Worth another try later (a registry's trouble), not a refusal of the text itself (a
    /// malformed reference).
    pub transient: bool,
}

/// An answer still being fetched.
pub type Pending<'a, T> = Pin<Box<dyn Future<Output = Result<T, FetchFailure>> + Send + 'a>>;

/// A fetcher of plugin artifacts, with a registry's settings (credentials, CAs) and a
/// verification policy that may change while it serves.
pub trait Fetch: Send + Sync {
    /// Whether artifacts are verified (or, with the policy unavailable, refused): a component
    /// given as bytes, which carries no signature, is then refused.
    fn verifies(&self) -> bool;
    /// Counts the changes of the registry settings: a fetch refused before the last one is
    /// worth another try at once.
    fn generation(&self) -> u64;
    /// Counts the changes of the verification policy: a component verified before the last one
    /// is verified again before it serves on.
    fn policy_generation(&self) -> u64;
    /// The component `reference` names, verified against the policy in force.
    fn fetch<'a>(&'a self, reference: &'a str) -> Pending<'a, Fetched>;
    /// Checks `pinned` (a reference [`Fetched::pinned`] gave) against the policy in force.
    fn verify<'a>(&'a self, pinned: &'a str) -> Pending<'a, ()>;
}
