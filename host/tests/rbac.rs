//! The shipped RBAC is enough, and no more than the controller needs: the controller runs as the
//! ServiceAccount of `deploy/deploy.yaml`, with a token of that account and the roles and
//! bindings of that file only, watching all namespaces with leader election on, and passes the
//! main scenario on the local control plane (`make test` starts it). The scenario runs three
//! times: the binary with the roles of `deploy/deploy.yaml`; the binary with the roles the Helm
//! chart renders; and the image of `make image-oci`, pushed to a registry on loopback, pulled back
//! by digest and run by runc as the Deployment runs it, with in-cluster configuration.
//!
//! The network prober's RBAC and admission policy (`deploy/prober`) alike: a prober, by a token
//! bound to its pod on a node, writes its condition on the pods of that node and nothing else,
//! and the prober binary runs with only those permissions.
//!
//! Its own test binary, so that no other test's controller runs while this cluster-wide one
//! does; its tests take turns ([`TURN`]).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
// A scenario on the control plane reads top to bottom, as the story it tells.
#![allow(clippy::too_many_lines)]

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use k8s_openapi::api::{
    authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec},
    coordination::v1::Lease,
    core::v1::{ConfigMap, Namespace, Pod, Secret, Service, ServiceAccount},
    discovery::v1::EndpointSlice,
    events::v1::Event,
    resource::v1::{DeviceClass, ResourceClaim, ResourceSlice},
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
/// The Secret the shipped RBAC lets the controller read registry credentials from.
const REGISTRY_SECRET: &str = "nad-service-controller-registry";
/// The ConfigMap the shipped RBAC lets the controller read registry CAs from.
const REGISTRY_CAS: &str = "nad-service-controller-registry-cas";
const OPT_OUT: &[u8] = include_bytes!(env!("NSC_EXAMPLE_OPT_OUT_WASM"));
/// The network prober's ServiceAccount, RBAC, admission policy and DaemonSet (`deploy/prober`,
/// each file naming its namespace).
const PROBER_FILES: [&str; 3] = [
    include_str!("../../deploy/prober/rbac.yaml"),
    include_str!("../../deploy/prober/admission-policy.yaml"),
    include_str!("../../deploy/prober/daemonset.yaml"),
];
const PROBER_ACCOUNT: &str = "nad-network-prober";
const PROBER_POLICY: &str = "nad-network-prober-own-node";
/// The annotation of the prober's grant that names its networks.
const PROBE_NETWORKS: &str = "isim.dev/probe-networks";
const PROBER_KINDS: [&str; 6] = [
    "Namespace",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
];
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

/// One verb a shipped role grants: on which resource (with its `resourceNames`, if any), in
/// which role of the manifest.
#[derive(Debug, Clone)]
struct Grant {
    role: usize,
    api_group: String,
    resource: String,
    names: Option<Value>,
    verb: String,
}

/// Every verb each role of `docs` grants, one per resource.
fn grants(docs: &[Value]) -> Vec<Grant> {
    let mut all = Vec::new();
    for (role, doc) in docs.iter().enumerate() {
        if !matches!(doc["kind"].as_str(), Some("ClusterRole" | "Role")) {
            continue;
        }
        for rule in doc["rules"].as_array().unwrap() {
            for group in rule["apiGroups"].as_array().unwrap() {
                for resource in rule["resources"].as_array().unwrap() {
                    for verb in rule["verbs"].as_array().unwrap() {
                        all.push(Grant {
                            role,
                            api_group: group.as_str().unwrap().to_owned(),
                            resource: resource.as_str().unwrap().to_owned(),
                            names: rule.get("resourceNames").cloned(),
                            verb: verb.as_str().unwrap().to_owned(),
                        });
                    }
                }
            }
        }
    }
    all
}

/// `docs` with the roles granting every verb of `grants` but `without`, one rule per verb.
fn roles_without(docs: &[Value], grants: &[Grant], without: &Grant) -> Vec<Value> {
    let mut docs = docs.to_vec();
    for (role, doc) in docs.iter_mut().enumerate() {
        if !matches!(doc["kind"].as_str(), Some("ClusterRole" | "Role")) {
            continue;
        }
        let rules: Vec<Value> = grants
            .iter()
            .filter(|g| g.role == role && !std::ptr::eq(*g, without))
            .map(|g| {
                let mut rule = json!({"apiGroups": [g.api_group], "resources": [g.resource],
                                      "verbs": [g.verb]});
                if let Some(names) = &g.names {
                    rule["resourceNames"] = names.clone();
                }
                rule
            })
            .collect();
        doc["rules"] = json!(rules);
    }
    docs
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
    install(admin, docs, &RBAC_KINDS).await;
}

/// Applies the objects of `kinds` in `docs`, as they are (server-side apply), and checks that
/// there is one of each kind.
async fn install(admin: &Client, docs: &[Value], kinds: &[&str]) {
    let mut applied = Vec::new();
    for doc in docs.iter().cloned() {
        let kind = doc["kind"].as_str().unwrap().to_owned();
        if !kinds.contains(&kind.as_str()) {
            continue;
        }
        let object: DynamicObject = serde_json::from_value(doc.clone()).unwrap();
        let api = api_of(admin, &doc).await;
        api.patch(
            &object.name_any(),
            &PatchParams::apply("nsc-rbac-test").force(),
            &Patch::Apply(&object),
        )
        .await
        .unwrap_or_else(|e| panic!("applying {kind} {}: {e}", object.name_any()));
        applied.push(kind);
    }
    for &kind in kinds {
        assert!(
            applied.iter().any(|k| k == kind),
            "the manifest has a {kind}"
        );
    }
}

/// A fresh token of the controller's ServiceAccount.
async fn service_account_token(admin: &Client) -> String {
    token(admin, ACCOUNT, None).await
}

/// A fresh token of the ServiceAccount `account` (in the controller's namespace), bound to the
/// pod `bound` if any, as kubelet mounts one: it then names the pod's node too.
async fn token(admin: &Client, account: &str, bound: Option<&Pod>) -> String {
    token_in(admin, CONTROLLER_NS, account, bound).await
}

