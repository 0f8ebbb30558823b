//! The [`Puller`]: pulls a plugin artifact by reference, checked against its digests, the
//! size limit and the verification policy, and pushes one for `plugin push`.

use std::{
    sync::{
        Arc, PoisonError, RwLock,
        atomic::{AtomicU64, Ordering},
    },
    time::Instant,
};

use oci_client::{
    client::{Config, ImageLayer},
    manifest::{
        IMAGE_MANIFEST_LIST_MEDIA_TYPE, IMAGE_MANIFEST_MEDIA_TYPE, OCI_IMAGE_INDEX_MEDIA_TYPE,
        OCI_IMAGE_MEDIA_TYPE, OciImageManifest,
    },
};

use nad_model::digest::sha256_hex;

use super::{
    artifact::{self, Layer, PUSH_CONFIG_MEDIA_TYPE, wasm_layer},
    auth::Auth,
    cache::Cache,
    credentials::Credentials,
    describe::describe,
    fetch,
    options::RegistryOptions,
    reference::OciRef,
    session::{Origin, Settings, SignatureTrouble, State, Verification},
    tls::{RegistryCas, install_crypto_provider},
    verify::{Verified, Verifier},
};
use nad_model::fetch::MAX_PLUGIN_BYTES;

/// The manifest media types asked for a tag: an index too, to be refused with a message of
/// ours rather than as unknown.
const TAGGED_MEDIA_TYPES: [&str; 4] = [
    OCI_IMAGE_MEDIA_TYPE,
    IMAGE_MANIFEST_MEDIA_TYPE,
    OCI_IMAGE_INDEX_MEDIA_TYPE,
    IMAGE_MANIFEST_LIST_MEDIA_TYPE,
];

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
    /// It was had, but its signatures do not pass the verification policy.
    pub unverified: bool,
}

