//! Signature checks: a verification [`Policy`] says whose cosign signatures a plugin artifact
//! must carry (public keys, or keyless identities: an OIDC issuer and subject), all of some and
//! a minimum of others. The signatures are read from the registry in both formats cosign writes
//! (the `.sig` tag, and Sigstore bundles as OCI referrers) by the `sigstore` crate, and the
//! policy is applied before the component is compiled: an artifact that fails is not loaded.
//!
//! What counts is checked here, not taken from the library: each signature's payload names the
//! artifact's digest; a key's signature verifies with the key; a keyless one is what
//! [`keyless`] proves. One signature counts for one signer, and one signer once.

mod keyless;

use std::collections::BTreeMap;

use serde::Deserialize;
use sigstore::{
    cosign::{
        ClientBuilder, CosignCapabilities as _,
        signature_layers::SignatureLayer,
        verification_constraint::{PublicKeyVerifier, VerificationConstraint as _},
    },
    errors::SigstoreError,
    registry::OciReference,
    trust::ManualTrustRoot,
};

/// Whose signatures an artifact must carry. An empty policy is refused: it would pass anything.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Policy {
    /// Every one of these must sign the artifact.
    #[serde(default)]
    pub all_of: Vec<Signer>,
    /// At least `minimum` of these must sign the artifact.
    #[serde(default)]
    pub any_of: Option<AnyOf>,
    /// The roots keyless signatures are checked against: a private Sigstore's Fulcio CA and
    /// Rekor keys. Without it, keyless signers cannot be satisfied.
    #[serde(default)]
    pub trust_root: Option<TrustRoot>,
}

/// `minimum` of `signers`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnyOf {
    #[serde(default = "one")]
    pub minimum: usize,
    pub signers: Vec<Signer>,
}

fn one() -> usize {
    1
}

/// One signer.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum Signer {
    /// A public key (PEM), as `cosign generate-key-pair` writes `cosign.pub`.
    PublicKey(String),
    /// A keyless signature: the certificate's OIDC issuer, and its subject (an e-mail address
    /// or a URI) exactly, or under a prefix that ends on a path boundary.
    Keyless(Keyless),
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Keyless {
    pub issuer: String,
    #[serde(default)]
    pub subject: Option<String>,
    #[serde(default)]
    pub subject_prefix: Option<String>,
}

/// A private trust root for keyless signatures (PEM).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TrustRoot {
    /// The Fulcio CA certificates that issue the signers' certificates.
    pub fulcio_certificates: Vec<String>,
    /// The Rekor public keys whose signed entry timestamps the signatures carry.
    pub rekor_keys: Vec<String>,
}

/// A policy made ready: its signers as constraints.
pub struct Verifier {
    /// Where the policy came from, for messages.
    source: String,
    all_of: Vec<Constraint>,
    any_of: Option<(usize, Vec<Constraint>)>,
    fulcio_certificates: Vec<Vec<u8>>,
    rekor_keys: BTreeMap<String, Vec<u8>>,
    anchors: keyless::Anchors,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// One signer, ready to check, and how messages name it.
struct Constraint {
    name: String,
    check: Check,
}

enum Check {
    /// The key, and who it is: the sha256 of its DER, so that one key listed twice is one
    /// signer.
    Key {
        verifier: PublicKeyVerifier,
        id: String,
    },
    Keyless(Keyless),
}

/// A signature found, as far as it counts.
struct Found<'a> {
    layer: &'a SignatureLayer,
    /// Its keyless identity, proved; `None` for a signature by a key.
    identity: Option<keyless::Identity>,
    /// Why it counts for nothing, if it does not.
    refused: Option<String>,
}

impl<'a> Found<'a> {
    /// `layer`, a signature found for `digest`, as far as it counts.
    fn of(layer: &'a SignatureLayer, digest: &str, anchors: &keyless::Anchors) -> Self {
        let named = &layer.simple_signing.critical.image.docker_manifest_digest;
        let (identity, refused) = if named != digest {
            (None, Some(format!("it signs another artifact ({named})")))
        } else {
            match keyless::signer(layer, anchors) {
                None => (None, None),
                Some(Ok(identity)) => (Some(identity), None),
                Some(Err(why)) => (None, Some(why)),
            }
        };
        Found {
            layer,
            identity,
            refused,
        }
    }

