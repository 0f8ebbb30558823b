//! Registries that misbehave, on loopback (support/hostile.rs): one that stalls before
//! answering or in the middle of a body, trickles, answers a manifest of many megabytes or a
//! body that never ends, or hangs many signature layers on an artifact, fails that one fetch
//! within its timeout, with a message that names the reference, what happened and what to do,
//! and reads no more than its limit; other plugins keep loading. And credentials go only where
//! they were aimed: not to a token server on plain HTTP for an HTTPS registry, not on to
//! another host a token server redirects to, and a blob redirected to other storage loads
//! without the registry's credential reaching it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code

use crate::{hostile, registry, token_server};

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use hostile::{Hostile, Reply, Seen};
use nad_plugin_fetcher::{
    Credentials, FetchError, GivenIn, MAX_MANIFEST_BYTES, MAX_SIGNATURE_LAYERS, Policy, Puller,
    RegistryCas, RegistryOptions, Signer, Timeouts, Verifier,
};
use nad_plugin_runtime::{Limits, PluginDir, Plugins, Runtime, Step};
use registry::{Registry, Scratch, TestCa, oci};
use token_server::TokenServer;

const OPT_OUT: &[u8] = include_bytes!(env!("NSC_EXAMPLE_OPT_OUT_WASM"));

/// Short timeouts, so that a stall costs the test seconds.
const FAST: Timeouts = Timeouts {
    connect: Duration::from_secs(1),
    request: Duration::from_secs(2),
    download: Duration::from_secs(3),
    signatures: Duration::from_secs(3),
};

/// What a time bound allows past its timeout: a loaded machine's scheduling.
const MARGIN: Duration = Duration::from_secs(5);

fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    format!("sha256:{:x}", sha2::Sha256::digest(bytes))
}

/// The manifest of a plugin artifact whose one layer is `component`.
fn manifest(component: &[u8]) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.wasm.config.v0+json", "digest": sha256(b"{}"), "size": 2},
        "layers": [{"mediaType": "application/wasm", "digest": sha256(component), "size": component.len()}],
    }))
    .unwrap()
}

/// A puller that speaks plain HTTP to `hosts`, with the [`FAST`] timeouts.
fn puller(hosts: &[&str]) -> Puller {
    Puller::new(&RegistryOptions {
        http: hosts.iter().map(|h| (*h).to_owned()).collect(),
        cache_dir: None,
        timeouts: FAST,
    })
    .unwrap()
}

/// A registry that serves the opt-out plugin (pinned at `manifest(OPT_OUT)`) in every
/// repository, open to anyone, except where `bad` answers instead.
fn registry(bad: impl Fn(&Seen) -> Option<Reply> + Send + Sync + 'static) -> Hostile {
    let body = manifest(OPT_OUT);
    let (digest, layer) = (sha256(&body), sha256(OPT_OUT));
    Hostile::start(move |seen| {
        if let Some(reply) = bad(seen) {
            return reply;
        }
        if seen.path == "/v2/" {
            Reply::json(200, "{}")
        } else if seen.path.ends_with(&format!("/manifests/{digest}")) {
            Reply::Full {
                status: 200,
                headers: vec![(
                    "content-type".into(),
                    "application/vnd.oci.image.manifest.v1+json".into(),
                )],
                body: body.clone(),
            }
        } else if seen.path.ends_with(&format!("/blobs/{layer}")) {
            Reply::Full {
                status: 200,
                headers: Vec::new(),
                body: OPT_OUT.to_vec(),
            }
        } else {
            Reply::json(
                404,
                r#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"no"}]}"#,
            )
        }
    })
}

/// `oci://<host>/<repository>@<the opt-out artifact's digest>`.
fn pinned(host: &str, repository: &str) -> String {
    format!("oci://{host}/{repository}@{}", sha256(&manifest(OPT_OUT)))
}

/// Pulls `reference`, timing it.
async fn pull(puller: &Puller, reference: &str) -> (Result<Vec<u8>, FetchError>, Duration) {
    let started = Instant::now();
    let result = puller.pull(&oci(reference)).await.map(|p| p.component);
    (result, started.elapsed())
}

