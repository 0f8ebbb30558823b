//! How one request authenticates to a registry, and who that is, for what a refusal says.

use oci_client::secrets::RegistryAuth;

/// How one registry is spoken to: anonymously, or with a credential from a named source.
pub(super) struct Auth {
    pub(super) registry_auth: RegistryAuth,
    pub(super) who: Who,
    /// When a registry token that is a JWT expires (its `exp`, seconds since the epoch).
    pub(super) expires: Option<u64>,
    /// What to do if the registry's certificate is not trusted.
    pub(super) untrusted: String,
}

/// Who asks the registry, for what a refusal says.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Who {
    /// No one: `remedy` tells how to give a credential.
    Anonymous { remedy: String },
    /// A credential of `kind` (`user name and password`) from `source` (`Secret nsc/pull`).
    Credential { source: String, kind: &'static str },
}

impl Auth {
    pub(super) fn new(registry_auth: RegistryAuth, who: Who, untrusted: String) -> Self {
        Auth {
            registry_auth,
            who,
            expires: None,
            untrusted,
        }
    }
}

/// The `exp` claim of a token that is a JWT, read without checking its signature: it only
/// explains a refusal.
pub(super) fn jwt_expiry(token: &str) -> Option<u64> {
    use base64::Engine as _;
    #[derive(serde::Deserialize)]
    struct Claims {
        exp: Option<u64>,
    }
    let payload = token.split('.').nth(1)?;
    let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    serde_json::from_slice::<Claims>(&json).ok()?.exp
}