    /// Whether this signature is `c`'s, and who signed it (one signer whatever the entry).
    fn signed_by(&self, c: &Constraint) -> Option<String> {
        if self.refused.is_some() {
            return None;
        }
        match (&c.check, &self.identity) {
            (Check::Key { verifier, id }, None) => verifier
                .verify(self.layer)
                .unwrap_or(false)
                .then(|| format!("key {id}")),
            (Check::Keyless(signer), Some(identity)) => (signer.issuer == identity.issuer
                && signer.matches(&identity.subject))
            .then(|| format!("keyless {}\n{}", identity.issuer, identity.subject)),
            _ => None,
        }
    }
}

impl Keyless {
    /// Whether `subject` is this signer's: equal to `subject`, or under `subject_prefix` on a
    /// path boundary (`https://github.com/org/` holds `https://github.com/org/repo/...`, not
    /// `https://github.com/organisation/...`).
    pub fn matches(&self, subject: &str) -> bool {
        if let Some(exact) = &self.subject {
            return subject == exact;
        }
        let Some(prefix) = &self.subject_prefix else {
            return false;
        };
        match subject.strip_prefix(prefix.as_str()) {
            None => false,
            Some(rest) => prefix.ends_with('/') || rest.is_empty() || rest.starts_with('/'),
        }
    }
}

/// What a check found, for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// Signatures found on the artifact.
    pub signatures: usize,
    /// The signers that signed it.
    pub signers: Vec<String>,
}

impl Verifier {
    /// Makes `policy` (from `source`) ready, or says which signer is wrong and why.
    pub fn new(source: &str, policy: &Policy) -> Result<Self, String> {
        let any = policy.any_of.as_ref();
        if policy.all_of.is_empty() && any.is_none_or(|a| a.signers.is_empty()) {
            return Err(format!(
                "{source}: the policy names no signer: give allOf or anyOf.signers"
            ));
        }
        let constraints = |field: &str, signers: &[Signer]| {
            signers
                .iter()
                .enumerate()
                .map(|(i, signer)| constraint(&format!("{field}[{i}]"), signer))
                .collect::<Result<Vec<_>, String>>()
                .map_err(|e| format!("{source}: {e}"))
        };
        let all_of = constraints("allOf", &policy.all_of)?;
        let any_of = match any {
            None => None,
            Some(any) => {
                let signers = constraints("anyOf.signers", &any.signers)?;
                if any.minimum == 0 || any.minimum > signers.len() {
                    return Err(format!(
                        "{source}: anyOf.minimum is {}: give 1 to the {} signers listed",
                        any.minimum,
                        signers.len()
                    ));
                }
                Some((any.minimum, signers))
            }
        };
        let (fulcio_certificates, rekor_keys) = match &policy.trust_root {
            None => (Vec::new(), BTreeMap::new()),
            Some(root) => trust_root(root).map_err(|e| format!("{source}: trustRoot.{e}"))?,
        };
        let anchors = keyless::Anchors::new(&fulcio_certificates, &rekor_keys)
            .map_err(|e| format!("{source}: trustRoot.{e}"))?;
        Ok(Verifier {
            source: source.to_owned(),
            all_of,
            any_of,
            fulcio_certificates,
            rekor_keys,
            anchors,
        })
    }

    /// Checks the signatures of the artifact `registry/repository@digest`, read with `config`
    /// and `auth`.
    pub async fn verify(
        &self,
        config: sigstore::registry::ClientConfig,
        auth: &sigstore::registry::Auth,
        registry: &str,
        repository: &str,
        digest: &str,
    ) -> Result<Verified, String> {
        let trust = ManualTrustRoot {
            fulcio_certs: self
                .fulcio_certificates
                .iter()
                .map(|der| der.clone().into())
                .collect(),
            rekor_keys: self.rekor_keys.clone(),
            ctfe_keys: BTreeMap::new(),
        };
        let mut builder = ClientBuilder::default().with_oci_client_config(config);
        if !self.fulcio_certificates.is_empty() {
            builder = builder
                .with_trust_repository(&trust)
                .map_err(|e| format!("{}: the trust root: {e}", self.source))?;
        }
        let mut client = builder
            .build()
            .map_err(|e| format!("cannot make the signature client: {e}"))?;
        let image = OciReference::with_digest(
            registry.to_owned(),
            repository.to_owned(),
            digest.to_owned(),
        );
        let layers = client
            .trusted_signature_layers(auth, &image)
            .await
            .map_err(|e: SigstoreError| format!("cannot read its signatures: {e}"))?;
        if layers.is_empty() {
            return Err(format!(
                "it is not signed, and the verification policy ({}) asks for signatures: sign \
                 it (cosign sign --key <key> {registry}/{repository}@{digest})",
                self.source
            ));
        }
        self.apply(&layers, digest)
    }

