//! Keyless signatures against a private trust root the test makes (support/sigstore.rs: a
//! Fulcio-like CA, a Rekor-like key), in cosign's `.sig` format, in the CNCF distribution
//! registry on loopback. A genuine signature loads; what a forger can assemble from genuine
//! parts does not: a certificate and bundle moved onto a payload for another digest, a
//! signature by another key under a genuine certificate, a bundle that describes another
//! signature or payload, a certificate from another CA. A subject prefix holds on a path
//! boundary only; `anyOf` counts each signature and each signer once.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code

use crate::{registry, sigstore};

use std::collections::BTreeMap;

use base64::{Engine as _, engine::general_purpose::STANDARD as BASE64};

use nad_plugin_fetcher::{
    AnyOf, Keyless, PUSH_LAYER_MEDIA_TYPE, Policy, Puller, Signer, TrustRoot, Verifier,
};
use registry::{Registry, oci, puller};
use sigstore::{
    BUNDLE, CERTIFICATE, Fulcio, Rekor, SIGNATURE, SignatureLayer, Subject, hashedrekord, payload,
    put_signatures,
};

const OPT_OUT: &[u8] = include_bytes!(env!("NSC_EXAMPLE_OPT_OUT_WASM"));
const REPOSITORY: &str = "plugins/keyless";
const ISSUER: &str = "https://issuer.example";
const RELEASE: &str = "release@example.com";

/// Two releases of a plugin in a registry, and a private Sigstore.
struct Keyed {
    registry: Registry,
    fulcio: Fulcio,
    rekor: Rekor,
    digests: [String; 2],
}

impl Keyed {
    async fn start(test: &str) -> Self {
        let registry = Registry::start(test);
        let publisher = puller(&registry, None);
        let mut digests = Vec::new();
        for n in ["1", "2"] {
            let target = oci(&format!("{}:{n}", registry.reference(REPOSITORY)));
            let annotations = BTreeMap::from([("release".to_owned(), n.to_owned())]);
            let digest = publisher
                .push(&target, OPT_OUT, PUSH_LAYER_MEDIA_TYPE, annotations)
                .await
                .unwrap();
            digests.push(digest);
        }
        Keyed {
            registry,
            fulcio: Fulcio::new("fulcio.test"),
            rekor: Rekor::default(),
            digests: digests.try_into().unwrap(),
        }
    }

    /// cosign's payload for release `n`.
    fn payload(&self, n: usize) -> Vec<u8> {
        payload(
            &format!("{}/{REPOSITORY}", self.registry.host),
            &self.digests[n],
        )
    }

    /// Release `n`'s signatures are `layers` from now on.
    async fn sign(&self, n: usize, layers: &[SignatureLayer]) {
        put_signatures(&self.registry.host, REPOSITORY, &self.digests[n], layers).await;
    }

    /// A genuine keyless signature of release `n` by `subject`.
    fn genuine(&self, n: usize, subject: Subject<'_>) -> SignatureLayer {
        let signer = self.fulcio.issue(ISSUER, subject);
        SignatureLayer::keyless(&signer, &self.fulcio, &self.rekor, &self.payload(n))
    }

    /// A policy of `all_of` and `any_of`, with this Sigstore as its trust root.
    fn policy(&self, all_of: Vec<Signer>, any_of: Option<(usize, Vec<Signer>)>) -> Policy {
        Policy {
            all_of,
            any_of: any_of.map(|(minimum, signers)| AnyOf { minimum, signers }),
            trust_root: Some(TrustRoot {
                fulcio_certificates: vec![self.fulcio.pem.clone()],
                rekor_keys: vec![self.rekor.pem.clone()],
            }),
        }
    }

    fn checking(&self, policy: &Policy) -> Puller {
        let puller = puller(&self.registry, None);
        let verifier = Verifier::new("policy.yaml", policy).unwrap();
        puller.set_policy(Some(verifier)).unwrap();
        puller
    }

    fn at(&self, n: usize) -> String {
        format!(
            "{}@{}",
            self.registry.reference(REPOSITORY),
            self.digests[n]
        )
    }

    async fn loads(&self, n: usize, puller: &Puller) {
        let pulled = puller.pull(&oci(&self.at(n))).await;
        let pulled = pulled.unwrap_or_else(|e| panic!("release {n} refused: {e}"));
        assert_eq!(pulled.component, OPT_OUT);
    }

    async fn refused(&self, n: usize, puller: &Puller) -> String {
        match puller.pull(&oci(&self.at(n))).await {
            Ok(_) => panic!("release {n} loaded"),
            Err(e) => {
                assert!(e.unverified, "{e}");
                e.message
            }
        }
    }
}

fn keyless(subject: &str) -> Signer {
    Signer::Keyless(Keyless {
        issuer: ISSUER.to_owned(),
        subject: Some(subject.to_owned()),
        subject_prefix: None,
    })
}

fn keyless_prefix(prefix: &str) -> Signer {
    Signer::Keyless(Keyless {
        issuer: ISSUER.to_owned(),
        subject: None,
        subject_prefix: Some(prefix.to_owned()),
    })
}

