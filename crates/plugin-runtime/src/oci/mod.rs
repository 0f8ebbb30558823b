//! Plugins as OCI artifacts, the convention of Kubewarden, Istio's WasmPlugin and Spin: a
//! source names `oci://<registry>/<repository>@sha256:<digest>` (a tag is resolved to a digest
//! and logged), the [`Puller`] fetches the manifest and its one Wasm layer with `oci-client`,
//! checks both against their digests and the size limit (before downloading the layer), and
//! keeps them on disk by digest ([`Cache`]): a pinned plugin that was pulled once loads again
//! without the registry. A registry the [`Credentials`] name is spoken to with its credential,
//! never anonymously.

mod artifact;
mod cache;
mod credentials;
mod reference;
mod token;

use std::{
    path::PathBuf,
    sync::{
        Arc, PoisonError, RwLock,
        atomic::{AtomicU64, Ordering},
    },
    time::Instant,
};

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
pub use credentials::{Credential, Credentials, CredentialsError};
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
    options: RegistryOptions,
    /// Made anew when the credentials change, so that no token of the old ones is used again.
    state: RwLock<State>,
    /// Counts the changes of credentials: a fetch refused before the last one is worth
    /// another try at once.
    generation: AtomicU64,
    cache: Option<Cache>,
    limit: u64,
}

/// Where the credentials come from, for what a refusal of anonymous access tells to do.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Origin {
    /// `--registry-config`, or nothing (the plugin commands).
    Flag,
    /// A Secret (`namespace/name`) watched by name, which exists or not.
    Secret { name: String, exists: bool },
}

impl Origin {
    /// What to do when `registry` refuses anonymous access.
    fn remedy(&self, registry: &str) -> String {
        match self {
            Origin::Flag => format!(
                "give a credential for {registry} (--registry-config), or make the repository \
                 public"
            ),
            Origin::Secret { name, exists: true } => format!(
                "give a credential for {registry} in the Secret {name}, or make the repository \
                 public"
            ),
            Origin::Secret {
                name,
                exists: false,
            } => format!(
                "the Secret {name} that is to hold the credential for {registry} does not exist: \
                 create it (kubectl create secret docker-registry --docker-server={registry}), \
                 or make the repository public"
            ),
        }
    }
}

/// The clients of one set of credentials.
#[derive(Clone)]
struct State {
    client: Client,
    credentials: Option<Arc<Credentials>>,
    origin: Origin,
    /// Access tokens given for the credentials' identity tokens.
    exchanger: Arc<token::Exchanger>,
}