/// A token of the ServiceAccount `namespace/account`, bound to `bound` when given.
async fn token_in(admin: &Client, namespace: &str, account: &str, bound: Option<&Pod>) -> String {
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), namespace);
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: None,
            expiration_seconds: Some(3600),
            bound_object_ref: bound.map(|pod| BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(pod.name_any()),
                uid: pod.metadata.uid.clone(),
            }),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    accounts
        .create_token_request(account, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|e| panic!("a token of {account}: {e}"))
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

/// Flags both ways of running add: ports on loopback, debug logs, the plugin ConfigMap, the
/// registry Secret and the registry CA ConfigMap.
fn test_flags() -> Vec<String> {
    [
        "--leader-election=true",
        "--health-address=127.0.0.1:0",
        "--metrics-address=127.0.0.1:0",
        "--log-filter=info,nad_service_controller=debug",
    ]
    .into_iter()
    .map(str::to_owned)
    .chain([
        format!("--plugin-configmap={PLUGIN_CONFIGMAP}"),
        format!("--plugin-registry-secret={REGISTRY_SECRET}"),
        format!("--plugin-registry-ca-configmap={REGISTRY_CAS}"),
    ])
    .collect()
}

/// The controller, as the ServiceAccount, in the controller's namespace (or the prober, as
/// its own).
struct Controller {
    child: Child,
    log: PathBuf,
    /// The runc container's id, when it runs from the image.
    container: Option<String>,
    /// What runs, for the messages.
    what: &'static str,
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
            what: "the controller",
        }
    }

    /// The prober's binary (`nad-network-prober`), with a kubeconfig, serving on
    /// loopback port `port`, as the stand-in prober pod `pod` (in the prober's namespace) on `node`,
    /// reading its admission policy every second.
    fn prober(
        kubeconfig: &Path,
        dir: &Path,
        node: &str,
        network: &str,
        port: u16,
        pod: &str,
    ) -> Self {
        let log = dir.join("prober.log");
        let child = Command::new(support::prober_binary())
            .args(["--node-name", node, "--network", network])
            .arg(format!("--address=127.0.0.1:{port}"))
            .args(["--pod-name", pod, "--pod-namespace", CONTROLLER_NS])
            .arg("--admission-policy-check-seconds=1")
            .arg("--log-filter=info,nad_prober=debug")
            .env("KUBECONFIG", kubeconfig)
            .env_remove("NODE_NAME")
            .env_remove("NSC_PROBE_NETWORKS")
            .env_remove("NSC_PROBE_ADDRESS")
            .env_remove("NSC_PROBE_ADMISSION_POLICY")
            .env_remove("NSC_PROBE_ADMISSION_POLICY_BINDING")
            .env_remove("POD_NAME")
            .env_remove("POD_NAMESPACE")
            .env_remove("NSC_LOG_FORMAT")
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Self {
            child,
            log,
            container: None,
            what: "the prober",
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
            what: "the controller",
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, as kubelet sends it; the controller releases its Lease and exits 0 (the
    /// prober leaves its conditions as they are and exits 0).
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
                panic!("{} did not stop on SIGTERM:\n{}", self.what, self.log());
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let log = self.log();
        assert!(exit.success(), "{} exited with {exit}:\n{log}", self.what);
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

/// The network prober's image (`make image-oci`, `deploy/prober`'s DaemonSet runs it): through a
/// registry on loopback, it holds the prober's static binary and the CA bundle, nothing else;
/// its SBOM lists the prober's crates and none of the controller's Wasm runtime, compiler or
/// signature verification, and its binary holds none of their code (a crate's panic locations
/// name its source files, so code of wasmtime, Cranelift, sigstore or sigstore's TLS backend
/// aws-lc would leave their names: the prober's TLS is ring's alone).
#[test]
fn the_prober_image_holds_the_prober_alone() {
    let dir = std::env::temp_dir().join(format!("nsc-rbac-{}-prober-image", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (layout, tag) = image::layout(image::PROBER);
    let registry = registry::Registry::start("prober-image");
    let pulled = image::push_and_pull(&layout, &tag, "nad-network-prober", &registry, &dir);
    let sbom = image::sbom(&pulled, &dir);
    drop(registry);
    let listed: Vec<&str> = sbom["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    for name in ["nad-prober", "nad-model", "kube-client"] {
        assert!(listed.contains(&name), "the SBOM lists {name}: {listed:?}");
    }
    const CONTROLLER_ONLY: [&str; 6] = [
        "wasmtime",
        "cranelift-codegen",
        "sigstore",
        "nad-plugin-runtime",
        "nad-plugin-fetcher",
        "nad-service-controller",
    ];
    for name in CONTROLLER_ONLY {
        assert!(!listed.contains(&name), "the prober's SBOM lists {name}");
    }
    let bundle = dir.join("bundle");
    image::unpack(&pulled, &bundle);
    assert_eq!(
        image::rootfs_files(&bundle),
        [
            "etc",
            "etc/ssl",
            "etc/ssl/certs",
            "etc/ssl/certs/ca-certificates.crt",
            "nad-network-prober",
        ]
    );
    let binary = std::fs::read(bundle.join("rootfs/nad-network-prober")).unwrap();
    for name in ["wasmtime", "cranelift", "sigstore", "aws_lc", "aws-lc-rs-"] {
        let found = binary
            .windows(name.len())
            .filter(|w| w == &name.as_bytes())
            .count();
        assert_eq!(found, 0, "the prober's binary names {name} {found} times");
    }
    eprintln!("the prober image's binary: {} bytes", binary.len());
    let config = image::config(&pulled);
    assert_eq!(config["config"]["User"], "65532:65532");
    assert_eq!(
        config["config"]["Entrypoint"],
        json!(["/nad-network-prober"])
    );
    assert!(config["config"]["Cmd"].is_null(), "{config}");
    assert_eq!(
        config["config"]["Labels"]["org.opencontainers.image.title"],
        "nad-network-prober"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The image of `make image-oci` through a registry on loopback, unpacked into `dir/bundle`
/// with the runtime configuration of the Deployment's pod `identity`, its ServiceAccount files
/// holding `token`.
async fn image_bundle(admin: &Client, token: &str, dir: &Path, identity: &str) -> PathBuf {
    let (layout, tag) = image::layout(image::CONTROLLER);
    let registry = registry::Registry::start("image");
    let pulled = image::push_and_pull(&layout, &tag, "nad-service-controller", &registry, dir);
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
    let config = image::config(&pulled);
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

/// No verb of the shipped roles is there for nothing: with any one of them taken away (and the
/// rest as shipped), the controller is refused that very call (its log says `cannot <verb>
/// resource "<resource>"`) while it does its ordinary work: start (the plugin ConfigMaps and the
/// registry Secret read by name, its Lease), watch, publish a Service's pods (a new slice), follow
/// a pod's readiness (a changed one), warn about an invalid Service (an Event, and its repeat) and
/// delete the slice it had for it, and renew its Lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_verb_of_the_shipped_roles_is_one_the_controller_calls() {
    let _turn = TURN.lock().await;
    let admin = client().await;
    let docs = manifest(Roles::Release);
    let all = grants(&docs);
    assert!(all.len() > 10, "{all:?}");
    install_rbac(&admin, &docs).await;
    let dir = std::env::temp_dir().join(format!("nsc-rbac-{}-needed", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = service_account_kubeconfig(&service_account_token(&admin).await, &dir);
    let ns = namespace(&admin, "rbac-needed").await;
    let sim = std::sync::Arc::new(Simulator::new(admin.clone(), node_sim::Config::default()));
    sim.ensure_nodes().await.unwrap();
    let heartbeat = tokio::spawn({
        let sim = sim.clone();
        async move {
            let _ = sim.heartbeat().await;
        }
    });
    let services: Api<Service> = Api::namespaced(admin.clone(), &ns);
    let slices: Api<EndpointSlice> = Api::namespaced(admin.clone(), &ns);
    for (name, spec) in [
        (
            "web",
            json!({"clusterIP": "None", "ports": [{"name": "http", "port": 80}]}),
        ),
        ("clustered", json!({"ports": [{"port": 80}]})),
    ] {
        let service = json!({"metadata": {"name": name, "annotations": {"isim.dev/network": "macvlan"}},
                             "spec": spec});
        services
            .create(
                &PostParams::default(),
                &serde_json::from_value(service).unwrap(),
            )
            .await
            .unwrap();
    }
    let pod = json!({
        "metadata": {"name": "web-a", "labels": {"app": "web"},
                     "annotations": {"k8s.v1.cni.cncf.io/networks": "macvlan"}},
        "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
    });
    Api::<Pod>::namespaced(admin.clone(), &ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(pod).unwrap(),
        )
        .await
        .unwrap();
    sim.start_pod(&ns, "web-a", true).await.unwrap();

    for (i, grant) in all.iter().enumerate() {
        // Every watch's initial list arrives as a watch stream (WatchList, on by default since
        // Kubernetes 1.32); list is for an API server with it turned off, which the controller
        // lists page by page (host/src/watch/list.rs), and this one has it on. Services are
        // listed all the same (the quorum read before the controller is ready), and the
        // ConfigMaps and Secrets watched by name are listed.
        const STREAMED: [&str; 6] = [
            "pods",
            "nodes",
            "endpointslices",
            "network-attachment-definitions",
            "resourceclaims",
            "deviceclasses",
        ];
        if grant.verb == "list" && STREAMED.contains(&grant.resource.as_str()) {
            continue;
        }
        install_rbac(&admin, &roles_without(&docs, &all, grant)).await;
        // Its work to do again: no Lease, no slice of web, a slice of its own for the Service
        // it cannot serve (to delete).
        let _ = Api::<Lease>::namespaced(admin.clone(), CONTROLLER_NS)
            .delete(LEASE, &DeleteParams::default())
            .await;
        let _ = slices
            .delete_collection(
                &DeleteParams::default(),
                &ListParams::default().labels("kubernetes.io/service-name"),
            )
            .await;
        let orphan: EndpointSlice = serde_json::from_value(json!({
            "metadata": {"name": "orphan", "labels": {
                "kubernetes.io/service-name": "clustered",
                "endpointslice.kubernetes.io/managed-by": "nad-service-controller.isim.dev"}},
            "addressType": "IPv4", "endpoints": [],
        }))
        .unwrap();
        slices
            .create(&PostParams::default(), &orphan)
            .await
            .unwrap();
        let identity = format!("rbac-needed-{}-{i}", std::process::id());
        let controller = Controller::binary(&kubeconfig, &dir, &identity);
        let refused = format!("cannot {} resource \"{}\"", grant.verb, grant.resource);
        let deadline = tokio::time::Instant::now() + support::WAIT;
        let mut ready = true;
        while !controller.log().contains(&refused) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "without {} on {} (of {}), the controller was never refused it within {:?}: \
                 the role grants a verb it does not use. Its log:\n{}",
                grant.verb,
                grant.resource,
                docs[grant.role]["metadata"]["name"],
                support::WAIT,
                controller.log()
            );
            // Work that needs the verbs of a running controller: a readiness flip, a repeat.
            ready = !ready;
            sim.set_ready(&ns, "web-a", ready).await.unwrap();
            let touch = json!({"metadata": {"labels": {"touched": ready.to_string()}}});
            services
                .patch("clustered", &PatchParams::default(), &Patch::Merge(&touch))
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        drop(controller);
    }

    install_rbac(&admin, &docs).await;
    heartbeat.abort();
    let _ = Api::<Lease>::namespaced(admin.clone(), CONTROLLER_NS)
        .delete(LEASE, &DeleteParams::default())
        .await;
    node_sim::delete_test_namespace(&admin, &ns).await;
    let _ = std::fs::remove_dir_all(&dir);
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
    // Slices are created, updated at the version seen and deleted: never patched (no
    // server-side apply, no merge patch over another writer's fields), never read by name.
    assert_forbidden(
        "patching an EndpointSlice",
        Api::<EndpointSlice>::namespaced(account.clone(), "default")
            .patch(
                "any",
                &PatchParams::default().dry_run(),
                &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
            )
            .await,
    );
    assert_forbidden(
        "reading an EndpointSlice by name",
        Api::<EndpointSlice>::namespaced(account.clone(), "default")
            .get("any")
            .await,
    );
    // DRA: claims and classes are read, nothing of DRA is written, ResourceSlices never read.
    assert_forbidden(
        "listing ResourceSlices",
        Api::<ResourceSlice>::all(account.clone())
            .list(&ListParams::default())
            .await,
    );
    assert_forbidden(
        "reading a ResourceClaim by name",
        Api::<ResourceClaim>::namespaced(account.clone(), "default")
            .get("any")
            .await,
    );
    assert_forbidden(
        "writing a ResourceClaim's status",
        Api::<ResourceClaim>::namespaced(account.clone(), "default")
            .patch_status(
                "any",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"devices": []}})),
            )
            .await,
    );
    assert_forbidden(
        "creating a DeviceClass",
        Api::<DeviceClass>::all(account.clone())
            .create(
                &PostParams {
                    dry_run: true,
                    ..PostParams::default()
                },
                &serde_json::from_value(json!({"metadata": {"name": "x"}, "spec": {}})).unwrap(),
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
    for name in [PLUGIN_CONFIGMAP, REGISTRY_CAS] {
        let _ = plugin_configmaps
            .delete(name, &DeleteParams::default())
            .await;
    }
    // Of the Secrets, only the registry one, by name.
    assert_forbidden(
        "reading another Secret in its own namespace",
        Api::<Secret>::namespaced(account.clone(), CONTROLLER_NS)
            .get("someone-elses")
            .await,
    );
    assert_forbidden(
        "listing the Secrets of its own namespace",
        Api::<Secret>::namespaced(account.clone(), CONTROLLER_NS)
            .list(&ListParams::default())
            .await,
    );
    assert_forbidden(
        "changing the registry Secret",
        Api::<Secret>::namespaced(account.clone(), CONTROLLER_NS)
            .delete(REGISTRY_SECRET, &DeleteParams::default().dry_run())
            .await,
    );
    let registry_secrets: Api<Secret> = Api::namespaced(admin.clone(), CONTROLLER_NS);
    let _ = registry_secrets
        .delete(REGISTRY_SECRET, &DeleteParams::default())
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
    // Slices (update at the version seen).
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
    // The registry Secret (get, list and watch by name): its credentials read as it appears.
    let config = json!({"auths": {"registry.example": {"username": "ci", "password": "s3cret"}}});
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": REGISTRY_SECRET},
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": config.to_string()},
    }))
    .unwrap();
    registry_secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    eventually("the registry Secret's credentials read", || async {
        controller
            .log()
            .contains("registry credentials read from the Secret")
            .then_some(())
    })
    .await;
    registry_secrets
        .delete(REGISTRY_SECRET, &DeleteParams::default())
        .await
        .unwrap();
    // The registry CA ConfigMap (get, list and watch by name) alike.
    let cas: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": REGISTRY_CAS},
        "data": {"registry.example_5000": registry::TestCa::new("rbac test CA").pem},
    }))
    .unwrap();
    plugin_configmaps
        .create(&PostParams::default(), &cas)
        .await
        .unwrap();
    eventually("the registry CA ConfigMap's CAs read", || async {
        let log = controller.log();
        (log.contains("registry CAs read from the ConfigMap")
            && log.contains("registry.example:5000"))
        .then_some(())
    })
    .await;
    plugin_configmaps
        .delete(REGISTRY_CAS, &DeleteParams::default())
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

/// The objects of `deploy/prober` and the namespace of `deploy/deploy.yaml` they go to, its
/// grant naming `networks` (as an overlay sets them).
fn prober_manifest(networks: &str) -> Vec<Value> {
    let mut docs: Vec<Value> = manifest(Roles::Release)
        .into_iter()
        .filter(|d| d["kind"] == "Namespace")
        .collect();
    for text in PROBER_FILES {
        let more: Vec<Value> = serde_saphyr::from_str_multiple(text).unwrap();
        docs.extend(more.into_iter().filter(|d| !d.is_null()));
    }
    set_probe_networks(&mut docs, networks);
    docs
}

/// Names `networks` in the annotation of the prober's grant (its ClusterRoleBinding).
fn set_probe_networks(docs: &mut [Value], networks: &str) {
    let grant = docs
        .iter_mut()
        .find(|d| d["kind"] == "ClusterRoleBinding")
        .expect("deploy/prober has the ClusterRoleBinding");
    grant["metadata"]["annotations"][PROBE_NETWORKS] = json!(networks);
}

/// `deploy/prober` as an operator installs it under other names: a kustomization of its own
/// with `namespace: <namespace>` and `namePrefix: <prefix>`, rendered by kubectl's kustomize,
/// its grant naming `networks`.
fn renamed_prober_manifest(
    dir: &Path,
    namespace: &str,
    prefix: &str,
    networks: &str,
) -> Vec<Value> {
    let base = dir.join("base");
    std::fs::create_dir_all(&base).unwrap();
    let prober = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/prober");
    for entry in std::fs::read_dir(&prober).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), base.join(entry.file_name())).unwrap();
    }
    std::fs::write(
        dir.join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
             namespace: {namespace}\nnamePrefix: {prefix}\nresources:\n  - base\n"
        ),
    )
    .unwrap();
    let local = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.local/bin/kubectl");
    let kubectl = if local.exists() {
        local
    } else {
        "kubectl".into()
    };
    let out = Command::new(kubectl)
        .arg("kustomize")
        .arg(dir)
        .stderr(Stdio::inherit())
        .output()
        .expect("running kubectl kustomize");
    assert!(out.status.success(), "kubectl kustomize {}", dir.display());
    let mut docs: Vec<Value> =
        serde_saphyr::from_str_multiple(std::str::from_utf8(&out.stdout).unwrap()).unwrap();
    docs.retain(|d| !d.is_null());
    set_probe_networks(&mut docs, networks);
    docs
}

