//! The shipped RBAC is enough, and no more than the controller needs: the controller runs as the
//! ServiceAccount of `deploy/deploy.yaml`, with a token of that account and the roles and
//! bindings of that file only, watching all namespaces with leader election on, and passes the
//! main scenario on the local control plane (`make test` starts it). The scenario runs three
//! times: the binary with the roles of `deploy/deploy.yaml`; the binary with the roles the Helm
//! chart renders; and the image of `make image-oci`, pushed to a registry on loopback, pulled back
//! by digest and run by runc as the Deployment runs it, with in-cluster configuration.
//!
//! Its own test binary, so that no other test's controller runs while this cluster-wide one
//! does; its tests take turns ([`TURN`]).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use k8s_openapi::api::{
    authentication::v1::{TokenRequest, TokenRequestSpec},
    coordination::v1::Lease,
    core::v1::{ConfigMap, Namespace, Pod, Secret, Service, ServiceAccount},
    discovery::v1::EndpointSlice,
    events::v1::Event,
};
use kube::{
    Api, Client, ResourceExt,
    api::{
        DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
    },
    config::Kubeconfig,
    discovery::{Scope, pinned_kind},
};
use node_sim::Simulator;
use serde_json::{Value, json};

mod support;
use support::{client, client_for, eventually, image, kubeconfig_path, namespace, registry};

/// One cluster-wide controller at a time: each test holds it throughout.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const MANIFEST: &str = include_str!("../../deploy/deploy.yaml");
const CONTROLLER_NS: &str = "nad-service-controller";
const ACCOUNT: &str = "nad-service-controller";
const LEASE: &str = "nad-service-controller";
/// The ConfigMap the shipped RBAC lets the controller read its plugins from.
const PLUGIN_CONFIGMAP: &str = "nad-service-controller-plugins";
const OPT_OUT: &[u8] = include_bytes!(env!("NSC_EXAMPLE_OPT_OUT_WASM"));
const RBAC_KINDS: [&str; 6] = [
    "Namespace",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
];

/// Where the roles come from.
#[derive(Clone, Copy, Debug)]
enum Roles {
    /// `deploy/deploy.yaml`.
    Release,
    /// The Helm chart with its default values (`hack/helm.sh template`).
    Chart,
}

/// How the controller runs.
#[derive(Clone, Copy, Debug)]
enum Launch {
    /// The binary of this build, with a kubeconfig for the ServiceAccount.
    Binary,
    /// The image, by runc, with in-cluster configuration.
    Image,
}

fn manifest(roles: Roles) -> Vec<Value> {
    let text = match roles {
        Roles::Release => MANIFEST.to_owned(),
        Roles::Chart => {
            let helm = Path::new(env!("CARGO_MANIFEST_DIR")).join("../hack/helm.sh");
            let out = Command::new(helm)
                .arg("template")
                .stderr(Stdio::inherit())
                .output()
                .expect("running hack/helm.sh template");
            assert!(out.status.success(), "hack/helm.sh template failed");
            String::from_utf8(out.stdout).unwrap()
        }
    };
    let docs: Vec<Value> = serde_saphyr::from_str_multiple(&text).unwrap();
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// Applies the namespace, ServiceAccount, roles and bindings of the manifest, as they are.
async fn install_rbac(admin: &Client, docs: &[Value]) {
    let mut applied = Vec::new();
    for doc in docs.iter().cloned() {
        let kind = doc["kind"].as_str().unwrap().to_owned();
        if !RBAC_KINDS.contains(&kind.as_str()) {
            continue;
        }
        let (group, version) = match doc["apiVersion"].as_str().unwrap().split_once('/') {
            Some((g, v)) => (g.to_owned(), v.to_owned()),
            None => (
                String::new(),
                doc["apiVersion"].as_str().unwrap().to_owned(),
            ),
        };
        let (resource, caps) = pinned_kind(admin, &GroupVersionKind::gvk(&group, &version, &kind))
            .await
            .unwrap();
        let object: DynamicObject = serde_json::from_value(doc).unwrap();
        let api: Api<DynamicObject> = match (caps.scope, object.namespace()) {
            (Scope::Namespaced, Some(ns)) => Api::namespaced_with(admin.clone(), &ns, &resource),
            (Scope::Namespaced, None) => panic!("{kind} {} has no namespace", object.name_any()),
            (Scope::Cluster, _) => Api::all_with(admin.clone(), &resource),
        };
        api.patch(
            &object.name_any(),
            &PatchParams::apply("nsc-rbac-test").force(),
            &Patch::Apply(&object),
        )
        .await
        .unwrap_or_else(|e| panic!("applying {kind} {}: {e}", object.name_any()));
        applied.push(kind);
    }
    for kind in RBAC_KINDS {
        assert!(
            applied.iter().any(|k| k == kind),
            "the manifest has a {kind}"
        );
    }
}

/// A fresh token of the controller's ServiceAccount.
async fn service_account_token(admin: &Client) -> String {
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), CONTROLLER_NS);
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: None,
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    accounts
        .create_token_request(ACCOUNT, &PostParams::default(), &request)
        .await
        .unwrap()
        .status
        .unwrap()
        .token
        .unwrap()
}

