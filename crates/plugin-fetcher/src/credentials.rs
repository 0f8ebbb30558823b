//! Registry credentials as a Docker config holds them: the `.dockerconfigjson` of a
//! `kubernetes.io/dockerconfigjson` Secret, or an author's `~/.docker/config.json`. Per registry,
//! a user name and password (`auth`, or `username` and `password`), a registry token (sent as
//! the bearer token itself), or an identity token (an OAuth2 refresh token, exchanged at the
//! registry's token server for a short-lived one).

use std::collections::BTreeMap;

use base64::Engine as _;
use serde::Deserialize;

/// The credentials of one Docker config, by registry (`host[:port]`).
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    /// Where they came from, for messages: `Secret <namespace>/<name>` or a file's path.
    source: String,
    by_registry: BTreeMap<String, Credential>,
}

/// How to authenticate to one registry.
#[derive(Clone, PartialEq, Eq)]
pub enum Credential {
    Basic {
        username: String,
        password: String,
    },
    /// A token the registry accepts as it is (`registrytoken`).
    RegistryToken(String),
    /// An OAuth2 refresh token for the registry's token server (`identitytoken`).
    IdentityToken(String),
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credential::Basic { username, .. } => write!(f, "Basic({username}, <redacted>)"),
            Credential::RegistryToken(_) => f.write_str("RegistryToken(<redacted>)"),
            Credential::IdentityToken(_) => f.write_str("IdentityToken(<redacted>)"),
        }
    }
}

impl Credential {
    /// What kind it is, for messages (never the secret itself).
    pub fn kind(&self) -> &'static str {
        match self {
            Credential::Basic { .. } => "user name and password",
            Credential::RegistryToken(_) => "registry token",
            Credential::IdentityToken(_) => "identity token",
        }
    }
}

/// A Docker config that cannot be used, naming where it came from and what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialsError {
    #[error("{source_}: not a Docker config (a JSON object with \"auths\"): {reason}")]
    NotAConfig { source_: String, reason: String },
    #[error(
        "{source_}: auths.\"{registry}\": {reason}; give \"auth\" (base64 of user:password), \
         \"username\" and \"password\", \"identitytoken\" or \"registrytoken\""
    )]
    Entry {
        source_: String,
        registry: String,
        reason: String,
    },
}

#[derive(Deserialize)]
struct DockerConfig {
    auths: BTreeMap<String, Entry>,
}

/// One `auths` entry; other fields (`email`, `serveraddress`) are ignored, as Docker does.
#[derive(Deserialize, Default)]
struct Entry {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    identitytoken: Option<String>,
    #[serde(default)]
    registrytoken: Option<String>,
}

impl Credentials {
    /// Reads a Docker config; `source` names it in messages.
    pub fn parse(source: &str, json: &[u8]) -> Result<Self, CredentialsError> {
        let config: DockerConfig =
            serde_json::from_slice(json).map_err(|e| CredentialsError::NotAConfig {
                source_: source.to_owned(),
                reason: e.to_string(),
            })?;
        let mut by_registry = BTreeMap::new();
        for (key, entry) in config.auths {
            let credential = entry
                .credential()
                .map_err(|reason| CredentialsError::Entry {
                    source_: source.to_owned(),
                    registry: key.clone(),
                    reason,
                })?;
            by_registry.insert(registry_of(&key), credential);
        }
        Ok(Credentials {
            source: source.to_owned(),
            by_registry,
        })
    }

    /// Where they came from: `Secret <namespace>/<name>` or a file's path.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The credential for `registry` (`host[:port]`), if the config has one.
    pub fn for_registry(&self, registry: &str) -> Option<&Credential> {
        self.by_registry.get(&registry_of(registry))
    }

    /// The registries it has credentials for.
    pub fn registries(&self) -> impl Iterator<Item = &str> {
        self.by_registry.keys().map(String::as_str)
    }
}

