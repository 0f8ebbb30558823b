//! Whose keyless signature a signature layer is, checked by this project's code against the
//! policy's trust root, for both formats cosign writes.
//!
//! sigstore 0.15 hands over layers whose payload names the artifact's digest, and whose Rekor
//! bundle's signed entry timestamp (SET) a trust-root Rekor key verifies. For a `.sig` layer it
//! also chains the certificate annotation to the Fulcio CA, and no more: it does not verify the
//! layer's signature with the certificate's key, nor that the bundle's entry describes this
//! signature and payload, so genuine annotations copied onto another payload would pass. For a
//! Sigstore bundle (OCI referrer) it checks that the log entry describes the envelope, but the
//! DSSE signature itself only on Rekor's word. Here, for both: the SET again, the certificate
//! the log recorded chained to the Fulcio CA at the entry's time, the signature verified with
//! that certificate's key, the entry's signature and payload hash compared with the layer's,
//! and the certificate annotation compared with the logged one. The identity that counts is
//! the logged certificate's.

use std::collections::BTreeMap;

use base64::{Engine as _, engine::general_purpose::STANDARD as BASE64};
use rustls_pki_types::{CertificateDer, TrustAnchor, UnixTime, pem::PemObject as _};
use sigstore::{
    cosign::{
        bundle_content::BundleContent,
        signature_layers::{CertificateSubject, SignatureLayer},
    },
    crypto::{CosignVerificationKey, Signature},
};
use x509_cert::der::{Decode as _, Encode as _, asn1::Utf8StringRef};

/// Fulcio's OIDC issuer extensions: `.1.8` a DER UTF8String (what Fulcio writes now), `.1.1`
/// the issuer's bytes as they are (what it wrote first, and what sigstore-rs reads).
const ISSUER_V2: &str = "1.3.6.1.4.1.57264.1.8";
const ISSUER_V1: &str = "1.3.6.1.4.1.57264.1.1";

/// id-kp-codeSigning (1.3.6.1.5.5.7.3.3), as the bytes of its DER value.
const CODE_SIGNING: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x03];

/// Who signed with a Fulcio certificate: its OIDC issuer and its subject (an e-mail address or
/// a URI).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Identity {
    pub issuer: String,
    pub subject: String,
}

/// The trust root, ready to check with.
pub(super) struct Anchors {
    fulcio: Vec<TrustAnchor<'static>>,
    /// By log id (the sha256 of the key's DER, hex).
    rekor: BTreeMap<String, CosignVerificationKey>,
}

impl Anchors {
    /// The anchors of the certificates and keys (DER), or which one cannot be used.
    pub fn new(
        fulcio_certificates: &[Vec<u8>],
        rekor_keys: &BTreeMap<String, Vec<u8>>,
    ) -> Result<Self, String> {
        let mut fulcio = Vec::new();
        for (i, der) in fulcio_certificates.iter().enumerate() {
            let der = CertificateDer::from(der.as_slice());
            let anchor = webpki::anchor_from_trusted_cert(&der)
                .map_err(|e| format!("fulcioCertificates[{i}]: not a CA certificate: {e}"))?;
            fulcio.push(anchor.to_owned());
        }
        let mut rekor = BTreeMap::new();
        for (i, (id, der)) in rekor_keys.iter().enumerate() {
            let key = CosignVerificationKey::try_from_der(der)
                .map_err(|e| format!("rekorKeys[{i}]: not a key Rekor signs with: {e}"))?;
            rekor.insert(id.clone(), key);
        }
        Ok(Anchors { fulcio, rekor })
    }
}

/// What the log entry of a layer records.
struct Entry {
    /// The signature, decoded.
    signature: Vec<u8>,
    /// The certificate or public key that verifies it (PEM).
    verifier: Vec<u8>,
    /// The sha256 of the signed payload (hex).
    payload_sha256: String,
    integrated_time: i64,
}