/// A kubeconfig that authenticates with `token`.
fn service_account_kubeconfig(token: &str, dir: &Path) -> PathBuf {
    let cluster = admin_cluster();
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": {
            "server": cluster.server,
            "certificate-authority-data": cluster.certificate_authority_data,
        }}],
        "users": [{"name": ACCOUNT, "user": {"token": token}}],
        "contexts": [{"name": ACCOUNT, "context": {"cluster": "local", "user": ACCOUNT}}],
        "current-context": ACCOUNT,
    });
    let path = dir.join("kubeconfig");
    std::fs::write(&path, serde_json::to_vec_pretty(&config).unwrap()).unwrap();
    path
}

/// The local control plane's cluster entry: its address and CA.
fn admin_cluster() -> kube::config::Cluster {
    let admin_config = Kubeconfig::read_from(kubeconfig_path()).unwrap();
    admin_config.clusters[0].cluster.clone().unwrap()
}

/// Asserts that `result` is the API server's 403.
fn assert_forbidden<T: std::fmt::Debug>(what: &str, result: Result<T, kube::Error>) {
    match result {
        Err(kube::Error::Api(status)) if status.code == 403 => {}
        other => panic!("{what}: expected 403 Forbidden, got {other:?}"),
    }
}

/// Flags both ways of running add: ports on loopback, debug logs, the plugin ConfigMap.
fn test_flags() -> Vec<String> {
    [
        "--leader-election=true",
        "--health-address=127.0.0.1:0",
        "--metrics-address=127.0.0.1:0",
        "--log-filter=info,nad_service_controller=debug",
    ]
    .into_iter()
    .map(str::to_owned)
    .chain([format!("--plugin-configmap={PLUGIN_CONFIGMAP}")])
    .collect()
}

/// The controller, as the ServiceAccount, in the controller's namespace.
struct Controller {
    child: Child,
    log: PathBuf,
    /// The runc container's id, when it runs from the image.
    container: Option<String>,
}

impl Controller {
    /// The binary, with a kubeconfig.
    fn binary(kubeconfig: &Path, dir: &Path, identity: &str) -> Self {
        let log = dir.join("controller.log");
        let child = Command::new(env!("CARGO_BIN_EXE_nad-service-controller"))
            .arg("run")
            .args(test_flags())
            .env("KUBECONFIG", kubeconfig)
            .env("POD_NAME", identity)
            .env("POD_NAMESPACE", CONTROLLER_NS)
            .env_remove("NSC_WATCH_NAMESPACE")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Self {
            child,
            log,
            container: None,
        }
    }