/// A pod standing for the prober's on `node`: the DaemonSet's pod template as it is (so the
/// namespace's restricted Pod Security profile admits it), bound to `node`. No kubelet runs it;
/// it is what its token is bound to.
async fn prober_pod(admin: &Client, docs: &[Value], node: &str, name: &str) -> Pod {
    let daemonset = docs
        .iter()
        .find(|d| d["kind"] == "DaemonSet")
        .expect("deploy/prober has the DaemonSet");
    let namespace = daemonset["metadata"]["namespace"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": daemonset["spec"]["template"]["metadata"].clone(),
        "spec": daemonset["spec"]["template"]["spec"].clone(),
    });
    pod["metadata"]["name"] = json!(name);
    pod["spec"]["nodeName"] = json!(node);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &namespace);
    let _ = pods
        .delete(name, &DeleteParams::default().grace_period(0))
        .await;
    eventually("an earlier stand-in prober pod gone", || async {
        pods.get_opt(name).await.unwrap().is_none().then_some(())
    })
    .await;
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(pod).unwrap(),
    )
    .await
    .unwrap_or_else(|e| panic!("creating the stand-in prober pod {name} on {node}: {e}"))
}

/// The strategic merge patch the prober writes (`probe::run::write_condition`): one condition.
fn condition_patch(condition_type: &str, status: &str) -> Value {
    json!({"status": {"conditions": [{
        "type": condition_type,
        "status": status,
        "reason": if status == "True" { "ProbeSucceeded" } else { "ProbeFailed" },
        "message": "written by host/tests/rbac.rs",
        "lastProbeTime": null,
        "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string(),
    }]}})
}

