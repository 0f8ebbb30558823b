//! What both controller benchmarks share: the controller binary in its own process, its
//! metrics and cost, the API server's own counters, and the summaries of a run.

#![allow(dead_code)] // each benchmark uses part of it

use std::{
    collections::HashMap,
    net::{SocketAddr, TcpListener},
    os::unix::process::CommandExt,
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::{core::v1::Pod, discovery::v1::EndpointSlice};
use kube::{
    Api, Client, ResourceExt,
    api::{ListParams, WatchEvent, WatchParams},
};
use nad_model::labels::{MANAGED_BY, MANAGED_BY_LABEL, SERVICE_NAME_LABEL};
use nad_test_kit::metrics::Scrape;
use node_sim::Simulator;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// kube-controller-manager's EndpointSlice controller, as its slices' managed-by label says.
pub const KCM_MANAGED_BY: &str = "endpointslice-controller.k8s.io";

/// Services the controller reconciles at once, passed to it explicitly: the benchmarks that
/// compare it with a plain client's writes or with kube-controller-manager (whose
/// --concurrent-service-endpoint-syncs defaults to 5 too) use the same number.
pub const CONCURRENT_SYNCS: usize = 5;

pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

pub fn progress(start: Instant, message: impl std::fmt::Display) {
    eprintln!("[{:>6.1}s] {message}", start.elapsed().as_secs_f64());
}

/// The API server's write requests on EndpointSlices so far (`apiserver_request_total`).
pub async fn apiserver_slice_writes(client: &Client) -> u64 {
    apiserver_slice_write_metric(client, "apiserver_request_total").await as u64
}

/// The API server's own time for EndpointSlice writes so far: (seconds in all, requests), from
/// `apiserver_request_duration_seconds`. Two readings give the mean time of the writes between.
pub async fn apiserver_slice_write_time(client: &Client) -> (f64, f64) {
    (
        apiserver_slice_write_metric(client, "apiserver_request_duration_seconds_sum").await,
        apiserver_slice_write_metric(client, "apiserver_request_duration_seconds_count").await,
    )
}

/// The API server's own time for pod status writes (the node simulator's) so far: (seconds in
/// all, requests).
pub async fn apiserver_status_write_time(client: &Client) -> (f64, f64) {
    let scrape = apiserver_metrics(client).await;
    let series = |part: &str| {
        ["PUT", "PATCH", "APPLY"]
            .iter()
            .map(|verb| {
                format!(
                    "apiserver_request_duration_seconds_{part}{{resource=\"pods\",subresource=\"status\",verb=\"{verb}\"}}"
                )
            })
            .filter(|series| scrape.get(series).is_some())
            .map(|series| scrape.sum(&series))
            .sum()
    };
    (series("sum"), series("count"))
}

/// The mean time in milliseconds of the requests between two readings of a (seconds,
/// requests) pair; 0 when there were none.
pub fn api_mean_ms(before: (f64, f64), after: (f64, f64)) -> f64 {
    let count = after.1 - before.1;
    if count > 0.0 {
        (after.0 - before.0) / count * 1e3
    } else {
        0.0
    }
}

/// Sum of the API server's metric `name` over its EndpointSlice write series (a verb it has
/// not served yet counts 0).
async fn apiserver_slice_write_metric(client: &Client, name: &str) -> f64 {
    let scrape = apiserver_metrics(client).await;
    ["POST", "PUT", "PATCH", "APPLY", "DELETE"]
        .iter()
        .map(|verb| slice_series(&scrape, name, verb))
        .sum()
}

/// The API server's `/metrics`.
pub async fn apiserver_metrics(client: &Client) -> Scrape {
    let text = client
        .request_text(http::Request::get("/metrics").body(Vec::new()).unwrap())
        .await
        .unwrap();
    Scrape::new(text)
}

/// The API server's metric `name` for `verb` on EndpointSlices; 0 before its first request.
pub fn slice_series(scrape: &Scrape, name: &str, verb: &str) -> f64 {
    let series = format!("{name}{{resource=\"endpointslices\",verb=\"{verb}\"}}");
    if scrape.get(&series).is_some() {
        scrape.sum(&series)
    } else {
        0.0
    }
}

/// The controller binary, started as `run` on one namespace, with its metrics on loopback.
pub struct Controller {
    child: Child,
    /// Its process group is gone (the group's id may be another's now).
    stopped: bool,
    metrics: SocketAddr,
    pub started: Instant,
}

pub fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

impl Controller {
    pub fn start(ns: &str, log: &std::path::Path) -> Self {
        let (metrics, health) = (free_port(), free_port());
        let started = Instant::now();
        // `NSC_BENCH_PROFILE="perf record -g -o {log}.perf --"` runs the controller under a
        // profiler, `{log}` being its log file's path; RSS and CPU figures are then the
        // profiler's process's. The controller runs in a process group of its own, with the
        // profiler if there is one, and is stopped by signalling the group: a profiler's
        // wrapper script would not pass a signal on to it.
        let binary = env!("CARGO_BIN_EXE_nad-service-controller");
        let wrapper = std::env::var("NSC_BENCH_PROFILE")
            .unwrap_or_default()
            .replace("{log}", &log.display().to_string());
        let mut argv: Vec<&str> = wrapper.split_whitespace().collect();
        argv.push(binary);
        // `NSC_BENCH_LOG_FILTER=nad_service_controller=debug` logs each reconcile's path.
        let filter = std::env::var("NSC_BENCH_LOG_FILTER").unwrap_or_else(|_| "info".into());
        let child = Command::new(argv[0])
            .args(&argv[1..])
            .args([
                "run",
                "--leader-election=false",
                &format!("--watch-namespace={ns}"),
                &format!("--metrics-address={metrics}"),
                &format!("--health-address={health}"),
                &format!("--log-filter={filter}"),
                &format!("--concurrent-syncs={CONCURRENT_SYNCS}"),
            ])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .process_group(0)
            .spawn()
            .unwrap();
        Self {
            child,
            stopped: false,
            metrics,
            started,
        }
    }

    pub async fn metrics(&self) -> String {
        let mut stream = tokio::net::TcpStream::connect(self.metrics).await.unwrap();
        stream
            .write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
            .await
            .unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).await.unwrap();
        text
    }

    /// One scrape of its `/metrics`.
    pub async fn scrape(&self) -> Scrape {
        Scrape::new(self.metrics().await)
    }

    /// Sum of a counter over its label sets; fails when it has none.
    pub async fn counter(&self, name: &str) -> u64 {
        self.sum(name).await as u64
    }

    /// Sum of a metric's series over their label sets (a counter, or a histogram's `_sum` or
    /// `_count`); fails when it has none.
    pub async fn sum(&self, name: &str) -> f64 {
        self.scrape().await.sum(name)
    }

    /// Waits until the reconcile counter has not moved for `quiet`.
    pub async fn settle(&self, quiet: Duration) {
        let mut last = self
            .counter("nad_service_controller_reconciles_total")
            .await;
        let mut since = Instant::now();
        let deadline = Instant::now() + Duration::from_secs(120);
        while since.elapsed() < quiet && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let now = self
                .counter("nad_service_controller_reconciles_total")
                .await;
            if now != last {
                (last, since) = (now, Instant::now());
            }
        }
    }

    /// Peak RSS (MiB), current RSS (MiB) and CPU seconds (user + system) so far.
    pub fn cost(&self) -> Value {
        let pid = self.child.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let kib = |key: &str| -> f64 {
            status
                .lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        json!({
            "peak_rss_mib": kib("VmHWM:") / 1024.0,
            "rss_mib": kib("VmRSS:") / 1024.0,
            "cpu_seconds": cpu_seconds(pid).unwrap(),
            "wall_seconds": self.started.elapsed().as_secs_f64(),
        })
    }

    /// Stops it as Ctrl-C in a terminal would: SIGINT to its whole process group, which
    /// profilers handle by writing out what they recorded. What is left after 60 s is killed.
    pub fn stop(mut self) {
        self.signal_group("-INT");
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.child.try_wait().unwrap().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill_group();
    }

    /// Sends `signal` to every process of its group (the group's id is the child's).
    fn signal_group(&self, signal: &str) {
        let _ = Command::new("kill")
            .args([signal, "--", &format!("-{}", self.child.id())])
            .stderr(Stdio::null())
            .status();
    }

    fn kill_group(&mut self) {
        if self.stopped {
            return;
        }
        self.signal_group("-KILL");
        let _ = self.child.wait();
        self.stopped = true;
    }
}

