//! Registry errors in an operator's terms: what failed, at which registry, and what to do.

use oci_client::errors::{OciDistributionError, OciEnvelope, OciErrorCode};

use super::{
    OciRef,
    auth::{Auth, Who},
};

/// An `oci-client` error in an operator's terms; `what` is the digest or tag asked for.
pub(super) fn describe(
    e: &OciDistributionError,
    reference: &OciRef,
    what: &str,
    auth: &Auth,
) -> String {
    let (registry, repository) = (reference.registry(), reference.repository());
    match e {
        OciDistributionError::RequestError(e) => request_failed(e, registry, &auth.untrusted),
        OciDistributionError::RegistryError { envelope, .. } => {
            let codes: Vec<&OciErrorCode> = envelope.errors.iter().map(|e| &e.code).collect();
            match codes.first() {
                Some(OciErrorCode::ManifestUnknown) => format!(
                    "the registry {registry} has no manifest {what} in {repository}: check the digest (`plugin push` prints the one it published)"
                ),
                Some(OciErrorCode::NameUnknown) => {
                    format!("the registry {registry} has no repository {repository}")
                }
                Some(OciErrorCode::BlobUnknown) => {
                    format!("the registry {registry} has no blob {what} in {repository}")
                }
                Some(OciErrorCode::Unauthorized | OciErrorCode::Denied) => {
                    unauthorized(registry, repository, auth)
                }
                _ => format!(
                    "the registry {registry} refused the request: {}",
                    envelope
                        .errors
                        .iter()
                        .map(|e| format!("{:?} {}", e.code, e.message))
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
            }
        }
        OciDistributionError::ImageManifestNotFoundError(_) => {
            format!("the registry {registry} has no manifest {what} in {repository}")
        }
        OciDistributionError::UnauthorizedError { .. }
        | OciDistributionError::AuthenticationFailure(_) => {
            unauthorized(registry, repository, auth)
        }
        OciDistributionError::ServerError {
            code: 401 | 403, ..
        } => unauthorized(registry, repository, auth),
        OciDistributionError::ServerError { code, message, .. } => {
            let message: String = message.trim().chars().take(200).collect();
            format!("the registry {registry} answered HTTP {code}: {message}")
        }
        OciDistributionError::DigestError(e) => {
            format!("the registry's content does not match its digest: {e}")
        }
        other => format!("the registry {registry}: {other}"),
    }
}

/// A registry's answer of `status` (not a success) with `body`, read by the puller itself, in
/// an operator's terms; `what` is the digest or tag asked for.
pub(super) fn describe_status(
    status: reqwest::StatusCode,
    body: &[u8],
    registry: &str,
    repository: &str,
    what: &str,
    auth: &Auth,
) -> String {
    let codes: Vec<OciErrorCode> = serde_json::from_slice::<OciEnvelope>(body)
        .map(|envelope| envelope.errors.into_iter().map(|e| e.code).collect())
        .unwrap_or_default();
    match (status.as_u16(), codes.first()) {
        (_, Some(OciErrorCode::ManifestUnknown)) | (404, None) => format!(
            "the registry {registry} has no manifest {what} in {repository}: check the digest (`plugin push` prints the one it published)"
        ),
        (_, Some(OciErrorCode::NameUnknown)) => {
            format!("the registry {registry} has no repository {repository}")
        }
        (_, Some(OciErrorCode::BlobUnknown)) => {
            format!("the registry {registry} has no blob {what} in {repository}")
        }
        (401 | 403, _) | (_, Some(OciErrorCode::Unauthorized | OciErrorCode::Denied)) => {
            unauthorized(registry, repository, auth)
        }
        (code, _) => {
            let message: String = String::from_utf8_lossy(body)
                .trim()
                .chars()
                .take(200)
                .collect();
            format!("the registry {registry} answered HTTP {code}: {message}")
        }
    }
}

/// A request that had no answer: the registry unreachable, slow, or not trusted over TLS.
pub(super) fn request_failed(e: &reqwest::Error, registry: &str, untrusted: &str) -> String {
    let cause = innermost(e);
    if untrusted_certificate(e) {
        format!("the registry {registry} was refused over TLS ({cause}): {untrusted}")
    } else if e.is_connect() {
        format!("cannot reach the registry {registry}: {cause}")
    } else if e.is_timeout() {
        format!(
            "the registry {registry} did not answer in time ({cause}): it is stalled or too \
             slow; the fetch is tried again later"
        )
    } else {
        format!("the request to the registry {registry} failed: {cause}")
    }
}

pub(super) fn unauthorized(registry: &str, repository: &str, auth: &Auth) -> String {
    match &auth.who {
        Who::Anonymous { remedy } => {
            format!("the registry {registry} refused anonymous access to {repository}: {remedy}")
        }
        Who::Credential { source, kind } => {
            let now = std::time::SystemTime::now();
            let expired = auth
                .expires
                .map(|exp| std::time::UNIX_EPOCH + std::time::Duration::from_secs(exp))
                .filter(|&at| at < now);
            match expired {
                Some(at) => format!(
                    "the registry {registry} refused the {kind} from {source} for {repository}: \
                     it expired at {}; give a fresh one",
                    humantime::format_rfc3339_seconds(at)
                ),
                None => format!(
                    "the registry {registry} refused the {kind} from {source} for {repository}: \
                     check that credential, and that it may read (or, to push, write) \
                     {repository}"
                ),
            }
        }
    }
}

/// Whether rustls refused the registry's certificate somewhere down `e`'s causes. rustls' error
/// travels inside an `io::Error`, itself inside another (tokio-rustls, then hyper), and an
/// `io::Error`'s `source()` skips the error it carries: each one is opened instead.
fn untrusted_certificate(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(cause) = next {
        if matches!(
            cause.downcast_ref::<rustls::Error>(),
            Some(rustls::Error::InvalidCertificate(_))
        ) {
            return true;
        }
        next = match cause
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
        {
            Some(carried) => Some(carried),
            None => cause.source(),
        };
    }
    false
}

/// The deepest cause of an error: `Connection refused (os error 111)` rather than reqwest's
/// `error sending request`.
pub(super) fn innermost(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

#[cfg(test)]
mod tests {
    use oci_client::secrets::RegistryAuth;

    use super::*;
    use crate::auth::jwt_expiry;

    /// An error with `source` as its cause, as reqwest and hyper wrap the connection's.
    #[derive(Debug)]
    struct Wrapped(std::io::Error);

    impl std::fmt::Display for Wrapped {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("error sending request")
        }
    }

    impl std::error::Error for Wrapped {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_refused_certificate_is_found_inside_the_io_error_that_carries_it() {
        let refused = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let io = |e: rustls::Error| std::io::Error::new(std::io::ErrorKind::InvalidData, e);
        assert!(untrusted_certificate(&Wrapped(io(refused.clone()))));
        // As reqwest gives it: tokio-rustls' io::Error inside hyper's.
        let nested = std::io::Error::other(io(refused.clone()));
        assert!(untrusted_certificate(&Wrapped(nested)));
        assert!(untrusted_certificate(&refused));
        // Other TLS failures and other causes are not a certificate refused, whatever they say.
        let other = rustls::Error::General("certificate store busy".into());
        assert!(!untrusted_certificate(&Wrapped(io(other))));
        let plain = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "bad certificate?");
        assert!(!untrusted_certificate(&Wrapped(plain)));
    }

    #[test]
    fn an_expired_registry_token_is_named_as_expired() {
        use base64::Engine as _;
        let jwt = |claims: &str| {
            let part = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
            format!("{}.{}.sig", part(r#"{"alg":"ES256"}"#), part(claims))
        };
        assert_eq!(
            jwt_expiry(&jwt(r#"{"exp": 1700000000}"#)),
            Some(1_700_000_000)
        );
        assert_eq!(jwt_expiry(&jwt(r#"{"sub": "x"}"#)), None);
        assert_eq!(jwt_expiry("opaque-token"), None);
        let auth = |expires| Auth {
            expires,
            ..Auth::new(
                RegistryAuth::Anonymous,
                Who::Credential {
                    source: "Secret nsc/pull".to_owned(),
                    kind: "registry token",
                },
                String::new(),
            )
        };
        let expired = unauthorized("r.example", "team/plugin", &auth(Some(1_700_000_000)));
        assert_eq!(
            expired,
            "the registry r.example refused the registry token from Secret nsc/pull for \
             team/plugin: it expired at 2023-11-14T22:13:20Z; give a fresh one"
        );
        let far = unauthorized("r.example", "team/plugin", &auth(Some(u64::from(u32::MAX))));
        assert!(far.contains("check that credential"), "{far}");
    }
}
