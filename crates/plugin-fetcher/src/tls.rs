//! Registry CAs: for a registry whose certificate a private CA signs, the PEM bundle of that
//! CA, added to the system's roots for that registry only (another registry is not trusted on
//! its word). Verification is never switched off: a registry without a trusted certificate is
//! refused, with what to give.

use std::collections::BTreeMap;

use rustls_pki_types::{CertificateDer, pem::PemObject as _};

/// The CAs given, by registry (`host[:port]`).
#[derive(Debug, Clone, Default)]
pub struct RegistryCas {
    by_registry: BTreeMap<String, Bundle>,
    /// Where they are given, for what a refusal tells to do.
    given_in: GivenIn,
}

/// The CAs of one registry, and where they came from.
#[derive(Debug, Clone, Default)]
pub(super) struct Bundle {
    pub(super) sources: Vec<String>,
    /// DER.
    pub(super) certificates: Vec<Vec<u8>>,
}

/// Where registry CAs are given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum GivenIn {
    /// `--registry-ca <registry>=<file>` (the plugin commands, and the controller without a
    /// ConfigMap).
    #[default]
    Flag,
    /// The ConfigMap `namespace/name`, a key per registry.
    ConfigMap(String),
}

/// The ConfigMap key of a registry's CA bundle: its `host[:port]` with `_` for `:` (a key may
/// not hold a colon).
pub fn configmap_key(registry: &str) -> String {
    registry.replace(':', "_")
}

/// The registry a CA ConfigMap key names (the reverse of [`configmap_key`]).
pub fn registry_of_key(key: &str) -> String {
    match key.rsplit_once('_') {
        Some((host, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => {
            format!("{host}:{port}")
        }
        _ => key.to_owned(),
    }
}

impl RegistryCas {
    /// No CAs yet; refusals point at `given_in`.
    pub fn new(given_in: GivenIn) -> Self {
        RegistryCas {
            by_registry: BTreeMap::new(),
            given_in,
        }
    }

    /// The same CAs, refusals pointing at `given_in`.
    #[must_use]
    pub fn given_in(mut self, given_in: GivenIn) -> Self {
        self.given_in = given_in;
        self
    }

    /// Trusts the certificates of the PEM bundle `pem` (from `source`) for `registry`.
    pub fn add_pem(&mut self, registry: &str, source: &str, pem: &[u8]) -> Result<(), String> {
        let certificates = CertificateDer::pem_slice_iter(pem)
            .map(|c| c.map(|c| c.as_ref().to_vec()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| {
                format!("{source}: the CA bundle for the registry {registry} is not PEM: {e:?}")
            })?;
        if certificates.is_empty() {
            return Err(format!(
                "{source}: the CA bundle for the registry {registry} holds no certificate \
                 (-----BEGIN CERTIFICATE-----)"
            ));
        }
        for der in &certificates {
            reqwest::Certificate::from_der(der).map_err(|e| {
                format!("{source}: a certificate for the registry {registry} cannot be read: {e}")
            })?;
        }
        let bundle = self
            .by_registry
            .entry(registry.to_ascii_lowercase())
            .or_default();
        bundle.sources.push(source.to_owned());
        bundle.certificates.extend(certificates);
        Ok(())
    }

    /// The registries with CAs.
    pub fn registries(&self) -> impl Iterator<Item = &str> {
        self.by_registry.keys().map(String::as_str)
    }

    pub(super) fn for_registry(&self, registry: &str) -> Option<&Bundle> {
        self.by_registry.get(&registry.to_ascii_lowercase())
    }

    /// What to do when `registry`'s certificate is not trusted.
    pub(super) fn remedy(&self, registry: &str) -> String {
        let how = match &self.given_in {
            GivenIn::Flag => format!("--registry-ca {registry}=<PEM file>"),
            GivenIn::ConfigMap(name) => format!(
                "the key {} of the ConfigMap {name}",
                configmap_key(registry)
            ),
        };
        match self.for_registry(registry) {
            None => format!(
                "it is not signed by a CA this host trusts: give the CA that signed it ({how})"
            ),
            Some(bundle) => format!(
                "it is not signed by the CA from {}: give the CA that signed it ({how})",
                bundle.sources.join(", ")
            ),
        }
    }
}

/// Makes ring rustls' provider for this process, before any TLS client (kube's, the registry's)
/// is made. rustls cannot choose on its own: the sigstore crate's backend brings aws-lc-rs into
/// the build beside ring, and with two providers compiled in, a client made without an installed
/// one panics. A second call changes nothing.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_configmap_key_names_the_registry_with_its_port() {
        assert_eq!(
            configmap_key("registry.example:5000"),
            "registry.example_5000"
        );
        assert_eq!(
            registry_of_key("registry.example_5000"),
            "registry.example:5000"
        );
        assert_eq!(registry_of_key("registry.example"), "registry.example");
        assert_eq!(
            registry_of_key("my_registry.example"),
            "my_registry.example"
        );
    }

    #[test]
    fn a_bundle_without_certificates_is_refused_naming_its_source() {
        let mut cas = RegistryCas::default();
        let empty = cas.add_pem("r.example", "ca.pem", b"not a certificate");
        assert_eq!(
            empty.unwrap_err(),
            "ca.pem: the CA bundle for the registry r.example holds no certificate \
             (-----BEGIN CERTIFICATE-----)"
        );
        let broken = cas.add_pem(
            "r.example",
            "ca.pem",
            b"-----BEGIN CERTIFICATE-----\n%%%%\n-----END CERTIFICATE-----\n",
        );
        assert!(
            broken
                .unwrap_err()
                .starts_with("ca.pem: the CA bundle for the registry r.example is not PEM")
        );
        assert_eq!(cas.registries().count(), 0);
        assert_eq!(
            cas.remedy("r.example:5000"),
            "it is not signed by a CA this host trusts: give the CA that signed it \
             (--registry-ca r.example:5000=<PEM file>)"
        );
        let in_configmap = RegistryCas::new(GivenIn::ConfigMap("nsc/cas".into()));
        assert!(
            in_configmap
                .remedy("r.example:5000")
                .ends_with("(the key r.example_5000 of the ConfigMap nsc/cas)")
        );
    }
}
