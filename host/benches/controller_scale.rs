//! The controller at scale, on the real local control plane (`make bench` starts it), with the
//! node simulator playing scheduler, kubelet and Multus. Not a test: it measures and reports.
//!
//! 1. Cold start, 1 Service x 5 000 pods: the controller binary starts with the pods already
//!    there; time until every slice is correct.
//! 2. Cold start, 100 Services x 100 pods (10 000 pods), likewise.
//! 3. Event latency with those 10 000 pods cached: one pod's Ready condition flips at a time;
//!    the time from the pod's watch event to the watch event of the slice that shows it.
//! 4. API writes per event, from the controller's metrics and from the API server's
//!    `apiserver_request_total`: for the flips (each moves one endpoint) and for changes that
//!    move none (a pod label and a Service annotation the policy ignores).
//! 5. Slice writes per pod added to and removed from a 250-pod Service, one at a time, with
//!    names that sort between the existing pods' (a relabel: one change each).
//! 6. Cost: the controller's peak RSS and CPU seconds for each run; pods the plugin was asked
//!    about per flip.
//! 7. The controller's own share of a flip: its latency less the API server's time from the
//!    same flip's status write to its watch event (the slice write costs about as much).
//! 8. Side by side with kube-controller-manager's EndpointSlice controller, on the same 10 000
//!    pods: 100 selector Services beside 100 of ours; "Services created → slices correct" for
//!    each, and Ready flips that both publish, timed to each one's slice.
//!
//! Each run is the real binary in its own process, watching only its scenario's namespace.
//! Writes JSON to `$NSC_BENCH_OUT` (default `<target>/bench/controller_scale.json`).
//! `NSC_BENCH_SCALE` (default 1) divides every count, for a quick look.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a measuring tool: failing loudly is right

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::{
    core::v1::{Pod, Service},
    discovery::v1::EndpointSlice,
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
    runtime::{WatchStreamExt, watcher},
};
use nad_model::labels::{MANAGED_BY, MANAGED_BY_LABEL, SERVICE_NAME_LABEL};
use node_sim::{Range, SimNode, Simulator};
use serde_json::{Value, json};

#[allow(dead_code)] // shared with the tests; the benchmark uses part of it
#[path = "../tests/support/mod.rs"]
mod support;

mod cluster;
use cluster::{
    Controller, Flip, Flips, KCM_MANAGED_BY, SliceTally, api_mean_ms, apiserver_slice_write_time,
    apiserver_slice_writes, apiserver_status_write_time, commit, control_plane_cpu, env_usize,
    kcm_flags, machine, pod_ready, progress, saw_pod, saw_slice, summary, watch_from_now,
};

const NETWORK: &str = "macvlan";

// ---- the cluster side --------------------------------------------------------------------------

fn simulator(client: &Client) -> Simulator {
    let mut config = node_sim::Config {
        nodes: (0..4)
            .map(|i| SimNode {
                name: format!("sim-node-{i}"),
                zone: Some(format!("zone-{}", ["a", "b"][i % 2])),
            })
            .collect(),
        // Room for every pod: a /15 on the primary network, a /14 on the secondary one.
        pod_range: "10.0.0.0/15".parse().unwrap(),
        ..node_sim::Config::default()
    };
    config.default_network_range = "10.128.0.0/14".parse::<Range>().unwrap();
    Simulator::new(client.clone(), config)
}