/// A benchmark that fails (panics) leaves no controller behind, nor a profiler's process: one
/// still watching its namespace would rewrite what the next run removes.
impl Drop for Controller {
    fn drop(&mut self) {
        self.kill_group();
    }
}

/// CPU seconds (user + system) process `pid` has used so far.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which is in parentheses): utime is the 12th, stime 13th.
    let fields: Vec<&str> = stat.rsplit_once(") ")?.1.split(' ').collect();
    let ticks: f64 = fields[11].parse::<f64>().ok()? + fields[12].parse::<f64>().ok()?;
    Some(ticks / clock_ticks())
}

/// CPU seconds so far of each local control-plane process (hack/local-up.sh records their
/// PIDs, each with its start time, beside the kubeconfig), to show what the API side spent on a
/// phase.
pub fn control_plane_cpu(kubeconfig: &std::path::Path) -> Value {
    let pids = kubeconfig.parent().unwrap().join("pids");
    let mut cpu = serde_json::Map::new();
    for name in ["etcd", "kube-apiserver", "kube-controller-manager"] {
        let seconds = std::fs::read_to_string(pids.join(format!("{name}.pid")))
            .ok()
            .and_then(|recorded| cpu_seconds(recorded.split_whitespace().next()?.parse().ok()?));
        cpu.insert(name.into(), json!(seconds));
    }
    Value::Object(cpu)
}

