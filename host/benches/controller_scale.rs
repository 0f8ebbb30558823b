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
//!
//! Each run is the real binary in its own process, watching only its scenario's namespace.
//! Writes JSON to `$NSC_BENCH_OUT` (default `<target>/bench/controller_scale.json`).
//! `NSC_BENCH_SCALE` (default 1) divides every count, for a quick look.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a measuring tool: failing loudly is right

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
    time::{Duration, Instant},
};

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::{
    core::v1::{Pod, Service},
    discovery::v1::EndpointSlice,
};
use kube::{
    Api, Client, ResourceExt,
    api::{ListParams, Patch, PatchParams, PostParams},
    runtime::{WatchStreamExt, watcher},
};
use node_sim::{Range, SimNode, Simulator};
use serde_json::{Value, json};

#[allow(dead_code)] // shared with the tests; the benchmark uses part of it
#[path = "../tests/support/mod.rs"]
mod support;

mod cluster;
use cluster::{
    Controller, Flip, Flips, apiserver_slice_writes, env_usize, machine, progress, saw_pod,
    saw_slice, summary,
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

/// Ready endpoints per Service in `ns`, from its EndpointSlices.
async fn ready_endpoints(client: &Client, ns: &str) -> BTreeMap<String, usize> {
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
    let mut counts = BTreeMap::new();
    for slice in api.list(&ListParams::default()).await.unwrap() {
        let Some(service) = slice.labels().get("kubernetes.io/service-name").cloned() else {
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

/// Watches pods and slices of `ns`, stamping when each awaited state shows up in either.
fn watch(client: &Client, ns: &str, flips: &Flips) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
    let f = flips.clone();
    tokio::spawn(async move {
        let mut events = watcher(pods, watcher::Config::default())
            .applied_objects()
            .boxed();
        while let Ok(Some(pod)) = events.try_next().await {
            saw_pod(&f, &pod, Instant::now());
        }
    });
    let f = flips.clone();
    tokio::spawn(async move {
        let mut events = watcher(slices, watcher::Config::default())
            .applied_objects()
            .boxed();
        while let Ok(Some(slice)) = events.try_next().await {
            saw_slice(&f, &slice, Instant::now());
        }
    });
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
    watch(client, ns, &waiting);
    tokio::time::sleep(Duration::from_secs(2)).await; // the watches' initial lists
    let writes_before = controller
        .counter("nad_service_controller_endpointslice_writes_total")
        .await;
    let evaluated_before = controller
        .counter("nad_service_controller_plugin_evaluated_pods_total")
        .await;
    let reconciling_before = reconcile_time(controller).await;
    let api_before = apiserver_slice_writes(client).await;
    let mut state: HashMap<String, bool> = HashMap::new();
    let (mut watch_ms, mut write_ms) = (Vec::new(), Vec::new());
    for i in 0..flips {
        // Spread over the Services and pods, deterministically.
        let index = (i * 7919) % (services * pods);
        let name = format!("svc-{:03}-{:05}", index / pods, index % pods);
        let ready = !state.get(&name).copied().unwrap_or(true);
        let (pod_seen, slice_seen, written) = flip(sim, ns, &waiting, &name, ready).await;
        state.insert(name, ready);
        watch_ms.push(slice_seen.saturating_duration_since(pod_seen).as_secs_f64() * 1e3);
        write_ms.push(slice_seen.saturating_duration_since(written).as_secs_f64() * 1e3);
        if (i + 1) % 100 == 0 {
            progress(t, format!("{ns}: {}/{flips} Ready flips", i + 1));
        }
    }
    controller.settle(Duration::from_secs(2)).await;
    let writes = controller
        .counter("nad_service_controller_endpointslice_writes_total")
        .await
        - writes_before;
    let api_writes = apiserver_slice_writes(client).await - api_before;
    let evaluated = controller
        .counter("nad_service_controller_plugin_evaluated_pods_total")
        .await
        - evaluated_before;
    let (seconds, reconciles) = reconcile_time(controller).await;
    let (seconds, reconciles) = (
        seconds - reconciling_before.0,
        reconciles - reconciling_before.1,
    );
    json!({
        "reconciles_per_flip": reconciles / flips as f64,
        "reconcile_ms_mean": seconds / reconciles.max(1.0) * 1e3,
        "evaluated_pods_per_flip": {
            "all_services": evaluated as f64 / flips as f64,
            "per_service": evaluated as f64 / flips as f64 / services as f64,
            "services_on_the_network": services,
        },
        "pods_cached": services * pods,
        "flips": flips,
        "pod_event_to_slice_event": summary(watch_ms),
        "status_write_response_to_slice_event": summary(write_ms),
        "writes_per_flip": {
            "controller_metric": writes as f64 / flips as f64,
            "apiserver_request_total": api_writes as f64 / flips as f64,
        },
    })
}

/// Sets pod `name`'s Ready to `ready` and waits until the watches saw it in the pod and in its
/// slice: when the pod's event came, when the slice's came, and when the status write's
/// response came.
async fn flip(
    sim: &Simulator,
    ns: &str,
    waiting: &Flips,
    name: &str,
    ready: bool,
) -> (Instant, Instant, Instant) {
    waiting.lock().unwrap().insert(
        name.to_owned(),
        Flip {
            want: ready,
            ..Flip::default()
        },
    );
    sim.set_ready(ns, name, ready).await.unwrap();
    waiting.lock().unwrap().get_mut(name).unwrap().written = Some(Instant::now());
    let deadline = Instant::now() + Duration::from_secs(30);
    let seen = loop {
        {
            let waiting = waiting.lock().unwrap();
            let p = &waiting[name];
            if let (Some(a), Some(b), Some(w)) = (p.pod_seen, p.slice_seen, p.written) {
                break (a, b, w);
            }
        }
        assert!(
            Instant::now() < deadline,
            "{name}: Ready={ready} not in its slice after 30 s"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    waiting.lock().unwrap().remove(name);
    seen
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
    let (wide_result, latency, no_op) = many_services(
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
        "machine": machine(),
        "kubernetes": version.git_version,
        "setup_seconds": populated,
        "cold_start_one_service": big_result,
        "cold_start_many_services": wide_result,
        "event_latency": latency,
        "no_op_changes": no_op,
        "churn": churn,
    });
    std::fs::write(&out, serde_json::to_vec_pretty(&result).unwrap()).unwrap();
    progress(t, format!("wrote {}", out.display()));
    println!("{}", serde_json::to_string_pretty(&result).unwrap());
}

/// The node simulator with its nodes, and the task that keeps them alive.
async fn start_simulator(client: &Client) -> (Arc<Simulator>, tokio::task::JoinHandle<()>) {
    let sim = Arc::new(simulator(client));
    sim.ensure_nodes().await.unwrap();
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

/// Runs 2 to 4 on one controller, on the `services` Services of `pods` pods in `ns`: the cold
/// start, then `flips` Ready flips, then `changes` changes that move no endpoint. Their
/// results in that order; the cold start's also holds the controller's cost after it and at
/// the end.
async fn many_services(
    client: &Client,
    sim: &Simulator,
    ns: &str,
    (services, pods): (usize, usize),
    (flips, changes): (usize, usize),
    log: &std::path::Path,
    t: Instant,
) -> (Value, Value, Value) {
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
    controller.stop();
    (result, latency, no_op)
}
