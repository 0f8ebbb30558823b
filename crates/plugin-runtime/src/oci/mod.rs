//! Plugins as OCI artifacts, the convention of Kubewarden, Istio's WasmPlugin and Spin: a
//! source names `oci://<registry>/<repository>@sha256:<digest>` (a tag is resolved to a digest
//! and logged), the [`Puller`] fetches the manifest and its one Wasm layer with `oci-client`,
//! checks both against their digests and the size limit (before downloading the layer), and
//! keeps them on disk by digest ([`Cache`]): a pinned plugin that was pulled once loads again
//! without the registry.

mod artifact;
mod cache;
mod reference;

use std::{path::PathBuf, time::Instant};

use futures::StreamExt as _;
use oci_client::{
    Client,
    client::{ClientConfig, ClientProtocol, Config, ImageLayer},
    errors::{OciDistributionError, OciErrorCode},
    manifest::{OCI_IMAGE_MEDIA_TYPE, OciImageManifest},
    secrets::RegistryAuth,
};

pub use artifact::{
    LAYER_MEDIA_TYPES, Layer, PUSH_CONFIG_MEDIA_TYPE, PUSH_LAYER_MEDIA_TYPE, wasm_layer,
};
pub use cache::Cache;
pub use reference::{OciRef, SCHEME};

use super::{MAX_PLUGIN_BYTES, pipeline::sha256_hex};

/// How the controller reaches registries.
#[derive(Debug, Clone, Default)]
pub struct RegistryOptions {
    /// Registries (`host[:port]`) spoken to over plain HTTP, not HTTPS.
    pub http: Vec<String>,
    /// Where pulled artifacts are kept by digest; `None` keeps none.
    pub cache_dir: Option<PathBuf>,
}

/// A plugin artifact, pulled and checked.
#[derive(Debug, Clone)]
pub struct Pulled {
    /// The manifest's digest (the reference's, or its tag's when it had none).
    pub digest: String,
    pub layer: Layer,
    pub component: Vec<u8>,
    /// Read from the cache, not the registry.
    pub cached: bool,
}

/// Why a plugin artifact could not be had.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{reference}: {message}")]
pub struct FetchError {
    pub reference: String,
    pub message: String,
}

/// Pulls plugin artifacts (and pushes them, for `plugin push`).
pub struct Puller {
    client: Client,
    cache: Option<Cache>,
    limit: u64,
}

impl std::fmt::Debug for Puller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Puller")
            .field("cache", &self.cache)
            .finish_non_exhaustive()
    }
}

