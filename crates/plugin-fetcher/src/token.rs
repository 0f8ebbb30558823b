//! Tokens: a registry that answers `/v2/` with a `WWW-Authenticate: Bearer` challenge names a
//! token server (its realm), where the credential is exchanged for a short-lived access token
//! to one repository: a user name and password (HTTP basic), an identity token (a Docker
//! config's `identitytoken`, an OAuth2 refresh token: `grant_type=refresh_token`, as the Docker
//! CLI does), or nothing (an anonymous token). Access tokens are kept per registry and scope
//! and exchanged again before they expire, so a pull never goes out with a token about to lapse.
//!
//! A credential goes to a token server only over HTTPS (or to one of a registry the controller
//! was told to speak plain HTTP to, with a warning), and never on to another host a token
//! server redirects to: the exchange is done here, not by `oci-client` (which sends a password
//! to any realm and re-sends a form body on a 307), and the registry clients are then given
//! only the access token.

use std::{
    collections::HashMap,
    sync::{Mutex, PoisonError},
    time::{Duration, Instant},
};

use oci_client::secrets::RegistryAuth;
use serde::Deserialize;

/// The `client_id` this controller names itself by at token servers.
const CLIENT_ID: &str = "nad-service-controller";

/// Access tokens without an `expires_in` are good for 60 seconds (the specification's default).
const DEFAULT_LIFETIME: Duration = Duration::from_secs(60);

/// Exchanges identity tokens and keeps what it was given.
pub(super) struct Exchanger {
    granted: Mutex<HashMap<(String, String), Granted>>,
}

struct Granted {
    token: String,
    /// When to exchange again: before the token expires.
    renew_at: Instant,
}

/// What a token server answers (`token` is the older name of `access_token`).
#[derive(Deserialize)]
struct Grant {
    #[serde(default)]
    access_token: Option<String>,
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    expires_in: Option<u64>,
}

/// An OAuth2 error answer.
#[derive(Deserialize)]
struct Refusal {
    error: String,
    #[serde(default)]
    error_description: Option<String>,
}

/// Where to exchange a refresh token for one registry.
struct Challenge {
    realm: String,
    service: Option<String>,
}

/// The credential given for a registry that asks for tokens, as it is exchanged.
pub(super) enum Given<'a> {
    /// None: an anonymous token is asked for; `remedy` tells how to give a credential.
    Anonymous { remedy: &'a str },
    /// A user name and password: sent to the registry itself (HTTP basic) when it asks for
    /// them, or to its token server for a token.
    Password {
        username: &'a str,
        password: &'a str,
    },
    /// An identity token, exchanged at the token server with `grant_type=refresh_token`.
    Refresh(&'a str),
}

impl Given<'_> {
    /// Whether sending it tells a secret.
    fn secret(&self) -> bool {
        !matches!(self, Given::Anonymous { .. })
    }

    fn kind(&self) -> &'static str {
        match self {
            Given::Anonymous { .. } => "anonymous request",
            Given::Password { .. } => "user name and password",
            Given::Refresh(_) => "identity token",
        }
    }
}

/// One exchange: who asks, for what, with which credential.
pub(super) struct Request<'a> {
    /// The client to ask the registry and its token server with; it follows no redirect to
    /// another host.
    pub http: &'a reqwest::Client,
    /// `http` or `https`, as the registry is spoken to.
    pub scheme: &'a str,
    pub registry: &'a str,
    pub repository: &'a str,
    pub push: bool,
    pub given: Given<'a>,
    /// Where the credential came from, for messages.
    pub source: &'a str,
    /// The registries (`host[:port]`) spoken to over plain HTTP (`--plugin-registry-http`).
    pub plain_http: &'a [String],
    /// How long the token server may take to answer whole.
    pub deadline: Duration,
    /// What to do if the registry's certificate is not trusted.
    pub untrusted: &'a str,
}

impl Request<'_> {
    fn scope(&self) -> String {
        let actions = if self.push { "pull,push" } else { "pull" };
        format!("repository:{}:{actions}", self.repository)
    }
}

impl Exchanger {
    pub(super) fn new() -> Self {
        Exchanger {
            granted: Mutex::new(HashMap::new()),
        }
    }