/// The identity of `layer`'s keyless signature; `None` when it is not one (no certificate, a
/// signature by a key), an error saying why it counts for nothing.
pub(super) fn signer(
    layer: &SignatureLayer,
    anchors: &Anchors,
) -> Option<Result<Identity, String>> {
    let has_certificate = layer.certificate_signature.is_some();
    let bundle = layer.bundle.as_ref()?;
    let entry = match entry(bundle, anchors) {
        Ok(entry) => entry,
        Err(e) => return Some(Err(e)),
    };
    let certificate = match CertificateDer::from_pem_slice(&entry.verifier) {
        Ok(certificate) => certificate,
        // A key's signature, logged: not keyless.
        Err(_) if !has_certificate => return None,
        Err(_) => {
            return Some(Err(
                "its Rekor bundle records a key, not its certificate: sign it again".to_owned(),
            ));
        }
    };
    Some(check(layer, anchors, &entry, &certificate))
}

/// The checks of a layer with a logged certificate, in the order that best tells a forgery:
/// the certificate, the signature with its key, then whether the entry is this signature's.
fn check(
    layer: &SignatureLayer,
    anchors: &Anchors,
    entry: &Entry,
    certificate: &CertificateDer<'_>,
) -> Result<Identity, String> {
    let not_trusted = |e: &dyn std::fmt::Debug| {
        format!(
            "its certificate is not issued by a trustRoot Fulcio certificate, or was not valid \
             when it was logged ({e:?}): sign it with a certificate of that Fulcio"
        )
    };
    let time = u64::try_from(entry.integrated_time)
        .map_err(|_| not_trusted(&format!("integrated time {}", entry.integrated_time)))?;
    let end_entity = webpki::EndEntityCert::try_from(certificate).map_err(|e| not_trusted(&e))?;
    end_entity
        .verify_for_usage(
            webpki::ALL_VERIFICATION_ALGS,
            &anchors.fulcio,
            &[],
            UnixTime::since_unix_epoch(std::time::Duration::from_secs(time)),
            webpki::KeyUsage::required(CODE_SIGNING),
            None,
            None,
        )
        .map_err(|e| not_trusted(&e))?;
    let parsed = x509_cert::Certificate::from_der(certificate)
        .map_err(|e| format!("its certificate cannot be read ({e}): sign it again"))?;
    let key = parsed
        .tbs_certificate()
        .subject_public_key_info()
        .to_der()
        .ok()
        .and_then(|der| CosignVerificationKey::try_from_der(&der).ok())
        .ok_or("its certificate's key is not one cosign signs with: sign it again")?;
    let Some(signature) = &layer.signature else {
        return Err("it carries no signature: sign it again".to_owned());
    };
    let verifies = |key: &CosignVerificationKey| {
        key.verify_signature(
            Signature::Base64Encoded(signature.as_bytes()),
            &layer.raw_data,
        )
        .is_ok()
    };
    if !verifies(&key) {
        return Err(
            "its signature does not verify with its certificate's key over its payload: sign it \
             again"
                .to_owned(),
        );
    }
    if BASE64.decode(signature).ok().as_ref() != Some(&entry.signature) {
        return Err(
            "its Rekor bundle records another signature than the layer's: sign it again".to_owned(),
        );
    }
    let payload = signed_payload(layer)?;
    if nad_model::digest::sha256_hex(payload) != entry.payload_sha256 {
        return Err(
            "its Rekor bundle records another payload than the layer's: sign it again".to_owned(),
        );
    }
    let identity = identity(&parsed)?;
    // The annotation sigstore chained is the one the log recorded: the same identity, and a
    // key that verifies the same signature.
    let annotated = layer.certificate_signature.as_ref().filter(|annotated| {
        let subject = match &annotated.subject {
            CertificateSubject::Email(s) | CertificateSubject::Uri(s) => s,
        };
        *subject == identity.subject
            && annotated
                .issuer
                .as_ref()
                .is_none_or(|issuer| *issuer == identity.issuer)
            && verifies(&annotated.verification_key)
    });
    if annotated.is_none() {
        return Err(
            "its certificate annotation is not the certificate its Rekor bundle records: sign it \
             again"
                .to_owned(),
        );
    }
    Ok(identity)
}

