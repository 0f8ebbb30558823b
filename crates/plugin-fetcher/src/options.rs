//! How the fetcher reaches registries: over which scheme, with which cache, within which
//! deadlines.

use std::{path::PathBuf, time::Duration};

/// How the controller reaches registries.
#[derive(Debug, Clone, Default)]
pub struct RegistryOptions {
    /// Registries (`host[:port]`) spoken to over plain HTTP, not HTTPS.
    pub http: Vec<String>,
    /// Where pulled artifacts are kept by digest; `None` keeps none.
    pub cache_dir: Option<PathBuf>,
    pub timeouts: Timeouts,
}

/// How long a registry may take. A fetch that runs past one fails, with a message that names
/// the reference, and is tried again later: a registry that stalls holds neither the
/// controller's start nor a reload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// To connect (TCP and TLS).
    pub connect: Duration,
    /// For one answer, whole: a registry's challenge, a token, a manifest, a tag's digest, a
    /// signature manifest or referrers index.
    pub request: Duration,
    /// For the plugin's Wasm layer, whole (at most [`nad_model::fetch::MAX_PLUGIN_BYTES`]).
    pub download: Duration,
    /// For all of an artifact's signatures, read by the `sigstore` crate (several requests,
    /// which it makes without timeouts of its own).
    pub signatures: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(5),
            request: Duration::from_secs(30),
            download: Duration::from_secs(120),
            signatures: Duration::from_secs(60),
        }
    }
}
