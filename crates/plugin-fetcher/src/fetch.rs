//! Bounded reads from a registry: every answer is read within a deadline and up to a size
//! limit, so that a registry that stalls, trickles or floods fails the one fetch instead of
//! holding a load or a reload, or the controller's memory. `oci-client` buffers manifests,
//! tags' answers and token answers whole, without a limit or an overall deadline (its read
//! timeout is per read, which a trickle never trips), so the puller reads them here.
//!
//! The `Authorization` header goes to the registry alone: on a redirect to another host (blob
//! storage behind the registry) reqwest drops it.

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use oci_client::{
    manifest::{OciImageIndex, OciImageManifest},
    secrets::RegistryAuth,
};
use reqwest::{StatusCode, header::HeaderMap};

use super::{
    MAX_MANIFEST_BYTES, MAX_REFERRERS, MAX_SIGNATURE_LAYER_BYTES, MAX_SIGNATURE_LAYERS,
    auth::Auth,
    describe::{describe_status, request_failed},
};

/// How much of a refusal's body is read: enough for the registry's error message.
const ERROR_BODY_BYTES: u64 = 16 << 10;

/// An answer read whole.
pub(super) struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

/// Why an answer could not be read.
#[derive(Debug)]
pub(super) enum Failure {
    /// No answer: unreachable, refused over TLS, broken off.
    Request(reqwest::Error),
    /// Not whole within `after`; `received` bytes of the body had come.
    TimedOut { after: Duration, received: u64 },
    /// Longer than `limit`: announced so (`declared`, nothing read) or found so while reading.
    TooLarge {
        limit: u64,
        declared: Option<u64>,
        received: u64,
    },
}

impl Failure {
    /// In an operator's terms: `what` the registry was sending (`its manifest sha256:…`), and
    /// what to do when it was too large.
    pub(super) fn describe(
        &self,
        registry: &str,
        what: &str,
        untrusted: &str,
        large: &str,
    ) -> String {
        match self {
            Failure::Request(e) => request_failed(e, registry, untrusted),
            Failure::TimedOut { after, received } => format!(
                "the registry {registry} did not send {what} within {} s ({received} bytes \
                 received): it is stalled or too slow, so the fetch was given up (it is tried \
                 again later); check the registry",
                after.as_secs_f64()
            ),
            Failure::TooLarge {
                limit,
                declared: Some(declared),
                ..
            } => format!(
                "the registry {registry} announced {what} of {declared} bytes, over the limit of \
                 {limit} bytes, and it was not read: {large}"
            ),
            Failure::TooLarge {
                limit, received, ..
            } => format!(
                "the registry {registry} sent {what} past the limit of {limit} bytes (reading \
                 stopped after {received} bytes): {large}"
            ),
        }
    }
}

