//! The harness of the fault tests (`make test-faults`, see `hack/test-faults.sh`).
//!
//! The tests run the real controller binary against a control plane of their own (started by
//! `hack/local-up.sh` in `NAD_LOCAL_DIR`, on ports of its own), and do to it what an operator's
//! chaos test would: kill and restart the API server, pause etcd, compact etcd, SIGKILL the
//! controller. [`ControlPlane`] does the first three, [`Controller`] runs the binary, [`Scene`]
//! holds a namespace with a Service and its pods, and [`Scene::converge`] waits until the
//! Service's slices hold exactly the expected endpoints.
//!
//! Every process this harness starts or stops is put back: a paused etcd is resumed and a
//! killed controller reaped when its guard drops, also when a test fails; the script stops the
//! control plane afterwards whatever happened.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed step is a failed test

use std::{
    collections::{BTreeMap, BTreeSet},
    io::Write as _,
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU32, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use k8s_openapi::api::{
    admissionregistration::v1::ValidatingWebhookConfiguration,
    coordination::v1::Lease,
    core::v1::{Pod, Service},
    discovery::v1::EndpointSlice,
};
use kube::{
    Api, Client, Config, ResourceExt,
    api::{ListParams, Patch, PatchParams, PostParams},
    config::{KubeConfigOptions, Kubeconfig},
};
use nad_test_kit::metrics::Scrape;
use node_sim::Simulator;
use serde_json::{Value, json};

pub const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "nad-service-controller.isim.dev";
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
pub const NETWORK_STATUS: &str = "k8s.v1.cni.cncf.io/network-status";

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: run the fault tests with `make test-faults` (hack/test-faults.sh)"
        )
    })
}

/// Sends `signal` (`-KILL`, `-STOP`, ...) to `pid` with kill(1).
pub fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill {signal} {pid} failed");
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|stat| !stat.contains(") Z "))
            .unwrap_or(false)
}

/// A process's start time (field 22 of `/proc/<pid>/stat`, clock ticks since boot), which with
/// its pid names it for good: hack/proc.sh records both.
fn start_time(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The command name (field 2) may hold spaces and parentheses: count from its closing one.
    let after_name = &stat[stat.rfind(')').unwrap() + 1..];
    after_name
        .split_whitespace()
        .nth(19)
        .and_then(|ticks| ticks.parse().ok())
        .unwrap_or_else(|| panic!("no start time in /proc/{pid}/stat: {stat}"))
}

/// The API server this harness started after a kill, so that the next kill can reap it: a
/// killed child that is not waited for shows as a zombie while its threads are still going.
/// One for the whole test binary, since every scene shares the control plane.
static APISERVER: std::sync::Mutex<Option<Child>> = std::sync::Mutex::new(None);

/// The fault control plane: its state directory, its components' pids and command lines.
pub struct ControlPlane {
    state: PathBuf,
    etcd_url: String,
    apiserver_port: u16,
}

impl ControlPlane {
    pub fn from_env() -> Self {
        Self {
            state: PathBuf::from(env("NAD_LOCAL_DIR")),
            etcd_url: format!("http://127.0.0.1:{}", env("NAD_ETCD_CLIENT_PORT")),
            apiserver_port: env("NAD_APISERVER_PORT").parse().unwrap(),
        }
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.state.join("kubeconfig")
    }

    pub async fn client(&self) -> Client {
        let kubeconfig = Kubeconfig::read_from(self.kubeconfig()).unwrap();
        let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .unwrap();
        nad_test_kit::install_crypto_provider();
        Client::try_from(config).unwrap()
    }

    /// The pid `hack/local-up.sh` recorded for `component` (its pid file holds the pid and the
    /// process's start time, hack/proc.sh).
    fn pid(&self, component: &str) -> u32 {
        let path = self.state.join("pids").join(format!("{component}.pid"));
        let recorded =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        recorded
            .split_whitespace()
            .next()
            .and_then(|pid| pid.parse().ok())
            .unwrap_or_else(|| panic!("{}: no pid in {recorded:?}", path.display()))
    }