/// Pulls plugin artifacts (and pushes them, for `plugin push`).
pub struct Puller {
    options: RegistryOptions,
    /// Made anew when the settings change, so that no token of the old ones is used again.
    pub(crate) state: RwLock<State>,
    /// Counts the changes of settings: a fetch refused before the last one is worth another
    /// try at once.
    generation: AtomicU64,
    /// Counts the changes of the verification policy (a new one, or none to be had): every
    /// artifact serving is verified again against the policy in force.
    policy_generation: AtomicU64,
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
        // The process's TLS clients use ring (see the function).
        install_crypto_provider();
        Ok(Self {
            options: options.clone(),
            state: RwLock::new(State::new(options, Settings::default())?),
            generation: AtomicU64::new(0),
            policy_generation: AtomicU64::new(0),
            cache: options.cache_dir.clone().map(Cache::new),
            limit: MAX_PLUGIN_BYTES,
        })
    }

    /// Pulls and pushes with `credentials` from now on (`None`: anonymously everywhere).
    pub fn set_credentials(&self, credentials: Option<Credentials>) -> anyhow::Result<()> {
        self.update(|settings| {
            settings.credentials = credentials.map(Arc::new);
            settings.origin = Origin::Flag;
        })
    }

    /// Pulls with the credentials of the Secret `name` (`namespace/name`) from now on; `None`
    /// when it does not exist (anonymously everywhere, and a refusal says to create it).
    pub fn set_secret_credentials(
        &self,
        name: &str,
        credentials: Option<Credentials>,
    ) -> anyhow::Result<()> {
        self.update(|settings| {
            settings.origin = Origin::Secret {
                name: name.to_owned(),
                exists: credentials.is_some(),
            };
            settings.credentials = credentials.map(Arc::new);
        })
    }

    /// Checks every artifact against `verifier`'s policy from now on (`None`: no check).
    pub fn set_policy(&self, verifier: Option<Verifier>) -> anyhow::Result<()> {
        self.update(|settings| {
            settings.verification = match verifier {
                None => Verification::Off,
                Some(verifier) => Verification::Policy(Arc::new(verifier)),
            }
        })?;
        self.policy_generation.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// Refuses every artifact from now on, for `why` (a policy is asked for and cannot be had):
    /// a missing policy never lets unchecked plugins in.
    pub fn set_policy_unavailable(&self, why: String) -> anyhow::Result<()> {
        self.update(|settings| settings.verification = Verification::Unavailable(why))?;
        self.policy_generation.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// Whether artifacts are checked (or, with the policy unavailable, refused).
    pub fn verifies(&self) -> bool {
        let state = self.state.read().unwrap_or_else(PoisonError::into_inner);
        !matches!(state.settings.verification, Verification::Off)
    }

    /// Whether a policy that can be checked with is in force.
    pub fn has_policy(&self) -> bool {
        let state = self.state.read().unwrap_or_else(PoisonError::into_inner);
        matches!(state.settings.verification, Verification::Policy(_))
    }

    /// Checks the signatures of `reference` (which names its digest) against the policy in
    /// force; `None` when there is none.
    pub async fn verify(&self, reference: &OciRef) -> Result<Option<Verified>, FetchError> {
        let state = self
            .state
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let fail = |message: String| FetchError {
            reference: reference.to_string(),
            message,
            unverified: true,
        };
        let verifier = match &state.settings.verification {
            Verification::Off => return Ok(None),
            Verification::Unavailable(why) => return Err(fail(why.clone())),
            Verification::Policy(verifier) => verifier,
        };
        let Some(digest) = reference.digest() else {
            return Err(fail(
                "a signature is checked against a digest: pin it (@sha256:…)".to_owned(),
            ));
        };
        let started = Instant::now();
        let (config, auth) = state
            .signature_session(&self.options, reference, digest)
            .await
            .map_err(|trouble| match trouble {
                SignatureTrouble::Fetch(message) => FetchError {
                    unverified: false,
                    ..fail(message)
                },
                SignatureTrouble::Refused(message) => fail(message),
            })?;
        let deadline = self.options.timeouts.signatures;
        let verifying = verifier.verify(
            config,
            &auth,
            reference.registry(),
            reference.repository(),
            digest,
        );
        let verified = tokio::time::timeout(deadline, verifying)
            .await
            .map_err(|_| FetchError {
                unverified: false,
                ..fail(format!(
                    "reading its signatures from the registry {} took longer than {} s: it is \
                     stalled or too slow, so the check was given up (it is tried again later); \
                     check the registry",
                    reference.registry(),
                    deadline.as_secs_f64()
                ))
            })?
            .map_err(fail)?;
        tracing::info!(
            reference = %reference,
            signatures = verified.signatures,
            signers = ?verified.signers,
            elapsed_ms = started.elapsed().as_secs_f64() * 1e3,
            "plugin artifact's signatures verified"
        );
        Ok(Some(verified))
    }

    /// Trusts `cas` for their registries from now on (in place of the CAs given before).
    pub fn set_cas(&self, cas: RegistryCas) -> anyhow::Result<()> {
        self.update(|settings| settings.cas = Arc::new(cas))
    }

    /// Makes new clients for the settings as `change` leaves them.
    fn update(&self, change: impl FnOnce(&mut Settings)) -> anyhow::Result<()> {
        let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
        let mut settings = state.settings.clone();
        change(&mut settings);
        *state = State::new(&self.options, settings)?;
        self.generation.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// Counts the changes of settings (credentials, CAs).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Counts the changes of the verification policy: an artifact verified before the last one
    /// is verified again before it serves on.
    pub fn policy_generation(&self) -> u64 {
        self.policy_generation.load(Ordering::SeqCst)
    }

    /// The clients of the settings in force.
    fn state(&self) -> State {
        self.state
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// A push client, and how to authenticate with it to `reference`'s registry to write its
    /// repository.
    pub(crate) async fn session(
        &self,
        reference: &OciRef,
        push: bool,
    ) -> Result<(oci_client::Client, Auth), String> {
        self.state().session(&self.options, reference, push).await
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
            unverified: false,
        };
        let started = Instant::now();
        let state = self.state();
        // Asked for only when the registry is: a cached pinned plugin loads without it.
        let access = || async {
            state
                .access(&self.options, reference, false)
                .await
                .map_err(fail)
        };
        let digest = match reference.digest() {
            Some(digest) => digest.to_owned(),
            None => {
                let auth = access().await?;
                let tag = reference.tag().unwrap_or("latest");
                let body = state
                    .repository(&self.options, reference, &auth)
                    .manifest(tag, &TAGGED_MEDIA_TYPES, &format!("tagged {tag}"))
                    .await
                    .map_err(fail)?;
                let digest = format!("sha256:{}", sha256_hex(&body));
                tracing::info!(
                    reference = %reference,
                    %digest,
                    "resolved the plugin's tag to a digest; pin the digest (@{digest}) so that every replica and restart runs the same plugin"
                );
                digest
            }
        };
        // Checked before anything is read, even from the cache: the policy may have changed.
        self.verify(&reference.pinned(&digest)).await?;
        if let Some(pulled) = self.cached(&digest) {
            return Ok(pulled);
        }
        let auth = access().await?;
        let repository = state.repository(&self.options, reference, &auth);
        let body = repository
            .manifest(&digest, &artifact::MANIFEST_MEDIA_TYPES, &digest)
            .await
            .map_err(fail)?;
        let actual = format!("sha256:{}", sha256_hex(&body));
        if actual != digest {
            return Err(fail(format!(
                "the registry's manifest does not match the digest: it is {actual}"
            )));
        }
        let layer = wasm_layer(&body, self.limit).map_err(fail)?;
        let component = self.download(&repository, &layer).await.map_err(fail)?;
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

    /// The layer's bytes, no more than its descriptor says (which the size limit bounds, and
    /// which is held to while reading), within the download timeout, checked against its
    /// digest.
    async fn download(
        &self,
        repository: &fetch::Repository<'_>,
        layer: &Layer,
    ) -> Result<Vec<u8>, String> {
        let what = format!("its Wasm layer {}", layer.digest);
        let answer = repository
            .get(
                &format!("blobs/{}", layer.digest),
                &[],
                layer.size,
                self.options.timeouts.download,
            )
            .await
            .map_err(|e| {
                e.describe(
                    repository.registry,
                    &what,
                    &repository.auth.untrusted,
                    &format!(
                        "its manifest gives the layer {} bytes, and the registry must send no \
                         more; check the registry",
                        layer.size
                    ),
                )
            })?;
        if !answer.status.is_success() {
            return Err(format!(
                "downloading its Wasm layer failed: {}",
                repository.refusal(&answer, &layer.digest)
            ));
        }
        let bytes = answer.body;
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
            unverified: false,
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