/// Asserts that the fetch failed within `timeout` (plus [`MARGIN`]), with a message that
/// starts with the reference and holds `expected`.
fn failed_in_time(
    result: Result<Vec<u8>, FetchError>,
    elapsed: Duration,
    timeout: Duration,
    reference: &str,
    expected: &str,
) -> String {
    let message = result.unwrap_err().to_string();
    assert!(
        elapsed < timeout + MARGIN,
        "took {elapsed:?} (the timeout is {timeout:?}): {message}"
    );
    assert!(message.starts_with(&format!("{reference}: ")), "{message}");
    assert!(message.contains(expected), "{message}");
    eprintln!("{elapsed:?}: {message}");
    message
}

#[tokio::test]
async fn a_registry_that_never_answers_fails_the_fetch_within_the_timeout() {
    let stalled = registry(|seen| seen.path.contains("/manifests/").then_some(Reply::Stall));
    let reference = pinned(&stalled.host, "plugins/stalled");
    let (result, elapsed) = pull(&puller(&[&stalled.host]), &reference).await;
    failed_in_time(
        result,
        elapsed,
        FAST.request,
        &reference,
        &format!(
            "the registry {} did not send the manifest sha256:{} within 2 s (0 bytes received): \
             it is stalled or too slow, so the fetch was given up (it is tried again later); \
             check the registry",
            stalled.host,
            &sha256(&manifest(OPT_OUT))["sha256:".len()..]
        ),
    );
    assert!(elapsed >= FAST.request, "{elapsed:?}");

    // A registry that accepts connections and never answers `/v2/` is given up as well.
    let mute = Hostile::start(|_| Reply::Stall);
    let reference = pinned(&mute.host, "plugins/mute");
    let (result, elapsed) = pull(&puller(&[&mute.host]), &reference).await;
    failed_in_time(
        result,
        elapsed,
        FAST.request,
        &reference,
        "it is stalled or too slow",
    );
}

#[tokio::test]
async fn a_body_that_stalls_or_trickles_fails_within_the_timeout() {
    // The manifest's headers, a few bytes of it, then nothing.
    let mid = registry(|seen| {
        seen.path
            .contains("/manifests/")
            .then_some(Reply::StallMidBody {
                declared: 1000,
                sent: 10,
            })
    });
    let reference = pinned(&mid.host, "plugins/mid");
    let (result, elapsed) = pull(&puller(&[&mid.host]), &reference).await;
    failed_in_time(
        result,
        elapsed,
        FAST.request,
        &reference,
        "within 2 s (10 bytes received): it is stalled or too slow",
    );

    // The Wasm layer a byte every 100 ms: each read answers, the whole never comes.
    let trickle = registry(|seen| {
        seen.path.contains("/blobs/").then_some(Reply::Trickle {
            declared: OPT_OUT.len(),
        })
    });
    let reference = pinned(&trickle.host, "plugins/trickle");
    let (result, elapsed) = pull(&puller(&[&trickle.host]), &reference).await;
    let message = failed_in_time(
        result,
        elapsed,
        FAST.download,
        &reference,
        &format!(
            "the registry {} did not send its Wasm layer {} within 3 s (",
            trickle.host,
            sha256(OPT_OUT)
        ),
    );
    assert!(message.contains("bytes received)"), "{message}");
}

