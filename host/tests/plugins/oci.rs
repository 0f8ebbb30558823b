//! Plugins as OCI artifacts, against the CNCF distribution registry on loopback: pushed and
//! pulled by digest, checked, cached, resolved from a tag; refused when the digest is not the
//! registry's, the artifact is too large or holds no Wasm layer; the last good version kept
//! while the registry is unreachable. The cluster test of the same path is in cluster.rs.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code

use crate::registry;

use std::{process::Command, sync::Arc, time::Duration};

use nad_model::fetch::MAX_PLUGIN_BYTES;
use nad_plugin_fetcher::{LAYER_MEDIA_TYPES, PUSH_LAYER_MEDIA_TYPE, Puller, RegistryOptions};
use nad_plugin_runtime::{Limits, PluginDir, Plugins, Runtime, Step};
use registry::{Registry, Scratch, cli, free_port, oci, puller, push};

const DEFAULT: &[u8] = include_bytes!(env!("NSC_DEFAULT_PLUGIN_WASM"));
const OPT_OUT: &[u8] = include_bytes!(env!("NSC_EXAMPLE_OPT_OUT_WASM"));
const BIN: &str = env!("CARGO_BIN_EXE_nad-service-controller");

fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    format!("sha256:{:x}", sha2::Sha256::digest(bytes))
}

#[tokio::test]
async fn a_plugin_is_pulled_by_digest_checked_and_then_loaded_from_the_cache_without_the_registry()
{
    let mut registry = Registry::start("pull");
    let cache = Scratch::new("pull-cache");
    let puller = puller(&registry, Some(&cache.0));
    let digest = push(
        &puller,
        &registry.reference("plugins/opt-out"),
        OPT_OUT,
        PUSH_LAYER_MEDIA_TYPE,
    )
    .await;
    let pinned = oci(&format!(
        "{}@{digest}",
        registry.reference("plugins/opt-out")
    ));

    let pulled = puller.pull(&pinned).await.unwrap();
    assert_eq!(pulled.component, OPT_OUT);
    assert_eq!(pulled.digest, digest);
    assert_eq!(pulled.layer.digest, sha256(OPT_OUT));
    assert!(!pulled.cached);
    // Kept by digest: the manifest and the component.
    for blob in [&digest, &pulled.layer.digest] {
        let path = cache.0.join("blobs/sha256").join(&blob["sha256:".len()..]);
        assert!(path.is_file(), "{} is not cached", path.display());
    }

    registry.stop();
    let again = puller.pull(&pinned).await.unwrap();
    assert!(again.cached);
    assert_eq!(again.component, OPT_OUT);
    // A fresh puller (a restarted controller) on the same cache needs no registry either.
    let restarted = Puller::new(&RegistryOptions {
        http: vec![],
        cache_dir: Some(cache.0.clone()),
        ..RegistryOptions::default()
    })
    .unwrap();
    assert_eq!(restarted.pull(&pinned).await.unwrap().component, OPT_OUT);
}

#[tokio::test]
async fn a_tag_is_resolved_to_the_digest_it_points_at() {
    let registry = Registry::start("tag");
    let puller = puller(&registry, None);
    let tagged = registry.reference("plugins/default:1.1");
    let digest = push(&puller, &tagged, DEFAULT, PUSH_LAYER_MEDIA_TYPE).await;
    let pulled = puller.pull(&oci(&tagged)).await.unwrap();
    assert_eq!(pulled.digest, digest);
    assert_eq!(pulled.component, DEFAULT);
    // The same bytes make the same artifact: the digest is reproducible.
    assert_eq!(
        push(&puller, &tagged, DEFAULT, PUSH_LAYER_MEDIA_TYPE).await,
        digest
    );
}

