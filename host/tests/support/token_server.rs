//! A registry token server of the Docker token specification, written for the tests: it gives
//! users of its password list (HTTP basic, `GET`) and holders of its refresh tokens (OAuth2
//! `grant_type=refresh_token`, `POST`) JWTs for the scope they ask, signed with an ES256 key it
//! made, which the distribution registry trusts through the JWKS file it writes. It counts the
//! refresh-token exchanges, and serves on a free loopback port from a thread of its own until
//! dropped.

#![allow(dead_code)] // not every test binary uses every part

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use axum::{
    Router,
    body::Bytes,
    extract::{RawQuery, State},
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};
use base64::{
    Engine as _, engine::general_purpose::STANDARD, engine::general_purpose::URL_SAFE_NO_PAD,
};
use ring::{
    rand::SystemRandom,
    signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _},
};

/// The audience of its tokens, the registry's `service`.
pub const SERVICE: &str = "nsc-test-registry";
/// The issuer of its tokens.
pub const ISSUER: &str = "nsc-test-token-server";
const KID: &str = "nsc-test-key";

pub struct TokenServer {
    /// `http://127.0.0.1:<port>/token`.
    pub realm: String,
    signer: Arc<Signer>,
    exchanges: Arc<AtomicUsize>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

struct Signer {
    key: EcdsaKeyPair,
    rng: SystemRandom,
    /// How long the tokens it gives live.
    lifetime: Duration,
}

struct Accounts {
    users: HashMap<String, String>,
    /// Refresh token → the user it stands for.
    refresh: HashMap<String, String>,
}

#[derive(Clone)]
struct Served {
    signer: Arc<Signer>,
    accounts: Arc<Mutex<Accounts>>,
    exchanges: Arc<AtomicUsize>,
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

impl Signer {
    /// A JWT for `subject` to do `actions` on `repository`, expiring at `exp`.
    fn token(&self, subject: &str, access: &[(String, Vec<String>)], exp: u64) -> String {
        let header = serde_json::json!({"alg": "ES256", "typ": "JWT", "kid": KID});
        let access: Vec<_> = access
            .iter()
            .map(|(name, actions)| {
                serde_json::json!({"type": "repository", "name": name, "actions": actions})
            })
            .collect();
        let claims = serde_json::json!({
            "iss": ISSUER, "sub": subject, "aud": SERVICE,
            "exp": exp, "nbf": now() - 5, "iat": now(),
            "jti": format!("{subject}-{exp}-{}", rand_suffix(&self.rng)),
            "access": access,
        });
        let signed = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let signature = self.key.sign(&self.rng, signed.as_bytes()).unwrap();
        format!("{signed}.{}", URL_SAFE_NO_PAD.encode(signature.as_ref()))
    }

    /// The public key as a JWK set, for the registry's `auth.token.jwks`.
    fn jwks(&self) -> String {
        // An uncompressed P-256 point: 0x04, then x and y of 32 bytes each.
        let point = self.key.public_key().as_ref();
        serde_json::json!({"keys": [{
            "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": KID,
            "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
            "y": URL_SAFE_NO_PAD.encode(&point[33..65]),
        }]})
        .to_string()
    }
}

fn rand_suffix(rng: &SystemRandom) -> String {
    let bytes: [u8; 8] = ring::rand::generate(rng).unwrap().expose();
    URL_SAFE_NO_PAD.encode(bytes)
}

impl TokenServer {
    /// Serves the `users` (name, password) and the `refresh` tokens (token, user name),
    /// giving tokens that live `lifetime`.
    pub fn start(users: &[(&str, &str)], refresh: &[(&str, &str)], lifetime: Duration) -> Self {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        let signer = Arc::new(Signer { key, rng, lifetime });
        let owned = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
                .collect()
        };
        let served = Served {
            signer: signer.clone(),
            accounts: Arc::new(Mutex::new(Accounts {
                users: owned(users),
                refresh: owned(refresh),
            })),
            exchanges: Arc::new(AtomicUsize::new(0)),
        };
        let exchanges = served.exchanges.clone();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let realm = format!("http://{}/token", listener.local_addr().unwrap());
        let (shutdown, stop) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let app = Router::new()
                    .route("/token", get(password_grant).post(refresh_grant))
                    .with_state(served);
                axum::serve(listener, app)
                    .with_graceful_shutdown(async {
                        let _ = stop.await;
                    })
                    .await
                    .unwrap();
            });
        });
        TokenServer {
            realm,
            signer,
            exchanges,
            shutdown: Some(shutdown),
            thread: Some(thread),
        }
    }

    /// The JWK set the registry is to trust (its `auth.token.jwks` file).
    pub fn jwks(&self) -> String {
        self.signer.jwks()
    }

    /// A token, as a Docker config's `registrytoken`, for `subject` to pull and push
    /// `repository`, expiring at `exp` (seconds since the epoch).
    pub fn registry_token(&self, subject: &str, repository: &str, exp: u64) -> String {
        let access = [(repository.to_owned(), vec!["pull".into(), "push".into()])];
        self.signer.token(subject, &access, exp)
    }

    /// Refresh-token exchanges served so far.
    pub fn exchanges(&self) -> usize {
        self.exchanges.load(Ordering::SeqCst)
    }
}

