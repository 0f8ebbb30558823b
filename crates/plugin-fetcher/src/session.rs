//! How each registry is spoken to: the clients made for one set of settings (the credentials,
//! where they come from, and the registry CAs), and, for one request, the client and the
//! authentication to use. A change of settings makes new clients, so that no token or
//! connection of the old ones is used again.

use std::{collections::HashMap, sync::Arc};

use oci_client::{
    Client,
    client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol},
    secrets::RegistryAuth,
};

use super::{
    Credential, Credentials, OciRef, RegistryOptions, Timeouts,
    auth::{Auth, Who, jwt_expiry},
    tls::RegistryCas,
    token::{Exchanger, Given, Request, same_origin},
    verify::Verifier,
};

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
    /// For pushes.
    oci: Client,
    /// For manifests and blobs, read by [`super::fetch`].
    content: reqwest::Client,
    /// For the registry's challenge and its token server: no redirect to another host.
    token: reqwest::Client,
    /// The registry's CAs (DER), to make more clients with.
    roots: Vec<Vec<u8>>,
}

impl Link {
    fn new(options: &RegistryOptions, roots: Vec<Vec<u8>>) -> anyhow::Result<Self> {
        Ok(Link {
            oci: client(options, &roots)?,
            content: content_client(&roots, &options.timeouts)?,
            token: token_client(&roots, &options.timeouts)?,
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

    /// The credential for `registry` and its source, if any, and who asks with it.
    fn credential(&self, registry: &str) -> (Option<(&str, &Credential)>, Who) {
        let found = self
            .settings
            .credentials
            .as_deref()
            .and_then(|all| Some((all.source(), all.for_registry(registry)?)));
        let who = match found {
            None => Who::Anonymous {
                remedy: self.settings.origin.remedy(registry),
            },
            Some((source, credential)) => Who::Credential {
                source: source.to_owned(),
                kind: credential.kind(),
            },
        };
        (found, who)
    }

    /// How to authenticate to `reference`'s registry to read (or also write) its repository:
    /// a registry token as it is, anything else exchanged for an access token if the registry
    /// asks for tokens.
    pub(super) async fn access(
        &self,
        options: &RegistryOptions,
        reference: &OciRef,
        push: bool,
    ) -> Result<Auth, String> {
        let registry = reference.registry();
        let untrusted = self.settings.cas.remedy(registry);
        let (found, who) = self.credential(registry);
        let (source, given) = match (found, &who) {
            (Some((_, Credential::RegistryToken(token))), _) => {
                return Ok(Auth {
                    expires: jwt_expiry(token),
                    ..Auth::new(RegistryAuth::Bearer(token.clone()), who, untrusted)
                });
            }
            (Some((source, Credential::Basic { username, password })), _) => {
                (source, Given::Password { username, password })
            }
            (Some((source, Credential::IdentityToken(token))), _) => {
                (source, Given::Refresh(token))
            }
            (None, Who::Anonymous { remedy }) => ("", Given::Anonymous { remedy }),
            (None, Who::Credential { .. }) => ("", Given::Anonymous { remedy: "" }),
        };
        let request = Request {
            http: &self.link(registry).token,
            scheme: scheme(options, registry),
            registry,
            repository: reference.repository(),
            push,
            given,
            source,
            plain_http: &options.http,
            deadline: options.timeouts.request,
            untrusted: &untrusted,
        };
        let registry_auth = self.exchanger.access(&request).await?;
        Ok(Auth::new(registry_auth, who, untrusted))
    }

    /// A push client, and how to authenticate with it to `reference`'s registry to write its
    /// repository.
    pub(super) async fn session(
        &self,
        options: &RegistryOptions,
        reference: &OciRef,
        push: bool,
    ) -> Result<(Client, Auth), String> {
        let auth = self.access(options, reference, push).await?;
        let link = self.link(reference.registry());
        let client = match auth.registry_auth {
            // `oci-client` keeps the first bearer token it is given for a registry, for every
            // repository: a client of its own for this one's.
            RegistryAuth::Bearer(_) => client(options, &link.roots).map_err(|e| e.to_string())?,
            _ => link.oci.clone(),
        };
        Ok((client, auth))
    }

    /// How the manifests and blobs of `reference`'s repository are read, authenticated with
    /// `auth`.
    pub(super) fn repository<'a>(
        &'a self,
        options: &'a RegistryOptions,
        reference: &'a OciRef,
        auth: &'a Auth,
    ) -> super::fetch::Repository<'a> {
        let registry = reference.registry();
        super::fetch::Repository {
            client: &self.link(registry).content,
            scheme: scheme(options, registry),
            registry,
            repository: reference.repository(),
            auth,
            deadline: options.timeouts.request,
        }
    }
}

/// How `registry` is spoken to: `http` if it is listed as plain HTTP, otherwise `https`.
fn scheme(options: &RegistryOptions, registry: &str) -> &'static str {
    if options.http.iter().any(|h| h == registry) {
        "http"
    } else {
        "https"
    }
}

