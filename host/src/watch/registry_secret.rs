//! The registry Secret (`--plugin-registry-secret`): a `kubernetes.io/dockerconfigjson` Secret
//! in the controller's namespace whose credentials the puller uses, read through the API (the
//! RBAC grants this one Secret by name) and watched, so that a new password takes effect without
//! a restart and the plugins that failed to fetch are tried again at once. A Secret that cannot
//! be used is logged with what to fix and changes nothing: the last good credentials stay.

use std::{sync::Arc, time::Duration};

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, Client,
    runtime::{WatchStreamExt as _, watcher},
};

use crate::plugin::oci::{Credentials, Puller};

/// The Secret's type, and the key of its Docker config.
const DOCKER_CONFIG_TYPE: &str = "kubernetes.io/dockerconfigjson";
const DOCKER_CONFIG_KEY: &str = ".dockerconfigjson";

/// How often a quiet watch checks whether this controller's term has ended.
const TERM_CHECK: Duration = Duration::from_secs(1);

/// The registry Secret, and the puller it gives credentials to.
#[derive(Clone)]
pub struct RegistrySecret {
    pub namespace: String,
    pub name: String,
    pub puller: Arc<Puller>,
}

/// The credentials of `secret`, or what is wrong with it (naming the field and what to do).
pub fn credentials(secret: &Secret, source: &str) -> Result<Credentials, String> {
    let kind = secret.type_.as_deref().unwrap_or("Opaque");
    if kind != DOCKER_CONFIG_TYPE {
        return Err(format!(
            "{source}: type is {kind}, not {DOCKER_CONFIG_TYPE}: make it with kubectl create \
             secret docker-registry (or --from-file={DOCKER_CONFIG_KEY}=<config.json> \
             --type={DOCKER_CONFIG_TYPE})"
        ));
    }
    let bytes = secret
        .data
        .as_ref()
        .and_then(|data| data.get(DOCKER_CONFIG_KEY))
        .ok_or_else(|| {
            format!("{source}: data.{DOCKER_CONFIG_KEY} is missing: give it a Docker config")
        })?;
    Credentials::parse(source, &bytes.0).map_err(|e| e.to_string())
}

impl RegistrySecret {
    /// `Secret <namespace>/<name>`, as messages name it.
    pub fn source(&self) -> String {
        format!("Secret {}/{}", self.namespace, self.name)
    }

    /// Gives the puller the credentials of `secret` (none when it does not exist). One that
    /// cannot be used is logged and changes nothing.
    pub fn apply(&self, secret: Option<&Secret>) {
        let source = self.source();
        let name = format!("{}/{}", self.namespace, self.name);
        let credentials = match secret.map(|s| credentials(s, &source)) {
            None => {
                tracing::info!(secret = %name, "the registry Secret does not exist: plugins are pulled anonymously until it is created");
                None
            }
            Some(Ok(credentials)) => {
                tracing::info!(
                    secret = %name,
                    registries = ?credentials.registries().collect::<Vec<_>>(),
                    "registry credentials read from the Secret"
                );
                Some(credentials)
            }
            Some(Err(e)) => {
                tracing::warn!(secret = %name, error = %e, "the registry Secret cannot be used; the credentials read before stay in use");
                return;
            }
        };
        if let Err(e) = self.puller.set_secret_credentials(&name, credentials) {
            tracing::error!(secret = %name, error = %e, "cannot make a registry client for the Secret's credentials; the previous ones stay in use");
        }
    }

    /// Reads the Secret once (at start, before the plugins load).
    pub async fn read(&self, client: &Client) {
        let api: Api<Secret> = Api::namespaced(client.clone(), &self.namespace);
        match api.get_opt(&self.name).await {
            Ok(found) => self.apply(found.as_ref()),
            Err(e) => tracing::warn!(
                secret = %format!("{}/{}", self.namespace, self.name),
                error = %crate::error::describe(&e),
                "cannot read the registry Secret (its watch retries); check the controller's RBAC for it"
            ),
        }
    }

    /// Follows the Secret until `ended` says this controller's term is over.
    pub async fn watch(self, client: Client, ended: impl Fn() -> bool + Send) {
        let api: Api<Secret> = Api::namespaced(client, &self.namespace);
        // Only this Secret: the RBAC grants it by name.
        let config = watcher::Config::default().fields(&format!("metadata.name={}", self.name));
        let mut events = watcher(api, config).backoff(super::backoff()).boxed();
        let mut listed: Option<Secret> = None;
        loop {
            let event = match tokio::time::timeout(TERM_CHECK, events.next()).await {
                Err(_) if ended() => return,
                Err(_) => continue,
                Ok(None) => return,
                Ok(Some(event)) => event,
            };
            match event {
                Err(e) => tracing::warn!(
                    secret = %format!("{}/{}", self.namespace, self.name),
                    error = %crate::error::describe_watch(&e),
                    "cannot watch the registry Secret (retrying); the credentials read before stay in use"
                ),
                Ok(watcher::Event::Init) => listed = None,
                Ok(watcher::Event::InitApply(secret)) => listed = Some(secret),
                Ok(watcher::Event::InitDone) => self.apply(listed.take().as_ref()),
                Ok(watcher::Event::Apply(secret)) => self.apply(Some(&secret)),
                Ok(watcher::Event::Delete(_)) => self.apply(None),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(kind: Option<&str>, data: &[(&str, &str)]) -> Secret {
        Secret {
            type_: kind.map(str::to_owned),
            data: Some(
                data.iter()
                    .map(|(k, v)| {
                        (
                            (*k).to_owned(),
                            k8s_openapi::ByteString(v.as_bytes().to_vec()),
                        )
                    })
                    .collect(),
            ),
            ..Secret::default()
        }
    }

    #[test]
    fn a_docker_config_secret_gives_its_credentials_and_any_other_is_told_what_to_fix() {
        let source = "Secret nsc/registry";
        let config = r#"{"auths": {"r.example": {"username": "u", "password": "p"}}}"#;
        let good = credentials(
            &secret(Some(DOCKER_CONFIG_TYPE), &[(DOCKER_CONFIG_KEY, config)]),
            source,
        )
        .unwrap();
        assert_eq!(good.registries().collect::<Vec<_>>(), ["r.example"]);
        assert_eq!(good.source(), source);

        let opaque = credentials(&secret(None, &[(DOCKER_CONFIG_KEY, config)]), source);
        assert_eq!(
            opaque.unwrap_err(),
            "Secret nsc/registry: type is Opaque, not kubernetes.io/dockerconfigjson: make it \
             with kubectl create secret docker-registry (or \
             --from-file=.dockerconfigjson=<config.json> --type=kubernetes.io/dockerconfigjson)"
        );
        let empty = credentials(&secret(Some(DOCKER_CONFIG_TYPE), &[]), source);
        assert_eq!(
            empty.unwrap_err(),
            "Secret nsc/registry: data..dockerconfigjson is missing: give it a Docker config"
        );
        let broken = credentials(
            &secret(
                Some(DOCKER_CONFIG_TYPE),
                &[(DOCKER_CONFIG_KEY, r#"{"auths": {"r.example": {}}}"#)],
            ),
            source,
        );
        assert!(
            broken
                .unwrap_err()
                .starts_with("Secret nsc/registry: auths.\"r.example\": no credential"),
        );
    }
}