/// The log entry of `bundle`, its SET verified with a trust-root Rekor key.
fn entry(bundle: &BundleContent, anchors: &Anchors) -> Result<Entry, String> {
    let (body, integrated_time) = logged(bundle, anchors)?;
    let body: serde_json::Value = serde_json::from_slice(&body)
        .map_err(|_| "its Rekor bundle's entry cannot be read: sign it again".to_owned())?;
    let field = |pointer: &str| body.pointer(pointer).and_then(serde_json::Value::as_str);
    let kind = (field("/kind"), field("/apiVersion"));
    let (signature, verifier, algorithm, hash) = match kind {
        (Some("hashedrekord"), Some("0.0.1")) => (
            field("/spec/signature/content"),
            field("/spec/signature/publicKey/content"),
            field("/spec/data/hash/algorithm"),
            field("/spec/data/hash/value"),
        ),
        (Some("dsse"), Some("0.0.1"))
            if body
                .pointer("/spec/signatures")
                .and_then(serde_json::Value::as_array)
                .is_some_and(|s| s.len() == 1) =>
        {
            (
                field("/spec/signatures/0/signature"),
                field("/spec/signatures/0/verifier"),
                field("/spec/payloadHash/algorithm"),
                field("/spec/payloadHash/value"),
            )
        }
        (kind, version) => {
            return Err(format!(
                "its Rekor bundle records a {} {} entry, not one signature of its payload: sign \
                 it again",
                kind.unwrap_or("unnamed"),
                version.unwrap_or("unversioned")
            ));
        }
    };
    let decoded = |field: Option<&str>| field.and_then(|f| BASE64.decode(f).ok());
    match (decoded(signature), decoded(verifier), algorithm, hash) {
        (Some(signature), Some(verifier), Some("sha256"), Some(hash)) => {
            // Sanity of the layer's format: a `.sig` layer's bundle records a hashedrekord,
            // a Sigstore bundle's a dsse entry (its raw data is the envelope's PAE).
            let dsse = matches!(bundle, BundleContent::SigstoreBundle(_));
            if dsse != (kind.0 == Some("dsse")) {
                return Err(
                    "its Rekor bundle records an entry of another format than the layer's: sign \
                     it again"
                        .to_owned(),
                );
            }
            Ok(Entry {
                signature,
                verifier,
                payload_sha256: hash.to_ascii_lowercase(),
                integrated_time,
            })
        }
        _ => Err("its Rekor bundle's entry cannot be read: sign it again".to_owned()),
    }
}

/// The entry's body, and when it was logged, once its SET verifies with a trust-root Rekor key.
fn logged(bundle: &BundleContent, anchors: &Anchors) -> Result<(Vec<u8>, i64), String> {
    let (body, set, integrated_time, log_index, log_id) = match bundle {
        BundleContent::RekorBundle(bundle) => (
            BASE64.decode(&bundle.payload.body).ok(),
            BASE64.decode(&bundle.signed_entry_timestamp).ok(),
            bundle.payload.integrated_time,
            bundle.payload.log_index,
            bundle.payload.log_id.clone(),
        ),
        BundleContent::SigstoreBundle(entry) => (
            Some(entry.canonicalized_body.clone()),
            entry
                .inclusion_promise
                .as_ref()
                .map(|p| p.signed_entry_timestamp.clone()),
            entry.integrated_time,
            entry.log_index,
            entry
                .log_id
                .as_ref()
                .map(|id| id.key_id.iter().map(|b| format!("{b:02x}")).collect())
                .unwrap_or_default(),
        ),
    };
    let unsigned = "its Rekor bundle is not signed by a trustRoot Rekor key: sign it again, \
                    logged by that Rekor";
    let (Some(body), Some(set)) = (body, set) else {
        return Err(unsigned.to_owned());
    };
    let key = anchors.rekor.get(&log_id).ok_or(unsigned)?;
    // The SET signs the canonical JSON of these four fields.
    let signed = serde_json::json!({
        "body": BASE64.encode(&body),
        "integratedTime": integrated_time,
        "logID": log_id,
        "logIndex": log_index,
    });
    key.verify_signature(Signature::Raw(&set), canonical_json(&signed).as_bytes())
        .map_err(|_| unsigned.to_owned())?;
    Ok((body, integrated_time))
}

