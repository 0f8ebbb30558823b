//! How much a registry can make the fetcher read: each bound is checked before a body is
//! read and while it is read.

/// The largest manifest read (a plugin's, a signature's, a referrers index): a plugin
/// artifact's is under a kilobyte, a signature manifest a few kilobytes a signature.
pub const MAX_MANIFEST_BYTES: u64 = 1 << 20;
/// The largest answer of a token server (a token is a few kilobytes).
pub const MAX_TOKEN_BYTES: u64 = 64 << 10;
/// The most layers (signatures) of one signature manifest read.
pub const MAX_SIGNATURE_LAYERS: usize = 32;
/// The largest signature layer (a payload or a Sigstore bundle) read.
pub const MAX_SIGNATURE_LAYER_BYTES: u64 = 256 << 10;
/// The most referrers of an artifact read for its signatures.
pub const MAX_REFERRERS: usize = 32;