/// `services` headless Services `svc-NNN`, each with `pods` Running, Ready pods on the network.
async fn populate(
    sim: &Arc<Simulator>,
    client: &Client,
    ns: &str,
    services: usize,
    pods: usize,
    t: Instant,
) {
    let svc_api: Api<Service> = Api::namespaced(client.clone(), ns);
    for s in 0..services {
        let svc = json!({
            "metadata": {"name": format!("svc-{s:03}"), "labels": {"app": format!("svc-{s:03}")},
                         "annotations": {"isim.dev/network": NETWORK}},
            "spec": {"clusterIP": "None", "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
        });
        svc_api
            .create(
                &PostParams::default(),
                &serde_json::from_value(svc).unwrap(),
            )
            .await
            .unwrap();
    }
    let total = services * pods;
    let done = std::sync::atomic::AtomicUsize::new(0);
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), ns);
    stream::iter(0..total)
        .map(|i| {
            let (pod_api, sim, done) = (pod_api.clone(), sim.clone(), &done);
            async move {
                let (s, p) = (i / pods, i % pods);
                let name = format!("svc-{s:03}-{p:05}");
                let pod = json!({
                    "metadata": {"name": name, "labels": {"app": format!("svc-{s:03}"), "pod-template-hash": "5d8c7f9b6"},
                                 "annotations": {"k8s.v1.cni.cncf.io/networks": NETWORK}},
                    "spec": {"containers": [{"name": "web", "image": "nginx:1.27",
                             "ports": [{"name": "http", "containerPort": 8080}]}]},
                });
                pod_api
                    .create(&PostParams::default(), &serde_json::from_value(pod).unwrap())
                    .await
                    .unwrap();
                sim.start_pod(ns, &name, true).await.unwrap();
                let n = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                if n % 1000 == 0 || n == total {
                    progress(t, format!("{ns}: {n}/{total} pods running"));
                }
            }
        })
        .buffer_unordered(24)
        .collect::<()>()
        .await;
}

/// Ready endpoints per Service in `ns`, from the controller's EndpointSlices.
async fn ready_endpoints(client: &Client, ns: &str) -> BTreeMap<String, usize> {
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
    let ours = ListParams::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY}"));
    let mut counts = BTreeMap::new();
    for slice in api.list(&ours).await.unwrap() {
        let Some(service) = slice.labels().get(SERVICE_NAME_LABEL).cloned() else {
            continue;
        };
        let ready = slice
            .endpoints
            .iter()
            .flatten()
            .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
            .count();
        *counts.entry(service).or_default() += ready;
    }
    counts
}

// ---- the controller process --------------------------------------------------------------------

/// Starts a controller on `ns` and waits until every Service there has `want` ready endpoints.
async fn cold_start(
    client: &Client,
    ns: &str,
    services: usize,
    want: usize,
    log: &std::path::Path,
    t: Instant,
) -> (Controller, Value) {
    let controller = Controller::start(ns, log);
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let counts = ready_endpoints(client, ns).await;
        if counts.len() == services && counts.values().all(|&n| n == want) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{ns}: slices not correct after 600 s: {} Services, {} endpoints",
            counts.len(),
            counts.values().sum::<usize>()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let seconds = controller.started.elapsed().as_secs_f64();
    progress(
        t,
        format!("{ns}: every slice correct {seconds:.2} s after the controller started"),
    );
    let writes = controller
        .counter("nad_service_controller_endpointslice_writes_total")
        .await;
    let result = json!({
        "services": services,
        "pods": services * want,
        "seconds_to_correct_slices": seconds,
        "slice_writes": writes,
    });
    (controller, result)
}

// ---- event latency ------------------------------------------------------------------------------

/// Watches pods and slices of `ns`, stamping when each awaited state shows up in either; the
/// watches' tasks, to abort when done.
fn watch(client: &Client, ns: &str, flips: &Flips) -> [tokio::task::JoinHandle<()>; 2] {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
    let f = flips.clone();
    let on_pods = tokio::spawn(async move {
        let mut events = watcher(pods, watcher::Config::default())
            .applied_objects()
            .boxed();
        while let Ok(Some(pod)) = events.try_next().await {
            saw_pod(&f, &pod, Instant::now());
        }
    });
    let f = flips.clone();
    let on_slices = tokio::spawn(async move {
        let mut events = watcher(slices, watcher::Config::default())
            .applied_objects()
            .boxed();
        while let Ok(Some(slice)) = events.try_next().await {
            saw_slice(&f, &slice, Instant::now());
        }
    });
    [on_pods, on_slices]
}

/// Pod `index` of the scenario of `pods` pods per Service.
fn pod_name(index: usize, pods: usize) -> String {
    format!("svc-{:03}-{:05}", index / pods, index % pods)
}