#[tokio::test]
async fn every_wasm_layer_media_type_in_use_is_read_and_other_artifacts_are_refused() {
    let registry = Registry::start("media");
    let puller = puller(&registry, None);
    for (i, media_type) in LAYER_MEDIA_TYPES.iter().enumerate() {
        let repo = registry.reference(&format!("plugins/convention-{i}"));
        let digest = push(&puller, &repo, OPT_OUT, media_type).await;
        let pulled = puller
            .pull(&oci(&format!("{repo}@{digest}")))
            .await
            .unwrap();
        assert_eq!(
            (pulled.layer.media_type.as_str(), &pulled.component[..]),
            (*media_type, OPT_OUT)
        );
    }
    // A container image's layer is no plugin.
    let repo = registry.reference("plugins/image");
    let digest = push(
        &puller,
        &repo,
        OPT_OUT,
        "application/vnd.oci.image.layer.v1.tar+gzip",
    )
    .await;
    let e = puller
        .pull(&oci(&format!("{repo}@{digest}")))
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "{repo}@{digest}: it has no Wasm layer (its layers: application/vnd.oci.image.layer.v1.tar+gzip): \
             a plugin artifact has one layer of media type {}",
            LAYER_MEDIA_TYPES.join(", ")
        )
    );
}

#[tokio::test]
async fn a_digest_the_registry_does_not_have_is_refused_and_tampered_content_is_never_served() {
    let mut registry = Registry::start("digest");
    let cache = Scratch::new("digest-cache");
    let puller = puller(&registry, Some(&cache.0));
    let repo = registry.reference("plugins/opt-out");
    let digest = push(&puller, &repo, OPT_OUT, PUSH_LAYER_MEDIA_TYPE).await;

    // The component's digest is not the artifact's: the registry has no such manifest.
    let wrong = sha256(OPT_OUT);
    let e = puller
        .pull(&oci(&format!("{repo}@{wrong}")))
        .await
        .unwrap_err();
    assert_eq!(
        e.message,
        format!(
            "the registry {} has no manifest {wrong} in plugins/opt-out: check the digest (`plugin push` prints the one it published)",
            registry.host
        )
    );
    let e = puller
        .pull(&oci(&format!(
            "{}@{digest}",
            registry.reference("plugins/nothing-here")
        )))
        .await
        .unwrap_err();
    assert!(
        e.message.contains("has no repository plugins/nothing-here")
            || e.message.contains("has no manifest"),
        "{e}"
    );

    // A cached component changed on disk is not trusted: pulled again, and the right bytes serve.
    let pinned = oci(&format!("{repo}@{digest}"));
    puller.pull(&pinned).await.unwrap();
    let blob = cache
        .0
        .join("blobs/sha256")
        .join(&sha256(OPT_OUT)["sha256:".len()..]);
    std::fs::write(&blob, b"\0asm tampered").unwrap();
    let pulled = puller.pull(&pinned).await.unwrap();
    assert!(!pulled.cached);
    assert_eq!(pulled.component, OPT_OUT);
    // ... and with the registry gone, tampered bytes are refused rather than served.
    std::fs::write(&blob, b"\0asm tampered").unwrap();
    registry.stop();
    let e = puller.pull(&pinned).await.unwrap_err();
    assert!(
        e.message
            .starts_with(&format!("cannot reach the registry {}", registry.host)),
        "{e}"
    );
}

#[tokio::test]
async fn an_artifact_over_the_size_limit_is_refused_before_its_layer_is_downloaded() {
    let registry = Registry::start("large");
    let puller = puller(&registry, None);
    let repo = registry.reference("plugins/large");
    let mut large = b"\0asm\x0d\0\x01\0".to_vec();
    large.resize(MAX_PLUGIN_BYTES as usize + 1, 0);
    let digest = push(&puller, &repo, &large, PUSH_LAYER_MEDIA_TYPE).await;
    let e = puller
        .pull(&oci(&format!("{repo}@{digest}")))
        .await
        .unwrap_err();
    assert_eq!(
        e.message,
        format!(
            "its Wasm layer is {} bytes, over the limit of {MAX_PLUGIN_BYTES} bytes for a plugin (not downloaded)",
            MAX_PLUGIN_BYTES + 1
        )
    );
    let layer = sha256(&large);
    let log = registry.log();
    assert!(
        log.contains(&format!("GET /v2/plugins/large/manifests/{digest}")),
        "{log}"
    );
    assert!(
        !log.contains(&format!("GET /v2/plugins/large/blobs/{layer}")),
        "the layer was downloaded:\n{log}"
    );
    // A smaller limit (the same check) refuses a plugin the default limit takes.
    let strict = self::puller(&registry, None).with_limit(1000);
    let opt_out = push(
        &puller,
        &registry.reference("plugins/opt-out"),
        OPT_OUT,
        PUSH_LAYER_MEDIA_TYPE,
    )
    .await;
    let e = strict
        .pull(&oci(&format!(
            "{}@{opt_out}",
            registry.reference("plugins/opt-out")
        )))
        .await
        .unwrap_err();
    assert!(e.message.contains("over the limit of 1000 bytes"), "{e}");
}