    /// How to authenticate to `request`'s registry: with an access token from its token
    /// server (the one given before while it is fresh) when it asks for tokens, otherwise as
    /// given (a password is then sent to the registry itself).
    pub(super) async fn access(&self, request: &Request<'_>) -> Result<RegistryAuth, String> {
        let key = (request.registry.to_owned(), request.scope());
        if let Some(granted) = self.lock().get(&key)
            && Instant::now() < granted.renew_at
        {
            return Ok(RegistryAuth::Bearer(granted.token.clone()));
        }
        let Some(challenge) = Self::challenge(request).await? else {
            return match request.given {
                Given::Anonymous { .. } => Ok(RegistryAuth::Anonymous),
                Given::Password { username, password } => Ok(RegistryAuth::Basic(
                    username.to_owned(),
                    password.to_owned(),
                )),
                Given::Refresh(_) => Err(format!(
                    "the registry {} does not ask for a bearer token, so the identity token \
                     from {} cannot be used there: give a user name and password for {} \
                     instead",
                    request.registry, request.source, request.registry
                )),
            };
        };
        Self::check_realm(request, &challenge.realm)?;
        let (token, lifetime) = Self::exchange(request, &challenge, &key.1).await?;
        tracing::debug!(
            registry = request.registry,
            scope = %key.1,
            lifetime_s = lifetime.as_secs(),
            "exchanged the credential for an access token"
        );
        // Renewed a quarter of its life (at most a minute) before it lapses.
        let margin = (lifetime / 4).min(Duration::from_secs(60));
        self.lock().insert(
            key,
            Granted {
                token: token.clone(),
                renew_at: Instant::now() + lifetime - margin,
            },
        );
        Ok(RegistryAuth::Bearer(token))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Granted>> {
        self.granted.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The registry's token server, from the Bearer challenge its `/v2/` answers with; `None`
    /// when it asks for none.
    async fn challenge(request: &Request<'_>) -> Result<Option<Challenge>, String> {
        let registry = request.registry;
        let url = format!("{}://{registry}/v2/", request.scheme);
        let answer = super::fetch::read(
            request.http.get(&url),
            super::limits::MAX_TOKEN_BYTES,
            request.deadline,
        )
        .await
        .map_err(|e| {
            e.describe(
                registry,
                "its answer to /v2/",
                request.untrusted,
                "check the registry",
            )
        })?;
        let header = answer
            .headers
            .get(http::header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        Ok(bearer_challenge(header))
    }

    /// Refuses to send a secret to a token server on plain HTTP, unless the registry (or that
    /// server) is one the controller was told to speak plain HTTP to.
    fn check_realm(request: &Request<'_>, realm: &str) -> Result<(), String> {
        let registry = request.registry;
        let url = reqwest::Url::parse(realm).map_err(|e| {
            format!(
                "the registry {registry} names as its token server {realm:?}, which is not a \
                 URL ({e}): check the registry's token configuration"
            )
        })?;
        let authority = match (url.host_str(), url.port()) {
            (Some(host), Some(port)) => format!("{host}:{port}"),
            (Some(host), None) => host.to_owned(),
            (None, _) => String::new(),
        };
        match url.scheme() {
            "https" => Ok(()),
            "http" if !request.given.secret() => Ok(()),
            "http"
                if request
                    .plain_http
                    .iter()
                    .any(|h| h == registry || *h == authority) =>
            {
                tracing::warn!(
                    registry,
                    realm,
                    source = request.source,
                    "sending the registry's credential to its token server over plain HTTP, as \
                     the registry is listed in --plugin-registry-http: anyone on the path can \
                     read it"
                );
                Ok(())
            }
            scheme => Err(format!(
                "the registry {registry} names as its token server {realm}, on {}: the {} \
                 from {} goes to a token server only over HTTPS, and was not sent. Check the \
                 registry's token configuration (its realm should be an https:// URL); if \
                 this registry is meant to be spoken to over plain HTTP, list it in \
                 --plugin-registry-http",
                if scheme == "http" {
                    "plain HTTP".to_owned()
                } else {
                    format!("the scheme {scheme}")
                },
                request.given.kind(),
                request.source
            )),
        }
    }

    /// The token at the token server: the access token and how long it lives.
    async fn exchange(
        request: &Request<'_>,
        challenge: &Challenge,
        scope: &str,
    ) -> Result<(String, Duration), String> {
        let (registry, realm) = (request.registry, &challenge.realm);
        let mut params = vec![("scope", scope)];
        if let Some(service) = &challenge.service {
            params.push(("service", service));
        }
        let call = match request.given {
            Given::Anonymous { .. } => request.http.get(realm).query(&params),
            Given::Password { username, password } => request
                .http
                .get(realm)
                .query(&params)
                .basic_auth(username, Some(password)),
            Given::Refresh(refresh_token) => {
                params.extend([
                    ("grant_type", "refresh_token"),
                    ("refresh_token", refresh_token),
                    ("client_id", CLIENT_ID),
                ]);
                request.http.post(realm).form(&params)
            }
        };
        let answer = super::fetch::read(call, super::limits::MAX_TOKEN_BYTES, request.deadline)
            .await
            .map_err(|e| {
                let what = format!("a token from its token server {realm}");
                let large = "a token is a few kilobytes; check the registry's token server";
                match e {
                    super::fetch::Failure::Request(e) => format!(
                        "cannot reach the token server {realm} of the registry {registry}: {}",
                        super::describe::innermost(&e)
                    ),
                    other => other.describe(registry, &what, request.untrusted, large),
                }
            })?;
        let status = answer.status;
        if status.is_redirection() {
            let location = answer
                .headers
                .get(http::header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("nowhere");
            return Err(format!(
                "the token server {realm} of the registry {registry} redirected the request to \
                 another host ({location}): not followed, so that the {} from {} goes only to \
                 the token server the registry names; check the registry's token configuration \
                 (its realm should be the token server's own address)",
                request.given.kind(),
                request.source
            ));
        }
        let body = answer.body;
        if !status.is_success() {
            return Err(refused(request, realm, status, &body));
        }
        let grant: Grant = serde_json::from_slice(&body).map_err(|e| {
            format!(
                "the token server {realm} of the registry {registry} answered with something \
                 other than a token: {e}"
            )
        })?;
        let token = grant
            .access_token
            .or(grant.token)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                format!(
                    "the token server {realm} of the registry {registry} answered without an \
                     access_token"
                )
            })?;
        let lifetime = grant
            .expires_in
            .filter(|&s| s > 0)
            .map_or(DEFAULT_LIFETIME, Duration::from_secs);
        Ok((token, lifetime))
    }
}

/// A token server's refusal of `request`'s credential, in an operator's terms.
fn refused(request: &Request<'_>, realm: &str, status: reqwest::StatusCode, body: &[u8]) -> String {
    let registry = request.registry;
    let reason = match serde_json::from_slice::<Refusal>(body) {
        Ok(Refusal {
            error,
            error_description: Some(description),
        }) => format!("{error}: {description}"),
        Ok(Refusal { error, .. }) => error,
        Err(_) => String::from_utf8_lossy(body)
            .trim()
            .chars()
            .take(200)
            .collect(),
    };
    let (code, repository) = (status.as_u16(), request.repository);
    let may = if request.push { "push to" } else { "read" };
    match request.given {
        Given::Anonymous { remedy } => format!(
            "the registry {registry} refused anonymous access to {repository}: {remedy} \
             (its token server {realm} answered HTTP {code}: {reason})"
        ),
        Given::Password { .. } => format!(
            "the registry {registry} refused the user name and password from {} for \
             {repository}: check that credential, and that it may {may} {repository} \
             (its token server {realm} answered HTTP {code}: {reason})",
            request.source
        ),
        Given::Refresh(_) => format!(
            "the token server {realm} of the registry {registry} refused the identity \
             token from {} (HTTP {code}: {reason}): give a fresh identity token for \
             {registry} (docker login {registry} writes one), and check that it may \
             {may} {repository}",
            request.source,
        ),
    }
}

/// Whether a redirect from `previous` to `next` stays on the same scheme, host and port: a
/// token client follows no other, so that a credential in a request's body (a refresh token)
/// or headers reaches only the server the registry names.
pub(super) fn same_origin(previous: &reqwest::Url, next: &reqwest::Url) -> bool {
    previous.scheme() == next.scheme()
        && previous.host_str() == next.host_str()
        && previous.port_or_known_default() == next.port_or_known_default()
}

/// The realm and service of a `WWW-Authenticate` header's Bearer challenge.
fn bearer_challenge(header: &str) -> Option<Challenge> {
    let challenges = http_auth::parse_challenges(header).ok()?;
    let bearer = challenges
        .iter()
        .find(|c| c.scheme.eq_ignore_ascii_case("bearer"))?;
    let param = |name: &str| {
        bearer
            .params
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.to_unescaped())
    };
    Some(Challenge {
        realm: param("realm").filter(|r| !r.is_empty())?,
        service: param("service"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bearer_challenge_gives_the_realm_and_service() {
        let challenge = bearer_challenge(
            r#"Basic realm="x", Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a:pull""#,
        )
        .unwrap();
        assert_eq!(challenge.realm, "https://auth.example/token");
        assert_eq!(challenge.service.as_deref(), Some("registry.example"));
        assert!(bearer_challenge(r#"Basic realm="registry""#).is_none());
        assert!(bearer_challenge("").is_none());
        assert!(
            bearer_challenge(r#"Bearer service="s""#).is_none(),
            "no realm"
        );
    }

    #[test]
    fn the_scope_asks_for_pull_or_for_push_too() {
        let http = reqwest::Client::new();
        let request = |push| Request {
            http: &http,
            scheme: "https",
            registry: "r.example",
            repository: "team/plugin",
            push,
            given: Given::Refresh("x"),
            source: "f",
            plain_http: &[],
            deadline: Duration::from_secs(1),
            untrusted: "",
        };
        assert_eq!(request(false).scope(), "repository:team/plugin:pull");
        assert_eq!(request(true).scope(), "repository:team/plugin:pull,push");
    }
}
