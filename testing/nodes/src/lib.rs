//! What the tests of the real nodes share: the client, `kubectl`, a namespace of a test's own,
//! the images the nodes hold, and the pods' views of themselves. The nodes are those of
//! `hack/nodes.sh up` on the control plane of `hack/local-up.sh` (`make test` starts both).

// A test kit: a broken expectation is a failed test, told with what was expected.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Pod, PodCondition, ServiceAccount};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

/// The label every node of `hack/nodes.sh` has.
pub const NODE_LABEL: &str = "nodes.isim.dev/local";
/// How long a wait of these tests may take: a container's start on a loaded 2-core machine.
pub const WAIT: Duration = Duration::from_secs(90);

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn state() -> PathBuf {
    std::env::var_os("NAD_LOCAL_DIR").map_or_else(|| repo().join(".local"), PathBuf::from)
}

/// The control plane's kubeconfig: `KUBECONFIG`, else `.local/kubeconfig`.
pub fn kubeconfig() -> PathBuf {
    std::env::var_os("KUBECONFIG").map_or_else(|| state().join("kubeconfig"), PathBuf::from)
}

/// The control plane's client (of [`kubeconfig`]).
pub async fn client() -> Client {
    nad_test_kit::install_crypto_provider();
    let path = kubeconfig();
    let kubeconfig = kube::config::Kubeconfig::read_from(&path).unwrap_or_else(|e| {
        panic!(
            "no control plane ({}: {e}): run hack/local-up.sh",
            path.display()
        )
    });
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

/// Polls `check` until it returns `Some`, for at most [`WAIT`].
pub async fn eventually<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    nad_test_kit::wait::eventually(what, WAIT, check).await
}

/// `kubectl <args>`: its exit code and its output (stdout, then stderr).
pub async fn kubectl(args: &[&str]) -> (i32, String) {
    let (code, mut out, err) = kubectl_apart(args).await;
    out.push_str(&err);
    (code, out)
}

/// `kubectl <args>`: its exit code, its standard output and its standard error.
pub async fn kubectl_apart(args: &[&str]) -> (i32, String, String) {
    let local = state().join("bin/kubectl");
    let program = if local.exists() {
        local
    } else {
        "kubectl".into()
    };
    let out = tokio::process::Command::new(&program)
        .args(args)
        .env("KUBECONFIG", state().join("kubeconfig"))
        .output()
        .await
        .unwrap_or_else(|e| panic!("running {}: {e}", program.display()));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `kubectl <args>` with `input` on its standard input, which must succeed; returns its output.
pub async fn kubectl_with(args: &[&str], input: &str) -> String {
    use tokio::io::AsyncWriteExt as _;
    let local = state().join("bin/kubectl");
    let program = if local.exists() {
        local
    } else {
        "kubectl".into()
    };
    let mut child = tokio::process::Command::new(&program)
        .args(args)
        .env("KUBECONFIG", state().join("kubeconfig"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("running {}: {e}", program.display()));
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.as_bytes()).await.unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "kubectl {}: {text}", args.join(" "));
    text
}