/// The plugin directory's `<name>.oci` files, as the controller scans them (on a blocking
/// thread of the async runtime): loaded, replaced, and kept while the registry cannot be
/// reached, whether a new reference cannot be fetched or the controller restarts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_registry_keeps_the_last_good_version_serving() {
    let registry = Registry::start("unreachable");
    let cache = Scratch::new("unreachable-cache");
    let dir = Scratch::new("unreachable-dir");
    let pusher = puller(&registry, None);
    let repo = registry.reference("plugins/tenant");
    let first = push(&pusher, &repo, OPT_OUT, PUSH_LAYER_MEDIA_TYPE).await;
    let runtime = Arc::new(Runtime::new(Limits::default()).unwrap());
    let puller = Arc::new(puller(&registry, Some(&cache.0)));
    let plugins = Plugins::built_in(&runtime).unwrap();
    let watch = PluginDir::with_fetcher(&dir.0, Some(puller.clone()));
    let state = Arc::new(std::sync::Mutex::new((watch, plugins)));
    let scan = |state: Arc<std::sync::Mutex<(PluginDir, Plugins)>>| {
        let runtime = runtime.clone();
        async move {
            tokio::task::spawn_blocking(move || {
                let mut guard = state.lock().unwrap();
                let (watch, plugins) = &mut *guard;
                watch.scan(&runtime, plugins)
            })
            .await
            .unwrap()
        }
    };
    let served = |state: &Arc<std::sync::Mutex<(PluginDir, Plugins)>>| {
        let guard = state.lock().unwrap();
        guard.1.get("tenant").map(|c| c.hash.clone()).ok()
    };

    std::fs::write(dir.0.join("tenant.oci"), format!("{repo}@{first}\n")).unwrap();
    let loaded = scan(state.clone()).await;
    assert_eq!(loaded.loaded, ["tenant"], "{:?}", loaded.failed);
    let opt_out = sha256(OPT_OUT)["sha256:".len()..].to_owned();
    assert_eq!(served(&state).as_deref(), Some(opt_out.as_str()));

    // A new version on a registry that cannot be reached: refused at the fetch step, and the
    // version loaded keeps serving.
    let dead = format!("127.0.0.1:{}", free_port());
    let second = push(&pusher, &repo, DEFAULT, PUSH_LAYER_MEDIA_TYPE).await;
    std::fs::write(
        dir.0.join("tenant.oci"),
        format!("oci://{dead}/plugins/tenant@{second}"),
    )
    .unwrap();
    let refused = scan(state.clone()).await;
    assert!(refused.loaded.is_empty());
    let [failure] = &refused.failed[..] else {
        panic!("{:?}", refused.failed)
    };
    assert_eq!(failure.step, Step::Fetch);
    let text = failure.to_string();
    assert!(
        text.starts_with(&format!("plugin tenant: cannot fetch it: oci://{dead}/plugins/tenant@{second}: cannot reach the registry {dead}: "))
            && text.ends_with("(tried again in 30 s)"),
        "{text}"
    );
    assert_eq!(served(&state).as_deref(), Some(opt_out.as_str()));
    // Unchanged, it is not fetched again at every scan (only after the retry delay).
    assert!(scan(state.clone()).await.is_empty());

    // The new version, reachable: served.
    std::fs::write(dir.0.join("tenant.oci"), format!("{repo}@{second}")).unwrap();
    assert_eq!(scan(state.clone()).await.loaded, ["tenant"]);
    let default = sha256(DEFAULT)["sha256:".len()..].to_owned();
    assert_eq!(served(&state).as_deref(), Some(default.as_str()));

    // A restart with the registry down: the cache has the pinned version.
    drop(registry);
    let restarted = Arc::new(std::sync::Mutex::new((
        PluginDir::with_fetcher(&dir.0, Some(puller)),
        Plugins::built_in(&runtime).unwrap(),
    )));
    assert_eq!(scan(restarted.clone()).await.loaded, ["tenant"]);
    assert_eq!(served(&restarted).as_deref(), Some(default.as_str()));

    // A reference that does not parse is refused with the form to write, and not retried.
    std::fs::write(dir.0.join("tenant.oci"), "registry.example/tenant:1").unwrap();
    let bad = scan(restarted.clone()).await;
    assert_eq!(
        bad.failed[0].to_string(),
        "plugin tenant: cannot fetch it: \"registry.example/tenant:1\" is not an OCI reference: write oci://<registry>/<repository>@sha256:<digest>"
    );
    assert_eq!(served(&restarted).as_deref(), Some(default.as_str()));
    tokio::time::sleep(Duration::from_millis(10)).await;
}

