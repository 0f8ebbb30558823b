//! A private Sigstore made by a test: a Fulcio-like CA that issues short-lived code-signing
//! certificates carrying an OIDC issuer and a subject, a Rekor-like P-256 key that signs its
//! entries' timestamps (SET), and cosign's `.sig` manifests built from them and pushed to a
//! test registry. Everything is built by hand, so that a test can also build what a forger
//! would: a signature, certificate or bundle taken from elsewhere.

#![allow(dead_code)] // not every test binary uses every part

use std::collections::BTreeMap;

use base64::{Engine as _, engine::general_purpose::STANDARD as BASE64};
use rcgen::{
    BasicConstraints, CertificateParams, CustomExtension, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, PublicKeyData as _, SanType,
    SigningKey as _,
};
use sha2::{Digest as _, Sha256};

/// The OIDC issuer extensions of Fulcio's certificates: `.1.1` holds the issuer's bytes as
/// they are (what sigstore-rs reads), `.1.8` a DER UTF8String (what Fulcio writes today).
const ISSUER_V1: &[u64] = &[1, 3, 6, 1, 4, 1, 57264, 1, 1];
const ISSUER_V2: &[u64] = &[1, 3, 6, 1, 4, 1, 57264, 1, 8];

pub const SIMPLE_SIGNING: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
pub const SIGNATURE: &str = "dev.cosignproject.cosign/signature";
pub const CERTIFICATE: &str = "dev.sigstore.cosign/certificate";
pub const CHAIN: &str = "dev.sigstore.cosign/chain";
pub const BUNDLE: &str = "dev.sigstore.cosign/bundle";
const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const CONFIG: &str = "application/vnd.oci.image.config.v1+json";

fn sha256_hex(data: &[u8]) -> String {
    format!("{:x}", Sha256::digest(data))
}

/// A certificate authority that plays Fulcio.
pub struct Fulcio {
    params: CertificateParams,
    key: KeyPair,
    /// Its certificate, PEM: the policy's `trustRoot.fulcioCertificates`.
    pub pem: String,
}

/// A certificate's subject: an e-mail address or a URI.
#[derive(Clone, Copy)]
pub enum Subject<'a> {
    Email(&'a str),
    Uri(&'a str),
}

/// A signer's short-lived certificate and its key.
pub struct Signer {
    /// PEM.
    pub certificate: String,
    key: KeyPair,
}

impl Fulcio {
    pub fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().unwrap();
        let pem = params.self_signed(&key).unwrap().pem();
        Fulcio { params, key, pem }
    }

    /// A certificate for a new key, valid from a minute ago for ten minutes, as Fulcio issues
    /// one for an OIDC token of `issuer` naming `subject`.
    pub fn issue(&self, issuer: &str, subject: Subject<'_>) -> Signer {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        // Fulcio's certificates have an empty subject name: the identity is in the SAN.
        params.distinguished_name = DistinguishedName::new();
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::minutes(1);
        params.not_after = now + time::Duration::minutes(10);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::CodeSigning];
        params.subject_alt_names = vec![match subject {
            Subject::Email(email) => SanType::Rfc822Name(email.try_into().unwrap()),
            Subject::Uri(uri) => SanType::URI(uri.try_into().unwrap()),
        }];
        let issuer_bytes = issuer.as_bytes().to_vec();
        assert!(issuer_bytes.len() < 128, "a short-form DER length");
        let mut utf8_string = vec![0x0c, issuer_bytes.len() as u8];
        utf8_string.extend_from_slice(&issuer_bytes);
        params.custom_extensions = vec![
            CustomExtension::from_oid_content(ISSUER_V1, issuer_bytes),
            CustomExtension::from_oid_content(ISSUER_V2, utf8_string),
        ];
        let key = KeyPair::generate().unwrap();
        let ca = Issuer::from_params(&self.params, &self.key);
        let certificate = params.signed_by(&key, &ca).unwrap().pem();
        Signer { certificate, key }
    }
}

impl Signer {
    /// A P-256 key with no certificate (a cosign key pair): the signer and its public key (PEM).
    pub fn key() -> (Self, String) {
        let key = KeyPair::generate().unwrap();
        let public = key.public_key_pem();
        (
            Signer {
                certificate: String::new(),
                key,
            },
            public,
        )
    }

    /// An ECDSA P-256 SHA-256 signature of `data` (ASN.1 DER), as cosign makes.
    pub fn sign(&self, data: &[u8]) -> Vec<u8> {
        self.key.sign(data).unwrap()
    }
}

/// A transparency log that plays Rekor: it does not check what it logs, it signs it.
pub struct Rekor {
    key: KeyPair,
    /// Its public key, PEM: the policy's `trustRoot.rekorKeys`.
    pub pem: String,
    log_id: String,
    next_index: std::sync::atomic::AtomicI64,
}

impl Default for Rekor {
    fn default() -> Self {
        let key = KeyPair::generate().unwrap();
        Rekor {
            pem: key.public_key_pem(),
            log_id: sha256_hex(&key.subject_public_key_info()),
            key,
            next_index: std::sync::atomic::AtomicI64::new(1000),
        }
    }
}

