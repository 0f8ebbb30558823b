//! Signed plugins: cosign (built from its Go module, `hack/tools.sh cosign`) signs artifacts in
//! the CNCF distribution registry on loopback with keys it made (offline: no transparency log),
//! and the puller checks them against a verification policy before anything is loaded. Signed
//! and matching loads; unsigned, signed by another key, a signature moved from another digest,
//! and a tampered signature are refused with the reason; `anyOf` counts its minimum; a policy
//! with a misspelt field is refused naming it; with a policy in force a component given as it
//! is (not a signed artifact) does not load.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code

use crate::registry;

use std::{collections::BTreeMap, path::Path};

use nad_plugin_fetcher::{AnyOf, PUSH_LAYER_MEDIA_TYPE, Policy, Puller, Signer, Verifier};
use nad_plugin_runtime::{Limits, PluginDir, Plugins, Runtime, Step};
use registry::{Cosign, Registry, Scratch, cli, oci, puller, push};

const DEFAULT: &[u8] = include_bytes!(env!("NSC_DEFAULT_PLUGIN_WASM"));
const OPT_OUT: &[u8] = include_bytes!(env!("NSC_EXAMPLE_OPT_OUT_WASM"));

fn policy(all_of: &[&str], any_of: Option<(usize, &[&str])>) -> Policy {
    let keys = |pems: &[&str]| {
        pems.iter()
            .map(|p| Signer::PublicKey((*p).to_owned()))
            .collect()
    };
    Policy {
        all_of: keys(all_of),
        any_of: any_of.map(|(minimum, pems)| AnyOf {
            minimum,
            signers: keys(pems),
        }),
        trust_root: None,
    }
}

/// A client of the plain-HTTP registry, for what the puller does not do.
fn raw_client() -> oci_client::Client {
    oci_client::Client::new(oci_client::client::ClientConfig {
        protocol: oci_client::client::ClientProtocol::Http,
        ..Default::default()
    })
}

const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const SIGNATURE: &str = "dev.cosignproject.cosign/signature";

/// The manifest at `reference` (`oci://`).
async fn manifest(reference: &str) -> serde_json::Value {
    let auth = oci_client::secrets::RegistryAuth::Anonymous;
    let (body, _) = raw_client()
        .pull_manifest_raw(oci(reference).reference(), &auth, &[MANIFEST])
        .await
        .unwrap();
    serde_json::from_slice(&body).unwrap()
}

/// Writes `manifest` at `reference` (`oci://`).
async fn put_manifest(reference: &str, manifest: &serde_json::Value) {
    let (client, to) = (raw_client(), oci(reference));
    let auth = oci_client::secrets::RegistryAuth::Anonymous;
    client.store_auth_if_needed(to.registry(), &auth).await;
    client
        .push_manifest_raw(
            to.reference(),
            serde_json::to_vec(manifest).unwrap(),
            http::HeaderValue::from_static(MANIFEST),
        )
        .await
        .unwrap();
}

/// Four artifacts in a registry, and three keys: the first artifact signed by a, the second
/// unsigned, the third signed by b, the fourth by a and b.
struct Signed {
    registry: Registry,
    _cosign: Cosign,
    keys: [String; 3],
    digests: [String; 4],
}

const REPOSITORY: &str = "plugins/tenant";

impl Signed {
    async fn start(test: &str) -> Self {
        let registry = Registry::start(test);
        let cosign = Cosign::new(test);
        let (a, a_pub) = cosign.key("a");
        let (b, b_pub) = cosign.key("b");
        let (_, c_pub) = cosign.key("c");
        let publisher = puller(&registry, None);
        let mut digests = Vec::new();
        for (n, component) in [
            ("1", OPT_OUT),
            ("2", DEFAULT),
            ("3", OPT_OUT),
            ("4", OPT_OUT),
        ] {
            let target = oci(&format!("{}:{n}", registry.reference(REPOSITORY)));
            let annotations = BTreeMap::from([("test".to_owned(), n.to_owned())]);
            let digest = publisher
                .push(&target, component, PUSH_LAYER_MEDIA_TYPE, annotations)
                .await
                .unwrap();
            digests.push(digest);
        }
        let signed = Signed {
            registry,
            _cosign: cosign,
            keys: [a_pub, b_pub, c_pub],
            digests: digests.try_into().unwrap(),
        };
        for (key, n) in [(&a, 0), (&b, 2), (&a, 3), (&b, 3)] {
            signed._cosign.sign(key, &signed.bare(n));
        }
        signed
    }