#[test]
fn plugin_push_publishes_a_plugin_that_loads_and_prints_the_reference_to_pin() {
    let registry = Registry::start("cli");
    let cache = Scratch::new("cli-cache");
    let files = Scratch::new("cli-files");
    let file = files.0.join("opt-out.wasm");
    std::fs::write(&file, OPT_OUT).unwrap();
    let registry_flags = [
        "--plugin-registry-http",
        &registry.host,
        "--plugin-cache-dir",
        cache.0.to_str().unwrap(),
    ];
    let tagged = registry.reference("plugins/opt-out:1.0");
    let mut args = vec!["plugin", "push", file.to_str().unwrap(), &tagged];
    args.extend(registry_flags);
    let (ok, out, err) = cli(&args);
    assert!(ok, "{err}");
    let pinned = out.trim();
    assert_eq!(
        pinned,
        format!("{}@{}", registry.reference("plugins/opt-out"), {
            // The tag and the printed digest name the same artifact.
            let rt = tokio::runtime::Runtime::new().unwrap();
            rt.block_on(puller(&registry, None).pull(&oci(&tagged)))
                .unwrap()
                .digest
        })
    );

    // What was pushed runs: inspect pulls it through the controller's pipeline.
    let mut args = vec!["plugin", "inspect", pinned];
    args.extend(registry_flags);
    let (ok, out, err) = cli(&args);
    assert!(ok, "{err}");
    assert!(out.contains(&format!("file:            {pinned}")), "{out}");
    assert!(out.contains("name:") && out.contains("opt-out"), "{out}");

    // A file that does not load is not published.
    let broken = files.0.join("broken.wasm");
    std::fs::write(&broken, b"\0asm\x0d\0\x01\0 truncated").unwrap();
    let mut args = vec!["plugin", "push", broken.to_str().unwrap(), &tagged];
    args.extend(registry_flags);
    let (ok, _, err) = cli(&args);
    assert!(!ok);
    assert!(err.contains("compile check failed"), "{err}");

    // `make plugin-push` runs the same command.
    let make = Command::new("make")
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .args([
            "--no-print-directory",
            "plugin-push",
            &format!("BIN={BIN}"),
            &format!("PLUGIN={}", file.display()),
            &format!("REF={}", registry.reference("plugins/opt-out:make")),
            &format!("PUSH_ARGS=--plugin-registry-http={}", registry.host),
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&make.stdout);
    assert!(
        make.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&make.stderr)
    );
    assert_eq!(stdout.lines().last(), Some(pinned), "{stdout}");

    // A digest is not a place to push to.
    let mut args = vec!["plugin", "push", file.to_str().unwrap(), pinned];
    args.extend(registry_flags);
    let (ok, _, err) = cli(&args);
    assert!(!ok);
    assert!(
        err.contains("push to a repository or a tag, not a digest"),
        "{err}"
    );
}
