//! Identity tokens: a Docker config's `identitytoken` is an OAuth2 refresh token, exchanged at
//! the registry's token server (the realm of its `WWW-Authenticate: Bearer` challenge) for a
//! short-lived access token to one repository, as the Docker CLI does (the registry token
//! specification's `grant_type=refresh_token`). Access tokens are kept per registry and scope
//! and exchanged again before they expire, so a pull never goes out with a token about to lapse.

use std::{
    collections::HashMap,
    sync::{Mutex, PoisonError},
    time::{Duration, Instant},
};

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

/// One exchange: who asks, for what, with which refresh token.
pub(super) struct Request<'a> {
    /// The client to ask the registry and its token server with.
    pub http: &'a reqwest::Client,
    /// `http` or `https`, as the registry is spoken to.
    pub scheme: &'a str,
    pub registry: &'a str,
    pub repository: &'a str,
    pub push: bool,
    pub refresh_token: &'a str,
    /// Where the refresh token came from, for messages.
    pub source: &'a str,
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

    /// An access token for `request`'s repository: the one given before while it is fresh,
    /// otherwise a new one from the registry's token server.
    pub(super) async fn access_token(&self, request: &Request<'_>) -> Result<String, String> {
        let key = (request.registry.to_owned(), request.scope());
        if let Some(granted) = self.lock().get(&key)
            && Instant::now() < granted.renew_at
        {
            return Ok(granted.token.clone());
        }
        let challenge = Self::challenge(request).await?;
        let (token, lifetime) = Self::exchange(request, &challenge, &key.1).await?;
        tracing::debug!(
            registry = request.registry,
            scope = %key.1,
            lifetime_s = lifetime.as_secs(),
            "exchanged the identity token for an access token"
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
        Ok(token)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Granted>> {
        self.granted.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The registry's token server, from the challenge its `/v2/` answers with.
    async fn challenge(request: &Request<'_>) -> Result<Challenge, String> {
        let registry = request.registry;
        let url = format!("{}://{registry}/v2/", request.scheme);
        let answer = request.http.get(&url).send().await.map_err(|e| {
            format!(
                "cannot reach the registry {registry}: {}",
                super::innermost(&e)
            )
        })?;
        let status = answer.status();
        let header = answer
            .headers()
            .get(http::header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        bearer_challenge(header).ok_or_else(|| {
            format!(
                "the registry {registry} does not ask for a bearer token (its /v2/ answered \
                 HTTP {} without a Bearer challenge), so the identity token from {} cannot be \
                 used there: give a user name and password for {registry} instead",
                status.as_u16(),
                request.source
            )
        })
    }

    /// The refresh-token grant at the token server: the access token and how long it lives.
    async fn exchange(
        request: &Request<'_>,
        challenge: &Challenge,
        scope: &str,
    ) -> Result<(String, Duration), String> {
        let (registry, realm) = (request.registry, &challenge.realm);
        let mut form = vec![
            ("grant_type", "refresh_token"),
            ("refresh_token", request.refresh_token),
            ("client_id", CLIENT_ID),
            ("scope", scope),
        ];
        if let Some(service) = &challenge.service {
            form.push(("service", service));
        }
        let answer = request
            .http
            .post(realm)
            .form(&form)
            .send()
            .await
            .map_err(|e| {
                format!(
                    "cannot reach the token server {realm} of the registry {registry}: {}",
                    super::innermost(&e)
                )
            })?;
        let status = answer.status();
        let body = answer.bytes().await.map_err(|e| {
            format!(
                "the token server {realm} of the registry {registry} broke off its answer: {}",
                super::innermost(&e)
            )
        })?;
        if !status.is_success() {
            let reason = match serde_json::from_slice::<Refusal>(&body) {
                Ok(Refusal {
                    error,
                    error_description: Some(description),
                }) => format!("{error}: {description}"),
                Ok(Refusal { error, .. }) => error,
                Err(_) => String::from_utf8_lossy(&body)
                    .trim()
                    .chars()
                    .take(200)
                    .collect(),
            };
            return Err(format!(
                "the token server {realm} of the registry {registry} refused the identity token \
                 from {} (HTTP {}: {reason}): give a fresh identity token for {registry} (docker \
                 login {registry} writes one), and check that it may {} {}",
                request.source,
                status.as_u16(),
                if request.push { "push to" } else { "read" },
                request.repository,
            ));
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
            refresh_token: "x",
            source: "f",
        };
        assert_eq!(request(false).scope(), "repository:team/plugin:pull");
        assert_eq!(request(true).scope(), "repository:team/plugin:pull,push");
    }
}
