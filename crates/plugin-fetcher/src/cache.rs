//! The pulled artifacts on disk, by digest: `<dir>/blobs/sha256/<hex>` holds manifests and
//! components alike, as an OCI image layout does. Every read is checked against its digest,
//! so a cached plugin is as trusted as a pulled one, and a pinned plugin loads with the
//! registry unreachable.

use std::{
    io::Write as _,
    path::{Path, PathBuf},
};

use super::reference::check_digest;
use nad_model::digest::sha256_hex;

#[derive(Debug, Clone)]
pub struct Cache {
    dir: PathBuf,
}

impl Cache {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, digest: &str) -> Option<PathBuf> {
        let hex = check_digest(digest).ok()?;
        Some(self.dir.join("blobs").join("sha256").join(hex))
    }

    /// The blob of `digest`, if cached and intact. One that does not match its digest is
    /// removed (and pulled again).
    pub fn get(&self, digest: &str) -> Option<Vec<u8>> {
        let path = self.path(digest)?;
        let bytes = std::fs::read(&path).ok()?;
        if format!("sha256:{}", sha256_hex(&bytes)) == digest {
            return Some(bytes);
        }
        tracing::warn!(path = %path.display(), %digest, "a cached plugin blob does not match its digest; removed, pulling it again");
        let _ = std::fs::remove_file(&path);
        None
    }

    /// Stores `bytes` (already checked against `digest`), written whole or not at all.
    pub fn put(&self, digest: &str, bytes: &[u8]) -> std::io::Result<()> {
        let path = self
            .path(digest)
            .ok_or_else(|| std::io::Error::other(format!("{digest} is not a sha256 digest")))?;
        let dir = path.parent().unwrap_or(&self.dir);
        std::fs::create_dir_all(dir)?;
        let mut file = tempfile_in(dir)?;
        file.1.write_all(bytes)?;
        file.1.sync_all()?;
        std::fs::rename(&file.0, &path)
    }
}

/// A new file beside the blobs, renamed into place once written.
fn tempfile_in(dir: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    let path = dir.join(format!(".partial-{}", std::process::id()));
    let file = std::fs::File::create(&path)?;
    Ok((path, file))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("nsc-cache-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn a_blob_is_kept_by_its_digest_and_checked_when_read() {
        let dir = temp_dir("roundtrip");
        let cache = Cache::new(&dir);
        let digest = format!("sha256:{}", sha256_hex(b"component"));
        assert_eq!(cache.get(&digest), None);
        cache.put(&digest, b"component").unwrap();
        assert_eq!(cache.get(&digest).as_deref(), Some(&b"component"[..]));
        // Changed on disk: not trusted, and gone.
        let path = dir.join("blobs/sha256").join(&digest["sha256:".len()..]);
        std::fs::write(&path, b"tampered").unwrap();
        assert_eq!(cache.get(&digest), None);
        assert!(!path.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn only_sha256_digests_name_a_file() {
        let cache = Cache::new(temp_dir("names"));
        assert_eq!(cache.get("sha256:../../etc/passwd"), None);
        assert!(cache.put("md5:00", b"x").is_err());
    }
}