    /// The policy applied to the signatures found for `digest`.
    fn apply(&self, layers: &[SignatureLayer], digest: &str) -> Result<Verified, String> {
        let found: Vec<Found<'_>> = layers
            .iter()
            .map(|layer| Found::of(layer, digest, &self.anchors))
            .collect();
        // Why the signatures that count for nothing do, for the message of a refusal.
        let refusals: String = found
            .iter()
            .enumerate()
            .filter_map(|(i, f)| Some((i, f.refused.as_ref()?)))
            .map(|(i, why)| format!("; signature {} counts for nothing: {why}", i + 1))
            .collect();
        let unsatisfied = |what: String| {
            format!(
                "its {} signature(s) do not satisfy the verification policy ({}): {what}{refusals}",
                layers.len(),
                self.source,
            )
        };
        let mut signers: Vec<String> = Vec::new();
        let mut missing: Vec<String> = Vec::new();
        for c in &self.all_of {
            if found.iter().any(|f| f.signed_by(c).is_some()) {
                signers.push(c.name.clone());
            } else {
                missing.push(c.name.clone());
            }
        }
        if !missing.is_empty() {
            return Err(unsatisfied(format!("not signed by {}", missing.join(", "))));
        }
        if let Some((minimum, any)) = &self.any_of {
            let counted = count_once(any, &found);
            if counted.len() < *minimum {
                let named: Vec<&str> = counted.iter().map(|&i| any[i].name.as_str()).collect();
                // More entries are met than count: a signature or a signer met two of them.
                let met = any
                    .iter()
                    .filter(|c| found.iter().any(|f| f.signed_by(c).is_some()))
                    .count();
                return Err(unsatisfied(format!(
                    "anyOf needs {minimum} of its {} signers, and {} signed{}{}",
                    any.len(),
                    counted.len(),
                    if named.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", named.join(", "))
                    },
                    if met > counted.len() {
                        "; a signature, and a signer, counts for one of them only"
                    } else {
                        ""
                    }
                )));
            }
            signers.extend(counted.into_iter().map(|i| any[i].name.clone()));
        }
        Ok(Verified {
            signatures: layers.len(),
            signers,
        })
    }
}