/// The API server's refusal: its message, when `result` is a 403.
fn forbidden_message<T: std::fmt::Debug>(what: &str, result: Result<T, kube::Error>) -> String {
    match result {
        Err(kube::Error::Api(status)) if status.code == 403 => status.message,
        other => panic!("{what}: expected 403 Forbidden, got {other:?}"),
    }
}

/// The status of condition `condition_type` of `pod`, if it has one.
fn condition_status(pod: &Pod, condition_type: &str) -> Option<String> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == condition_type)
        .map(|c| c.status.clone())
}

/// A pod of the simulator's in `ns`, on `node`, attached to macvlan, running and Ready.
async fn pod_on(sim: &Simulator, ns: &str, name: &str, node: &str, app: &str) -> Pod {
    sim.create_and_start(
        ns,
        json!({
            "metadata": {"name": name, "labels": {"app": app},
                         "annotations": {"k8s.v1.cni.cncf.io/networks": "macvlan"}},
            "spec": {"nodeName": node,
                     "containers": [{"name": "web", "image": "nginx:1.27"}]},
        }),
        true,
    )
    .await
    .unwrap()
}

/// The nodes of the simulator: the prober's, and another.
fn sim_nodes() -> (String, String) {
    let nodes = node_sim::Config::default().nodes;
    (nodes[0].name.clone(), nodes[1].name.clone())
}

