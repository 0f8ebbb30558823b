//! Content digests, as OCI names them.

use sha2::{Digest, Sha256};

/// The lowercase hex of `bytes`' sha256, as a digest names it after `sha256:`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    format!("{:x}", Sha256::digest(bytes))
}
