//! How each registry is spoken to: the clients made for one set of settings (the credentials,
//! where they come from, and the registry CAs), and, for one request, the client and the
//! authentication to use. A change of settings makes new clients, so that no token or
//! connection of the old ones is used again.

use std::{collections::HashMap, sync::Arc, time::Duration};

use oci_client::{
    Client,
    client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol},
    secrets::RegistryAuth,
};

use super::{
    Credential, Credentials, OciRef, RegistryOptions,
    tls::RegistryCas,
    token::{Exchanger, Request},
    verify::Verifier,
};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Where the credentials come from, for what a refusal of anonymous access tells to do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) enum Origin {
    /// `--registry-config`, or nothing (the plugin commands).
    #[default]
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

/// What the clients are made for.
#[derive(Debug, Clone, Default)]
pub(super) struct Settings {
    pub(super) credentials: Option<Arc<Credentials>>,
    pub(super) origin: Origin,
    pub(super) cas: Arc<RegistryCas>,
    /// What every artifact is checked against.
    pub(super) verification: Verification,
}

/// Whether artifacts are checked, and against what.
#[derive(Debug, Clone, Default)]
pub(super) enum Verification {
    /// No policy: artifacts load unchecked.
    #[default]
    Off,
    Policy(Arc<Verifier>),
    /// A policy is asked for but none can be had (`why`): nothing loads.
    Unavailable(String),
}

/// The clients of one registry (or of every registry without CAs of its own).
#[derive(Clone)]
struct Link {
    oci: Client,
    /// For token servers.
    http: reqwest::Client,
    /// The registry's CAs (DER), to make more clients with.
    roots: Vec<Vec<u8>>,
}

impl Link {
    fn new(options: &RegistryOptions, roots: Vec<Vec<u8>>) -> anyhow::Result<Self> {
        Ok(Link {
            oci: client(options, &roots)?,
            http: http_client(&roots)?,
            roots,
        })
    }
}

/// The clients of one set of settings.
#[derive(Clone)]
pub(super) struct State {
    pub(super) settings: Settings,
    /// For the registries without CAs of their own.
    default: Link,
    by_registry: HashMap<String, Link>,
    /// Access tokens given for the credentials' identity tokens.
    exchanger: Arc<Exchanger>,
}

impl State {
    pub(super) fn new(options: &RegistryOptions, settings: Settings) -> anyhow::Result<Self> {
        let mut by_registry = HashMap::new();
        for registry in settings.cas.registries() {
            let roots = settings
                .cas
                .for_registry(registry)
                .map(|b| b.certificates.clone())
                .unwrap_or_default();
            by_registry.insert(registry.to_owned(), Link::new(options, roots)?);
        }
        Ok(State {
            settings,
            default: Link::new(options, Vec::new())?,
            by_registry,
            exchanger: Arc::new(Exchanger::new()),
        })
    }

    fn link(&self, registry: &str) -> &Link {
        self.by_registry
            .get(&registry.to_ascii_lowercase())
            .unwrap_or(&self.default)
    }

    /// A client, and how to authenticate with it to `reference`'s registry to read (or also
    /// write) its repository.
    pub(super) async fn session(
        &self,
        options: &RegistryOptions,
        reference: &OciRef,
        push: bool,
    ) -> Result<(Client, Auth), String> {
        let registry = reference.registry();
        let link = self.link(registry);
        let untrusted = self.settings.cas.remedy(registry);
        let found = self
            .settings
            .credentials
            .as_deref()
            .and_then(|all| Some((all.source(), all.for_registry(registry)?)));
        let Some((source, credential)) = found else {
            let who = Who::Anonymous {
                remedy: self.settings.origin.remedy(registry),
            };
            let auth = Auth::new(RegistryAuth::Anonymous, who, untrusted);
            return Ok((link.oci.clone(), auth));
        };
        let who = Who::Credential {
            source: source.to_owned(),
            kind: credential.kind(),
        };
        let auth = match credential {
            Credential::Basic { username, password } => {
                let basic = RegistryAuth::Basic(username.clone(), password.clone());
                Auth::new(basic, who, untrusted)
            }
            Credential::RegistryToken(token) => Auth {
                expires: jwt_expiry(token),
                ..Auth::new(RegistryAuth::Bearer(token.clone()), who, untrusted)
            },
            Credential::IdentityToken(refresh_token) => {
                let request = Request {
                    http: &link.http,
                    scheme: if options.http.iter().any(|h| h == registry) {
                        "http"
                    } else {
                        "https"
                    },
                    registry,
                    repository: reference.repository(),
                    push,
                    refresh_token,
                    source,
                };
                let access = self.exchanger.access_token(&request).await?;
                // `oci-client` keeps the first bearer token it is given for a registry, for
                // every repository: a client of its own for this one's.
                let client = client(options, &link.roots).map_err(|e| e.to_string())?;
                let auth = Auth::new(RegistryAuth::Bearer(access), who, untrusted);
                return Ok((client, auth));
            }
        };
        Ok((link.oci.clone(), auth))
    }
}

impl State {
    /// How the signatures of `reference` are read: the signature client's configuration (the
    /// registry's protocol and CAs) and authentication.
    pub(super) async fn signature_session(
        &self,
        options: &RegistryOptions,
        reference: &OciRef,
    ) -> Result<(sigstore::registry::ClientConfig, sigstore::registry::Auth), String> {
        use sigstore::registry::{
            Auth as SignatureAuth, Certificate as SignatureCertificate,
            CertificateEncoding as SignatureEncoding, ClientConfig as SignatureConfig,
            ClientProtocol as SignatureProtocol,
        };
        let (_, auth) = self.session(options, reference, false).await?;
        let config = SignatureConfig {
            protocol: if options.http.is_empty() {
                SignatureProtocol::Https
            } else {
                SignatureProtocol::HttpsExcept(options.http.clone())
            },
            extra_root_certificates: self
                .link(reference.registry())
                .roots
                .iter()
                .map(|der| SignatureCertificate {
                    encoding: SignatureEncoding::Der,
                    data: der.clone(),
                })
                .collect(),
            ..SignatureConfig::default()
        };
        let auth = match auth.registry_auth {
            RegistryAuth::Basic(user, password) => SignatureAuth::Basic(user, password),
            RegistryAuth::Bearer(token) => SignatureAuth::Bearer(token),
            _ => SignatureAuth::Anonymous,
        };
        Ok((config, auth))
    }
}

/// A registry client (plain HTTP to the registries `options` name), trusting `roots` (DER) as
/// well as the system's CAs.
fn client(options: &RegistryOptions, roots: &[Vec<u8>]) -> anyhow::Result<Client> {
    let protocol = if options.http.is_empty() {
        ClientProtocol::Https
    } else {
        ClientProtocol::HttpsExcept(options.http.clone())
    };
    let config = ClientConfig {
        protocol,
        connect_timeout: Some(CONNECT_TIMEOUT),
        read_timeout: Some(READ_TIMEOUT),
        // A plugin is one manifest: an index is refused with a message of ours.
        platform_resolver: None,
        extra_root_certificates: roots
            .iter()
            .map(|der| Certificate {
                encoding: CertificateEncoding::Der,
                data: der.clone(),
            })
            .collect(),
        ..ClientConfig::default()
    };
    Ok(Client::try_from(config)?)
}

/// The client token servers are asked with, with the timeouts and roots of [`client`].
fn http_client(roots: &[Vec<u8>]) -> anyhow::Result<reqwest::Client> {
    let roots = roots
        .iter()
        .map(|der| reqwest::Certificate::from_der(der))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(READ_TIMEOUT)
        .tls_certs_merge(roots)
        .build()?)
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oci::Puller;

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
}