/// RBAC lets the prober patch the status of any pod; the admission policy of `deploy/prober`
/// narrows that to the pods of its own node (the node its token is bound to through its pod),
/// and there to the conditions network-ready.isim.dev/<namespace>.<name> of the networks its
/// grant names, and nothing else of the pod. (A refusal is matched by the policy's name's end:
/// a renamed install's policy, deleted by the test before, may still answer for a few seconds,
/// with the same rules.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_prober_writes_only_the_status_of_pods_on_its_own_node() {
    let _turn = TURN.lock().await;
    let admin = client().await;
    let docs = prober_manifest("x/y");
    install(&admin, &docs, &PROBER_KINDS).await;
    let (sim, heartbeat) = Simulator::for_tests(admin.clone()).await.unwrap();
    let (node_a, node_b) = sim_nodes();
    let ns = namespace(&admin, "prober-own-node").await;
    let on_a = pod_on(&sim, &ns, "on-a", &node_a, "web").await;
    pod_on(&sim, &ns, "on-b", &node_b, "web").await;
    let stand_in = format!("nad-network-prober-test-{}-own-node", std::process::id());
    let prober_pod = prober_pod(&admin, &docs, &node_a, &stand_in).await;

    let dir = std::env::temp_dir().join(format!("nsc-rbac-{}-prober", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bound = token(&admin, PROBER_ACCOUNT, Some(&prober_pod)).await;
    let prober = client_for(&service_account_kubeconfig(&bound, &dir)).await;
    let pods: Api<Pod> = Api::namespaced(prober.clone(), &ns);
    let ours = "network-ready.isim.dev/x.y";

    // Policies take effect some time after they are applied: until then, this write passes.
    let deadline = tokio::time::Instant::now() + support::WAIT;
    let refused = loop {
        match pods
            .patch_status(
                "on-b",
                &PatchParams::default(),
                &Patch::Strategic(&condition_patch(ours, "True")),
            )
            .await
        {
            Err(kube::Error::Api(status)) if status.code == 403 => break status.message,
            Err(e) => panic!("patching the status of a pod on another node: {e}"),
            Ok(_) => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "the admission policy {PROBER_POLICY} did not refuse the prober of {node_a} \
                     writing the status of a pod on {node_b} within {:?}",
                    support::WAIT
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    assert!(
        refused.contains(&format!("{PROBER_POLICY}' denied request"))
            && refused.contains(&format!(
                "the network prober of node {node_a} may only write the status of pods on its own \
             node; pod {ns}/on-b is on node {node_b}"
            )),
        "{refused}"
    );

    // On its own node: its condition, written and flipped; the pod's others stay as they were.
    let written = pods
        .patch_status(
            "on-a",
            &PatchParams::default(),
            &Patch::Strategic(&condition_patch(ours, "True")),
        )
        .await
        .unwrap();
    assert_eq!(condition_status(&written, ours).as_deref(), Some("True"));
    let flipped = pods
        .patch_status(
            "on-a",
            &PatchParams::default(),
            &Patch::Strategic(&condition_patch(ours, "False")),
        )
        .await
        .unwrap();
    assert_eq!(condition_status(&flipped, ours).as_deref(), Some("False"));
    let others = |pod: &Pod| -> Vec<_> {
        pod.status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|c| !c.type_.starts_with("network-ready.isim.dev/"))
            .collect()
    };
    assert_eq!(others(&flipped), others(&on_a));
    assert_eq!(condition_status(&flipped, "Ready").as_deref(), Some("True"));

    // On its own node, no other condition: not kubelet's Ready, nor one of another type, nor
    // the network readiness of a network it does not probe.
    let other_network = format!("network-ready.isim.dev/{ns}.other");
    for (what, condition_type) in [
        ("Ready", "Ready"),
        ("another type", "example.com/other"),
        ("of a network it does not probe", other_network.as_str()),
    ] {
        let message = forbidden_message(
            &format!("writing condition {what} of a pod on its node"),
            pods.patch_status(
                "on-a",
                &PatchParams::default(),
                &Patch::Strategic(&condition_patch(condition_type, "False")),
            )
            .await,
        );
        assert!(
            message.contains(&format!(
                "the network prober may only write the conditions of the networks it probes \
                 (network-ready.isim.dev/x.y); this request changes condition {condition_type} of \
                 pod {ns}/on-a"
            )),
            "{message}"
        );
    }
    let read_back = Api::<Pod>::namespaced(admin.clone(), &ns)
        .get("on-a")
        .await
        .unwrap();
    assert_eq!(condition_status(&read_back, &other_network), None);

    // Nothing else of the pod: one refusal per kind of field, each read back unchanged.
    refuses_every_change_but_its_condition(&pods, &admin, &ns, "on-a").await;

    // RBAC: the status only; not the pod itself, nor reading it one by one.
    let message = forbidden_message(
        "patching the spec of a pod on its node",
        pods.patch(
            "on-a",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"activeDeadlineSeconds": 10}})),
        )
        .await,
    );
    assert!(
        message.contains(&format!(
            "User \"system:serviceaccount:{CONTROLLER_NS}:{PROBER_ACCOUNT}\" cannot patch resource \"pods\""
        )),
        "{message}"
    );
    assert_forbidden(
        "deleting a pod on its node",
        pods.delete("on-a", &DeleteParams::default().dry_run())
            .await,
    );
    assert_forbidden("reading a pod", pods.get("on-a").await);
    assert_forbidden(
        "listing Secrets",
        Api::<Secret>::all(prober.clone())
            .list(&ListParams::default())
            .await,
    );

    // A token of the same account bound to no pod names no node: it writes no status at all.
    let unbound = token(&admin, PROBER_ACCOUNT, None).await;
    let unbound_dir = dir.join("unbound");
    std::fs::create_dir_all(&unbound_dir).unwrap();
    let unbound = client_for(&service_account_kubeconfig(&unbound, &unbound_dir)).await;
    let message = forbidden_message(
        "writing with a token bound to no pod",
        Api::<Pod>::namespaced(unbound, &ns)
            .patch_status(
                "on-a",
                &PatchParams::default(),
                &Patch::Strategic(&condition_patch(ours, "True")),
            )
            .await,
    );
    assert!(
        message.contains(&format!(
            "the network prober's token is bound to no pod on a node, so it may write the status \
             of no pod; pod {ns}/on-a is on node {node_a}"
        )),
        "{message}"
    );

    heartbeat.abort();
    let _ = Api::<Pod>::namespaced(admin.clone(), CONTROLLER_NS)
        .delete(&stand_in, &DeleteParams::default().grace_period(0))
        .await;
    node_sim::delete_test_namespace(&admin, &ns).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// The prober (`pods`: its client) may change nothing of pod `name` in `ns` but its own