/// Sends `request` and reads its answer within `deadline`: a successful answer's body up to
/// `limit` bytes (refused beyond), a refusal's up to what its message needs.
pub(super) async fn read(
    request: reqwest::RequestBuilder,
    limit: u64,
    deadline: Duration,
) -> Result<Answer, Failure> {
    let received = AtomicU64::new(0);
    let whole = async {
        let mut response = request.send().await.map_err(Failure::Request)?;
        let status = response.status();
        let headers = response.headers().clone();
        let refusal = !status.is_success();
        let cap = if refusal {
            ERROR_BODY_BYTES.min(limit)
        } else {
            limit
        };
        // Refused before the first byte: the connection is dropped unread.
        if let Some(declared) = response.content_length()
            && declared > cap
            && !refusal
        {
            return Err(Failure::TooLarge {
                limit,
                declared: Some(declared),
                received: 0,
            });
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(Failure::Request)? {
            let total =
                received.fetch_add(chunk.len() as u64, Ordering::Relaxed) + chunk.len() as u64;
            if total > cap {
                if refusal {
                    let room = usize::try_from(cap).unwrap_or(usize::MAX) - body.len();
                    body.extend_from_slice(&chunk[..room.min(chunk.len())]);
                    break;
                }
                return Err(Failure::TooLarge {
                    limit,
                    declared: None,
                    received: total,
                });
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Answer {
            status,
            headers,
            body,
        })
    };
    match tokio::time::timeout(deadline, whole).await {
        Ok(answer) => answer,
        Err(_) => Err(Failure::TimedOut {
            after: deadline,
            received: received.load(Ordering::Relaxed),
        }),
    }
}

/// `request` with the registry's authentication, if any.
pub(super) fn authenticated(
    request: reqwest::RequestBuilder,
    auth: &RegistryAuth,
) -> reqwest::RequestBuilder {
    match auth {
        RegistryAuth::Basic(user, password) => request.basic_auth(user, Some(password)),
        RegistryAuth::Bearer(token) => request.bearer_auth(token),
        RegistryAuth::Anonymous => request,
    }
}

/// One registry and repository, read with one client, authentication and deadline.
pub(super) struct Repository<'a> {
    pub client: &'a reqwest::Client,
    /// `http` or `https`.
    pub scheme: &'a str,
    pub registry: &'a str,
    pub repository: &'a str,
    pub auth: &'a Auth,
    pub deadline: Duration,
}

impl Repository<'_> {
    fn url(&self, path: &str) -> String {
        format!(
            "{}://{}/v2/{}/{path}",
            self.scheme, self.registry, self.repository
        )
    }

    /// GETs `path` (under the repository) with `accept`, reading at most `limit` bytes
    /// within `deadline`.
    pub(super) async fn get(
        &self,
        path: &str,
        accept: &[&str],
        limit: u64,
        deadline: Duration,
    ) -> Result<Answer, Failure> {
        let mut request = self.client.get(self.url(path));
        if !accept.is_empty() {
            request = request.header(http::header::ACCEPT, accept.join(", "));
        }
        read(
            authenticated(request, &self.auth.registry_auth),
            limit,
            deadline,
        )
        .await
    }

    /// The manifest `reference` (a digest or a tag), at most [`MAX_MANIFEST_BYTES`]; `what`
    /// names it in messages.
    pub(super) async fn manifest(
        &self,
        reference: &str,
        accept: &[&str],
        what: &str,
    ) -> Result<Vec<u8>, String> {
        let answer = self
            .get(
                &format!("manifests/{reference}"),
                accept,
                MAX_MANIFEST_BYTES,
                self.deadline,
            )
            .await
            .map_err(|e| self.manifest_failure(&e, reference))?;
        if !answer.status.is_success() {
            return Err(self.refusal(&answer, what));
        }
        Ok(answer.body)
    }

    fn manifest_failure(&self, e: &Failure, reference: &str) -> String {
        e.describe(
            self.registry,
            &format!("the manifest {reference}"),
            &self.auth.untrusted,
            "a plugin artifact's (or a signature's) manifest is a few kilobytes; check what the \
             reference names, and the registry",
        )
    }

    /// A registry's refusal in an operator's terms; `what` is the digest or tag asked for.
    pub(super) fn refusal(&self, answer: &Answer, what: &str) -> String {
        describe_status(
            answer.status,
            &answer.body,
            self.registry,
            self.repository,
            what,
            self.auth,
        )
    }

    /// Checks that the signatures of the artifact `digest` are few and small enough to read:
    /// the `.sig` manifest cosign writes, and the referrers with their manifests. The
    /// `sigstore` crate that reads them after buffers every manifest and layer whole, so what
    /// it would read is refused here first.
    pub(super) async fn check_signatures(&self, digest: &str) -> Result<(), String> {
        let tag = format!("{}.sig", digest.replace(':', "-"));
        if let Some(body) = self.optional_manifest(&tag, &SIGNATURE_MANIFESTS).await? {
            self.check_signature_manifest(&tag, &body)?;
        }
        let index = match self.referrers(digest).await? {
            Some(body) => body,
            None => return Ok(()),
        };
        // Anything else is not an index of referrers, and sigstore finds none in it either.
        let Ok(index) = serde_json::from_slice::<OciImageIndex>(&index) else {
            return Ok(());
        };
        if index.manifests.len() > MAX_REFERRERS {
            return Err(format!(
                "it has {} referrers (signatures and other artifacts attached to it), over the \
                 limit of {MAX_REFERRERS}: its signatures were not read; remove the referrers \
                 that are not needed",
                index.manifests.len()
            ));
        }
        for entry in &index.manifests {
            if u64::try_from(entry.size).map_or(true, |size| size > MAX_MANIFEST_BYTES) {
                return Err(format!(
                    "its referrer {} is {} bytes, over the limit of {MAX_MANIFEST_BYTES} bytes \
                     for a manifest: its signatures were not read",
                    entry.digest, entry.size
                ));
            }
            let what = format!("its referrer {}", entry.digest);
            let body = self
                .manifest(&entry.digest, &SIGNATURE_MANIFESTS, &what)
                .await?;
            self.check_signature_manifest(&entry.digest, &body)?;
        }
        Ok(())
    }

    /// The manifest `reference`, or `None` when the registry has none.
    async fn optional_manifest(
        &self,
        reference: &str,
        accept: &[&str],
    ) -> Result<Option<Vec<u8>>, String> {
        let answer = self
            .get(
                &format!("manifests/{reference}"),
                accept,
                MAX_MANIFEST_BYTES,
                self.deadline,
            )
            .await
            .map_err(|e| self.manifest_failure(&e, reference))?;
        match answer.status {
            StatusCode::NOT_FOUND => Ok(None),
            status if status.is_success() => Ok(Some(answer.body)),
            _ => Err(self.refusal(&answer, reference)),
        }
    }

    /// The referrers index of `digest`: from the referrers API, or (where the registry has
    /// none) from the referrers tag schema's tag, as sigstore reads it.
    async fn referrers(&self, digest: &str) -> Result<Option<Vec<u8>>, String> {
        let accept = [oci_client::manifest::OCI_IMAGE_INDEX_MEDIA_TYPE];
        let answer = self
            .get(
                &format!("referrers/{digest}"),
                &accept,
                MAX_MANIFEST_BYTES,
                self.deadline,
            )
            .await
            .map_err(|e| {
                e.describe(
                    self.registry,
                    &format!("the referrers of {digest}"),
                    &self.auth.untrusted,
                    "remove the referrers that are not needed",
                )
            })?;
        match answer.status {
            StatusCode::NOT_FOUND => {
                self.optional_manifest(&digest.replace(':', "-"), &accept)
                    .await
            }
            status if status.is_success() => Ok(Some(answer.body)),
            _ => Err(self.refusal(&answer, &format!("the referrers of {digest}"))),
        }
    }

    /// Refuses a signature manifest with more layers than [`MAX_SIGNATURE_LAYERS`] or a layer
    /// (or config) over [`MAX_SIGNATURE_LAYER_BYTES`].
    fn check_signature_manifest(&self, name: &str, body: &[u8]) -> Result<(), String> {
        let Ok(manifest) = serde_json::from_slice::<OciImageManifest>(body) else {
            return Ok(());
        };
        if manifest.layers.len() > MAX_SIGNATURE_LAYERS {
            return Err(format!(
                "its signature manifest {name} has {} layers, over the limit of \
                 {MAX_SIGNATURE_LAYERS}: its signatures were not read; sign it anew (cosign \
                 clean, then cosign sign) so that it carries only the signatures in use",
                manifest.layers.len()
            ));
        }
        let blobs = manifest.layers.iter().chain(Some(&manifest.config));
        if let Some(large) = blobs
            .into_iter()
            .find(|d| u64::try_from(d.size).map_or(true, |size| size > MAX_SIGNATURE_LAYER_BYTES))
        {
            return Err(format!(
                "its signature manifest {name} names a blob {} of {} bytes, over the limit of \
                 {MAX_SIGNATURE_LAYER_BYTES} bytes for a signature: its signatures were not read",
                large.digest, large.size
            ));
        }
        Ok(())
    }
}

/// The manifest media types of cosign's signatures and Sigstore bundles.
const SIGNATURE_MANIFESTS: [&str; 2] = [
    oci_client::manifest::OCI_IMAGE_MEDIA_TYPE,
    oci_client::manifest::IMAGE_MANIFEST_MEDIA_TYPE,
];