    /// SIGKILLs the API server; returns its command line, for [`Self::start_apiserver`].
    pub fn kill_apiserver(&self) -> Vec<String> {
        let pid = self.pid("kube-apiserver");
        let argv: Vec<String> = std::fs::read(format!("/proc/{pid}/cmdline"))
            .unwrap()
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        signal(pid, "-KILL");
        if let Some(mut child) = APISERVER.lock().unwrap().take() {
            let _ = child.wait();
        }
        // Dead, and its port free again: a dying process keeps its sockets until its last
        // thread is gone, while /proc may already show it as a zombie.
        let deadline = Instant::now() + Duration::from_secs(30);
        while alive(pid) || std::net::TcpListener::bind(("127.0.0.1", self.apiserver_port)).is_err()
        {
            assert!(
                Instant::now() < deadline,
                "kube-apiserver {pid} or its port {} survived SIGKILL",
                self.apiserver_port
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        argv
    }

    /// Starts the API server again with the same command line, in its own process group, its
    /// output appended to its log and its pid recorded for `hack/local-down.sh`.
    pub fn start_apiserver(&self, argv: &[String]) {
        let log = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(self.state.join("logs/kube-apiserver.log"))
            .unwrap();
        let child = Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .process_group(0)
            .spawn()
            .unwrap();
        // As hack/proc.sh records it: the pid and the start time, by which hack/local-down.sh
        // knows the process is still the one started here.
        std::fs::write(
            self.state.join("pids/kube-apiserver.pid"),
            format!("{} {}\n", child.id(), start_time(child.id())),
        )
        .unwrap();
        *APISERVER.lock().unwrap() = Some(child);
    }

    /// Waits until `/readyz` answers `ok`; returns how long that took.
    pub async fn wait_ready(&self, client: &Client) -> Duration {
        let started = Instant::now();
        loop {
            let request = http::Request::get("/readyz").body(Vec::new()).unwrap();
            if matches!(client.request_text(request).await, Ok(body) if body.trim() == "ok") {
                return started.elapsed();
            }
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "the API server is not ready after 120 s; see {}",
                self.state.join("logs/kube-apiserver.log").display()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// SIGSTOPs etcd until the guard is dropped (or [`Paused::resume`]).
    pub fn pause_etcd(&self) -> Paused {
        let pid = self.pid("etcd");
        signal(pid, "-STOP");
        Paused { pid: Some(pid) }
    }

    fn etcd(&self, path: &str, body: &Value) -> Value {
        let out = Command::new("curl")
            .args(["-fsS", "--max-time", "10", "-X", "POST", "-d"])
            .arg(body.to_string())
            .arg(format!("{}{path}", self.etcd_url))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "etcd {path}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// Compacts etcd's history up to its current revision (through etcd's JSON gateway), so
    /// that a watch from any older resource version can only be answered `410 Expired`.
    pub fn compact_etcd(&self) -> i64 {
        // A range read of any key answers with the current revision in its header.
        let range = self.etcd("/v3/kv/range", &json!({"key": "Lw=="}));
        let revision: i64 = range["header"]["revision"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        self.etcd(
            "/v3/kv/compaction",
            &json!({"revision": revision.to_string(), "physical": true}),
        );
        revision
    }
}

/// A paused etcd; resumed when dropped, also when a test fails.
pub struct Paused {
    pid: Option<u32>,
}

impl Paused {
    pub fn resume(mut self) {
        if let Some(pid) = self.pid.take() {
            signal(pid, "-CONT");
        }
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        if let Some(pid) = self.pid.take() {
            signal(pid, "-CONT");
        }
    }
}

/// A free port on loopback for the controller's metrics and health endpoints.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// How a controller process is run.
#[derive(Debug, Clone)]
pub struct Options {
    pub identity: String,
    pub leader_election: bool,
    pub namespace: String,
    pub max_endpoints_per_slice: usize,
}

/// The controller binary (`NSC_CONTROLLER_BIN`), with the fault control plane's admin
/// kubeconfig, watching one namespace, its log in a file.
pub struct Controller {
    child: Option<Child>,
    pub log: PathBuf,
    metrics: String,
    health: String,
    pub options: Options,
}

impl Controller {
    pub fn start(plane: &ControlPlane, options: Options) -> Self {
        let dir = std::env::var_os("NSC_FAULT_LOGS")
            .map_or_else(|| std::env::temp_dir().join("nsc-faults"), PathBuf::from);
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join(format!("{}.log", options.identity));
        let port = free_port();
        let health = free_port();
        let child = Command::new(env("NSC_CONTROLLER_BIN"))
            .args([
                "run",
                &format!("--leader-election={}", options.leader_election),
                &format!("--leader-election-namespace={}", options.namespace),
                &format!("--watch-namespace={}", options.namespace),
                &format!("--metrics-address=127.0.0.1:{port}"),
                &format!("--health-address=127.0.0.1:{health}"),
                &format!(
                    "--max-endpoints-per-slice={}",
                    options.max_endpoints_per_slice
                ),
                "--log-filter=info",
            ])
            .env("KUBECONFIG", plane.kubeconfig())
            .env("POD_NAME", &options.identity)
            .env("RUST_BACKTRACE", "1")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Self {
            child: Some(child),
            log,
            metrics: format!("http://127.0.0.1:{port}/metrics"),
            health: format!("http://127.0.0.1:{health}"),
            options,
        }
    }

    /// The URL of `path` (`/healthz`, `/readyz`) on the health address (`--health-address`).
    pub fn health_url(&self, path: &str) -> String {
        format!("{}{path}", self.health)
    }

    /// The HTTP status `GET <health address><path>` answers (`None`: no answer within 5 s).
    pub fn health_status(&self, path: &str) -> Option<u16> {
        let out = Command::new("curl")
            .args([
                "-sS",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--max-time",
                "5",
            ])
            .arg(self.health_url(path))
            .output()
            .ok()?;
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .ok()
            .filter(|code| *code != 0)
    }

    /// Whether a Lease's holder identity is this process (`<POD_NAME>_<pid>`).
    pub fn is(&self, holder: Option<&str>) -> bool {
        holder.is_some_and(|h| h == format!("{}_{}", self.options.identity, self.pid()))
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The sum of a counter over its label sets, from `/metrics` (`None`: not answering).
    /// `name` may give labels too, `name{label="value"}`: the sum is then over the label sets
    /// that have them. A series that is not there fails the test.
    pub fn metric(&self, name: &str) -> Option<f64> {
        scrape(&self.metrics).map(|metrics| metrics.sum(name))
    }

    /// Scrapes `/metrics` every `every` in a thread of its own until [`Sampler::finish`],
    /// keeping the figures `names` name (each as [`Self::metric`] reads it).
    pub fn sample(&self, names: &[&str], every: Duration) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let url = self.metrics.clone();
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut samples = Vec::new();
            while !stopped.load(Ordering::SeqCst) {
                let at = Instant::now();
                let figures = scrape(&url)
                    .map(|metrics| names.iter().map(|n| (n.clone(), metrics.sum(n))).collect());
                samples.push(Sample { at, figures });
                std::thread::sleep(every.saturating_sub(at.elapsed()));
            }
            samples
        });
        Sampler {
            stop,
            thread: Some(thread),
        }
    }

    /// EndpointSlice writes so far (applies and deletes).
    pub fn writes(&self) -> u64 {
        self.metric("nad_service_controller_endpointslice_writes_total")
            .unwrap_or_else(|| panic!("no metrics from {}:\n{}", self.options.identity, self.log()))
            as u64
    }

    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes the process (its connections stay open, it reads nothing) or thaws it.
    pub fn freeze(&self, frozen: bool) {
        signal(self.pid(), if frozen { "-STOP" } else { "-CONT" });
    }

    /// SIGTERM, and the exit status; the log when it did not exit in time.
    pub fn stop(mut self) -> String {
        if let Some(mut child) = self.child.take() {
            signal(child.id(), "-CONT");
            signal(child.id(), "-TERM");
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                if let Some(status) = child.try_wait().unwrap() {
                    assert!(
                        status.success(),
                        "{} exited with {status}:\n{}",
                        self.options.identity,
                        self.log()
                    );
                    break;
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    panic!(
                        "{} did not stop on SIGTERM:\n{}",
                        self.options.identity,
                        self.log()
                    );
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        self.log()
    }

    /// Whether the process still runs.
    pub fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        if let Some(child) = &self.child {
            signal(child.id(), "-CONT");
        }
        self.kill();
    }
}

/// `GET url` of a `/metrics` (`None`: no answer, or not `2xx`). Its figures are read with
/// [`Scrape::sum`]: `name` alone sums over its label sets, `name{label="value"}` over those
/// with that label; a missing series fails the test, for it is a renamed metric or a wrong
/// name, not a 0.
fn scrape(url: &str) -> Option<Scrape> {
    let out = Command::new("curl")
        .args(["-fsS", "--max-time", "5", url])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| Scrape::new(String::from_utf8_lossy(&out.stdout)))
}

/// One scrape of a [`Sampler`]: when it started, and the figures asked for (`None`: the
/// controller did not answer).
#[derive(Debug, Clone)]
pub struct Sample {
    pub at: Instant,
    pub figures: Option<BTreeMap<String, f64>>,
}

impl Sample {
    /// A figure of this sample (`None`: the controller did not answer).
    pub fn get(&self, name: &str) -> Option<f64> {
        self.figures.as_ref().map(|f| f[name])
    }
}

/// A thread scraping a controller's `/metrics` ([`Controller::sample`]); stopped when
/// finished or dropped, also when a test fails.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Vec<Sample>>>,
}

impl Sampler {
    /// Stops sampling; every sample taken, oldest first.
    pub fn finish(mut self) -> Vec<Sample> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.take().unwrap().join().unwrap()
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// One endpoint as a test expects it: address, pod, ready, serving, terminating.
pub type Expected = BTreeSet<(String, String, bool, bool, bool)>;

/// A namespace with a headless Service `web` on network `macvlan`, pods run by the node
/// simulator, and a log of what was measured.
pub struct Scene {
    pub plane: ControlPlane,
    pub client: Client,
    pub ns: String,
    pub sim: Arc<Simulator>,
    heartbeat: tokio::task::JoinHandle<()>,
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

impl Scene {
    pub async fn new(test: &str) -> Self {
        let plane = ControlPlane::from_env();
        let client = plane.client().await;
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let ns = format!("faults-{test}-{n}-{}", std::process::id() % 100_000);
        node_sim::create_test_namespace(&client, &ns).await.unwrap();
        let (sim, heartbeat) = Simulator::for_tests(client.clone()).await.unwrap();
        let scene = Self {
            plane,
            client,
            ns,
            sim,
            heartbeat,
        };
        let svc = json!({"metadata": {"name": "web", "labels": {"app": "web"},
                "annotations": {"isim.dev/network": "macvlan"}},
            "spec": {"clusterIP": "None", "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}});
        scene
            .api::<Service>()
            .create(
                &PostParams::default(),
                &serde_json::from_value(svc).unwrap(),
            )
            .await
            .unwrap();
        scene
    }

    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    pub fn options(&self, identity: &str, leader_election: bool) -> Options {
        Options {
            identity: format!("{}-{identity}", self.ns),
            leader_election,
            namespace: self.ns.clone(),
            max_endpoints_per_slice: 100,
        }
    }

    /// Creates `name` (label `app=web`, on `macvlan`) and lets the simulator start it.
    pub async fn pod(&self, name: &str, ready: bool) -> Pod {
        self.create_pod(name, json!({}), ready).await
    }

    /// Creates `name` with `status` as its network-status annotation (what a broken Multus
    /// wrote), and lets the simulator start it.
    pub async fn pod_with_status(&self, name: &str, status: &str) -> Pod {
        self.create_pod(name, json!({NETWORK_STATUS: status}), true)
            .await
    }

    async fn create_pod(&self, name: &str, mut annotations: Value, ready: bool) -> Pod {
        annotations["k8s.v1.cni.cncf.io/networks"] = json!("macvlan");
        let pod = json!({
            "metadata": {"name": name, "labels": {"app": "web"}, "annotations": annotations},
            "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
        });
        self.sim
            .create_and_start(&self.ns, pod, ready)
            .await
            .unwrap()
    }

    /// Replaces the pod's network-status annotation, as a broken Multus would.
    pub async fn set_network_status(&self, pod: &str, status: &str) {
        let patch = json!({"metadata": {"annotations": {NETWORK_STATUS: status}}});
        self.api::<Pod>()
            .patch(pod, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    /// Makes the API server refuse (`500`, at once) every write of this controller's slices in
    /// the scene's namespace: a validating webhook it must call, on a loopback port nothing
    /// listens on, with failure policy `Fail`. Returns its name, once a write is refused.
    pub async fn refuse_slice_writes(&self) -> String {
        let name = format!("{}-refuse-slices", self.ns);
        let port = free_port();
        let webhook: ValidatingWebhookConfiguration = serde_json::from_value(json!({
            "metadata": {"name": name},
            "webhooks": [{
                "name": "refuse.slices.isim.dev",
                "clientConfig": {"url": format!("https://127.0.0.1:{port}/refuse")},
                "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": ["discovery.k8s.io"],
                    "apiVersions": ["v1"], "resources": ["endpointslices"]}],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": self.ns}},
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 1,
            }],
        }))
        .unwrap();
        let api: Api<ValidatingWebhookConfiguration> = Api::all(self.client.clone());
        api.create(&PostParams::default(), &webhook).await.unwrap();
        // In force once a slice write of the test's own is refused.
        let slices: Api<EndpointSlice> = self.api();
        let probe: EndpointSlice = serde_json::from_value(json!({
            "metadata": {"name": "refused-probe"}, "addressType": "IPv4", "endpoints": [],
        }))
        .unwrap();
        eventually("the webhook in force", Duration::from_secs(30), || async {
            match slices.create(&PostParams::default(), &probe).await {
                Err(_) => Some(()),
                Ok(_) => {
                    let _ = slices.delete("refused-probe", &Default::default()).await;
                    None
                }
            }
        })
        .await;
        name
    }

    /// Takes slice writes again: the webhook of [`Self::refuse_slice_writes`] goes.
    pub async fn take_slice_writes(&self, name: &str) {
        let api: Api<ValidatingWebhookConfiguration> = Api::all(self.client.clone());
        api.delete(name, &Default::default()).await.unwrap();
    }

    pub async fn set_ready(&self, pod: &str, ready: bool) {
        self.sim.set_ready(&self.ns, pod, ready).await.unwrap();
    }

    /// Deletes a pod for good (no kubelet: no grace period).
    pub async fn remove(&self, pod: &str) {
        self.sim.finalize(&self.ns, pod).await.unwrap();
    }

    /// The pod's address on `macvlan`, as the simulator wrote it.
    pub fn address(pod: &Pod) -> String {
        let status: Vec<Value> = serde_json::from_str(&pod.annotations()[NETWORK_STATUS]).unwrap();
        status
            .iter()
            .find(|e| e["name"].as_str().is_some_and(|n| n.ends_with("/macvlan")))
            .and_then(|e| e["ips"][0].as_str())
            .unwrap()
            .to_owned()
    }

    pub async fn slices(&self) -> Vec<EndpointSlice> {
        let mut slices = self
            .api::<EndpointSlice>()
            .list(&ListParams::default().labels(&format!("{SERVICE_NAME_LABEL}=web")))
            .await
            .unwrap()
            .items;
        slices.sort_by_key(ResourceExt::name_any);
        slices
    }

    /// Every endpoint of the Service's slices (a duplicate address shows up twice).
    pub fn endpoints(slices: &[EndpointSlice]) -> Vec<(String, String, bool, bool, bool)> {
        let mut all: Vec<_> = slices
            .iter()
            .flat_map(|s| s.endpoints.iter().flatten())
            .map(|e| {
                let c = e.conditions.clone().unwrap_or_default();
                (
                    e.addresses[0].clone(),
                    e.target_ref
                        .as_ref()
                        .and_then(|r| r.name.clone())
                        .unwrap_or_default(),
                    c.ready == Some(true),
                    c.serving == Some(true),
                    c.terminating == Some(true),
                )
            })
            .collect();
        all.sort();
        all
    }

    /// Waits until the slices hold exactly `expected` (every address once, only managed
    /// slices), at most `within`; returns how long it took.
    pub async fn converge(&self, what: &str, expected: &Expected, within: Duration) -> Duration {
        let started = Instant::now();
        loop {
            let slices = self.slices().await;
            let got = Self::endpoints(&slices);
            let managed = slices
                .iter()
                .all(|s| s.labels().get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY));
            if managed
                && got.iter().cloned().collect::<Expected>() == *expected
                && got.len() == expected.len()
            {
                return started.elapsed();
            }
            if started.elapsed() > within {
                let got: Expected = got.into_iter().collect();
                panic!(
                    "{what}: the slices of {}/web are not as expected after {within:?}\nmissing: {:#?}\nunexpected: {:#?}",
                    self.ns,
                    expected.difference(&got).collect::<Vec<_>>(),
                    got.difference(expected).collect::<Vec<_>>(),
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The holder of the Lease the controllers of this scene elect with.
    pub async fn lease_holder(&self) -> Option<String> {
        self.api::<Lease>()
            .get_opt("nad-service-controller")
            .await
            .ok()
            .flatten()?
            .spec?
            .holder_identity
    }

    /// Deletes the namespace (its pods at once: there is no kubelet to stop them).
    pub async fn finish(self) {
        self.heartbeat.abort();
        node_sim::delete_test_namespace(&self.client, &self.ns).await;
    }
}

pub use nad_test_kit::wait::eventually;

/// The expected endpoint of a pod's `macvlan` address.
pub fn endpoint(pod: &Pod, ready: bool) -> (String, String, bool, bool, bool) {
    (Scene::address(pod), pod.name_any(), ready, ready, false)
}

/// Records a measurement: printed, and appended to `NSC_FAULT_REPORT` when set.
pub fn report(scenario: &str, figures: &[(&str, String)]) {
    let line = figures
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ");
    println!("measured: {scenario}: {line}");
    if let Ok(path) = std::env::var("NSC_FAULT_REPORT")
        && let Ok(mut file) = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
    {
        let _ = writeln!(file, "| {scenario} | {line} |");
    }
}

/// Lines of the controller's log mentioning `needle`.
pub fn lines_with<'a>(log: &'a str, needle: &str) -> Vec<&'a str> {
    log.lines().filter(|l| l.contains(needle)).collect()
}