/// The controller's and the API server's counters whose differences a phase reports.
#[derive(Clone, Copy)]
struct Counters {
    writes: u64,
    evaluated: u64,
    /// The reconciles' time (seconds) and number (the duration histogram's sum and count).
    reconciling: (f64, f64),
    api_writes: u64,
    /// The API server's time for slice writes and for pod status writes: (seconds, requests).
    api_slice_time: (f64, f64),
    api_status_time: (f64, f64),
}

impl Counters {
    async fn read(client: &Client, controller: &Controller) -> Self {
        Self {
            writes: controller
                .counter("nad_service_controller_endpointslice_writes_total")
                .await,
            evaluated: controller
                .counter("nad_service_controller_plugin_evaluated_pods_total")
                .await,
            reconciling: reconcile_time(controller).await,
            api_writes: apiserver_slice_writes(client).await,
            api_slice_time: apiserver_slice_write_time(client).await,
            api_status_time: apiserver_status_write_time(client).await,
        }
    }

    fn since(self, before: Self) -> Self {
        Self {
            writes: self.writes - before.writes,
            evaluated: self.evaluated - before.evaluated,
            reconciling: (
                self.reconciling.0 - before.reconciling.0,
                self.reconciling.1 - before.reconciling.1,
            ),
            api_writes: self.api_writes - before.api_writes,
            api_slice_time: (
                self.api_slice_time.0 - before.api_slice_time.0,
                self.api_slice_time.1 - before.api_slice_time.1,
            ),
            api_status_time: (
                self.api_status_time.0 - before.api_status_time.0,
                self.api_status_time.1 - before.api_status_time.1,
            ),
        }
    }
}

/// Flips the Ready condition of `flips` pods, one at a time, and times each flip.
async fn latency(
    client: &Client,
    sim: &Simulator,
    controller: &Controller,
    ns: &str,
    (services, pods): (usize, usize),
    flips: usize,
    t: Instant,
) -> Value {
    let waiting: Flips = Arc::default();
    let watches = watch(client, ns, &waiting);
    tokio::time::sleep(Duration::from_secs(2)).await; // the watches' initial lists
    let before = Counters::read(client, controller).await;
    let mut state: HashMap<String, bool> = HashMap::new();
    let mut seen = Vec::with_capacity(flips);
    for i in 0..flips {
        // Spread over the Services and pods, deterministically.
        let name = pod_name((i * 7919) % (services * pods), pods);
        let ready = !state.get(&name).copied().unwrap_or(true);
        let ours = |f: &Flip| f.pod_seen.is_some() && f.slice_seen.is_some();
        seen.push(cluster::flip(sim, ns, &waiting, &name, ready, ours).await);
        state.insert(name, ready);
        if (i + 1) % 100 == 0 {
            progress(t, format!("{ns}: {}/{flips} Ready flips", i + 1));
        }
    }
    controller.settle(Duration::from_secs(2)).await;
    watches.iter().for_each(tokio::task::JoinHandle::abort);
    let spent = Counters::read(client, controller).await.since(before);
    let (seconds, reconciles) = spent.reconciling;
    let per_flip = |n: u64| n as f64 / flips as f64;
    let ms = |figure: fn(&Flip) -> f64| summary(seen.iter().map(figure).collect());
    json!({
        "reconciles_per_flip": reconciles / flips as f64,
        "reconcile_ms_mean": seconds / reconciles.max(1.0) * 1e3,
        "evaluated_pods_per_flip": {
            "all_services": per_flip(spent.evaluated),
            "per_service": per_flip(spent.evaluated) / services as f64,
            "services_on_the_network": services,
        },
        "pods_cached": services * pods,
        "flips": flips,
        "pod_event_to_slice_event": ms(Flip::latency_ms),
        "status_write_response_to_slice_event": ms(|f| Flip::ms(f.written, f.slice_seen)),
        "apiserver_status_write_to_pod_event": ms(Flip::api_ms),
        "controller_own_share": ms(Flip::own_ms),
        // The API server's own time (its request duration histogram) for the flips' writes.
        "apiserver_ms_per_write": {
            "slice": api_mean_ms((0.0, 0.0), spent.api_slice_time),
            "pod_status": api_mean_ms((0.0, 0.0), spent.api_status_time),
        },
        "writes_per_flip": {
            "controller_metric": per_flip(spent.writes),
            "apiserver_request_total": per_flip(spent.api_writes),
        },
    })
}