/// The entries of `any` that count, in order: as many as can each be given a signature of its
/// own by a signer of its own (a maximum matching of entries to signers, by augmenting paths).
/// One signature (or one key or identity listed twice) that meets two entries counts once.
fn count_once(any: &[Constraint], found: &[Found<'_>]) -> Vec<usize> {
    // A signature has one signer, so distinct signers are distinct signatures too.
    let mut who: Vec<String> = Vec::new();
    let edges: Vec<Vec<usize>> = any
        .iter()
        .map(|c| {
            let mut to: Vec<usize> = Vec::new();
            for signer in found.iter().filter_map(|f| f.signed_by(c)) {
                let n = who.iter().position(|w| *w == signer).unwrap_or_else(|| {
                    who.push(signer);
                    who.len() - 1
                });
                if !to.contains(&n) {
                    to.push(n);
                }
            }
            to
        })
        .collect();
    let mut owner: Vec<Option<usize>> = vec![None; who.len()];
    fn augment(
        entry: usize,
        edges: &[Vec<usize>],
        owner: &mut [Option<usize>],
        seen: &mut [bool],
    ) -> bool {
        for &w in &edges[entry] {
            if seen[w] {
                continue;
            }
            seen[w] = true;
            if owner[w].is_none_or(|other| augment(other, edges, owner, seen)) {
                owner[w] = Some(entry);
                return true;
            }
        }
        false
    }
    for entry in 0..any.len() {
        augment(entry, &edges, &mut owner, &mut vec![false; who.len()]);
    }
    let mut counted: Vec<usize> = owner.into_iter().flatten().collect();
    counted.sort_unstable();
    counted
}

/// The signer at `field` as a constraint.
fn constraint(field: &str, signer: &Signer) -> Result<Constraint, String> {
    match signer {
        Signer::PublicKey(pem) => {
            let not_a_key = |e: &dyn std::fmt::Display| {
                format!("{field}.publicKey: not a PEM public key (cosign.pub): {e}")
            };
            let verifier =
                PublicKeyVerifier::try_from(pem.as_bytes()).map_err(|e| not_a_key(&e))?;
            use rustls_pki_types::{SubjectPublicKeyInfoDer, pem::PemObject as _};
            let der = SubjectPublicKeyInfoDer::from_pem_slice(pem.as_bytes())
                .map_err(|e| not_a_key(&format!("{e:?}")))?;
            Ok(Constraint {
                name: format!("{field} (public key)"),
                check: Check::Key {
                    verifier,
                    id: nad_model::digest::sha256_hex(der.as_ref()),
                },
            })
        }
        Signer::Keyless(keyless) => {
            match (&keyless.subject, &keyless.subject_prefix) {
                (Some(_), None) | (None, Some(_)) => {}
                _ => {
                    return Err(format!(
                        "{field}.keyless: give subject or subjectPrefix, one of them"
                    ));
                }
            }
            let subject = keyless
                .subject
                .as_deref()
                .or(keyless.subject_prefix.as_deref())
                .unwrap_or_default();
            Ok(Constraint {
                name: format!("{field} ({} from {})", subject, keyless.issuer),
                check: Check::Keyless(keyless.clone()),
            })
        }
    }
}

/// The trust root's certificates and keys (DER), or which one is wrong.
#[allow(clippy::type_complexity)]
fn trust_root(root: &TrustRoot) -> Result<(Vec<Vec<u8>>, BTreeMap<String, Vec<u8>>), String> {
    use rustls_pki_types::{CertificateDer, SubjectPublicKeyInfoDer, pem::PemObject as _};
    let mut certificates = Vec::new();
    for (i, pem) in root.fulcio_certificates.iter().enumerate() {
        let der = CertificateDer::from_pem_slice(pem.as_bytes())
            .map_err(|e| format!("fulcioCertificates[{i}]: not a PEM certificate: {e:?}"))?;
        certificates.push(der.as_ref().to_vec());
    }
    let mut keys = BTreeMap::new();
    for (i, pem) in root.rekor_keys.iter().enumerate() {
        let der = SubjectPublicKeyInfoDer::from_pem_slice(pem.as_bytes())
            .map_err(|e| format!("rekorKeys[{i}]: not a PEM public key: {e:?}"))?;
        // Rekor names a key by the sha256 of its DER.
        let id = nad_model::digest::sha256_hex(der.as_ref());
        keys.insert(id, der.as_ref().to_vec());
    }
    Ok((certificates, keys))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subject_prefix_holds_the_subjects_under_it_on_a_path_boundary() {
        let prefix = |p: &str| Keyless {
            issuer: "https://token.actions.githubusercontent.com".into(),
            subject: None,
            subject_prefix: Some(p.into()),
        };
        let org = prefix("https://github.com/org");
        assert!(
            org.matches(
                "https://github.com/org/repo/.github/workflows/release.yml@refs/heads/main"
            )
        );
        assert!(org.matches("https://github.com/org"));
        assert!(!org.matches("https://github.com/organisation/repo"));
        let slash = prefix("https://github.com/org/");
        assert!(slash.matches("https://github.com/org/repo"));
        assert!(!slash.matches("https://github.com/organisation/repo"));
        let exact = Keyless {
            issuer: "https://accounts.example".into(),
            subject: Some("ci@example.com".into()),
            subject_prefix: None,
        };
        assert!(exact.matches("ci@example.com"));
        assert!(!exact.matches("ci@example.com.evil"));
    }

    #[test]
    fn a_policy_that_cannot_be_used_says_which_field() {
        let refused = |policy: Policy| Verifier::new("policy.yaml", &policy).unwrap_err();
        assert_eq!(
            refused(Policy::default()),
            "policy.yaml: the policy names no signer: give allOf or anyOf.signers"
        );
        let bad_key = Policy {
            all_of: vec![Signer::PublicKey("not a key".into())],
            ..Policy::default()
        };
        assert!(
            refused(bad_key).starts_with("policy.yaml: allOf[0].publicKey: not a PEM public key"),
        );
        let both = Policy {
            any_of: Some(AnyOf {
                minimum: 1,
                signers: vec![Signer::Keyless(Keyless {
                    issuer: "i".into(),
                    subject: Some("a".into()),
                    subject_prefix: Some("b".into()),
                })],
            }),
            ..Policy::default()
        };
        assert_eq!(
            refused(both),
            "policy.yaml: anyOf.signers[0].keyless: give subject or subjectPrefix, one of them"
        );
    }
}