impl State {
    /// How the signatures of `reference` are read: the signature client's configuration (the
    /// registry's protocol and CAs) and authentication (an access token where the registry
    /// asks for tokens: the signature client is never given a password to send to a token
    /// server), after checking that they are few and small enough for it to read.
    pub(super) async fn signature_session(
        &self,
        options: &RegistryOptions,
        reference: &OciRef,
        digest: &str,
    ) -> Result<(sigstore::registry::ClientConfig, sigstore::registry::Auth), SignatureTrouble>
    {
        use sigstore::registry::{
            Auth as SignatureAuth, Certificate as SignatureCertificate,
            CertificateEncoding as SignatureEncoding, ClientConfig as SignatureConfig,
            ClientProtocol as SignatureProtocol,
        };
        let auth = self
            .access(options, reference, false)
            .await
            .map_err(SignatureTrouble::Fetch)?;
        self.repository(options, reference, &auth)
            .check_signatures(digest)
            .await
            .map_err(SignatureTrouble::Refused)?;
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

/// Why the signatures of an artifact could not be read.
pub(super) enum SignatureTrouble {
    /// The registry could not be read.
    Fetch(String),
    /// They are too many or too large to read.
    Refused(String),
}

/// A registry client for pushes (plain HTTP to the registries `options` name), trusting
/// `roots` (DER) as well as the system's CAs.
fn client(options: &RegistryOptions, roots: &[Vec<u8>]) -> anyhow::Result<Client> {
    let protocol = if options.http.is_empty() {
        ClientProtocol::Https
    } else {
        ClientProtocol::HttpsExcept(options.http.clone())
    };
    let config = ClientConfig {
        protocol,
        connect_timeout: Some(options.timeouts.connect),
        read_timeout: Some(options.timeouts.request),
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

fn roots(roots: &[Vec<u8>]) -> anyhow::Result<Vec<reqwest::Certificate>> {
    Ok(roots
        .iter()
        .map(|der| reqwest::Certificate::from_der(der))
        .collect::<Result<Vec<_>, _>>()?)
}

/// The client manifests and blobs are read with: it follows redirects (blob storage), and
/// drops the `Authorization` header on one to another host. It has no timeout but the
/// connect one: [`super::fetch::read`] bounds each answer whole (a timeout per read would not
/// end a trickle). It keeps no idle connection: pulls are
/// few (a plugin at a load), and one the registry closed meanwhile (a restart) would fail the
/// next pull (`connection closed before message completed`) instead of a new connection
/// serving it.
fn content_client(roots: &[Vec<u8>], timeouts: &Timeouts) -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .connect_timeout(timeouts.connect)
        .tls_certs_merge(self::roots(roots)?)
        .build()?)
}

/// The client registries' challenges and token servers are asked with: a redirect to another
/// scheme, host or port is not followed (its answer is the redirect), so that a credential
/// reaches only the server the registry names. Its answers are bounded by
/// [`super::fetch::read`] and no idle connection is kept, as for [`content_client`].
fn token_client(roots: &[Vec<u8>], timeouts: &Timeouts) -> anyhow::Result<reqwest::Client> {
    let policy = reqwest::redirect::Policy::custom(|attempt| {
        let same = attempt
            .previous()
            .last()
            .is_some_and(|previous| same_origin(previous, attempt.url()));
        if same && attempt.previous().len() < 5 {
            attempt.follow()
        } else {
            attempt.stop()
        }
    });
    Ok(reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .connect_timeout(timeouts.connect)
        .redirect(policy)
        .tls_certs_merge(self::roots(roots)?)
        .build()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Puller;

    /// The credential `puller` gives `registry`, and who asks with it.
    fn chosen(puller: &Puller, registry: &str) -> (Option<Credential>, Who) {
        let state = puller
            .state
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let (found, who) = state.credential(registry);
        (found.map(|(_, c)| c.clone()), who)
    }

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
        // A registry token is used as it is, without asking the registry anything.
        let reference = OciRef::parse("oci://tokens.example/team/plugin:v1").unwrap();
        let bearer = puller.session(&reference, false).await.unwrap().1;
        assert!(matches!(&bearer.registry_auth, RegistryAuth::Bearer(t) if t == "t"));
        assert_eq!(
            bearer.who,
            Who::Credential {
                source: "Secret nsc/pull".to_owned(),
                kind: "registry token"
            }
        );
        let (basic, _) = chosen(&puller, "users.example");
        assert_eq!(
            basic,
            Some(Credential::Basic {
                username: "u".into(),
                password: "p".into()
            })
        );
        let (none, who) = chosen(&puller, "other.example");
        assert_eq!(none, None);
        assert!(
            matches!(&who, Who::Anonymous { remedy } if remedy.contains("(--registry-config)"))
        );
        puller.set_credentials(None).unwrap();
        assert_eq!(chosen(&puller, "users.example").0, None);
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
        let Who::Anonymous { remedy } = chosen(&puller, "other.example").1 else {
            panic!("anonymous where the Secret names nothing")
        };
        assert_eq!(
            remedy,
            "give a credential for other.example in the Secret nsc/pull, or make the repository public"
        );
        puller.set_secret_credentials("nsc/pull", None).unwrap();
        assert_eq!(puller.generation(), before + 2);
        let Who::Anonymous { remedy } = chosen(&puller, "users.example").1 else {
            panic!("anonymous once the Secret is gone")
        };
        assert!(
            remedy.starts_with("the Secret nsc/pull that is to hold the credential for users.example does not exist: create it"),
            "{remedy}"
        );
    }
}