impl Puller {
    pub fn new(options: &RegistryOptions) -> anyhow::Result<Self> {
        // reqwest's rustls is built without a crypto provider: use ring, as kube does. A second
        // install (another Puller) is refused harmlessly.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let protocol = if options.http.is_empty() {
            ClientProtocol::Https
        } else {
            ClientProtocol::HttpsExcept(options.http.clone())
        };
        let config = ClientConfig {
            protocol,
            connect_timeout: Some(std::time::Duration::from_secs(5)),
            read_timeout: Some(std::time::Duration::from_secs(30)),
            // A plugin is one manifest: an index is refused with a message of ours.
            platform_resolver: None,
            ..ClientConfig::default()
        };
        Ok(Self {
            client: Client::try_from(config)?,
            cache: options.cache_dir.clone().map(Cache::new),
            limit: MAX_PLUGIN_BYTES,
        })
    }

    /// A puller whose size limit is `limit` bytes (tests of the limit).
    pub fn with_limit(mut self, limit: u64) -> Self {
        self.limit = limit;
        self
    }

    /// The artifact `reference` names: from the cache when its digest is there, otherwise from
    /// the registry (and then cached).
    pub async fn pull(&self, reference: &OciRef) -> Result<Pulled, FetchError> {
        let fail = |message: String| FetchError {
            reference: reference.to_string(),
            message,
        };
        let started = Instant::now();
        let digest = match reference.digest() {
            Some(digest) => digest.to_owned(),
            None => {
                let digest = self
                    .client
                    .fetch_manifest_digest(reference.reference(), &RegistryAuth::Anonymous)
                    .await
                    .map_err(|e| fail(describe(&e, reference, "its tag")))?;
                tracing::info!(
                    reference = %reference,
                    %digest,
                    "resolved the plugin's tag to a digest; pin the digest (@{digest}) so that every replica and restart runs the same plugin"
                );
                digest
            }
        };
        if let Some(pulled) = self.cached(&digest) {
            return Ok(pulled);
        }
        let pinned = reference.at(&digest);
        let (body, _) = self
            .client
            .pull_manifest_raw(
                &pinned,
                &RegistryAuth::Anonymous,
                &artifact::MANIFEST_MEDIA_TYPES,
            )
            .await
            .map_err(|e| fail(describe(&e, reference, &digest)))?;
        let actual = format!("sha256:{}", sha256_hex(&body));
        if actual != digest {
            return Err(fail(format!(
                "the registry's manifest does not match the digest: it is {actual}"
            )));
        }
        let layer = wasm_layer(&body, self.limit).map_err(fail)?;
        let component = self.download(&pinned, &layer).await.map_err(fail)?;
        if let Some(cache) = &self.cache {
            for (digest, bytes) in [(&layer.digest, &component[..]), (&digest, &body[..])] {
                if let Err(e) = cache.put(digest, bytes) {
                    tracing::warn!(dir = %cache.dir().display(), error = %e, "cannot cache a pulled plugin: it is pulled again at the next start (give --plugin-cache-dir a writable directory)");
                }
            }
        }
        tracing::info!(
            reference = %reference,
            %digest,
            media_type = %layer.media_type,
            bytes = component.len(),
            elapsed_ms = started.elapsed().as_secs_f64() * 1e3,
            "plugin artifact pulled"
        );
        Ok(Pulled {
            digest,
            layer,
            component,
            cached: false,
        })
    }

    /// The artifact of manifest `digest`, if the cache holds it whole.
    fn cached(&self, digest: &str) -> Option<Pulled> {
        let cache = self.cache.as_ref()?;
        let body = cache.get(digest)?;
        let layer = wasm_layer(&body, self.limit).ok()?;
        let component = cache.get(&layer.digest)?;
        Some(Pulled {
            digest: digest.to_owned(),
            layer,
            component,
            cached: true,
        })
    }

    /// The layer's bytes, no more than its descriptor says, checked against its digest.
    async fn download(&self, at: &oci_client::Reference, layer: &Layer) -> Result<Vec<u8>, String> {
        let mut stream = self
            .client
            .pull_blob_stream(at, layer.digest.as_str())
            .await
            .map_err(|e| describe_blob(&e, &layer.digest))?;
        let mut bytes = Vec::with_capacity(usize::try_from(layer.size).unwrap_or(0));
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| {
                format!(
                    "downloading its Wasm layer {} failed: {}",
                    layer.digest,
                    innermost(&e)
                )
            })?;
            if (bytes.len() + chunk.len()) as u64 > layer.size {
                return Err(format!(
                    "the registry sent more than the {} bytes its manifest gives for the Wasm layer",
                    layer.size
                ));
            }
            bytes.extend_from_slice(&chunk);
        }
        let actual = format!("sha256:{}", sha256_hex(&bytes));
        if actual != layer.digest {
            return Err(format!(
                "its Wasm layer does not match its digest {}: it is {actual}",
                layer.digest
            ));
        }
        Ok(bytes)
    }

    /// Publishes `component` as a plugin artifact at `reference` (a tag, or none): one layer
    /// of `media_type` (the CNCF Wasm layout's is [`PUSH_LAYER_MEDIA_TYPE`]); returns the
    /// manifest's digest.
    pub async fn push(
        &self,
        reference: &OciRef,
        component: &[u8],
        media_type: &str,
        annotations: std::collections::BTreeMap<String, String>,
    ) -> Result<String, FetchError> {
        let fail = |message: String| FetchError {
            reference: reference.to_string(),
            message,
        };
        let layer = ImageLayer::new(component.to_vec(), media_type.to_owned(), None);
        let config = Config::new(b"{}".to_vec(), PUSH_CONFIG_MEDIA_TYPE.to_owned(), None);
        let mut manifest =
            OciImageManifest::build(std::slice::from_ref(&layer), &config, Some(annotations));
        manifest.media_type = Some(OCI_IMAGE_MEDIA_TYPE.to_owned());
        let body = serde_json::to_vec(&manifest).map_err(|e| fail(e.to_string()))?;
        let digest = format!("sha256:{}", sha256_hex(&body));
        let target = match reference.tag() {
            Some(_) => reference.reference().clone(),
            None => reference.at(&digest),
        };
        let auth = RegistryAuth::Anonymous;
        self.client
            .store_auth_if_needed(target.resolve_registry(), &auth)
            .await;
        for (data, digest) in [
            (layer.data.clone(), layer.sha256_digest()),
            (config.data.clone(), config.sha256_digest()),
        ] {
            self.client
                .push_blob(&target, data, &digest)
                .await
                .map_err(|e| fail(describe(&e, reference, &digest)))?;
        }
        let content_type = http::HeaderValue::from_static(OCI_IMAGE_MEDIA_TYPE);
        self.client
            .push_manifest_raw(&target, body, content_type)
            .await
            .map_err(|e| fail(describe(&e, reference, &digest)))?;
        Ok(digest)
    }
}

/// An `oci-client` error in an operator's terms; `what` is the digest or tag asked for.
fn describe(e: &OciDistributionError, reference: &OciRef, what: &str) -> String {
    let (registry, repository) = (reference.registry(), reference.repository());
    match e {
        OciDistributionError::RequestError(e) if e.is_connect() => {
            format!("cannot reach the registry {registry}: {}", innermost(e))
        }
        OciDistributionError::RequestError(e) if e.is_timeout() => {
            format!("the registry {registry} did not answer in time")
        }
        OciDistributionError::RequestError(e) => {
            format!(
                "the request to the registry {registry} failed: {}",
                innermost(e)
            )
        }
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
                    unauthorized(registry, repository)
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
        | OciDistributionError::AuthenticationFailure(_) => unauthorized(registry, repository),
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

fn unauthorized(registry: &str, repository: &str) -> String {
    format!(
        "the registry {registry} refused anonymous access to {repository}: make the repository \
         public, or copy the plugin to a registry the controller can read anonymously"
    )
}

fn describe_blob(e: &OciDistributionError, digest: &str) -> String {
    match e {
        OciDistributionError::RequestError(e) => {
            format!(
                "downloading its Wasm layer {digest} failed: {}",
                innermost(e)
            )
        }
        other => format!("downloading its Wasm layer {digest} failed: {other}"),
    }
}

/// The deepest cause of an error: `Connection refused (os error 111)` rather than reqwest's
/// `error sending request`.
fn innermost(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}