/// The flags kube-controller-manager runs with that shape its EndpointSlice controller (from
/// its command line; hack/local-up.sh records its PID beside the kubeconfig): a flag not listed
/// has its default. Paths and keys are left out.
pub fn kcm_flags(kubeconfig: &std::path::Path) -> Vec<String> {
    let pid = kubeconfig
        .parent()
        .unwrap()
        .join("pids/kube-controller-manager.pid");
    let Some(cmdline) = std::fs::read_to_string(pid).ok().and_then(|recorded| {
        let pid = recorded.split_whitespace().next()?.to_owned();
        std::fs::read(format!("/proc/{pid}/cmdline")).ok()
    }) else {
        return Vec::new();
    };
    let relevant = [
        "controllers",
        "endpoint",
        "kube-api",
        "leader-elect",
        "service-account-credentials",
    ];
    cmdline
        .split(|&b| b == 0)
        .map(|arg| String::from_utf8_lossy(arg).into_owned())
        .filter(|arg| arg.starts_with("--") && relevant.iter().any(|r| arg.contains(r)))
        .collect()
}

/// What each process of `after` spent since `before` (both from [`control_plane_cpu`]).
pub fn cpu_spent(before: &Value, after: &Value) -> Value {
    let mut spent = serde_json::Map::new();
    for (name, seconds) in after.as_object().unwrap() {
        if let (Some(a), Some(b)) = (seconds.as_f64(), before[name].as_f64()) {
            spent.insert(name.clone(), json!(a - b));
        }
    }
    Value::Object(spent)
}

/// Registers the simulated nodes and marks them Ready, then, if they had gone without
/// heartbeats (an earlier run's nodes), waits until kube-controller-manager's node lifecycle
/// controller has seen them Ready: while it sees one NotReady it marks the pods on it not
/// ready, pods this run creates among them. The API shows no sign of it having looked (with
/// every node NotReady it taints none), so three of its passes (--node-monitor-period, 5 s)
/// are waited.
pub async fn revive_nodes(client: &Client, sim: &Simulator) {
    let stale = stale_nodes(client).await;
    sim.ensure_nodes().await.unwrap();
    if stale {
        tokio::time::sleep(Duration::from_secs(15)).await;
    }
}

/// Whether a simulated node is there whose Ready condition is not True or older than 30 s (a
/// live simulator renews it every 10 s).
async fn stale_nodes(client: &Client) -> bool {
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let simulated = ListParams::default().labels("node-sim.isim.dev/simulated=true");
    let now = k8s_openapi::jiff::Timestamp::now();
    nodes
        .list(&simulated)
        .await
        .unwrap()
        .items
        .iter()
        .any(|node| {
            let ready = node
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
            !ready.is_some_and(|c| {
                c.status == "True"
                    && c.last_heartbeat_time
                        .as_ref()
                        .is_some_and(|t| now.duration_since(t.0).as_secs() < 30)
            })
        })
}

/// Runs a benchmark's driver on a two-thread runtime. (`cargo bench` passes `--bench`; the
/// drivers have no options of their own.)
pub fn main(run: impl std::future::Future<Output = ()>) {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(run);
}

/// Where a benchmark writes its JSON: `$NSC_BENCH_OUT`, else `<target>/bench/<name>`; the
/// directory is created.
pub fn output(name: &str) -> std::path::PathBuf {
    let out = std::env::var_os("NSC_BENCH_OUT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::PathBuf::from(
                std::env::var("CARGO_TARGET_DIR")
                    .unwrap_or_else(|_| format!("{}/../target", env!("CARGO_MANIFEST_DIR"))),
            )
            .join("bench")
            .join(name)
        });
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    out
}