#[tokio::test]
async fn a_huge_or_endless_manifest_is_refused_at_the_limit_not_read_whole() {
    // 64 MiB announced: refused from its length, and the connection dropped unread.
    let huge = registry(|seen| {
        seen.path
            .contains("/manifests/")
            .then_some(Reply::Huge { declared: 64 << 20 })
    });
    let reference = pinned(&huge.host, "plugins/huge");
    let (result, elapsed) = pull(&puller(&[&huge.host]), &reference).await;
    failed_in_time(
        result,
        elapsed,
        FAST.request,
        &reference,
        &format!(
            "announced the manifest sha256:{} of 67108864 bytes, over the limit of \
             {MAX_MANIFEST_BYTES} bytes, and it was not read",
            &sha256(&manifest(OPT_OUT))["sha256:".len()..]
        ),
    );
    // The server writes until the client hangs up: what it wrote is what the kernel's buffers
    // took, far from the 64 MiB.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !huge.hung_up() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(huge.hung_up(), "the client read on ({} bytes)", huge.sent());
    assert!(huge.sent() < 32 << 20, "{} bytes were taken", huge.sent());

    // A chunked body that never ends: read up to the limit, then refused.
    let endless = registry(|seen| seen.path.contains("/manifests/").then_some(Reply::Endless));
    let reference = pinned(&endless.host, "plugins/endless");
    let (result, elapsed) = pull(&puller(&[&endless.host]), &reference).await;
    failed_in_time(
        result,
        elapsed,
        FAST.request,
        &reference,
        &format!("past the limit of {MAX_MANIFEST_BYTES} bytes (reading stopped after "),
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while !endless.hung_up() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        endless.hung_up(),
        "the client read on ({} bytes)",
        endless.sent()
    );
    eprintln!(
        "huge: {} bytes written before the hang-up; endless: {}",
        huge.sent(),
        endless.sent()
    );
}

/// A verification policy of one public key (any: the artifacts here are refused before a
/// signature is checked).
fn policy() -> Verifier {
    let key = rcgen::KeyPair::generate().unwrap().public_key_pem();
    let policy = Policy {
        all_of: vec![Signer::PublicKey(key)],
        ..Policy::default()
    };
    Verifier::new("policy.yaml", &policy).unwrap()
}

#[tokio::test]
async fn many_signature_layers_are_refused_before_they_are_read_and_a_stalled_signature_read_ends()
{
    let digest = sha256(&manifest(OPT_OUT));
    let sig_tag = format!("{}.sig", digest.replace(':', "-"));
    let layers: Vec<_> = (0..1000)
        .map(|i| {
            serde_json::json!({
                "mediaType": "application/vnd.dev.cosign.simplesigning.v1+json",
                "digest": sha256(format!("{i}").as_bytes()), "size": 250,
            })
        })
        .collect();
    let flood = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": sha256(b"{}"), "size": 2},
        "layers": layers,
    }))
    .unwrap();
    let tag = sig_tag.clone();
    let signed = registry(move |seen| {
        seen.path
            .ends_with(&format!("/manifests/{tag}"))
            .then(|| Reply::json(200, flood.clone()))
    });
    let puller = puller(&[&signed.host]);
    puller.set_policy(Some(policy())).unwrap();
    let reference = pinned(&signed.host, "plugins/flood");
    let (result, elapsed) = pull(&puller, &reference).await;
    let message = failed_in_time(
        result,
        elapsed,
        FAST.request,
        &reference,
        &format!(
            "its signature manifest {sig_tag} has 1000 layers, over the limit of \
             {MAX_SIGNATURE_LAYERS}: its signatures were not read"
        ),
    );
    assert!(!message.is_empty());
    let blobs = signed
        .seen()
        .iter()
        .filter(|s| s.path.contains("/blobs/"))
        .count();
    assert_eq!(blobs, 0, "no signature layer (or plugin) was downloaded");

    // A registry that stalls once the signature check is under way (sigstore's reads, which
    // have no timeouts of their own): the whole check is given up.
    let checks = std::sync::atomic::AtomicUsize::new(0);
    let stalling = registry(move |seen| {
        // The first read of each path (the check of sizes) is answered; sigstore's are not.
        let n = checks.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        (n >= 4 && seen.path != "/v2/").then_some(Reply::Stall)
    });
    let puller = self::puller(&[&stalling.host]);
    puller.set_policy(Some(policy())).unwrap();
    let reference = pinned(&stalling.host, "plugins/slow-signatures");
    let (result, elapsed) = pull(&puller, &reference).await;
    failed_in_time(
        result,
        elapsed,
        FAST.request + FAST.signatures,
        &reference,
        "stalled or too slow",
    );
}