impl State {
    fn new(
        options: &RegistryOptions,
        credentials: Option<Credentials>,
        origin: Origin,
    ) -> anyhow::Result<Self> {
        Ok(State {
            client: client(options)?,
            credentials: credentials.map(Arc::new),
            origin,
            exchanger: Arc::new(token::Exchanger::new(http_client()?)),
        })
    }
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
        Ok(Self {
            options: options.clone(),
            state: RwLock::new(State::new(options, None, Origin::Flag)?),
            generation: AtomicU64::new(0),
            cache: options.cache_dir.clone().map(Cache::new),
            limit: MAX_PLUGIN_BYTES,
        })
    }

    /// Pulls and pushes with `credentials` from now on (`None`: anonymously everywhere).
    pub fn set_credentials(&self, credentials: Option<Credentials>) -> anyhow::Result<()> {
        self.swap(State::new(&self.options, credentials, Origin::Flag)?);
        Ok(())
    }

    /// Pulls with the credentials of the Secret `name` (`namespace/name`) from now on; `None`
    /// when it does not exist (anonymously everywhere, and a refusal says to create it).
    pub fn set_secret_credentials(
        &self,
        name: &str,
        credentials: Option<Credentials>,
    ) -> anyhow::Result<()> {
        let origin = Origin::Secret {
            name: name.to_owned(),
            exists: credentials.is_some(),
        };
        self.swap(State::new(&self.options, credentials, origin)?);
        Ok(())
    }

    fn swap(&self, fresh: State) {
        *self.state.write().unwrap_or_else(PoisonError::into_inner) = fresh;
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// Counts the changes of credentials.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// A client, and how to authenticate with it to `reference`'s registry to read (or also
    /// write) its repository.
    async fn session(&self, reference: &OciRef, push: bool) -> Result<(Client, Auth), String> {
        let state = self
            .state
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let registry = reference.registry();
        let found = state
            .credentials
            .as_deref()
            .and_then(|all| Some((all.source(), all.for_registry(registry)?)));
        let Some((source, credential)) = found else {
            let auth = Auth::anonymous(state.origin.remedy(registry));
            return Ok((state.client, auth));
        };
        let who = Who::Credential {
            source: source.to_owned(),
            kind: credential.kind(),
        };
        let (registry_auth, expires) = match credential {
            Credential::Basic { username, password } => (
                RegistryAuth::Basic(username.clone(), password.clone()),
                None,
            ),
            Credential::RegistryToken(token) => {
                (RegistryAuth::Bearer(token.clone()), jwt_expiry(token))
            }
            Credential::IdentityToken(refresh_token) => {
                let request = token::Request {
                    scheme: self.scheme(registry),
                    registry,
                    repository: reference.repository(),
                    push,
                    refresh_token,
                    source,
                };
                let access = state.exchanger.access_token(&request).await?;
                // `oci-client` keeps the first bearer token it is given for a registry, for
                // every repository: a client of its own for this one's.
                let client = client(&self.options).map_err(|e| e.to_string())?;
                let auth = Auth {
                    registry_auth: RegistryAuth::Bearer(access),
                    who,
                    expires: None,
                };
                return Ok((client, auth));
            }
        };
        let auth = Auth {
            registry_auth,
            who,
            expires,
        };
        Ok((state.client, auth))
    }

    /// How `registry` is spoken to: `http` if the options name it, otherwise `https`.
    fn scheme(&self, registry: &str) -> &'static str {
        if self.options.http.iter().any(|h| h == registry) {
            "http"
        } else {
            "https"
        }
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
        // Asked for only when the registry is: a cached pinned plugin loads without it.
        let session = || async { self.session(reference, false).await.map_err(fail) };
        let digest = match reference.digest() {
            Some(digest) => digest.to_owned(),
            None => {
                let (client, auth) = session().await?;
                let digest = client
                    .fetch_manifest_digest(reference.reference(), &auth.registry_auth)
                    .await
                    .map_err(|e| fail(describe(&e, reference, "its tag", &auth)))?;
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
        let (client, auth) = session().await?;
        let (body, _) = client
            .pull_manifest_raw(
                &pinned,
                &auth.registry_auth,
                &artifact::MANIFEST_MEDIA_TYPES,
            )
            .await
            .map_err(|e| fail(describe(&e, reference, &digest, &auth)))?;
        let actual = format!("sha256:{}", sha256_hex(&body));
        if actual != digest {
            return Err(fail(format!(
                "the registry's manifest does not match the digest: it is {actual}"
            )));
        }
        let layer = wasm_layer(&body, self.limit).map_err(fail)?;
        let component = self
            .download(&client, &pinned, &layer)
            .await
            .map_err(fail)?;
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
    async fn download(
        &self,
        client: &Client,
        at: &oci_client::Reference,
        layer: &Layer,
    ) -> Result<Vec<u8>, String> {
        let mut stream = client
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
        let (client, auth) = self.session(reference, true).await.map_err(fail)?;
        client
            .store_auth_if_needed(target.resolve_registry(), &auth.registry_auth)
            .await;
        for (data, digest) in [
            (layer.data.clone(), layer.sha256_digest()),
            (config.data.clone(), config.sha256_digest()),
        ] {
            client
                .push_blob(&target, data, &digest)
                .await
                .map_err(|e| fail(describe(&e, reference, &digest, &auth)))?;
        }
        let content_type = http::HeaderValue::from_static(OCI_IMAGE_MEDIA_TYPE);
        client
            .push_manifest_raw(&target, body, content_type)
            .await
            .map_err(|e| fail(describe(&e, reference, &digest, &auth)))?;
        Ok(digest)
    }
}

/// The client every registry is spoken to with (plain HTTP to those `options` name).
fn client(options: &RegistryOptions) -> anyhow::Result<Client> {
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
    Ok(Client::try_from(config)?)
}

/// The client token servers are asked with, with the timeouts of [`client`].
fn http_client() -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .connect_timeout(std::time::Duration::from_secs(5))
        .timeout(std::time::Duration::from_secs(30))
        .build()?)
}