/// conditions: each change below, a strategic merge of its status as the prober writes, is
/// refused naming the field, and the pod reads back (by `admin`) as it was. The field the
/// policy names nowhere (`status.message`) stands for one a later Kubernetes adds.
async fn refuses_every_change_but_its_condition(
    pods: &Api<Pod>,
    admin: &Client,
    ns: &str,
    name: &str,
) {
    let before = Api::<Pod>::namespaced(admin.clone(), ns)
        .get(name)
        .await
        .unwrap();
    for (what, patch, field) in [
        (
            "a label (joining another Service's selector)",
            json!({"metadata": {"labels": {"app": "hijacked"}}}),
            "metadata.labels",
        ),
        (
            "the Multus network-status annotation (publishing an address of its choice)",
            json!({"metadata": {"annotations": {"k8s.v1.cni.cncf.io/network-status":
                r#"[{"name": "x/y", "interface": "net1", "ips": ["192.0.2.66"]}]"#}}}),
            "metadata.annotations",
        ),
        (
            "a finalizer (the pod can no longer be deleted)",
            json!({"metadata": {"finalizers": ["example.com/stuck"]}}),
            "metadata.finalizers",
        ),
        (
            "the pod's addresses",
            json!({"status": {"podIP": "10.244.0.66",
                "podIPs": [{"ip": "10.244.0.66"}, {"$patch": "replace"}]}}),
            "status.podIP",
        ),
        (
            "the phase",
            json!({"status": {"phase": "Failed"}}),
            "status.phase",
        ),
        (
            "a status field no rule names",
            json!({"status": {"message": "written by the prober"}}),
            "status.message",
        ),
    ] {
        let message = forbidden_message(
            &format!("writing {what} of pod {ns}/{name}"),
            pods.patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch))
                .await,
        );
        assert!(
            message.contains(&format!(
                "{PROBER_POLICY}' denied request"
            )) && message.contains("the network prober may change nothing of a pod but its network readiness conditions")
                && message.contains(field)
                && message.contains(&format!("of pod {ns}/{name}")),
            "writing {what}: {message}"
        );
    }
    // Owner references: the status subresource drops them itself (whatever the writer).
    let _ = pods
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Strategic(&json!({"metadata": {"ownerReferences": [{"apiVersion": "v1",
                "kind": "ConfigMap", "name": "owner", "uid": "1b4e28ba-2fa1-11d2-883f-0016d3cca427"}]}})),
        )
        .await;
    let after = Api::<Pod>::namespaced(admin.clone(), ns)
        .get(name)
        .await
        .unwrap();
    assert_eq!(after.metadata.labels, before.metadata.labels);
    assert_eq!(after.metadata.annotations, before.metadata.annotations);
    assert_eq!(after.metadata.finalizers, before.metadata.finalizers);
    assert_eq!(
        after.metadata.owner_references,
        before.metadata.owner_references
    );
    let (status, was) = (after.status.unwrap(), before.status.unwrap());
    assert_eq!(
        (status.pod_ip, status.phase, status.message),
        (was.pod_ip, was.phase, was.message)
    );
}

/// The prober installed under other names, as an operator might (kustomize `namespace:` and
/// `namePrefix:`), is confined all the same: the policy finds the prober through its grant,
/// whose subject kustomize renames with it, not through a user name written in the policy.
/// (The shipped binding is taken away first, so the renamed install's own policy is the one
/// that refuses.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prober_installed_under_other_names_is_confined_all_the_same() {
    let _turn = TURN.lock().await;
    let admin = client().await;
    let dir = std::env::temp_dir().join(format!("nsc-rbac-{}-renamed", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let renamed_ns = &format!("nsc-prober-renamed-{}", std::process::id());
    let docs = renamed_prober_manifest(&dir, renamed_ns, "renamed-", "x/y");
    let names: Vec<String> = docs
        .iter()
        .map(|d| {
            format!(
                "{} {}",
                d["kind"].as_str().unwrap(),
                d["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    assert!(
        names.contains(
            &"ValidatingAdmissionPolicyBinding renamed-nad-network-prober-own-node".to_owned()
        ),
        "{names:?}"
    );
    let bindings = api_of(
        &admin,
        &json!({"apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding", "metadata": {}}),
    )
    .await;
    let _ = bindings
        .delete(PROBER_POLICY, &DeleteParams::default())
        .await;
    let namespace_doc = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": renamed_ns,
        "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}});
    let mut all = vec![namespace_doc];
    all.extend(docs.iter().cloned());
    install(&admin, &all, &PROBER_KINDS).await;

    let (sim, heartbeat) = Simulator::for_tests(admin.clone()).await.unwrap();
    let (node_a, _) = sim_nodes();
    let ns = namespace(&admin, "prober-renamed").await;
    pod_on(&sim, &ns, "on-a", &node_a, "web").await;
    let stand_in = format!("renamed-prober-{}", std::process::id());
    let prober_pod = prober_pod(&admin, &docs, &node_a, &stand_in).await;
    let bound = token_in(
        &admin,
        renamed_ns,
        "renamed-nad-network-prober",
        Some(&prober_pod),
    )
    .await;
    let prober = client_for(&service_account_kubeconfig(&bound, &dir)).await;
    let pods: Api<Pod> = Api::namespaced(prober.clone(), &ns);

    // Until the renamed policy takes effect (and the shipped one's binding, deleted, stops
    // answering), wait for the renamed policy's refusal; a label written meanwhile is undone.
    let deadline = tokio::time::Instant::now() + support::WAIT;
    let message = loop {
        let result = pods
            .patch_status(
                "on-a",
                &PatchParams::default(),
                &Patch::Strategic(&json!({"metadata": {"labels": {"app": "hijacked"}}})),
            )
            .await;
        match result {
            Err(kube::Error::Api(status))
                if status.code == 403 && status.message.contains("'renamed-") =>
            {
                break status.message;
            }
            Err(kube::Error::Api(status)) if status.code == 403 => {}
            Err(e) => panic!("patching a label as the renamed prober: {e}"),
            Ok(_) => {
                Api::<Pod>::namespaced(admin.clone(), &ns)
                    .patch(
                        "on-a",
                        &PatchParams::default(),
                        &Patch::Merge(&json!({"metadata": {"labels": {"app": "web"}}})),
                    )
                    .await
                    .unwrap();
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the renamed install's policy did not refuse its prober a label within {:?}",
            support::WAIT
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        message.contains("ValidatingAdmissionPolicy 'renamed-nad-network-prober-own-node' with binding 'renamed-nad-network-prober-own-node' denied request")
            && message.contains("this request changes metadata.labels"),
        "{message}"
    );
    // Its own condition it writes.
    let written = pods
        .patch_status(
            "on-a",
            &PatchParams::default(),
            &Patch::Strategic(&condition_patch("network-ready.isim.dev/x.y", "True")),
        )
        .await
        .unwrap();
    assert_eq!(
        condition_status(&written, "network-ready.isim.dev/x.y").as_deref(),
        Some("True")
    );

    heartbeat.abort();
    for doc in docs.iter().filter(|d| d["kind"] != "DaemonSet") {
        delete_doc(&admin, doc).await;
    }
    let _ = Api::<Namespace>::all(admin.clone())
        .delete(renamed_ns, &DeleteParams::default())
        .await;
    // The shipped policy bound, and no grant at all: nobody is refused a pod status write for
    // it (a binding that refused when it finds no grant would stop every kubelet's).
    install(&admin, &prober_manifest(""), &PROBER_KINDS).await;
    let grants: Api<k8s_openapi::api::rbac::v1::ClusterRoleBinding> = Api::all(admin.clone());
    grants
        .delete(PROBER_ACCOUNT, &DeleteParams::default())
        .await
        .unwrap();
    let message = json!({"status": {"message": "written without any prober grant"}});
    eventually(
        "a status write with the policy bound and no grant",
        || async {
            Api::<Pod>::namespaced(admin.clone(), &ns)
                .patch_status("on-a", &PatchParams::default(), &Patch::Merge(&message))
                .await
                .ok()
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    Api::<Pod>::namespaced(admin.clone(), &ns)
        .patch_status("on-a", &PatchParams::default(), &Patch::Merge(&message))
        .await
        .expect("a status write by someone who is no prober, with no prober grant anywhere");
    // The shipped prober back, as the other tests expect it.
    install(&admin, &prober_manifest(""), &PROBER_KINDS).await;
    node_sim::delete_test_namespace(&admin, &ns).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Deletes the object `doc` describes, if it is there.
async fn delete_doc(admin: &Client, doc: &Value) {
    let name = doc["metadata"]["name"].as_str().unwrap();
    let _ = api_of(admin, doc)
        .await
        .delete(name, &DeleteParams::default())
        .await;
}

/// The API of the kind `doc` is, in its namespace when the kind is namespaced. (kustomize gives
/// cluster-scoped policies a namespace too, kubernetes-sigs/kustomize#6051: the scope decides.)
async fn api_of(admin: &Client, doc: &Value) -> Api<DynamicObject> {
    let kind = doc["kind"].as_str().unwrap();
    let (group, version) = match doc["apiVersion"].as_str().unwrap().split_once('/') {
        Some((g, v)) => (g.to_owned(), v.to_owned()),
        None => (
            String::new(),
            doc["apiVersion"].as_str().unwrap().to_owned(),
        ),
    };
    let (resource, caps) = pinned_kind(admin, &GroupVersionKind::gvk(&group, &version, kind))
        .await
        .unwrap();
    match (caps.scope, doc["metadata"]["namespace"].as_str()) {
        (Scope::Namespaced, Some(ns)) => Api::namespaced_with(admin.clone(), ns, &resource),
        (Scope::Namespaced, None) => panic!("{kind} {} has no namespace", doc["metadata"]["name"]),
        (Scope::Cluster, _) => Api::all_with(admin.clone(), &resource),
    }
}

/// GET `path` from 127.0.0.1:`port`: the status code and body, `None` while nothing answers.
async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    let code = head.split(' ').nth(1)?.parse().ok()?;
    Some((code, body.to_owned()))
}

/// The prober's ClusterRole is enough to run it: its binary, as the prober's ServiceAccount by a
/// token bound to its pod on a node (as kubelet mounts it), lists and watches Services, this
/// controller's EndpointSlices and the pods of its node (/readyz turns 200), with no request
/// refused; the same token may publish an Event on a pod. (Nothing here is published, so it
/// probes nothing: its writes and Events, through the shipped RBAC and admission policy, are
/// the data-plane tests', where the pods' addresses are on networks of the project's own.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probers_cluster_role_is_enough_to_run_the_prober() {
    let _turn = TURN.lock().await;
    let admin = client().await;
    let docs = prober_manifest("");
    install(&admin, &docs, &PROBER_KINDS).await;
    let (sim, heartbeat) = Simulator::for_tests(admin.clone()).await.unwrap();
    let (node_a, _) = sim_nodes();
    let ns = namespace(&admin, "prober-run").await;
    let network = format!("{ns}/macvlan");
    pod_on(&sim, &ns, "probed-a", &node_a, "probed").await;

    let stand_in = format!("nad-network-prober-test-{}-run", std::process::id());
    let prober_pod = prober_pod(&admin, &docs, &node_a, &stand_in).await;
    let dir = std::env::temp_dir().join(format!("nsc-rbac-{}-prober-run", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bound = token(&admin, PROBER_ACCOUNT, Some(&prober_pod)).await;
    let kubeconfig = service_account_kubeconfig(&bound, &dir);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let prober = Controller::prober(&kubeconfig, &dir, &node_a, &network, port, &stand_in);

    // Services and the node's pods (list, watch).
    let deadline = tokio::time::Instant::now() + support::WAIT;
    loop {
        if let Some((200, _)) = http_get(port, "/readyz").await {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the prober's /readyz did not turn 200 within {:?} (its watches did not list):\n{}",
            support::WAIT,
            prober.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (code, metrics) = http_get(port, "/metrics").await.unwrap();
    assert_eq!(code, 200);
    assert!(
        metrics.contains(&format!("nad_prober_targets{{network=\"{network}\"}} 0")),
        "nothing published, nothing probed:\n{metrics}"
    );
    // Its admission policy and binding, read by name: in force.
    let in_force = |value: u8| {
        let line = format!("nad_prober_admission_policy_in_force {value}");
        async move {
            let (_, metrics) = http_get(port, "/metrics").await?;
            metrics.lines().any(|l| l == line).then_some(())
        }
    };
    eventually("the prober's admission policy in force", || in_force(1)).await;
    let events = |reason: &'static str| {
        let admin = admin.clone();
        let stand_in = stand_in.clone();
        async move {
            Api::<Event>::namespaced(admin, CONTROLLER_NS)
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .find(|e| {
                    e.reason.as_deref() == Some(reason)
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(&stand_in)
                })
        }
    };
    eventually(
        "an AdmissionPolicyInForce Event on the prober's pod",
        || events("AdmissionPolicyInForce"),
    )
    .await;
    // Without its binding, the policy enforces nothing: the prober fails closed (it writes no
    // condition), and says so in its log, on its pod and in its metrics.
    let bindings = api_of(
        &admin,
        &json!({"apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding", "metadata": {}}),
    )
    .await;
    bindings
        .delete(PROBER_POLICY, &DeleteParams::default())
        .await
        .unwrap();
    eventually("the prober's admission policy not in force", || in_force(0)).await;
    let missing = eventually(
        "an AdmissionPolicyMissing Event on the prober's pod",
        || events("AdmissionPolicyMissing"),
    )
    .await;
    assert_eq!(missing.type_.as_deref(), Some("Warning"));
    assert_eq!(
        missing.note.as_deref(),
        Some(
            format!(
                "Writing no network readiness condition: the ValidatingAdmissionPolicyBinding \
             {PROBER_POLICY} does not exist, so the policy {PROBER_POLICY} is not enforced: apply \
             deploy/prober/admission-policy.yaml (or the Helm chart's prober), or give \
             --admission-policy and --admission-policy-binding the names it was applied with"
            )
            .as_str()
        )
    );
    assert!(
        prober.log().contains("the admission policy that confines this prober's writes is not in force: writing no condition until it is"),
        "{}",
        prober.log()
    );
    install(&admin, &docs, &["ValidatingAdmissionPolicyBinding"]).await;
    eventually("the prober's admission policy in force again", || {
        in_force(1)
    })
    .await;
    // Events (create), as the prober publishes one on a pod whose readiness flips.
    let as_prober = client_for(&kubeconfig).await;
    let event: Event = serde_json::from_value(json!({
        "metadata": {"generateName": "probed-a-"},
        "eventTime": k8s_openapi::jiff::Timestamp::now().to_string(),
        "reportingController": "nad-network-prober", "reportingInstance": node_a,
        "action": "Probe", "reason": "NetworkUnready", "type": "Warning", "note": "rbac test",
        "regarding": {"apiVersion": "v1", "kind": "Pod", "namespace": ns, "name": "probed-a"},
    }))
    .unwrap();
    Api::<Event>::namespaced(as_prober, &ns)
        .create(&PostParams::default(), &event)
        .await
        .expect("the prober may publish an Event");

    let log = prober.stop();
    heartbeat.abort();
    let refused: Vec<&str> = log
        .lines()
        .filter(|l| l.to_lowercase().contains("forbidden") || l.contains("code: 403"))
        .collect();
    assert!(
        refused.is_empty(),
        "the prober was refused by the API server:\n{}",
        refused.join("\n")
    );
    let _ = Api::<Pod>::namespaced(admin.clone(), CONTROLLER_NS)
        .delete(&stand_in, &DeleteParams::default().grace_period(0))
        .await;
    node_sim::delete_test_namespace(&admin, &ns).await;
    let _ = std::fs::remove_dir_all(&dir);
}