/// The plugin directory's scan, as the controller runs it (on a blocking thread).
async fn scan(dir: &std::path::Path, puller: Arc<Puller>) -> (Vec<String>, Vec<String>) {
    let dir = dir.to_owned();
    tokio::task::spawn_blocking(move || {
        let runtime = Runtime::new(Limits::default()).unwrap();
        let mut plugins = Plugins::built_in(&runtime).unwrap();
        let mut watch = PluginDir::with_fetcher(&dir, Some(puller));
        let scan = watch.scan(&runtime, &mut plugins);
        assert!(scan.failed.iter().all(|f| f.step == Step::Fetch));
        (
            scan.loaded,
            scan.failed.iter().map(ToString::to_string).collect(),
        )
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_registry_holds_neither_the_start_nor_the_other_plugins() {
    let stalled = registry(|seen| seen.path.contains("/stalled/").then_some(Reply::Stall));
    let dir = Scratch::new("hostile-dir");
    std::fs::write(
        dir.0.join("stalled.oci"),
        pinned(&stalled.host, "plugins/stalled"),
    )
    .unwrap();
    std::fs::write(
        dir.0.join("good.oci"),
        pinned(&stalled.host, "plugins/good"),
    )
    .unwrap();
    let started = Instant::now();
    let (loaded, failed) = scan(&dir.0, Arc::new(puller(&[&stalled.host]))).await;
    let elapsed = started.elapsed();
    assert_eq!(loaded, ["good"], "{failed:?}");
    let [failure] = &failed[..] else {
        panic!("{failed:?}")
    };
    assert!(
        failure.starts_with(&format!(
            "plugin stalled: cannot fetch it: {}: the registry {} did not send the manifest",
            pinned(&stalled.host, "plugins/stalled"),
            stalled.host
        )),
        "{failure}"
    );
    assert!(elapsed < FAST.request + MARGIN, "{elapsed:?}");
}

/// A Docker config of one entry for `registry`.
fn credentials(registry: &str, entry: serde_json::Value) -> Credentials {
    let config = serde_json::json!({"auths": {registry: entry}});
    Credentials::parse("config.json", config.to_string().as_bytes()).unwrap()
}

/// Whether any request `server` saw carries `secret` (in a header or its body).
fn carries(server: &Hostile, secret: &str) -> bool {
    server.seen().iter().any(|seen| {
        seen.headers.iter().any(|(_, v)| v.contains(secret))
            || String::from_utf8_lossy(&seen.body).contains(secret)
    })
}

#[tokio::test]
async fn a_token_server_on_plain_http_gets_no_credential_of_an_https_registry() {
    use base64::Engine as _;
    let ca = TestCa::new("nsc hostile CA");
    // Its realm is a server that records what it is sent, on plain HTTP.
    let realm = Hostile::start(|_| Reply::json(401, r#"{"error":"unauthorized"}"#));
    let tokens = TokenServer::start(&[], &[], Duration::from_secs(60));
    let registry = Registry::start_token_tls(
        "plain-realm",
        &ca,
        (
            &realm.url("/token"),
            token_server::SERVICE,
            token_server::ISSUER,
            &tokens.jwks(),
        ),
    );
    let mut cas = RegistryCas::new(GivenIn::Flag);
    cas.add_pem(&registry.host, "ca.pem", ca.pem.as_bytes())
        .unwrap();
    let basic = base64::engine::general_purpose::STANDARD.encode("ci:s3cret");
    let reference = pinned(&registry.host, "team/plugin");
    for (entry, kind) in [
        (
            serde_json::json!({"username": "ci", "password": "s3cret"}),
            "user name and password",
        ),
        (
            serde_json::json!({"identitytoken": "refresh-ci"}),
            "identity token",
        ),
    ] {
        let puller = puller(&[]);
        puller.set_cas(cas.clone()).unwrap();
        puller
            .set_credentials(Some(credentials(&registry.host, entry)))
            .unwrap();
        let (result, elapsed) = pull(&puller, &reference).await;
        failed_in_time(
            result,
            elapsed,
            FAST.request,
            &reference,
            &format!(
                "the registry {} names as its token server {}, on plain HTTP: the {kind} from \
                 config.json goes to a token server only over HTTPS, and was not sent. Check \
                 the registry's token configuration (its realm should be an https:// URL); if \
                 this registry is meant to be spoken to over plain HTTP, list it in \
                 --plugin-registry-http",
                registry.host,
                realm.url("/token")
            ),
        );
    }
    assert!(realm.seen().is_empty(), "{:?}", realm.seen());
    assert!(!carries(&realm, &basic) && !carries(&realm, "refresh-ci"));
}

#[tokio::test]
async fn a_token_server_that_redirects_elsewhere_does_not_pass_the_credential_on() {
    use base64::Engine as _;
    // Where the token server sends the request: another port, another origin.
    let elsewhere = Hostile::start(|_| Reply::json(200, r#"{"token":"stolen"}"#));
    let to = elsewhere.url("/token");
    let realm = Hostile::start(move |_| Reply::with_header(307, "location", &to));
    let realm_url = realm.url("/token");
    let registry = Hostile::start(move |seen| {
        if seen.path == "/v2/" {
            let challenge = format!(r#"Bearer realm="{realm_url}",service="hostile""#);
            Reply::with_header(401, "www-authenticate", &challenge)
        } else {
            Reply::json(
                401,
                r#"{"errors":[{"code":"UNAUTHORIZED","message":"no"}]}"#,
            )
        }
    });
    let basic = base64::engine::general_purpose::STANDARD.encode("ci:s3cret");
    let reference = pinned(&registry.host, "team/plugin");
    for entry in [
        serde_json::json!({"username": "ci", "password": "s3cret"}),
        serde_json::json!({"identitytoken": "refresh-ci"}),
    ] {
        let puller = puller(&[&registry.host]);
        puller
            .set_credentials(Some(credentials(&registry.host, entry)))
            .unwrap();
        let (result, elapsed) = pull(&puller, &reference).await;
        failed_in_time(
            result,
            elapsed,
            FAST.request,
            &reference,
            &format!(
                "the token server {} of the registry {} redirected the request to another host \
                 ({}): not followed",
                realm.url("/token"),
                registry.host,
                elsewhere.url("/token")
            ),
        );
    }
    assert_eq!(
        realm.seen().len(),
        2,
        "each credential was sent to the realm"
    );
    assert!(
        !carries(&elsewhere, &basic) && !carries(&elsewhere, "refresh-ci"),
        "a credential reached the host the token server redirected to: {:?}",
        elsewhere.seen()
    );
}

#[tokio::test]
async fn a_blob_redirected_to_other_storage_loads_without_the_registrys_credential() {
    let storage = Hostile::start(|_| Reply::Full {
        status: 200,
        headers: Vec::new(),
        body: OPT_OUT.to_vec(),
    });
    let blob = storage.url("/bucket/opt-out?signature=x");
    let layer = sha256(OPT_OUT);
    let registry = registry(move |seen| {
        seen.path
            .ends_with(&format!("/blobs/{layer}"))
            .then(|| Reply::with_header(307, "location", &blob))
    });
    let puller = puller(&[&registry.host]);
    puller
        .set_credentials(Some(credentials(
            &registry.host,
            serde_json::json!({"registrytoken": "registry-secret"}),
        )))
        .unwrap();
    let reference = pinned(&registry.host, "team/plugin");
    let (result, _) = pull(&puller, &reference).await;
    assert_eq!(result.unwrap(), OPT_OUT);
    let asked = registry.seen();
    assert!(
        asked
            .iter()
            .all(|s| s.header("authorization") == Some("Bearer registry-secret")),
        "the registry is sent its token: {asked:?}"
    );
    let fetched = storage.seen();
    assert_eq!(fetched.len(), 1, "{fetched:?}");
    assert_eq!(fetched[0].path, "/bucket/opt-out?signature=x");
    assert!(
        !carries(&storage, "registry-secret"),
        "the registry's token reached the storage: {fetched:?}"
    );
}
