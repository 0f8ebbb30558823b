//! The registry settings read from the cluster, in the controller's namespace, each object by
//! name (the RBAC grants those names only), read at start and watched so that a change needs no
//! restart and the plugins that failed to fetch are tried again at once (and, at a change of the
//! verification policy, the plugins serving from a registry are verified again: see
//! [`Loader`](nad_plugin_runtime::Loader)):
//!
//! - the registry Secret (`--plugin-registry-secret`), a `kubernetes.io/dockerconfigjson` one
//!   whose credentials the puller uses;
//! - the registry CA ConfigMap (`--plugin-registry-ca-configmap`), a PEM bundle per registry
//!   (key `host` or `host_port`), trusted for that registry only, beside the CAs of
//!   `--registry-ca` files;
//! - the verification policy ConfigMap (`--plugin-verification-configmap`, key `policy.yaml`):
//!   the signatures every plugin artifact must carry.
//!
//! An object that cannot be used is logged with what to fix and changes nothing: the last good
//! settings stay. A verification policy that is asked for and cannot be had (the ConfigMap
//! missing, or never valid) lets no plugin artifact load: never a silent downgrade.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;

use super::named::{self, Named, Seen};
use nad_plugin_fetcher::{
    Credentials, GivenIn, Puller, RegistryCas, Verifier, parse_policy, registry_of_key,
};

/// The key of the verification policy in its ConfigMap.
pub const POLICY_KEY: &str = "policy.yaml";

/// The Secret's type, and the key of its Docker config.
const DOCKER_CONFIG_TYPE: &str = "kubernetes.io/dockerconfigjson";
const DOCKER_CONFIG_KEY: &str = ".dockerconfigjson";

/// The registry objects to follow, and the puller they set.
#[derive(Clone)]
pub struct RegistrySettings {
    pub namespace: String,
    /// The registry Secret's name.
    pub secret: Option<String>,
    /// The CA ConfigMap's name.
    pub ca_configmap: Option<String>,
    /// The verification policy ConfigMap's name.
    pub policy_configmap: Option<String>,
    /// The CAs of `--registry-ca` files, trusted beside the ConfigMap's.
    pub file_cas: RegistryCas,
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

/// `file_cas` and the CAs of `configmap` (`data`: a PEM bundle per registry), or what is wrong
/// with its entries.
pub fn cas(
    configmap: &ConfigMap,
    name: &str,
    file_cas: &RegistryCas,
) -> Result<RegistryCas, String> {
    let mut cas = file_cas
        .clone()
        .given_in(GivenIn::ConfigMap(name.to_owned()));
    let mut errors = Vec::new();
    for (key, pem) in configmap.data.iter().flatten() {
        let source = format!("ConfigMap {name} data.{key}");
        if let Err(e) = cas.add_pem(&registry_of_key(key), &source, pem.as_bytes()) {
            errors.push(e);
        }
    }
    if let Some(keys) = configmap.binary_data.as_ref().filter(|b| !b.is_empty()) {
        errors.push(format!(
            "ConfigMap {name}: binaryData ({}) is not read: put each PEM bundle in data",
            keys.keys().cloned().collect::<Vec<_>>().join(", ")
        ));
    }
    if errors.is_empty() {
        Ok(cas)
    } else {
        Err(errors.join("; "))
    }
}

/// The verification policy of `configmap` (`namespace/name`), or what is wrong with it.
pub fn policy(configmap: &ConfigMap, name: &str) -> Result<Verifier, String> {
    let text = configmap
        .data
        .as_ref()
        .and_then(|data| data.get(POLICY_KEY))
        .ok_or_else(|| {
            format!("ConfigMap {name}: data.{POLICY_KEY} is missing: give it the policy (YAML)")
        })?;
    parse_policy(&format!("ConfigMap {name} data.{POLICY_KEY}"), text)
}

impl RegistrySettings {
    fn qualified(&self, name: &str) -> String {
        format!("{}/{name}", self.namespace)
    }

    /// Gives the puller the credentials of `secret` (none when it does not exist). One that
    /// cannot be used is logged and changes nothing.
    fn apply_secret(&self, name: &str, secret: Option<&Secret>) {
        let name = self.qualified(name);
        let credentials = match secret.map(|s| credentials(s, &format!("Secret {name}"))) {
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
            tracing::error!(secret = %name, error = %e, "cannot make registry clients for the Secret's credentials; the previous ones stay in use");
        }
    }

    /// Gives the puller the CAs of `configmap` beside the files' (the files' only when it
    /// does not exist). One that cannot be used is logged and changes nothing.
    fn apply_cas(&self, name: &str, configmap: Option<&ConfigMap>) {
        let name = self.qualified(name);
        let cas = match configmap.map(|c| cas(c, &name, &self.file_cas)) {
            None => {
                tracing::info!(configmap = %name, "the registry CA ConfigMap does not exist: registries are trusted by the system's CAs (and --registry-ca files) until it is created");
                self.file_cas
                    .clone()
                    .given_in(GivenIn::ConfigMap(name.clone()))
            }
            Some(Ok(cas)) => {
                tracing::info!(
                    configmap = %name,
                    registries = ?cas.registries().collect::<Vec<_>>(),
                    "registry CAs read from the ConfigMap"
                );
                cas
            }
            Some(Err(e)) => {
                tracing::warn!(configmap = %name, error = %e, "the registry CA ConfigMap cannot be used; the CAs read before stay in use");
                return;
            }
        };
        if let Err(e) = self.puller.set_cas(cas) {
            tracing::error!(configmap = %name, error = %e, "cannot make registry clients for the ConfigMap's CAs; the previous ones stay in use");
        }
    }