/// The controller's time in reconciles so far, and their number (its duration histogram).
async fn reconcile_time(controller: &Controller) -> (f64, f64) {
    (
        controller
            .sum("nad_service_controller_reconcile_duration_seconds_sum")
            .await,
        controller
            .sum("nad_service_controller_reconcile_duration_seconds_count")
            .await,
    )
}

/// Pods joining and leaving one Service of `pods` pods, one at a time: each is a relabel (one
/// change), with a name that sorts between the Service's pods.
async fn churn(
    client: &Client,
    sim: &Arc<Simulator>,
    ns: &str,
    pods: usize,
    moves: usize,
    log: &std::path::Path,
    t: Instant,
) -> Value {
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let names: Vec<String> = (0..moves)
        .map(|i| format!("svc-000-{:05}a", i * pods / moves))
        .collect();
    for name in &names {
        let pod = json!({
            "metadata": {"name": name, "labels": {"app": "standby"},
                         "annotations": {"k8s.v1.cni.cncf.io/networks": NETWORK}},
            "spec": {"containers": [{"name": "web", "image": "nginx:1.27",
                     "ports": [{"name": "http", "containerPort": 8080}]}]},
        });
        pod_api
            .create(
                &PostParams::default(),
                &serde_json::from_value(pod).unwrap(),
            )
            .await
            .unwrap();
        sim.start_pod(ns, name, true).await.unwrap();
    }
    let (controller, _) = cold_start(client, ns, 1, pods, log, t).await;
    controller.settle(Duration::from_secs(2)).await;
    let mut result = json!({"pods": pods, "moves": moves});
    for (phase, app, step) in [("added", "svc-000", 1_i64), ("removed", "standby", -1)] {
        let writes_before = controller
            .counter("nad_service_controller_endpointslice_writes_total")
            .await;
        let api_before = apiserver_slice_writes(client).await;
        let mut want = i64::try_from(ready_endpoints(client, ns).await["svc-000"]).unwrap();
        for name in &names {
            let patch = json!({"metadata": {"labels": {"app": app}}});
            pod_api
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .unwrap();
            want += step;
            let deadline = Instant::now() + Duration::from_secs(30);
            while ready_endpoints(client, ns)
                .await
                .get("svc-000")
                .copied()
                .unwrap_or(0)
                != usize::try_from(want).unwrap()
            {
                assert!(
                    Instant::now() < deadline,
                    "{ns}: {name} not {phase} after 30 s"
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        controller.settle(Duration::from_secs(1)).await;
        let writes = controller
            .counter("nad_service_controller_endpointslice_writes_total")
            .await
            - writes_before;
        let api_writes = apiserver_slice_writes(client).await - api_before;
        result[phase] = json!({
            "controller_metric": writes as f64 / moves as f64,
            "apiserver_request_total": api_writes as f64 / moves as f64,
        });
        progress(
            t,
            format!("{ns}: {moves} pods {phase}, {writes} slice writes"),
        );
    }
    result["cost"] = controller.cost();
    controller.stop();
    result
}

/// Changes that move no endpoint: a pod label and a Service annotation that no policy reads.
async fn no_op_changes(
    client: &Client,
    controller: &Controller,
    ns: &str,
    (services, pods): (usize, usize),
    changes: usize,
) -> Value {
    controller.settle(Duration::from_secs(2)).await;
    let writes_before = controller
        .counter("nad_service_controller_endpointslice_writes_total")
        .await;
    let reconciles_before = controller
        .counter("nad_service_controller_reconciles_total")
        .await;
    let api_before = apiserver_slice_writes(client).await;
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let svc_api: Api<Service> = Api::namespaced(client.clone(), ns);
    for i in 0..changes {
        let index = (i * 104_729) % (services * pods);
        let name = format!("svc-{:03}-{:05}", index / pods, index % pods);
        let patch = json!({"metadata": {"labels": {"bench.isim.dev/noise": i.to_string()}}});
        pod_api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        let patch = json!({"metadata": {"annotations": {"bench.isim.dev/noise": i.to_string()}}});
        svc_api
            .patch(
                &format!("svc-{:03}", i % services),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .unwrap();
    }
    controller.settle(Duration::from_secs(3)).await;
    let writes = controller
        .counter("nad_service_controller_endpointslice_writes_total")
        .await
        - writes_before;
    let reconciles = controller
        .counter("nad_service_controller_reconciles_total")
        .await
        - reconciles_before;
    let api_writes = apiserver_slice_writes(client).await - api_before;
    json!({
        "pod_label_changes": changes,
        "service_annotation_changes": changes,
        "reconciles": reconciles,
        "writes": {"controller_metric": writes, "apiserver_request_total": api_writes},
    })
}

// ---- side by side with kube-controller-manager -------------------------------------------------

/// At most one flip per this period in the side-by-side flips: kube-controller-manager's
/// client allows 20 requests a second (--kube-api-qps, default 20, burst 30) and each flip
/// costs it one slice write, so faster flips would time its rate limiter, not its controller.
const KCM_FLIP_PERIOD: Duration = Duration::from_millis(60);

/// Whose Services a side-by-side Service is for; each selects the pods of the existing
/// scenario's `svc-NNN`.
#[derive(Clone, Copy)]
enum Side {
    Ours,
    Kcm,
}

impl Side {
    /// The slices' managed-by label.
    fn manager(self) -> &'static str {
        match self {
            Side::Ours => MANAGED_BY,
            Side::Kcm => KCM_MANAGED_BY,
        }
    }

    fn service_name(self, s: usize) -> String {
        match self {
            Side::Ours => format!("nsc-svc-{s:03}"),
            Side::Kcm => format!("kcm-svc-{s:03}"),
        }
    }

    /// Ours: annotated, without a selector, its pods picked by its `app` label (the default
    /// policy), as the existing scenario's. Kubernetes': an ordinary selector Service on the
    /// primary network. Both headless, with the same port.
    fn service(self, s: usize) -> Service {
        let app = format!("svc-{s:03}");
        let ports = json!([{"name": "http", "port": 80, "targetPort": "http"}]);
        let body = match self {
            Side::Ours => json!({
                "metadata": {"name": self.service_name(s), "labels": {"app": app},
                             "annotations": {"isim.dev/network": NETWORK}},
                "spec": {"clusterIP": "None", "ports": ports},
            }),
            Side::Kcm => json!({
                "metadata": {"name": self.service_name(s)},
                "spec": {"clusterIP": "None", "selector": {"app": app}, "ports": ports},
            }),
        };
        serde_json::from_value(body).unwrap()
    }
}

/// Each pod's Ready condition by name, and the Ready pods of each `app` label, read in pages
/// (10 000 whole pods in one response would be tens of MiB).
async fn pod_readiness(
    client: &Client,
    ns: &str,
) -> (HashMap<String, bool>, HashMap<String, usize>) {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let (mut ready, mut per_app) = (HashMap::new(), HashMap::new());
    let mut params = ListParams::default().limit(1000);
    loop {
        let page = api.list(&params).await.unwrap();
        for pod in &page.items {
            let up = pod_ready(pod);
            ready.insert(pod.name_any(), up);
            if let Some(app) = pod.labels().get("app") {
                *per_app.entry(app.clone()).or_default() += usize::from(up);
            }
        }
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return (ready, per_app),
        }
    }
}

/// Creates `services` Services of `side` (16 at a time, on either side) and times them,
/// from the first create, until that side's slices show each Service's Ready pods (`per_app`),
/// as a slice watch started before sees them. `cpu` reads the side's process's CPU seconds.
async fn services_to_slices(
    client: &Client,
    ns: &str,
    side: Side,
    (services, per_app): (usize, &HashMap<String, usize>),
    cpu: impl Fn() -> f64,
    t: Instant,
) -> Value {
    let want = (0..services)
        .map(|s| (side.service_name(s), per_app[&format!("svc-{s:03}")]))
        .collect();
    let tally = Arc::new(Mutex::new(SliceTally::new(side.manager(), want)));
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
    let watching = watch_from_now(slices, {
        let tally = tally.clone();
        move |event| tally.lock().unwrap().on(event)
    })
    .await;
    let (cpu_before, writes_before) = (cpu(), apiserver_slice_writes(client).await);
    let started = Instant::now();
    let api: Api<Service> = Api::namespaced(client.clone(), ns);
    stream::iter(0..services)
        .map(|s| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &side.service(s))
                    .await
                    .unwrap();
            }
        })
        .buffer_unordered(16)
        .collect::<()>()
        .await;
    while !tally.lock().unwrap().done() {
        let correct = tally.lock().unwrap().correct;
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "{ns}: {correct} of {services} {} Services correct after 120 s",
            side.manager()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    let cpu_seconds = cpu() - cpu_before;
    watching.abort();
    progress(
        t,
        format!(
            "{ns}: {services} Services' slices by {} correct {seconds:.2} s after the first create",
            side.manager()
        ),
    );
    // Writes that come after the slices were correct count too.
    tokio::time::sleep(Duration::from_secs(2)).await;
    json!({
        "services": services,
        "seconds_to_correct_slices": seconds,
        "cpu_seconds": cpu_seconds,
        "slice_writes": apiserver_slice_writes(client).await - writes_before,
    })
}