/// What the layer's signature hashes to in its log entry: the payload, which for a DSSE
/// envelope is inside the PAE the signature covers ("DSSEv1 <len> <type> <len> <payload>").
fn signed_payload(layer: &SignatureLayer) -> Result<&[u8], String> {
    if !matches!(layer.bundle, Some(BundleContent::SigstoreBundle(_))) {
        return Ok(&layer.raw_data);
    }
    let unreadable = || "its DSSE envelope cannot be read: sign it again".to_owned();
    let rest = layer
        .raw_data
        .strip_prefix(b"DSSEv1 ")
        .ok_or_else(unreadable)?;
    let (type_len, rest) = length(rest).ok_or_else(unreadable)?;
    let rest = rest
        .get(type_len..)
        .and_then(|r| r.strip_prefix(b" "))
        .ok_or_else(unreadable)?;
    let (payload_len, payload) = length(rest).ok_or_else(unreadable)?;
    if payload.len() != payload_len {
        return Err(unreadable());
    }
    Ok(payload)
}

/// A decimal length and a space, and what follows them.
fn length(data: &[u8]) -> Option<(usize, &[u8])> {
    let space = data.iter().position(|b| *b == b' ')?;
    let digits = std::str::from_utf8(&data[..space]).ok()?;
    Some((digits.parse().ok()?, &data[space + 1..]))
}

/// JSON with object keys in UTF-16 order and no spaces: RFC 8785 for the SET's fields, which
/// are strings of base64 and hex (nothing to escape) and integers.
fn canonical_json(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::Object(map) => {
            let mut fields: Vec<_> = map.iter().collect();
            fields.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            let fields: Vec<String> = fields
                .into_iter()
                .map(|(k, v)| {
                    format!(
                        "{}:{}",
                        serde_json::Value::from(k.as_str()),
                        canonical_json(v)
                    )
                })
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        other => other.to_string(),
    }
}

/// The certificate's OIDC issuer and subject.
fn identity(certificate: &x509_cert::Certificate) -> Result<Identity, String> {
    let tbs = certificate.tbs_certificate();
    let extension = |oid: &str| {
        tbs.extensions()
            .into_iter()
            .flatten()
            .find(|e| e.extn_id.to_string() == oid)
            .map(|e| e.extn_value.as_bytes())
    };
    let issuer = match (extension(ISSUER_V2), extension(ISSUER_V1)) {
        (Some(der), _) => Utf8StringRef::from_der(der)
            .ok()
            .map(|s| s.as_str().to_owned()),
        (None, Some(raw)) => std::str::from_utf8(raw).ok().map(str::to_owned),
        (None, None) => None,
    }
    .ok_or("its certificate names no OIDC issuer: sign it with a Fulcio certificate")?;
    let subject = CertificateSubject::from_certificate(certificate).map_err(|e| {
        format!("its certificate names no subject ({e}): sign it with a Fulcio certificate")
    })?;
    let subject = match subject {
        CertificateSubject::Email(s) | CertificateSubject::Uri(s) => s,
    };
    Ok(Identity { issuer, subject })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_set_is_signed_over_the_fields_in_order_without_spaces() {
        let signed = serde_json::json!({
            "logIndex": 7,
            "logID": "c0d2",
            "integratedTime": 1634714179,
            "body": "eyJ9",
        });
        assert_eq!(
            canonical_json(&signed),
            r#"{"body":"eyJ9","integratedTime":1634714179,"logID":"c0d2","logIndex":7}"#
        );
    }

    #[test]
    fn a_dsse_pae_gives_its_payload_only_when_its_lengths_hold() {
        assert_eq!(
            length(b"29 application/vnd.in-toto+json"),
            Some((29, &b"application/vnd.in-toto+json"[..]))
        );
        assert_eq!(length(b"x y"), None);
        assert_eq!(length(b"12"), None);
    }
}