pub fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub fn summary(mut ms: Vec<f64>) -> Value {
    ms.sort_by(f64::total_cmp);
    json!({
        "count": ms.len(),
        "p50_ms": percentile(&ms, 50.0),
        "p95_ms": percentile(&ms, 95.0),
        "p99_ms": percentile(&ms, 99.0),
        "max_ms": ms.last().copied().unwrap_or_default(),
        "mean_ms": ms.iter().sum::<f64>() / ms.len().max(1) as f64,
    })
}

/// The commit measured: `git rev-parse --short HEAD`, with `-dirty` when the work tree has
/// changes (so a figure is never credited to a commit that did not have the code measured).
/// The report files the benchmarks write themselves do not count: `make bench` after
/// `make bench-scale` measures the same code.
pub fn commit() -> String {
    let git = |args: &[&str]| {
        Command::new("git")
            .arg("-C")
            .arg(env!("CARGO_MANIFEST_DIR"))
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let Some(head) = git(&["rev-parse", "--short", "HEAD"]) else {
        return "unknown".into();
    };
    let status = [
        "status",
        "--porcelain",
        "--",
        ":(top)",
        ":(top,exclude)BENCHMARKS.md",
        ":(top,exclude)benchmarks.json",
        ":(top,exclude)hack/bench/envelope.json",
    ];
    match git(&status) {
        Some(changes) if changes.is_empty() => head,
        _ => format!("{head}-dirty"),
    }
}

pub fn machine() -> Value {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_kib: f64 = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0.0);
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, m)| m.trim().to_owned())
        .unwrap_or_default();
    json!({
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "memory_gib": (mem_kib / 1024.0 / 1024.0 * 10.0).round() / 10.0,
        "cpu": cpu,
    })
}

// ---- Ready flips ---------------------------------------------------------------------------------

/// One awaited Ready flip: the state wanted, and when each step of it was seen.
#[derive(Default, Clone, Copy)]
pub struct Flip {
    pub want: bool,
    /// Before the status write was sent.
    pub sent: Option<Instant>,
    /// When its response came.
    pub written: Option<Instant>,
    pub pod_seen: Option<Instant>,
    /// This controller's slice.
    pub slice_seen: Option<Instant>,
    /// kube-controller-manager's slice, when a selector Service has the pod too.
    pub kcm_seen: Option<Instant>,
}

impl Flip {
    /// Milliseconds from `from` to `to`, both stamped.
    pub fn ms(from: Option<Instant>, to: Option<Instant>) -> f64 {
        to.unwrap()
            .saturating_duration_since(from.unwrap())
            .as_secs_f64()
            * 1e3
    }

    /// Pod watch event to our slice's watch event: the flip's latency.
    pub fn latency_ms(&self) -> f64 {
        Self::ms(self.pod_seen, self.slice_seen)
    }

    /// Status write sent to the pod's watch event: what the API server takes for one write to
    /// reach a watcher, measured on this very flip.
    pub fn api_ms(&self) -> f64 {
        Self::ms(self.sent, self.pod_seen)
    }

    /// The flip's latency less its write's API time (at least 0): the controller's own share,
    /// since its slice write costs the API server about what the pod's status write did.
    pub fn own_ms(&self) -> f64 {
        (self.latency_ms() - self.api_ms()).max(0.0)
    }
}

/// The flips awaited, by pod name, stamped by the benchmark's pod and slice watches.
pub type Flips = Arc<Mutex<HashMap<String, Flip>>>;

pub fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

/// A pod's watch event, seen at `now`: stamps its flip if it shows the wanted state.
pub fn saw_pod(flips: &Flips, pod: &Pod, now: Instant) {
    if let Some(f) = flips.lock().unwrap().get_mut(&pod.name_any())
        && f.pod_seen.is_none()
        && pod_ready(pod) == f.want
    {
        f.pod_seen = Some(now);
    }
}