/// Deletes the `services` Services of `side` and waits until their slices are gone.
async fn remove_services(client: &Client, ns: &str, side: Side, services: usize) {
    let api: Api<Service> = Api::namespaced(client.clone(), ns);
    for s in 0..services {
        match api
            .delete(&side.service_name(s), &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => panic!("deleting {}: {e}", side.service_name(s)),
        }
    }
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
    let theirs = ListParams::default().labels(&format!("{MANAGED_BY_LABEL}={}", side.manager()));
    let prefix = side.service_name(0).trim_end_matches("000").to_owned();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let left = slices
            .list_metadata(&theirs)
            .await
            .unwrap()
            .items
            .iter()
            .filter(|s| {
                s.labels()
                    .get(SERVICE_NAME_LABEL)
                    .is_some_and(|n| n.starts_with(&prefix))
            })
            .count();
        if left == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{ns}: {left} slices of {prefix}* left after 120 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Ready flips of pods that one of our Services and one of kube-controller-manager's both
/// select, one at a time, each timed from the pod's watch event to each controller's slice's.
async fn flips_side_by_side(
    client: &Client,
    sim: &Simulator,
    ns: &str,
    ready: &mut HashMap<String, bool>,
    (services, pods): (usize, usize),
    flips: usize,
    t: Instant,
) -> Value {
    let waiting: Flips = Arc::default();
    let watches = watch(client, ns, &waiting);
    tokio::time::sleep(Duration::from_secs(2)).await; // the watches' initial lists
    let both = |f: &Flip| f.pod_seen.is_some() && f.slice_seen.is_some() && f.kcm_seen.is_some();
    let mut seen = Vec::with_capacity(flips);
    for i in 0..flips {
        let next = tokio::time::Instant::now() + KCM_FLIP_PERIOD;
        let name = pod_name((i * 7919) % (services * pods), pods);
        let want = !ready[&name];
        seen.push(cluster::flip(sim, ns, &waiting, &name, want, both).await);
        ready.insert(name, want);
        if (i + 1) % 100 == 0 {
            progress(
                t,
                format!("{ns}: {}/{flips} Ready flips side by side", i + 1),
            );
        }
        tokio::time::sleep_until(next).await;
    }
    watches.iter().for_each(tokio::task::JoinHandle::abort);
    let ms = |figure: fn(&Flip) -> f64| summary(seen.iter().map(figure).collect());
    json!({
        "flips": flips,
        "min_period_ms": KCM_FLIP_PERIOD.as_secs_f64() * 1e3,
        "ours": ms(Flip::latency_ms),
        "kube_controller_manager": ms(|f| Flip::ms(f.pod_seen, f.kcm_seen)),
        "apiserver_status_write_to_pod_event": ms(Flip::api_ms),
    })
}

/// Run 8, on the running controller of runs 2 to 4: kube-controller-manager's EndpointSlice
/// controller beside ours, on the same pods. Ours first: `services` annotated Services created,
/// timed until their slices are correct, then removed; then as many selector Services for
/// kube-controller-manager, timed the same way, and the flips with both in place.
async fn side_by_side(
    client: &Client,
    sim: &Simulator,
    controller: &Controller,
    ns: &str,
    (services, pods): (usize, usize),
    flips: usize,
    t: Instant,
) -> Value {
    let kubeconfig = support::kubeconfig_path();
    let (mut ready, per_app) = pod_readiness(client, ns).await;
    progress(
        t,
        format!("side by side: {services} Services of ours created"),
    );
    let our_cpu = || controller.cost()["cpu_seconds"].as_f64().unwrap();
    let ours = services_to_slices(client, ns, Side::Ours, (services, &per_app), our_cpu, t).await;
    remove_services(client, ns, Side::Ours, services).await;
    controller.settle(Duration::from_secs(2)).await;
    progress(
        t,
        format!("side by side: {services} selector Services created"),
    );
    let kcm_cpu = || {
        control_plane_cpu(&kubeconfig)["kube-controller-manager"]
            .as_f64()
            .unwrap_or(0.0)
    };
    let kcm = services_to_slices(client, ns, Side::Kcm, (services, &per_app), kcm_cpu, t).await;
    let flipped = flips_side_by_side(client, sim, ns, &mut ready, (services, pods), flips, t).await;
    remove_services(client, ns, Side::Kcm, services).await;
    let ratio = |ours: &Value, theirs: &Value| ours.as_f64().unwrap() / theirs.as_f64().unwrap();
    json!({
        "kube_controller_manager_flags": kcm_flags(&kubeconfig),
        "services": services,
        "pods": services * pods,
        "services_created_to_slices_correct": {"ours": ours, "kube_controller_manager": kcm},
        "flips": flipped,
        "ours_over_kube_controller_manager": {
            "flip_p50": ratio(&flipped["ours"]["p50_ms"], &flipped["kube_controller_manager"]["p50_ms"]),
            "flip_p99": ratio(&flipped["ours"]["p99_ms"], &flipped["kube_controller_manager"]["p99_ms"]),
            "services_created_to_slices_correct": ratio(
                &ours["seconds_to_correct_slices"],
                &kcm["seconds_to_correct_slices"],
            ),
        },
    })
}

// ---- the run ------------------------------------------------------------------------------------

fn main() {
    cluster::main(run());
}

async fn run() {
    let t = Instant::now();
    let scale = env_usize("NSC_BENCH_SCALE", 1).max(1);
    let (wide_services, wide_pods) = (100 / scale.min(10), 100 / scale.min(10));
    let big_pods = 5000 / scale;
    let flips = (500 / scale).max(10);
    let out = cluster::output("controller_scale.json");
    let logs = out.parent().unwrap().to_path_buf();

    let client = support::client().await;
    let version = client.apiserver_version().await.unwrap_or_else(|e| {
        panic!("no control plane ({e}); start it with make local-up (make bench does)")
    });
    progress(
        t,
        format!(
            "API server {}; {} x {} pods, 1 x {big_pods} pods, {flips} flips",
            version.git_version, wide_services, wide_pods
        ),
    );
    let (sim, heartbeat) = start_simulator(&client).await;
    let big = support::namespace(&client, "bench-big").await;
    let wide = support::namespace(&client, "bench-wide").await;
    let churning = support::namespace(&client, "bench-churn").await;
    populate(&sim, &client, &big, 1, big_pods, t).await;
    populate(&sim, &client, &wide, wide_services, wide_pods, t).await;
    populate(&sim, &client, &churning, 1, 250, t).await;
    let populated = t.elapsed().as_secs_f64();

    let big_result =
        one_service(&client, &big, big_pods, &logs.join("controller-big.log"), t).await;
    let (wide_result, latency, no_op, side) = many_services(
        &client,
        &sim,
        &wide,
        (wide_services, wide_pods),
        (flips, 100 / scale.min(10)),
        &logs.join("controller-wide.log"),
        t,
    )
    .await;

    progress(t, "pods joining and leaving a 250-pod Service");
    let churn = churn(
        &client,
        &sim,
        &churning,
        250,
        50 / scale.min(10),
        &logs.join("controller-churn.log"),
        t,
    )
    .await;
    heartbeat.abort();

    progress(t, "removing the benchmark's namespaces");
    for ns in [&big, &wide, &churning] {
        node_sim::delete_test_namespace(&client, ns).await;
    }

    let result = json!({
        "commit": commit(),
        "machine": machine(),
        "kubernetes": version.git_version,
        "setup_seconds": populated,
        "cold_start_one_service": big_result,
        "cold_start_many_services": wide_result,
        "event_latency": latency,
        "no_op_changes": no_op,
        "side_by_side": side,
        "churn": churn,
    });
    std::fs::write(&out, serde_json::to_vec_pretty(&result).unwrap()).unwrap();
    progress(t, format!("wrote {}", out.display()));
    println!("{}", serde_json::to_string_pretty(&result).unwrap());
}

/// The node simulator with its nodes, and the task that keeps them alive.
async fn start_simulator(client: &Client) -> (Arc<Simulator>, tokio::task::JoinHandle<()>) {
    let sim = Arc::new(simulator(client));
    cluster::revive_nodes(client, &sim).await;
    let heartbeat = tokio::spawn({
        let sim = sim.clone();
        async move {
            let _ = sim.heartbeat().await;
        }
    });
    (sim, heartbeat)
}

/// Run 1: the cold start of one Service of `pods` pods in `ns`, and its cost.
async fn one_service(
    client: &Client,
    ns: &str,
    pods: usize,
    log: &std::path::Path,
    t: Instant,
) -> Value {
    progress(t, format!("cold start: 1 Service x {pods} pods"));
    let (controller, mut result) = cold_start(client, ns, 1, pods, log, t).await;
    controller.settle(Duration::from_secs(2)).await;
    result["cost"] = controller.cost();
    controller.stop();
    result
}

/// Runs 2 to 4 and 8 on one controller, on the `services` Services of `pods` pods in `ns`: the
/// cold start, then `flips` Ready flips, then `changes` changes that move no endpoint, then the
/// side by side with kube-controller-manager. Their results in that order; the cold start's
/// also holds the controller's cost after it and after run 4 (before the side by side adds
/// Services).
async fn many_services(
    client: &Client,
    sim: &Simulator,
    ns: &str,
    (services, pods): (usize, usize),
    (flips, changes): (usize, usize),
    log: &std::path::Path,
    t: Instant,
) -> (Value, Value, Value, Value) {
    progress(t, format!("cold start: {services} Services x {pods} pods"));
    let (controller, mut result) = cold_start(client, ns, services, pods, log, t).await;
    controller.settle(Duration::from_secs(2)).await;
    result["cost_after_cold_start"] = controller.cost();
    progress(
        t,
        format!(
            "event latency: {flips} Ready flips with {} pods cached",
            services * pods
        ),
    );
    let latency = latency(client, sim, &controller, ns, (services, pods), flips, t).await;
    progress(t, "changes that move no endpoint");
    let no_op = no_op_changes(client, &controller, ns, (services, pods), changes).await;
    result["cost"] = controller.cost();
    let side = side_by_side(client, sim, &controller, ns, (services, pods), flips, t).await;
    controller.stop();
    (result, latency, no_op, side)
}