/// `text` (manifests) with each image the nodes cannot pull replaced by the nodes' own:
/// the seed's nginx and netshoot by nsc/nginx and nsc/netutils, the project's images (of any
/// registry and tag: `deploy/` names ghcr.io's) by those `hack/nodes.sh load` loaded.
pub fn local_images(text: &str) -> String {
    let replacements = [
        ("nginx:1.27", image("nginx")),
        ("nicolaka/netshoot:v0.13", image("netutils")),
    ];
    let project = ["nad-service-controller", "nad-network-prober"];
    text.lines()
        .map(|line| {
            let Some((indent, reference)) = line.split_once("image: ") else {
                return line.to_owned();
            };
            let reference = reference.trim();
            let repository = reference.split([':', '@']).next().unwrap_or(reference);
            let name = repository.rsplit('/').next().unwrap_or(repository);
            replacements
                .iter()
                .find(|(from, _)| *from == reference)
                .map(|(_, to)| to.clone())
                .or_else(|| project.contains(&name).then(|| image(name)))
                .map_or_else(|| line.to_owned(), |to| format!("{indent}image: {to}"))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `testdata/` as a user applies it, with the images the nodes hold ([`local_images`]): its files
/// in their order, as one stream of documents.
pub fn testdata() -> String {
    manifests("testdata")
}

/// The manifests of the repository's directory `dir` (its `*.yaml`, not its subdirectories') as
/// [`testdata`] gives `testdata/`'s.
pub fn manifests(dir: &str) -> String {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let manifests: Vec<String> = files
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect();
    local_images(&manifests.join("\n---\n"))
}

/// The pods of `api` that `selector` (a label selector) selects, those not being deleted.
pub async fn pods_of(api: &Api<Pod>, selector: &str) -> Vec<Pod> {
    api.list(&ListParams::default().labels(selector))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

/// `curl <flags> -s -o /dev/null -w %{http_code} --connect-timeout 3 <url>` from `pod` in
/// `namespace` (`kubectl exec`): the HTTP code and curl's exit code.
pub async fn curl(namespace: &str, pod: &str, flags: &[&str], url: &str) -> (String, i32) {
    let mut args = vec!["exec", "-n", namespace, pod, "--", "curl"];
    args.extend_from_slice(flags);
    args.extend([
        "-s",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "--connect-timeout",
        "3",
        url,
    ]);
    let (code, out, _) = kubectl_apart(&args).await;
    (out, code)
}

/// The addresses `name` resolves to from `pod` in `namespace` through CoreDNS (`getent
/// <database> <name>`: `ahostsv4` for A records, `ahostsv6` for AAAA), without the IPv4-mapped
/// answers `ahostsv6` gives for A records.
pub async fn resolve(
    namespace: &str,
    pod: &str,
    database: &str,
    name: &str,
) -> std::collections::BTreeSet<String> {
    let (_, out, _) =
        kubectl_apart(&["exec", "-n", namespace, pod, "--", "getent", database, name]).await;
    out.lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|a| !a.starts_with("::ffff:"))
        .map(str::to_owned)
        .collect()
}

/// The reference of the nodes' image whose repository ends in `/<name>` (nginx, netutils,
/// pause), from the list `hack/nodes.sh up` writes.
pub fn image(name: &str) -> String {
    let list = state().join("nodes/images");
    let text = std::fs::read_to_string(&list)
        .unwrap_or_else(|e| panic!("{}: {e}: run hack/nodes.sh up", list.display()));
    text.lines()
        .filter_map(|l| l.strip_prefix("image "))
        .find(|r| {
            r.rsplit_once(':')
                .is_some_and(|(repo, _)| repo.ends_with(&format!("/{name}")))
        })
        .unwrap_or_else(|| panic!("no image …/{name} in {}", list.display()))
        .to_owned()
}

/// The nodes of `hack/nodes.sh`, which must be there.
pub async fn nodes(client: &Client) -> Vec<k8s_openapi::api::core::v1::Node> {
    let nodes = Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .list(&kube::api::ListParams::default().labels(&format!("{NODE_LABEL}=true")))
        .await
        .unwrap()
        .items;
    assert!(
        !nodes.is_empty(),
        "no nodes: run hack/nodes.sh up (as root; make test does)"
    );
    nodes
}

/// A fresh namespace named after `test`, once its default ServiceAccount exists.
pub async fn namespace(client: &Client, test: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let ns = format!("nsc-{test}-{:05x}", nanos & 0xfffff);
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
        )
        .await
        .unwrap();
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    eventually("the namespace's default ServiceAccount", || async {
        accounts.get_opt("default").await.unwrap().map(|_| ())
    })
    .await;
    ns
}

/// The binary `name` of this build (beside the test binaries' `deps/`), which must be newer
/// than every source it was built from, as its dep-info file (`<name>.d`) lists them:
/// `make test` builds it first (`hack/static-cargo.sh build --release`).
pub fn built(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(Path::parent).unwrap();
    let binary = dir.join(name);
    let rebuild =
        format!("hack/static-cargo.sh build --release --locked of {name} (make test does)");
    let built = std::fs::metadata(&binary)
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| panic!("{}: {e}; build it: {rebuild}", binary.display()));
    let info = std::fs::read_to_string(binary.with_extension("d"))
        .unwrap_or_else(|e| panic!("{}.d: {e}; build it: {rebuild}", binary.display()));
    let sources = info.split_once(": ").map_or("", |(_, s)| s);
    for source in sources.split_whitespace().filter(|s| !s.ends_with('\\')) {
        let Ok(changed) = std::fs::metadata(source).and_then(|m| m.modified()) else {
            continue; // a generated file of a build script, gone since
        };
        assert!(
            changed <= built,
            "{} is older than {source}: rebuild it: {rebuild}",
            binary.display()
        );
    }
    binary
}

/// The controller binary of this build, run on the host for one namespace, its log in a file.
/// Stopped when dropped, however the test ends.
pub struct HostController {
    child: tokio::process::Child,
    log: PathBuf,
}

impl HostController {
    pub fn start(ns: &str) -> Self {
        let binary = built("nad-service-controller");
        let log = std::env::temp_dir().join(format!("{ns}-controller.log"));
        let file = std::fs::File::create(&log).unwrap();
        let child = tokio::process::Command::new(binary)
            .args([
                "run",
                &format!("--watch-namespace={ns}"),
                "--leader-election=false",
                "--metrics-address=127.0.0.1:0",
                "--health-address=127.0.0.1:0",
                "--log-filter=info,nad_service_controller=debug",
            ])
            .env("KUBECONFIG", kubeconfig())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        Self { child, log }
    }

    /// What it has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
        let _ = std::fs::remove_file(&self.log);
    }
}