/// A slice's watch event, seen at `now`: stamps the flips of the endpoints that show theirs,
/// as this controller's or kube-controller-manager's by the slice's managed-by label.
pub fn saw_slice(flips: &Flips, slice: &EndpointSlice, now: Instant) {
    let kcm = match slice.labels().get(MANAGED_BY_LABEL).map(String::as_str) {
        Some(MANAGED_BY) => false,
        Some(KCM_MANAGED_BY) => true,
        _ => return,
    };
    let mut flips = flips.lock().unwrap();
    for endpoint in slice.endpoints.iter().flatten() {
        let Some(name) = endpoint.target_ref.as_ref().and_then(|r| r.name.as_ref()) else {
            continue;
        };
        let Some(f) = flips.get_mut(name) else {
            continue;
        };
        let shows = endpoint.conditions.as_ref().and_then(|c| c.ready) == Some(f.want);
        let seen = if kcm {
            &mut f.kcm_seen
        } else {
            &mut f.slice_seen
        };
        if shows && seen.is_none() {
            *seen = Some(now);
        }
    }
}

/// Sets pod `name`'s Ready to `want` (awaited in `flips`, its send and response stamped), then
/// waits until `done` holds for it: the flip as seen.
pub async fn flip(
    sim: &Simulator,
    ns: &str,
    flips: &Flips,
    name: &str,
    want: bool,
    done: impl Fn(&Flip) -> bool,
) -> Flip {
    flips.lock().unwrap().insert(
        name.to_owned(),
        Flip {
            want,
            sent: Some(Instant::now()),
            ..Flip::default()
        },
    );
    sim.set_ready(ns, name, want).await.unwrap();
    flips.lock().unwrap().get_mut(name).unwrap().written = Some(Instant::now());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        {
            let mut flips = flips.lock().unwrap();
            if flips.get(name).is_some_and(&done) {
                return flips.remove(name).unwrap();
            }
        }
        assert!(
            Instant::now() < deadline,
            "{name}: Ready={want} not in its slices after 30 s"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

// ---- watching without a list -----------------------------------------------------------------

/// Watches `api` from now on, without listing its objects, handing each event to `on` on a
/// task of its own (until the server ends the watch, after at most 290 s, or the task is
/// aborted).
pub async fn watch_from_now<K>(
    api: Api<K>,
    mut on: impl FnMut(WatchEvent<K>) + Send + 'static,
) -> tokio::task::JoinHandle<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let from = api
        .list_metadata(&ListParams::default().limit(1))
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    tokio::spawn(async move {
        let mut events = api
            .watch(&WatchParams::default().timeout(290), &from)
            .await
            .unwrap()
            .boxed();
        while let Ok(Some(event)) = events.try_next().await {
            on(event);
        }
    })
}

/// Ready endpoints per Service in the slices of one manager, kept from a slice watch:
/// `correct` counts the Services of `want` whose slices show exactly their wanted number.
pub struct SliceTally {
    manager: &'static str,
    want: HashMap<String, usize>,
    ready_by_slice: HashMap<String, (String, usize)>,
    ready_by_service: HashMap<String, usize>,
    pub correct: usize,
}

impl SliceTally {
    pub fn new(manager: &'static str, want: HashMap<String, usize>) -> Self {
        Self {
            manager,
            want,
            ready_by_slice: HashMap::new(),
            ready_by_service: HashMap::new(),
            correct: 0,
        }
    }

    /// True once every Service of `want` is correct.
    pub fn done(&self) -> bool {
        self.correct == self.want.len()
    }

    pub fn on(&mut self, event: WatchEvent<EndpointSlice>) {
        match event {
            WatchEvent::Added(s) | WatchEvent::Modified(s) => self.apply(&s, false),
            WatchEvent::Deleted(s) => self.apply(&s, true),
            WatchEvent::Bookmark(_) => {}
            WatchEvent::Error(e) => panic!("the slice watch failed: {e:?}"),
        }
    }

    fn apply(&mut self, slice: &EndpointSlice, deleted: bool) {
        if slice.labels().get(MANAGED_BY_LABEL).map(String::as_str) != Some(self.manager) {
            return;
        }
        let Some(service) = slice.labels().get(SERVICE_NAME_LABEL).cloned() else {
            return;
        };
        let Some(&want) = self.want.get(&service) else {
            return;
        };
        let ready = if deleted {
            0
        } else {
            slice
                .endpoints
                .iter()
                .flatten()
                .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
                .count()
        };
        let before = self
            .ready_by_slice
            .insert(slice.name_any(), (service.clone(), ready))
            .map_or(0, |(_, n)| n);
        let total = self.ready_by_service.entry(service).or_default();
        let was_correct = *total == want;
        *total = *total + ready - before;
        match (was_correct, *total == want) {
            (false, true) => self.correct += 1,
            (true, false) => self.correct -= 1,
            _ => {}
        }
    }
}