    /// Gives the puller the policy of `configmap`. One that cannot be used is logged and
    /// changes nothing, unless no policy was had before: then nothing loads until one is.
    fn apply_policy(&self, name: &str, configmap: Option<&ConfigMap>) {
        let name = self.qualified(name);
        let applied = match configmap.map(|c| policy(c, &name)) {
            None => {
                let why = format!(
                    "the verification policy ConfigMap {name} does not exist, so no plugin \
                     artifact can be checked: create it (data.{POLICY_KEY})"
                );
                tracing::warn!(configmap = %name, "the verification policy ConfigMap does not exist: no plugin artifact loads until it is created");
                self.puller.set_policy_unavailable(why)
            }
            Some(Ok(verifier)) => {
                tracing::info!(configmap = %name, "verification policy read from the ConfigMap");
                self.puller.set_policy(Some(verifier))
            }
            Some(Err(e)) if self.puller.has_policy() => {
                tracing::warn!(configmap = %name, error = %e, "the verification policy cannot be used; the policy read before stays in force");
                return;
            }
            Some(Err(e)) => {
                tracing::warn!(configmap = %name, error = %e, "the verification policy cannot be used: no plugin artifact loads until it is mended");
                self.puller.set_policy_unavailable(e)
            }
        };
        if let Err(e) = applied {
            tracing::error!(configmap = %name, error = %e, "cannot make registry clients for the verification policy");
        }
    }

    /// Reads the objects once (at start, before the plugins load).
    pub async fn read(&self, client: &Client) {
        if let Some(name) = &self.secret {
            let found = get::<Secret>(client, &self.namespace, name).await;
            if let Ok(secret) = found {
                self.apply_secret(name, secret.as_ref());
            }
        }
        if let Some(name) = &self.ca_configmap {
            let found = get::<ConfigMap>(client, &self.namespace, name).await;
            if let Ok(configmap) = found {
                self.apply_cas(name, configmap.as_ref());
            }
        }
        if let Some(name) = &self.policy_configmap {
            match get::<ConfigMap>(client, &self.namespace, name).await {
                Ok(configmap) => self.apply_policy(name, configmap.as_ref()),
                // Until it is read, nothing loads unchecked.
                Err(()) => self.apply_policy(name, None),
            }
        }
    }

    /// Follows the objects until `ended` says this controller's term is over.
    pub async fn watch(self, client: Client, ended: impl Fn() -> bool + Send + Sync) {
        let secret = async {
            if let Some(name) = &self.secret {
                let apply = |s: Option<&Secret>| self.apply_secret(name, s);
                follow(&client, &self.namespace, name, &ended, apply).await;
            }
        };
        let cas = async {
            if let Some(name) = &self.ca_configmap {
                let apply = |c: Option<&ConfigMap>| self.apply_cas(name, c);
                follow(&client, &self.namespace, name, &ended, apply).await;
            }
        };
        let policy = async {
            if let Some(name) = &self.policy_configmap {
                let apply = |c: Option<&ConfigMap>| self.apply_policy(name, c);
                follow(&client, &self.namespace, name, &ended, apply).await;
            }
        };
        futures::join!(secret, cas, policy);
    }
}

/// The object `name`, if it exists; an error (logged) when it cannot be read.
async fn get<K>(client: &Client, namespace: &str, name: &str) -> Result<Option<K>, ()>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    api.get_opt(name).await.map_err(|e| {
        tracing::warn!(
            kind = %K::kind(&()),
            name = %format!("{namespace}/{name}"),
            error = %nad_process::kube_error::describe(&e),
            "cannot read a registry setting (its watch retries); check the controller's RBAC for it"
        );
    })
}

/// Applies each state of the object `name` (`None`: it does not exist) until `ended`.
async fn follow<K: named::Object>(
    client: &Client,
    namespace: &str,
    name: &str,
    ended: &(impl Fn() -> bool + Sync),
    apply: impl Fn(Option<&K>),
) {
    let mut watch = Named::<K>::new(client.clone(), namespace, name);
    while let Some(seen) = watch.next(|_| {}).await {
        match seen {
            Seen::Quiet if ended() => return,
            Seen::Quiet => {}
            Seen::Failed(error) => tracing::warn!(
                kind = %K::kind(&()),
                name = %format!("{namespace}/{name}"),
                error = %error,
                "cannot watch a registry setting (retrying); the settings read before stay in use"
            ),
            Seen::State(object) => apply(object.as_ref()),
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

    #[test]
    fn a_ca_configmap_entry_that_is_no_pem_bundle_is_named_by_its_key() {
        let configmap = ConfigMap {
            data: Some([("r.example_5000".to_owned(), "nothing here".to_owned())].into()),
            binary_data: Some(
                [(
                    "other.example".to_owned(),
                    k8s_openapi::ByteString(b"x".to_vec()),
                )]
                .into(),
            ),
            ..ConfigMap::default()
        };
        let error = cas(&configmap, "nsc/cas", &RegistryCas::default()).unwrap_err();
        assert_eq!(
            error,
            "ConfigMap nsc/cas data.r.example_5000: the CA bundle for the registry \
             r.example:5000 holds no certificate (-----BEGIN CERTIFICATE-----); ConfigMap \
             nsc/cas: binaryData (other.example) is not read: put each PEM bundle in data"
        );
        let none = cas(&ConfigMap::default(), "nsc/cas", &RegistryCas::default()).unwrap();
        assert_eq!(none.registries().count(), 0);
    }
}