    /// The unpacked image in `bundle`, by `runc run` in the foreground (which passes signals on
    /// to the container, as a container runtime does kubelet's).
    fn image(bundle: &Path, dir: &Path, id: &str) -> Self {
        let log = dir.join("controller.log");
        let child = Command::new("runc")
            .args(["run", "--bundle"])
            .arg(bundle)
            .arg(id)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("running runc (apt-get install runc)");
        Self {
            child,
            log,
            container: Some(id.to_owned()),
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, as kubelet sends it; the controller releases its Lease and exits 0.
    fn stop(mut self) -> String {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let exit = loop {
            if let Some(exit) = self.child.try_wait().unwrap() {
                break exit;
            }
            if std::time::Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("the controller did not stop on SIGTERM:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let log = self.log();
        assert!(exit.success(), "the controller exited with {exit}:\n{log}");
        log
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        if let Some(id) = &self.container {
            let _ = Command::new("runc")
                .args(["kill", id, "KILL"])
                .stderr(Stdio::null())
                .status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(id) = &self.container {
            let _ = Command::new("runc")
                .args(["delete", "--force", id])
                .stderr(Stdio::null())
                .status();
        }
    }
}

fn endpoints(slices: &[EndpointSlice]) -> Vec<(String, bool)> {
    let mut all: Vec<_> = slices
        .iter()
        .flat_map(|s| s.endpoints.iter().flatten())
        .map(|e| {
            (
                e.target_ref.as_ref().unwrap().name.clone().unwrap(),
                e.conditions.as_ref().unwrap().ready.unwrap(),
            )
        })
        .collect();
    all.sort();
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_rbac_is_enough_to_run_the_controller_cluster_wide() {
    main_scenario(Roles::Release, Launch::Binary).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_charts_rbac_is_enough_to_run_the_controller_cluster_wide() {
    main_scenario(Roles::Chart, Launch::Binary).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_image_run_as_the_deployment_runs_it_passes_the_main_scenario() {
    main_scenario(Roles::Release, Launch::Image).await;
}

/// The image of `make image-oci` through a registry on loopback, unpacked into `dir/bundle`
/// with the runtime configuration of the Deployment's pod `identity`, its ServiceAccount files
/// holding `token`.
async fn image_bundle(admin: &Client, token: &str, dir: &Path, identity: &str) -> PathBuf {
    let (layout, tag) = image::layout();
    let registry = registry::Registry::start("image");
    let pulled = image::push_and_pull(&layout, &tag, &registry, dir);
    assert_eq!(
        pulled.digest,
        image::layout_digest(&layout, &tag),
        "the registry serves the manifest the layout holds"
    );
    // The SBOM the release attests: every crate of Cargo.lock, this one among them.
    let sbom = image::sbom(&pulled, dir);
    assert_eq!(sbom["spdxVersion"], "SPDX-2.3");
    let packages = sbom["packages"].as_array().unwrap();
    for name in ["nad-service-controller", "kube-client", "wasmtime"] {
        assert!(
            packages.iter().any(|p| p["name"] == name),
            "the SBOM lists {name}"
        );
    }
    drop(registry);
    let bundle = dir.join("bundle");
    image::unpack(&pulled, &bundle);
    // scratch: the binary and the CA bundle, nothing else.
    assert_eq!(
        image::rootfs_files(&bundle),
        [
            "etc",
            "etc/ssl",
            "etc/ssl/certs",
            "etc/ssl/certs/ca-certificates.crt",
            "nad-service-controller",
        ]
    );
    let image_manifest = image::layout_json(&pulled.layout, &pulled.digest);
    let config = image::layout_json(
        &pulled.layout,
        image_manifest["config"]["digest"].as_str().unwrap(),
    );
    assert_eq!(config["config"]["User"], "65532:65532");
    assert_eq!(
        config["config"]["Entrypoint"],
        json!(["/nad-service-controller"])
    );
    assert_eq!(config["config"]["Cmd"], json!(["run"]));
    let labels = &config["config"]["Labels"];
    for label in [
        "title",
        "description",
        "source",
        "version",
        "revision",
        "created",
        "licenses",
    ] {
        assert!(
            labels[format!("org.opencontainers.image.{label}")].is_string(),
            "label org.opencontainers.image.{label}: {labels}"
        );
    }
    assert_eq!(labels["org.opencontainers.image.version"], tag.as_str());

    // What kubelet mounts: the token, the cluster's CA (kube-root-ca.crt), the namespace.
    let account_dir = dir.join("serviceaccount");
    std::fs::create_dir_all(&account_dir).unwrap();
    let root_ca = eventually("the kube-root-ca.crt ConfigMap", || async {
        Api::<ConfigMap>::namespaced(admin.clone(), CONTROLLER_NS)
            .get_opt("kube-root-ca.crt")
            .await
            .unwrap()
            .and_then(|c| c.data?.remove("ca.crt"))
    })
    .await;
    std::fs::write(account_dir.join("token"), token).unwrap();
    std::fs::write(account_dir.join("ca.crt"), root_ca).unwrap();
    std::fs::write(account_dir.join("namespace"), CONTROLLER_NS).unwrap();

    let server = admin_cluster().server.unwrap();
    let address = server.trim_start_matches("https://");
    let (host, port) = address.rsplit_once(':').unwrap();
    let docs = manifest(Roles::Release);
    let pod = image::Pod {
        name: identity,
        namespace: CONTROLLER_NS,
        apiserver_host: host,
        apiserver_port: port.parse().unwrap(),
        service_account: &account_dir,
        extra_args: &test_flags(),
    };
    let base: Value =
        serde_json::from_slice(&std::fs::read(bundle.join("config.json")).unwrap()).unwrap();
    let runtime = image::runtime_config(
        &base,
        image::deployment(&docs, "nad-service-controller"),
        &pod,
    );
    assert_eq!(
        runtime["process"]["user"],
        json!({"uid": 65532, "gid": 65532})
    );
    assert_eq!(runtime["root"]["readonly"], json!(true));
    assert_eq!(runtime["process"]["noNewPrivileges"], json!(true));
    std::fs::write(
        bundle.join("config.json"),
        serde_json::to_vec_pretty(&runtime).unwrap(),
    )
    .unwrap();
    bundle
}

async fn main_scenario(roles: Roles, launch: Launch) {
    let _turn = TURN.lock().await;
    let admin = client().await;
    install_rbac(&admin, &manifest(roles)).await;
    let dir = std::env::temp_dir().join(format!(
        "nsc-rbac-{}-{roles:?}-{launch:?}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let token = service_account_token(&admin).await;
    let kubeconfig = service_account_kubeconfig(&token, &dir);
    let account = client_for(&kubeconfig).await;

    // No more than needed: what the controller never does is refused.
    assert_forbidden(
        "listing Secrets",
        Api::<Secret>::all(account.clone())
            .list(&ListParams::default())
            .await,
    );
    assert_forbidden(
        "listing ConfigMaps",
        Api::<ConfigMap>::all(account.clone())
            .list(&ListParams::default())
            .await,
    );
    assert_forbidden(
        "deleting a Service",
        Api::<Service>::namespaced(account.clone(), "default")
            .delete("kubernetes", &DeleteParams::default().dry_run())
            .await,
    );
    assert_forbidden(
        "creating a Pod",
        Api::<Pod>::namespaced(account.clone(), "default")
            .create(
                &PostParams {
                    dry_run: true,
                    ..PostParams::default()
                },
                &serde_json::from_value(json!({"metadata": {"name": "x"},
                    "spec": {"containers": [{"name": "x", "image": "x"}]}}))
                .unwrap(),
            )
            .await,
    );
    assert_forbidden(
        "reading a Lease in another namespace",
        Api::<Lease>::namespaced(account.clone(), "default")
            .get(LEASE)
            .await,
    );
    assert_forbidden(
        "reading another Lease in its own namespace",
        Api::<Lease>::namespaced(account.clone(), CONTROLLER_NS)
            .get("someone-else")
            .await,
    );
    assert_forbidden(
        "creating a NetworkAttachmentDefinition",
        Api::<kube::api::DynamicObject>::namespaced_with(
            account.clone(),
            "default",
            &kube::discovery::ApiResource::from_gvk_with_plural(
                &kube::api::GroupVersionKind::gvk(
                    "k8s.cni.cncf.io",
                    "v1",
                    "NetworkAttachmentDefinition",
                ),
                "network-attachment-definitions",
            ),
        )
        .create(
            &PostParams {
                dry_run: true,
                ..PostParams::default()
            },
            &serde_json::from_value(json!({"apiVersion": "k8s.cni.cncf.io/v1",
                "kind": "NetworkAttachmentDefinition", "metadata": {"name": "x"}}))
            .unwrap(),
        )
        .await,
    );
    // Of the ConfigMaps, only the plugins' one, by name.
    assert_forbidden(
        "reading another ConfigMap in its own namespace",
        Api::<ConfigMap>::namespaced(account.clone(), CONTROLLER_NS)
            .get("kube-root-ca.crt")
            .await,
    );
    assert_forbidden(
        "listing the ConfigMaps of its own namespace",
        Api::<ConfigMap>::namespaced(account.clone(), CONTROLLER_NS)
            .list(&ListParams::default())
            .await,
    );
    assert_forbidden(
        "changing the plugin ConfigMap",
        Api::<ConfigMap>::namespaced(account.clone(), CONTROLLER_NS)
            .delete(PLUGIN_CONFIGMAP, &DeleteParams::default().dry_run())
            .await,
    );
    let plugin_configmaps: Api<ConfigMap> = Api::namespaced(admin.clone(), CONTROLLER_NS);
    let _ = plugin_configmaps
        .delete(PLUGIN_CONFIGMAP, &DeleteParams::default())
        .await;

    // A Lease left by an earlier run that was killed would hold the controller back.
    let _ = Api::<Lease>::namespaced(admin.clone(), CONTROLLER_NS)
        .delete(LEASE, &DeleteParams::default())
        .await;
    let ns = namespace(&admin, "rbac").await;
    let sim = std::sync::Arc::new(Simulator::new(admin.clone(), node_sim::Config::default()));
    sim.ensure_nodes().await.unwrap();
    let heartbeat = tokio::spawn({
        let sim = sim.clone();
        async move {
            let _ = sim.heartbeat().await;
        }
    });
    let identity = format!("rbac-test-{}", std::process::id());
    let controller = match launch {
        Launch::Binary => Controller::binary(&kubeconfig, &dir, &identity),
        Launch::Image => {
            let bundle = image_bundle(&admin, &token, &dir, &identity).await;
            Controller::image(&bundle, &dir, &identity)
        }
    };

    let services: Api<Service> = Api::namespaced(admin.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    let slices: Api<EndpointSlice> = Api::namespaced(admin.clone(), &ns);
    let events: Api<Event> = Api::namespaced(admin.clone(), &ns);
    let service = |name: &str, spec: Value| -> Service {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"app": "web"},
                         "annotations": {"isim.dev/network": "macvlan"}},
            "spec": spec,
        }))
        .unwrap()
    };
    services
        .create(
            &PostParams::default(),
            &service(
                "web",
                json!({"clusterIP": "None", "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}),
            ),
        )
        .await
        .unwrap();
    for name in ["web-a", "web-b"] {
        let pod = json!({
            "metadata": {"name": name, "labels": {"app": "web"},
                         "annotations": {"k8s.v1.cni.cncf.io/networks": "macvlan"}},
            "spec": {"containers": [{"name": "web", "image": "nginx:1.27",
                     "ports": [{"name": "http", "containerPort": 8080}]}]},
        });
        pods.create(
            &PostParams::default(),
            &serde_json::from_value(pod).unwrap(),
        )
        .await
        .unwrap();
        sim.start_pod(&ns, name, true).await.unwrap();
    }
    let web_slices = || {
        let slices = slices.clone();
        async move {
            slices
                .list(&ListParams::default().labels("kubernetes.io/service-name=web"))
                .await
                .unwrap()
                .items
        }
    };
    let wait_for = |what: &'static str, want: Vec<(String, bool)>| {
        let web_slices = &web_slices;
        let controller = &controller;
        async move {
            let deadline = tokio::time::Instant::now() + support::WAIT;
            loop {
                let got = endpoints(&web_slices().await);
                if got == want {
                    return;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "timed out waiting for {what}: endpoints {got:?}\nthe controller's log:\n{}",
                    controller.log()
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let both = |a: bool, b: bool| vec![("web-a".to_owned(), a), ("web-b".to_owned(), b)];

    // Leases (create, get, update), Services, pods and nodes (list, watch), slices (create).
    wait_for("both pods published", both(true, true)).await;
    let lease = Api::<Lease>::namespaced(admin.clone(), CONTROLLER_NS)
        .get(LEASE)
        .await
        .unwrap();
    let holder = lease.spec.unwrap().holder_identity.unwrap_or_default();
    assert!(
        holder.starts_with(&identity),
        "the Lease is held by this controller, not {holder:?}"
    );
    // Slices (patch).
    sim.set_ready(&ns, "web-a", false).await.unwrap();
    wait_for("web-a not ready", both(false, true)).await;
    // Events (create, then patch for the repeat).
    services
        .create(
            &PostParams::default(),
            &service("clustered", json!({"ports": [{"port": 80}]})),
        )
        .await
        .unwrap();
    // The Event of `reason` on the Service `name`, if any.
    let event_on = |reason: &'static str, name: &'static str| {
        let events = events.clone();
        async move {
            events
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .find(|e| {
                    e.reason.as_deref() == Some(reason)
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                })
        }
    };
    let warning = || event_on("InvalidService", "clustered");
    eventually("an InvalidService Event", || async {
        warning().await.map(|_| ())
    })
    .await;
    let touch = json!({"metadata": {"labels": {"touched": "1"}}});
    services
        .patch("clustered", &PatchParams::default(), &Patch::Merge(&touch))
        .await
        .unwrap();
    eventually("the repeated Event as a series", || async {
        warning().await.filter(|e| e.series.is_some()).map(|_| ())
    })
    .await;
    // NetworkAttachmentDefinitions (list, watch): a Service whose network names none is told.
    services
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "misspelt", "annotations": {"isim.dev/network": "macvlann"}},
                "spec": {"clusterIP": "None", "ports": [{"port": 80}]},
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let not_found = eventually("a NetworkNotFound Event", || {
        event_on("NetworkNotFound", "misspelt")
    })
    .await;
    let note = not_found.note.unwrap_or_default();
    assert!(
        note.contains(&format!("network {ns}/macvlann names no NetworkAttachmentDefinition (did you mean {ns}/macvlan?)")),
        "{note}"
    );
    // The plugin ConfigMap (get, list and watch by name): a plugin it brings serves a Service.
    services
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "tenant", "annotations": {
                    "isim.dev/network": "macvlan", "isim.dev/endpoint-policy": "tenant"}},
                "spec": {"clusterIP": "None", "ports": [{"port": 80}]},
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let configmap: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": PLUGIN_CONFIGMAP},
        "binaryData": {"tenant.wasm": k8s_openapi::ByteString(OPT_OUT.to_vec())},
    }))
    .unwrap();
    plugin_configmaps
        .create(&PostParams::default(), &configmap)
        .await
        .unwrap();
    eventually(
        "the ConfigMap's plugin serving the tenant Service",
        || async {
            let tenant = slices
                .list(&ListParams::default().labels("kubernetes.io/service-name=tenant"))
                .await
                .unwrap()
                .items;
            (endpoints(&tenant).len() == 2).then_some(())
        },
    )
    .await;
    plugin_configmaps
        .delete(PLUGIN_CONFIGMAP, &DeleteParams::default())
        .await
        .unwrap();
    // Slices (delete): without the annotation the Service is not the controller's any more.
    let unannotate = json!({"metadata": {"annotations": {"isim.dev/network": null}}});
    services
        .patch("web", &PatchParams::default(), &Patch::Merge(&unannotate))
        .await
        .unwrap();
    eventually("the slices removed", || async {
        web_slices().await.is_empty().then_some(())
    })
    .await;

    let log = controller.stop();
    heartbeat.abort();
    let denied: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("is forbidden: User"))
        .collect();
    assert!(
        denied.is_empty(),
        "the controller was refused by RBAC:\n{}",
        denied.join("\n")
    );
    let lease = Api::<Lease>::namespaced(admin.clone(), CONTROLLER_NS)
        .get(LEASE)
        .await
        .unwrap();
    assert_eq!(
        lease.spec.unwrap().holder_identity,
        None,
        "released on SIGTERM"
    );

    let _ = pods
        .delete_collection(
            &DeleteParams::default().grace_period(0),
            &ListParams::default(),
        )
        .await;
    let _ = Api::<Namespace>::all(admin)
        .delete(&ns, &DeleteParams::default())
        .await;
    let _ = std::fs::remove_dir_all(&dir);
}