/// How one registry is spoken to: anonymously, or with a credential from a named source.
struct Auth {
    registry_auth: RegistryAuth,
    who: Who,
    /// When a registry token that is a JWT expires (its `exp`, seconds since the epoch).
    expires: Option<u64>,
}

/// Who asks the registry, for what a refusal says.
#[derive(Debug, PartialEq, Eq)]
enum Who {
    /// No one: `remedy` tells how to give a credential.
    Anonymous { remedy: String },
    /// A credential of `kind` (`user name and password`) from `source` (`Secret nsc/pull`).
    Credential { source: String, kind: &'static str },
}

impl Auth {
    fn anonymous(remedy: String) -> Self {
        Auth {
            registry_auth: RegistryAuth::Anonymous,
            who: Who::Anonymous { remedy },
            expires: None,
        }
    }
}

/// The `exp` claim of a token that is a JWT, read without checking its signature: it only
/// explains a refusal.
fn jwt_expiry(token: &str) -> Option<u64> {
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

/// An `oci-client` error in an operator's terms; `what` is the digest or tag asked for.
fn describe(e: &OciDistributionError, reference: &OciRef, what: &str, auth: &Auth) -> String {
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

fn unauthorized(registry: &str, repository: &str, auth: &Auth) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn each_registry_gets_its_own_credential_and_the_others_none() {
        let credentials = Credentials::parse(
            "Secret nsc/pull",
            br#"{"auths": {"tokens.example": {"registrytoken": "t"},
                           "users.example": {"username": "u", "password": "p"}}}"#,
        )
        .unwrap();
        let puller = Puller::new(&RegistryOptions::default()).unwrap();
        puller.set_credentials(Some(credentials)).unwrap();
        let auth = |registry: &str| {
            let reference = OciRef::parse(&format!("oci://{registry}/team/plugin:v1")).unwrap();
            let puller = &puller;
            async move { puller.session(&reference, false).await.unwrap().1 }
        };
        let bearer = auth("tokens.example").await;
        assert!(matches!(&bearer.registry_auth, RegistryAuth::Bearer(t) if t == "t"));
        assert_eq!(
            bearer.who,
            Who::Credential {
                source: "Secret nsc/pull".to_owned(),
                kind: "registry token"
            }
        );
        let basic = auth("users.example").await.registry_auth;
        assert!(matches!(basic, RegistryAuth::Basic(u, p) if u == "u" && p == "p"));
        let other = auth("other.example").await;
        assert!(matches!(other.registry_auth, RegistryAuth::Anonymous));
        assert!(
            matches!(&other.who, Who::Anonymous { remedy } if remedy.contains("(--registry-config)"))
        );
        puller.set_credentials(None).unwrap();
        let dropped = auth("users.example").await;
        assert!(matches!(dropped.registry_auth, RegistryAuth::Anonymous));
    }

    #[tokio::test]
    async fn a_secrets_credentials_replace_the_last_and_a_missing_secret_is_named() {
        let puller = Puller::new(&RegistryOptions::default()).unwrap();
        let before = puller.generation();
        let credentials = Credentials::parse(
            "Secret nsc/pull",
            br#"{"auths": {"users.example": {"username": "u", "password": "p"}}}"#,
        )
        .unwrap();
        puller
            .set_secret_credentials("nsc/pull", Some(credentials))
            .unwrap();
        assert_eq!(puller.generation(), before + 1);
        let session = |registry: &str| {
            let reference = OciRef::parse(&format!("oci://{registry}/team/plugin:v1")).unwrap();
            let puller = &puller;
            async move { puller.session(&reference, false).await.unwrap().1.who }
        };
        let Who::Anonymous { remedy } = session("other.example").await else {
            panic!("anonymous where the Secret names nothing")
        };
        assert_eq!(
            remedy,
            "give a credential for other.example in the Secret nsc/pull, or make the repository public"
        );
        puller.set_secret_credentials("nsc/pull", None).unwrap();
        assert_eq!(puller.generation(), before + 2);
        let Who::Anonymous { remedy } = session("users.example").await else {
            panic!("anonymous once the Secret is gone")
        };
        assert!(
            remedy.starts_with("the Secret nsc/pull that is to hold the credential for users.example does not exist: create it"),
            "{remedy}"
        );
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
            registry_auth: RegistryAuth::Anonymous,
            who: Who::Credential {
                source: "Secret nsc/pull".to_owned(),
                kind: "registry token",
            },
            expires,
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