impl Entry {
    fn credential(self) -> Result<Credential, String> {
        let present = |v: &Option<String>| v.as_deref().is_some_and(|s| !s.is_empty());
        if present(&self.registrytoken) {
            return Ok(Credential::RegistryToken(
                self.registrytoken.unwrap_or_default(),
            ));
        }
        if present(&self.identitytoken) {
            return Ok(Credential::IdentityToken(
                self.identitytoken.unwrap_or_default(),
            ));
        }
        if present(&self.auth) {
            let auth = self.auth.unwrap_or_default();
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(auth.trim())
                .map_err(|e| format!("\"auth\" is not base64: {e}"))?;
            let text = String::from_utf8(decoded)
                .map_err(|_| "\"auth\" does not decode to text".to_owned())?;
            let (username, password) = text
                .split_once(':')
                .ok_or_else(|| "\"auth\" does not decode to user:password".to_owned())?;
            return Ok(Credential::Basic {
                username: username.to_owned(),
                password: password.to_owned(),
            });
        }
        match (self.username, self.password) {
            (Some(username), Some(password)) if !username.is_empty() => {
                Ok(Credential::Basic { username, password })
            }
            (Some(_), None) => Err("\"username\" without \"password\"".to_owned()),
            _ => Err("no credential".to_owned()),
        }
    }
}

/// The registry a Docker config key names: its `host[:port]`, lowercase, without a scheme or
/// path; Docker Hub's several names as one.
fn registry_of(key: &str) -> String {
    let key = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let host = key.split('/').next().unwrap_or(key).to_ascii_lowercase();
    match host.as_str() {
        "index.docker.io" | "registry-1.docker.io" | "registry.hub.docker.com" => {
            "docker.io".to_owned()
        }
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<Credentials, CredentialsError> {
        Credentials::parse("Secret nsc/pull", json.as_bytes())
    }

    fn basic(username: &str, password: &str) -> Credential {
        Credential::Basic {
            username: username.into(),
            password: password.into(),
        }
    }

    #[test]
    fn each_kind_of_entry_is_read_and_found_by_host() {
        let auth = base64::engine::general_purpose::STANDARD.encode("ci:s3cr:et");
        let credentials = parse(&format!(
            r#"{{"auths": {{
                "https://Registry.Example:5000/v2/": {{"auth": "{auth}", "email": "x"}},
                "plain.example": {{"username": "u", "password": "p"}},
                "tokens.example": {{"identitytoken": "refresh"}},
                "bearer.example": {{"registrytoken": "t", "auth": "{auth}"}},
                "https://index.docker.io/v1/": {{"username": "hub", "password": "h"}}
            }}, "credsStore": "desktop"}}"#
        ))
        .unwrap();
        let found = |r: &str| credentials.for_registry(r).cloned();
        assert_eq!(found("registry.example:5000"), Some(basic("ci", "s3cr:et")));
        assert_eq!(found("plain.example"), Some(basic("u", "p")));
        assert_eq!(
            found("tokens.example"),
            Some(Credential::IdentityToken("refresh".into()))
        );
        assert_eq!(
            found("bearer.example"),
            Some(Credential::RegistryToken("t".into())),
            "a registry token is used before a password"
        );
        assert_eq!(found("registry-1.docker.io"), Some(basic("hub", "h")));
        assert_eq!(
            found("registry.example"),
            None,
            "another port is another registry"
        );
        assert_eq!(credentials.source(), "Secret nsc/pull");
    }

    #[test]
    fn an_unusable_entry_names_the_source_the_registry_and_what_to_give() {
        for (entry, reason) in [
            (r#"{"auth": "%%%"}"#, "\"auth\" is not base64"),
            (r#"{"auth": "bm9jb2xvbg=="}"#, "user:password"),
            (r#"{"username": "u"}"#, "without \"password\""),
            (r#"{"email": "a@b"}"#, "no credential"),
        ] {
            let error = parse(&format!(r#"{{"auths": {{"r.example": {entry}}}}}"#)).unwrap_err();
            let text = error.to_string();
            assert!(
                text.starts_with("Secret nsc/pull: auths.\"r.example\": ") && text.contains(reason),
                "{text}"
            );
        }
        let error = parse(r#"{"credsStore": "desktop"}"#).unwrap_err();
        assert!(
            matches!(error, CredentialsError::NotAConfig { .. }),
            "{error}"
        );
    }

    #[test]
    fn a_credential_never_prints_its_secret() {
        let shown = format!(
            "{:?} {:?} {:?}",
            basic("ci", "hunter2"),
            Credential::RegistryToken("tok123".into()),
            Credential::IdentityToken("ref456".into())
        );
        assert!(
            !shown.contains("hunter2") && !shown.contains("tok123") && !shown.contains("ref456")
        );
        assert!(shown.contains("ci"));
    }
}