impl Drop for TokenServer {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The scopes of a request (`repository:<name>:<actions>`, any number, space separated or
/// repeated), as (repository, actions).
fn scopes(params: &[(String, String)]) -> Vec<(String, Vec<String>)> {
    params
        .iter()
        .filter(|(key, _)| key == "scope")
        .flat_map(|(_, value)| value.split(' ').map(str::to_owned).collect::<Vec<_>>())
        .filter_map(|scope| {
            let mut parts = scope.splitn(3, ':');
            match (parts.next(), parts.next(), parts.next()) {
                (Some("repository"), Some(name), Some(actions)) => Some((
                    name.to_owned(),
                    actions.split(',').map(str::to_owned).collect(),
                )),
                _ => None,
            }
        })
        .collect()
}

fn refused(status: StatusCode, error: &str, description: &str) -> Response {
    let body = serde_json::json!({"error": error, "error_description": description});
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn granted(served: &Served, subject: &str, params: &[(String, String)]) -> Response {
    let lifetime = served.signer.lifetime.as_secs();
    let token = served
        .signer
        .token(subject, &scopes(params), now() + lifetime);
    let body = serde_json::json!({
        "token": token, "access_token": token, "expires_in": lifetime,
    });
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// `GET /token` with HTTP basic: a user of the password list.
async fn password_grant(
    State(served): State<Served>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let params: Vec<(String, String)> =
        serde_urlencoded::from_str(query.as_deref().unwrap_or_default()).unwrap_or_default();
    let user = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic "))
        .and_then(|b| STANDARD.decode(b).ok())
        .and_then(|b| String::from_utf8(b).ok())
        .and_then(|pair| {
            let (user, password) = pair.split_once(':')?;
            let accounts = served.accounts.lock().unwrap();
            (accounts.users.get(user)? == password).then(|| user.to_owned())
        });
    match user {
        Some(user) => granted(&served, &user, &params),
        None => refused(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "wrong user name or password",
        ),
    }
}

/// `POST /token`, `grant_type=refresh_token`: a holder of a refresh token.
async fn refresh_grant(State(served): State<Served>, body: Bytes) -> Response {
    let params: Vec<(String, String)> = serde_urlencoded::from_bytes(&body).unwrap_or_default();
    let param = |name: &str| {
        params
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    };
    if param("grant_type") != Some("refresh_token") || param("client_id").is_none() {
        return refused(
            StatusCode::BAD_REQUEST,
            "unsupported_grant_type",
            "send grant_type=refresh_token and a client_id",
        );
    }
    if param("service") != Some(SERVICE) {
        return refused(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "unknown service",
        );
    }
    let subject = param("refresh_token")
        .and_then(|token| served.accounts.lock().unwrap().refresh.get(token).cloned());
    let Some(subject) = subject else {
        return refused(
            StatusCode::BAD_REQUEST,
            "invalid_grant",
            "unknown refresh token",
        );
    };
    served.exchanges.fetch_add(1, Ordering::SeqCst);
    granted(&served, &subject, &params)
}