    /// Artifact `n` as `oci://…@digest`, and as cosign names it.
    fn at(&self, n: usize) -> String {
        format!(
            "{}@{}",
            self.registry.reference(REPOSITORY),
            self.digests[n]
        )
    }

    fn bare(&self, n: usize) -> String {
        format!("{}/{REPOSITORY}@{}", self.registry.host, self.digests[n])
    }

    /// The `.sig` tag cosign writes for artifact `n`.
    fn sig_tag(&self, n: usize) -> String {
        let digest = self.digests[n].replace(':', "-");
        format!("{}:{digest}.sig", self.registry.reference(REPOSITORY))
    }

    /// A puller that checks `policy`.
    fn checking(&self, policy: &Policy) -> Puller {
        let puller = puller(&self.registry, None);
        let verifier = Verifier::new("policy.yaml", policy).unwrap();
        puller.set_policy(Some(verifier)).unwrap();
        puller
    }

    /// Why `puller` refuses artifact `n`.
    async fn refused(&self, n: usize, puller: &Puller) -> String {
        let e = puller.pull(&oci(&self.at(n))).await.unwrap_err();
        assert!(e.unverified, "{e}");
        e.message
    }
}

const NOT_BY_A: &str = "its 1 signature(s) do not satisfy the verification policy \
                        (policy.yaml): not signed by allOf[0] (public key)";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_loads_only_with_the_signatures_its_policy_asks_for() {
    let signed = Signed::start("signatures").await;
    let [a, b, c] = &signed.keys;
    let by_a = signed.checking(&policy(&[a], None));
    let pulled = by_a.pull(&oci(&signed.at(0))).await.unwrap();
    assert_eq!(pulled.component, OPT_OUT);
    assert_eq!(
        signed.refused(1, &by_a).await,
        format!(
            "it is not signed, and the verification policy (policy.yaml) asks for signatures: \
             sign it (cosign sign --key <key> {})",
            signed.bare(1)
        )
    );
    assert_eq!(signed.refused(2, &by_a).await, NOT_BY_A);

    // Two of three keys: a and b signed one artifact, a alone another.
    let two_of_three = signed.checking(&policy(&[], Some((2, &[a, b, c]))));
    let pulled = two_of_three.pull(&oci(&signed.at(3))).await.unwrap();
    assert_eq!(pulled.component, OPT_OUT);
    assert_eq!(
        signed.refused(0, &two_of_three).await,
        "its 1 signature(s) do not satisfy the verification policy (policy.yaml): anyOf needs \
         2 of its 3 signers, and 1 signed (anyOf.signers[0] (public key))"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signature_moved_from_another_digest_or_tampered_with_counts_for_nothing() {
    let signed = Signed::start("signatures-moved").await;
    let by_a = signed.checking(&policy(&[&signed.keys[0]], None));
    let unsigned = signed.refused(1, &by_a).await;
    // a's signature of artifact 0, put at the `.sig` tag of artifact 1.
    put_manifest(&signed.sig_tag(1), &manifest(&signed.sig_tag(0)).await).await;
    assert_eq!(signed.refused(1, &by_a).await, unsigned);

    // Artifact 0's signature by a replaced with b's signature of artifact 2.
    let b_signature =
        manifest(&signed.sig_tag(2)).await["layers"][0]["annotations"][SIGNATURE].clone();
    let mut tampered = manifest(&signed.sig_tag(0)).await;
    tampered["layers"][0]["annotations"][SIGNATURE] = b_signature;
    put_manifest(&signed.sig_tag(0), &tampered).await;
    assert_eq!(signed.refused(0, &by_a).await, NOT_BY_A);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_policy_in_force_a_component_given_as_it_is_does_not_load() {
    let registry = Registry::start("signatures-dir");
    let cosign = Cosign::new("signatures-dir");
    let (key, public) = cosign.key("release");
    let publisher = puller(&registry, None);
    let reference = format!("{}:1", registry.reference("plugins/opt-out"));
    let digest = push(&publisher, &reference, OPT_OUT, PUSH_LAYER_MEDIA_TYPE).await;
    let pinned = format!("{}@{digest}", registry.reference("plugins/opt-out"));
    cosign.sign(&key, &format!("{}/plugins/opt-out@{digest}", registry.host));

    let dir = Scratch::new("signatures-dir-plugins");
    std::fs::write(dir.0.join("signed.oci"), &pinned).unwrap();
    std::fs::write(dir.0.join("inline.wasm"), OPT_OUT).unwrap();
    let checking = std::sync::Arc::new(puller(&registry, None));
    let verifier = Verifier::new("policy.yaml", &policy(&[&public], None)).unwrap();
    checking.set_policy(Some(verifier)).unwrap();
    let runtime = Runtime::new(Limits::default()).unwrap();
    let path = dir.0.clone();
    let scan = tokio::task::spawn_blocking(move || {
        let mut plugins = Plugins::built_in(&runtime).unwrap();
        let mut dir = PluginDir::with_fetcher(path, Some(checking));
        let scan = dir.scan(&runtime, &mut plugins);
        (scan, plugins.get("signed").is_ok())
    })
    .await
    .unwrap();
    let (scan, signed_serves) = scan;
    assert_eq!(scan.loaded, ["signed"]);
    assert!(signed_serves);
    assert_eq!(scan.failed.len(), 1, "{:?}", scan.failed);
    let failed = &scan.failed[0];
    assert_eq!(
        (failed.plugin.as_str(), failed.step),
        ("inline", Step::Signature)
    );
    assert!(
        failed
            .to_string()
            .starts_with("plugin inline: not loaded unverified: a verification policy is in force"),
        "{failed}"
    );
}

#[test]
fn plugin_verify_checks_an_artifact_against_a_policy_file_offline_from_the_controller() {
    let registry = Registry::start("signatures-cli");
    let cosign = Cosign::new("signatures-cli");
    let (key, public) = cosign.key("release");
    let files = Scratch::new("signatures-cli-files");
    let component = files.0.join("opt-out.wasm");
    std::fs::write(&component, OPT_OUT).unwrap();
    let http = format!("--plugin-registry-http={}", registry.host);
    let (ok, out, err) = cli(&[
        "plugin",
        "push",
        component.to_str().unwrap(),
        &registry.reference("plugins/opt-out:1"),
        &http,
    ]);
    assert!(ok, "{err}");
    let pinned = out.trim().to_owned();
    let bare = pinned.trim_start_matches("oci://");
    let policy_file = files.0.join("policy.yaml");
    let indented: String = public.lines().map(|l| format!("      {l}\n")).collect();
    std::fs::write(
        &policy_file,
        format!("allOf:\n  - publicKey: |\n{indented}"),
    )
    .unwrap();
    let verify = |policy: &Path| {
        cli(&[
            "plugin",
            "verify",
            &pinned,
            "--policy",
            policy.to_str().unwrap(),
            &http,
        ])
    };
    let (ok, _, err) = verify(&policy_file);
    assert!(!ok && err.contains("it is not signed"), "{err}");
    cosign.sign(&key, bare);
    let (ok, out, err) = verify(&policy_file);
    assert!(ok, "{err}");
    assert!(
        out.contains("verified: 1 signature(s); signed by allOf[0] (public key)"),
        "{out}"
    );
    let typo = files.0.join("typo.yaml");
    std::fs::write(&typo, format!("allOf:\n  - publikKey: |\n{indented}")).unwrap();
    let (ok, _, err) = verify(&typo);
    assert!(!ok, "{err}");
    assert!(
        err.contains(&format!(
            "{}: allOf[0]: unknown variant `publikKey`",
            typo.display()
        )),
        "{err}"
    );
    let misnamed = files.0.join("misnamed.yaml");
    std::fs::write(&misnamed, format!("allof:\n  - publicKey: |\n{indented}")).unwrap();
    let (ok, _, err) = verify(&misnamed);
    assert!(!ok && err.contains("unknown field `allof`"), "{err}");
}

/// A change of the verification policy verifies every plugin serving from a registry again, in
/// the next reload: one whose signer the new policy no longer lists stops serving (its Services
/// get their failure policy), the others keep serving; a policy that cannot be had stops them
/// all; each serves again once a policy lets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_change_verifies_every_plugin_serving_again() {
    let signed = Signed::start("signatures-reverify").await;
    let [a, b, _] = signed.keys.clone();
    let plugin_dir = Scratch::new("signatures-reverify-plugins");
    // Signed by a alone, and by a and b.
    std::fs::write(plugin_dir.0.join("by-a.oci"), signed.at(0)).unwrap();
    std::fs::write(plugin_dir.0.join("by-a-and-b.oci"), signed.at(3)).unwrap();
    let checking = std::sync::Arc::new(signed.checking(&policy(&[], Some((1, &[&a, &b])))));
    let path = plugin_dir.0.clone();
    // The scans run on a blocking thread, as the controller's reloads do.
    tokio::task::spawn_blocking(move || {
        let runtime = Runtime::new(Limits::default()).unwrap();
        let mut plugins = Plugins::built_in(&runtime).unwrap();
        let mut dir = PluginDir::with_fetcher(path, Some(checking.clone()));
        let mut reload = |plugins: &mut Plugins| {
            let started = std::time::Instant::now();
            let scan = dir.scan(&runtime, plugins);
            eprintln!("reload: {:?}", started.elapsed());
            scan
        };
        let serving = |plugins: &Plugins| -> Vec<String> {
            plugins
                .names()
                .filter(|n| n.starts_with("by-"))
                .map(str::to_owned)
                .collect()
        };
        let scan = reload(&mut plugins);
        assert_eq!(scan.loaded, ["by-a", "by-a-and-b"], "{:?}", scan.failed);

        // a's key taken out of the policy: by-a stops serving in the next reload.
        let by_b = Verifier::new("policy.yaml", &policy(&[&b], None)).unwrap();
        checking.set_policy(Some(by_b)).unwrap();
        let scan = reload(&mut plugins);
        assert!(
            scan.loaded.is_empty() && scan.removed.is_empty(),
            "{scan:?}"
        );
        assert_eq!(scan.failed.len(), 1, "{:?}", scan.failed);
        let failed = &scan.failed[0];
        assert_eq!(
            (failed.plugin.as_str(), failed.step),
            ("by-a", Step::Signature)
        );
        let why = format!(
            "plugin by-a: not loaded unverified: {}: its 1 signature(s) do not satisfy the \
             verification policy (policy.yaml): not signed by allOf[0] (public key); the \
             verification policy changed while it served, and it no longer passes, so it \
             stopped serving: sign the artifact as the policy asks, or change the policy (tried \
             again in 30 s and at every change of the registry settings)",
            signed.at(0)
        );
        assert_eq!(failed.to_string(), why);
        assert_eq!(serving(&plugins), ["by-a-and-b"]);
        let unknown = plugins.get("by-a").unwrap_err();
        assert_eq!(unknown.failed.as_deref(), Some(why.as_str()));
        // Nothing more changes while the policy stays.
        assert!(reload(&mut plugins).is_empty());

        // No policy to be had: none serves.
        checking
            .set_policy_unavailable(
                "the verification policy ConfigMap nsc/policy does not exist".into(),
            )
            .unwrap();
        // by-a, due again at the change of settings, is refused in its pull; by-a-and-b in its
        // verification.
        let scan = reload(&mut plugins);
        assert_eq!(scan.changed(), ["by-a", "by-a-and-b"]);
        for failed in &scan.failed {
            assert!(
                failed
                    .to_string()
                    .contains("the verification policy ConfigMap nsc/policy does not exist"),
                "{failed}"
            );
        }
        assert!(serving(&plugins).is_empty());

        // a's key back: both serve again, pulled and verified anew.
        let by_a = Verifier::new("policy.yaml", &policy(&[&a], None)).unwrap();
        checking.set_policy(Some(by_a)).unwrap();
        let scan = reload(&mut plugins);
        assert_eq!(scan.loaded, ["by-a", "by-a-and-b"], "{:?}", scan.failed);
        assert_eq!(serving(&plugins), ["by-a", "by-a-and-b"]);
        assert_eq!(plugins.failure("by-a"), None);
    })
    .await
    .unwrap();
}