/// The refusal of a release whose one signature, a keyless one, does not count.
fn not_by_release(why: &str) -> String {
    format!(
        "its 1 signature(s) do not satisfy the verification policy (policy.yaml): not signed by \
         allOf[0] ({RELEASE} from {ISSUER}); signature 1 counts for nothing: {why}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_genuine_keyless_signature_loads() {
    let keyed = Keyed::start("keyless-genuine").await;
    keyed
        .sign(0, &[keyed.genuine(0, Subject::Email(RELEASE))])
        .await;
    let by_release = keyed.checking(&keyed.policy(vec![keyless(RELEASE)], None));
    keyed.loads(0, &by_release).await;
    // Another issuer's identity of the same name is not the signer's.
    let other_issuer = Signer::Keyless(Keyless {
        issuer: "https://other.example".to_owned(),
        subject: Some(RELEASE.to_owned()),
        subject_prefix: None,
    });
    let by_other = keyed.checking(&keyed.policy(vec![other_issuer], None));
    assert_eq!(
        keyed.refused(0, &by_other).await,
        format!(
            "its 1 signature(s) do not satisfy the verification policy (policy.yaml): not signed \
             by allOf[0] ({RELEASE} from https://other.example)"
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_and_bundle_moved_onto_a_payload_for_another_digest_count_for_nothing() {
    let keyed = Keyed::start("keyless-moved").await;
    // Release 1's genuine signature, its signature, certificate and bundle as they are, over a
    // payload that names release 2.
    let moved = keyed
        .genuine(0, Subject::Email(RELEASE))
        .over(&keyed.payload(1));
    keyed.sign(1, &[moved]).await;
    let by_release = keyed.checking(&keyed.policy(vec![keyless(RELEASE)], None));
    assert_eq!(
        keyed.refused(1, &by_release).await,
        not_by_release(
            "its signature does not verify with its certificate's key over its payload: sign it \
             again"
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signature_by_another_key_under_a_genuine_certificate_counts_for_nothing() {
    let keyed = Keyed::start("keyless-other-key").await;
    let genuine = keyed.fulcio.issue(ISSUER, Subject::Email(RELEASE));
    let (forger, _) = sigstore::Signer::key();
    let payload = keyed.payload(1);
    let forged = forger.sign(&payload);
    // Even a log that recorded the forger's signature with the genuine certificate does not
    // make it the certificate's.
    let body = hashedrekord(&forged, &genuine.certificate, &payload);
    let layer = SignatureLayer::keyless(&genuine, &keyed.fulcio, &keyed.rekor, &payload)
        .with(SIGNATURE, &BASE64.encode(&forged))
        .with(BUNDLE, &keyed.rekor.bundle(&body));
    keyed.sign(1, &[layer]).await;
    let by_release = keyed.checking(&keyed.policy(vec![keyless(RELEASE)], None));
    assert_eq!(
        keyed.refused(1, &by_release).await,
        not_by_release(
            "its signature does not verify with its certificate's key over its payload: sign it \
             again"
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundle_that_describes_another_signature_or_payload_counts_for_nothing() {
    let keyed = Keyed::start("keyless-other-entry").await;
    let signer = keyed.fulcio.issue(ISSUER, Subject::Email(RELEASE));
    // One certificate signs both releases (it lives ten minutes); release 2's layer carries
    // release 1's log entry.
    let first = SignatureLayer::keyless(&signer, &keyed.fulcio, &keyed.rekor, &keyed.payload(0));
    let second = SignatureLayer::keyless(&signer, &keyed.fulcio, &keyed.rekor, &keyed.payload(1));
    keyed
        .sign(
            1,
            &[second.clone().with(BUNDLE, &first.annotations[BUNDLE])],
        )
        .await;
    let by_release = keyed.checking(&keyed.policy(vec![keyless(RELEASE)], None));
    assert_eq!(
        keyed.refused(1, &by_release).await,
        not_by_release(
            "its Rekor bundle records another signature than the layer's: sign it again"
        )
    );
    // An entry with this signature and certificate, and another payload's hash.
    let signature = BASE64.decode(&second.annotations[SIGNATURE]).unwrap();
    let body = hashedrekord(&signature, &signer.certificate, &keyed.payload(0));
    keyed
        .sign(
            1,
            &[second.clone().with(BUNDLE, &keyed.rekor.bundle(&body))],
        )
        .await;
    assert_eq!(
        keyed.refused(1, &by_release).await,
        not_by_release("its Rekor bundle records another payload than the layer's: sign it again")
    );
    // Another identity's genuine signature and entry, under the release certificate's
    // annotation: the log recorded the other certificate.
    let developer = keyed
        .fulcio
        .issue(ISSUER, Subject::Email("developer@example.com"));
    let by_developer =
        SignatureLayer::keyless(&developer, &keyed.fulcio, &keyed.rekor, &keyed.payload(1));
    keyed
        .sign(1, &[by_developer.with(CERTIFICATE, &signer.certificate)])
        .await;
    assert_eq!(
        keyed.refused(1, &by_release).await,
        not_by_release(
            "its certificate annotation is not the certificate its Rekor bundle records: sign it \
             again"
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_not_from_the_trust_root_or_a_bundle_not_from_its_log_counts_for_nothing() {
    let keyed = Keyed::start("keyless-rogue").await;
    let rogue = Fulcio::new("rogue.test");
    let signer = rogue.issue(ISSUER, Subject::Email(RELEASE));
    keyed
        .sign(
            0,
            &[SignatureLayer::keyless(
                &signer,
                &rogue,
                &keyed.rekor,
                &keyed.payload(0),
            )],
        )
        .await;
    let by_release = keyed.checking(&keyed.policy(vec![keyless(RELEASE)], None));
    let refused = keyed.refused(0, &by_release).await;
    assert!(
        refused.starts_with(&not_by_release(
            "its certificate is not issued by a trustRoot Fulcio certificate, or was not valid \
             when it was logged ("
        )),
        "{refused}"
    );
    assert!(
        refused.ends_with("): sign it with a certificate of that Fulcio"),
        "{refused}"
    );

    // A genuine certificate and signature, logged by another Rekor.
    let other_log = Rekor::default();
    let signer = keyed.fulcio.issue(ISSUER, Subject::Email(RELEASE));
    let layer = SignatureLayer::keyless(&signer, &keyed.fulcio, &other_log, &keyed.payload(0));
    keyed.sign(0, &[layer]).await;
    // sigstore drops a layer whose bundle no Rekor key verifies: the artifact is unsigned.
    let refused = keyed.refused(0, &by_release).await;
    assert!(refused.starts_with("it is not signed"), "{refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subject_prefix_holds_the_subjects_under_it_on_a_path_boundary_only() {
    let keyed = Keyed::start("keyless-prefix").await;
    let workflow = "https://github.com/org/repo/.github/workflows/release.yml@refs/heads/main";
    let beside = "https://github.com/organisation/repo/.github/workflows/release.yml@refs/tags/v1";
    keyed
        .sign(0, &[keyed.genuine(0, Subject::Uri(workflow))])
        .await;
    keyed
        .sign(1, &[keyed.genuine(1, Subject::Uri(beside))])
        .await;
    let by_org =
        keyed.checking(&keyed.policy(vec![keyless_prefix("https://github.com/org")], None));
    keyed.loads(0, &by_org).await;
    assert_eq!(
        keyed.refused(1, &by_org).await,
        format!(
            "its 1 signature(s) do not satisfy the verification policy (policy.yaml): not signed \
             by allOf[0] (https://github.com/org from {ISSUER})"
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_any_of_minimum_of_two_is_met_by_two_signers_not_by_one_listed_twice_or_matching_two() {
    let keyed = Keyed::start("keyless-any-of").await;
    let ci = "https://github.com/org/repo/.github/workflows/release.yml@refs/heads/main";
    let (key, public) = sigstore::Signer::key();
    keyed
        .sign(
            0,
            &[
                keyed.genuine(0, Subject::Email(RELEASE)),
                SignatureLayer::by_key(&key, &keyed.payload(0)),
            ],
        )
        .await;
    keyed.sign(1, &[keyed.genuine(1, Subject::Uri(ci))]).await;

    // Two signers, two signatures.
    let two = keyed.checking(&keyed.policy(
        Vec::new(),
        Some((2, vec![keyless(RELEASE), Signer::PublicKey(public.clone())])),
    ));
    keyed.loads(0, &two).await;

    // One signer listed twice, with both of its signatures there: one signer.
    let twice = keyed.checking(&keyed.policy(
        Vec::new(),
        Some((2, vec![keyless(RELEASE), keyless(RELEASE)])),
    ));
    assert_eq!(
        keyed.refused(0, &twice).await,
        format!(
            "its 2 signature(s) do not satisfy the verification policy (policy.yaml): anyOf \
             needs 2 of its 2 signers, and 1 signed (anyOf.signers[0] ({RELEASE} from {ISSUER})); \
             a signature, and a signer, counts for one of them only"
        )
    );
    let key_twice = keyed.checking(&keyed.policy(
        Vec::new(),
        Some((
            2,
            vec![
                Signer::PublicKey(public.clone()),
                Signer::PublicKey(public.clone()),
            ],
        )),
    ));
    assert!(
        keyed
            .refused(0, &key_twice)
            .await
            .ends_with("anyOf needs 2 of its 2 signers, and 1 signed (anyOf.signers[0] (public key)); a signature, and a signer, counts for one of them only"),
    );

    // One signature that two entries match (the subject, and a prefix of it).
    let both = keyed.checking(&keyed.policy(
        Vec::new(),
        Some((
            2,
            vec![keyless(ci), keyless_prefix("https://github.com/org/")],
        )),
    ));
    assert_eq!(
        keyed.refused(1, &both).await,
        format!(
            "its 1 signature(s) do not satisfy the verification policy (policy.yaml): anyOf \
             needs 2 of its 2 signers, and 1 signed (anyOf.signers[0] ({ci} from {ISSUER})); a \
             signature, and a signer, counts for one of them only"
        )
    );
}