/// The body of a `hashedrekord` entry v0.0.1: a signature, the certificate (PEM) that verifies
/// it, and the sha256 of what was signed.
pub fn hashedrekord(signature: &[u8], certificate: &str, payload: &[u8]) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "0.0.1",
        "kind": "hashedrekord",
        "spec": {
            "data": {"hash": {"algorithm": "sha256", "value": sha256_hex(payload)}},
            "signature": {
                "content": BASE64.encode(signature),
                "publicKey": {"content": BASE64.encode(certificate)},
            },
        },
    })
}

impl Rekor {
    /// The bundle annotation of an entry whose body is `body`, logged now: the SET is its
    /// signature over the canonical JSON of {body, integratedTime, logID, logIndex}.
    pub fn bundle(&self, body: &serde_json::Value) -> String {
        let body = BASE64.encode(serde_json::to_vec(body).unwrap());
        let integrated_time = time::OffsetDateTime::now_utc().unix_timestamp();
        let log_index = self
            .next_index
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        // Canonical JSON: keys in order, no spaces; base64 and hex need no escapes.
        let canonical = format!(
            r#"{{"body":"{body}","integratedTime":{integrated_time},"logID":"{}","logIndex":{log_index}}}"#,
            self.log_id
        );
        let set = BASE64.encode(self.key.sign(canonical.as_bytes()).unwrap());
        serde_json::json!({
            "SignedEntryTimestamp": set,
            "Payload": {
                "body": body,
                "integratedTime": integrated_time,
                "logIndex": log_index,
                "logID": self.log_id,
            },
        })
        .to_string()
    }
}

/// cosign's simple-signing payload for the artifact `repository` (`host/path`) at `digest`.
pub fn payload(repository: &str, digest: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "critical": {
            "identity": {"docker-reference": repository},
            "image": {"docker-manifest-digest": digest},
            "type": "cosign container image signature",
        },
        "optional": null,
    }))
    .unwrap()
}

/// One layer of a `.sig` manifest: a payload and its annotations.
#[derive(Clone)]
pub struct SignatureLayer {
    pub payload: Vec<u8>,
    pub annotations: BTreeMap<String, String>,
}

impl SignatureLayer {
    /// A keyless signature as cosign writes one: `signer` signs `payload`, and `rekor` logs it.
    pub fn keyless(signer: &Signer, ca: &Fulcio, rekor: &Rekor, payload: &[u8]) -> Self {
        let signature = signer.sign(payload);
        let body = hashedrekord(&signature, &signer.certificate, payload);
        SignatureLayer {
            payload: payload.to_vec(),
            annotations: BTreeMap::from([
                (SIGNATURE.to_owned(), BASE64.encode(&signature)),
                (CERTIFICATE.to_owned(), signer.certificate.clone()),
                (CHAIN.to_owned(), ca.pem.clone()),
                (BUNDLE.to_owned(), rekor.bundle(&body)),
            ]),
        }
    }

    /// A signature by a key, offline (no transparency log).
    pub fn by_key(signer: &Signer, payload: &[u8]) -> Self {
        SignatureLayer {
            payload: payload.to_vec(),
            annotations: BTreeMap::from([(
                SIGNATURE.to_owned(),
                BASE64.encode(signer.sign(payload)),
            )]),
        }
    }

    /// The same layer with the annotation `key` set to `value`.
    pub fn with(mut self, key: &str, value: &str) -> Self {
        self.annotations.insert(key.to_owned(), value.to_owned());
        self
    }

    /// The same layer over another payload, its annotations kept as they are.
    pub fn over(mut self, payload: &[u8]) -> Self {
        self.payload = payload.to_vec();
        self
    }
}

/// Writes `layers` as the `.sig` manifest cosign keeps for `repository@digest` in the registry
/// at `host` (plain HTTP, open).
pub async fn put_signatures(host: &str, repository: &str, digest: &str, layers: &[SignatureLayer]) {
    let client = oci_client::Client::new(oci_client::client::ClientConfig {
        protocol: oci_client::client::ClientProtocol::Http,
        ..Default::default()
    });
    let tag = format!("{}.sig", digest.replace(':', "-"));
    let target: oci_client::Reference = format!("{host}/{repository}:{tag}").parse().unwrap();
    client
        .store_auth_if_needed(host, &oci_client::secrets::RegistryAuth::Anonymous)
        .await;
    let config = b"{}".to_vec();
    let mut descriptors = Vec::new();
    for blob in std::iter::once(&config).chain(layers.iter().map(|l| &l.payload)) {
        let digest = format!("sha256:{}", sha256_hex(blob));
        client
            .push_blob(&target, blob.clone(), &digest)
            .await
            .unwrap();
        descriptors.push((digest, blob.len()));
    }
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": {"mediaType": CONFIG, "digest": descriptors[0].0, "size": descriptors[0].1},
        "layers": layers.iter().zip(&descriptors[1..]).map(|(layer, (digest, size))| {
            serde_json::json!({
                "mediaType": SIMPLE_SIGNING,
                "digest": digest,
                "size": size,
                "annotations": layer.annotations,
            })
        }).collect::<Vec<_>>(),
    });
    client
        .push_manifest_raw(
            &target,
            serde_json::to_vec(&manifest).unwrap(),
            http::HeaderValue::from_static(MANIFEST),
        )
        .await
        .unwrap();
}
