//! `oci://<registry>/<repository>@sha256:<digest>`: where a plugin artifact is. A tag
//! (`:<tag>`) is accepted and resolved to a digest when pulled; the digest is what is pinned.

use std::fmt;

use oci_client::Reference;

pub const SCHEME: &str = "oci://";

const FORM: &str = "write oci://<registry>/<repository>@sha256:<digest>";

/// A parsed plugin reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OciRef {
    reference: Reference,
}

impl OciRef {
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let rest = text
            .strip_prefix(SCHEME)
            .ok_or_else(|| format!("{text:?} is not an OCI reference: {FORM}"))?;
        // Without a registry, the Docker convention would read `plugins/x` as Docker Hub's:
        // a plugin source names its registry.
        let first = rest.split('/').next().unwrap_or_default();
        if !rest.contains('/') || !(first.contains(['.', ':']) || first == "localhost") {
            return Err(format!(
                "{text:?} names no registry (its first part, {first:?}, is not a host): {FORM}"
            ));
        }
        let reference: Reference = rest
            .parse()
            .map_err(|e| format!("{text:?} is not a valid OCI reference ({e}): {FORM}"))?;
        if let Some(digest) = reference.digest() {
            check_digest(digest).map_err(|e| format!("{text:?}: {e}"))?;
        }
        Ok(OciRef { reference })
    }

    pub fn registry(&self) -> &str {
        self.reference.registry()
    }

    pub fn repository(&self) -> &str {
        self.reference.repository()
    }

    pub fn digest(&self) -> Option<&str> {
        self.reference.digest()
    }

    pub fn tag(&self) -> Option<&str> {
        self.reference.tag()
    }

    /// The plugin's name when none is given: the repository's last segment.
    pub fn name(&self) -> &str {
        self.repository().rsplit('/').next().unwrap_or_default()
    }

    /// The same repository at `digest`.
    pub fn at(&self, digest: &str) -> Reference {
        Reference::with_digest(
            self.registry().to_owned(),
            self.repository().to_owned(),
            digest.to_owned(),
        )
    }

    /// This reference pinned at `digest`.
    pub fn pinned(&self, digest: &str) -> OciRef {
        OciRef {
            reference: self.at(digest),
        }
    }

    pub fn reference(&self) -> &Reference {
        &self.reference
    }
}

impl fmt::Display for OciRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{SCHEME}{}/{}", self.registry(), self.repository())?;
        if let Some(tag) = self.tag() {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = self.digest() {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

/// `sha256:` and 64 lowercase hex digits: the only digest a plugin may be pinned by.
pub fn check_digest(digest: &str) -> Result<&str, String> {
    let hex = digest.strip_prefix("sha256:").ok_or_else(|| {
        format!("digest {digest:?} is not a sha256 digest (sha256:<64 hex digits>)")
    })?;
    if hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        Ok(hex)
    } else {
        Err(format!(
            "digest {digest:?} is not sha256:<64 lowercase hex digits>"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn a_pinned_reference_keeps_its_parts() {
        let text = format!("oci://127.0.0.1:5000/plugins/shop-policy@{DIGEST}");
        let r = OciRef::parse(&text).unwrap();
        assert_eq!(r.registry(), "127.0.0.1:5000");
        assert_eq!(r.repository(), "plugins/shop-policy");
        assert_eq!(r.digest(), Some(DIGEST));
        assert_eq!(r.name(), "shop-policy");
        assert_eq!(r.to_string(), text);
    }

    #[test]
    fn a_tag_is_kept_to_be_resolved() {
        let r = OciRef::parse("oci://registry.example/team/p:1.2").unwrap();
        assert_eq!((r.tag(), r.digest()), (Some("1.2"), None));
        assert_eq!(r.to_string(), "oci://registry.example/team/p:1.2");
    }

    #[test]
    fn bad_references_say_what_to_write() {
        for (text, says) in [
            ("registry.example/p@sha256:00", "is not an OCI reference"),
            ("oci://plugins/p", "names no registry"),
            ("oci://p", "names no registry"),
            (
                "oci://registry.example/p@sha256:00",
                "not a valid OCI reference",
            ),
            (
                "oci://registry.example/p@sha256:0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF",
                "not sha256:<64 lowercase hex digits>",
            ),
            (
                "oci://registry.example/p@md5:00",
                "not a valid OCI reference",
            ),
            ("oci://registry.example/UPPER", "not a valid OCI reference"),
        ] {
            let e = OciRef::parse(text).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
            assert!(
                e.contains("oci://<registry>/<repository>@sha256:<digest>") || says.contains("hex"),
                "{text}: {e}"
            );
        }
    }
}