/// A test's namespace, removed when it is dropped.
pub struct Scene {
    pub client: Client,
    pub ns: String,
    pub pods: Api<Pod>,
}

impl Scene {
    /// A fresh namespace named after `test` (see [`namespace`]).
    pub async fn new(test: &str) -> Self {
        let client = client().await;
        nodes(&client).await;
        let ns = namespace(&client, test).await;
        let pods = Api::namespaced(client.clone(), &ns);
        Self { client, ns, pods }
    }

    pub async fn create(&self, pod: Value) -> Pod {
        self.pods
            .create(
                &PostParams::default(),
                &serde_json::from_value(pod).unwrap(),
            )
            .await
            .unwrap()
    }

    pub async fn pod(&self, name: &str) -> Pod {
        self.pods.get(name).await.unwrap()
    }

    /// Waits until `name`'s condition `kind` has `status`; returns the pod then.
    pub async fn condition_is(&self, name: &str, kind: &str, status: &str) -> Pod {
        eventually(&format!("{name}: {kind}={status}"), || async {
            let pod = self.pod(name).await;
            (condition(&pod, kind).is_some_and(|c| c.status == status)).then_some(pod)
        })
        .await
    }

    /// `kubectl exec` in `pod`'s first container: the exit code and the output.
    pub async fn exec(&self, pod: &str, command: &[&str]) -> (i32, String) {
        let mut args = vec!["exec", "-n", &self.ns, pod, "--"];
        args.extend_from_slice(command);
        kubectl(&args).await
    }

    /// Deletes the namespace (its pods' containers stop on their nodes).
    pub async fn finish(self) {
        Api::<Namespace>::all(self.client.clone())
            .delete(&self.ns, &DeleteParams::default())
            .await
            .unwrap();
    }
}

pub fn condition(pod: &Pod, kind: &str) -> Option<PodCondition> {
    pod.status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .find(|c| c.type_ == kind)
        .cloned()
}

/// `pod`'s IPs on the network attachment `network` (`<namespace>/<name>`), as Multus wrote them
/// in `network-status`.
pub fn network_ips(pod: &Pod, network: &str) -> Vec<String> {
    let status: Vec<Value> = pod
        .annotations()
        .get("k8s.v1.cni.cncf.io/network-status")
        .map(|s| serde_json::from_str(s).unwrap())
        .unwrap_or_default();
    status
        .iter()
        .filter(|n| n["name"] == network)
        .flat_map(|n| n["ips"].as_array().cloned().unwrap_or_default())
        .filter_map(|ip| ip.as_str().map(str::to_owned))
        .collect()
}

/// Restarts the first container of pod `name` in `namespace` (`kill 1` inside it: its PID 1 must
/// end on TERM) and waits until kubelet has started it again and the pod is Ready.
pub async fn restart(namespace: &str, name: &str) {
    let (code, out) = kubectl(&["exec", "-n", namespace, name, "--", "kill", "1"]).await;
    // The exec ends 0, or 137 when its container stopped before it could answer (CI saw both).
    assert!(code == 0 || code == 137, "kill 1 in {name}: {code}: {out}");
    let pods: Api<Pod> = Api::namespaced(client().await, namespace);
    eventually(&format!("{name} restarted and Ready again"), || async {
        let pod = pods.get(name).await.unwrap();
        let restarts = pod
            .status
            .as_ref()?
            .container_statuses
            .as_ref()?
            .first()?
            .restart_count;
        (restarts >= 1 && condition(&pod, "Ready")?.status == "True").then_some(())
    })
    .await;
}
