//! The Kubernetes scalability envelope (`make bench-scale`; not in `make bench`, it takes long):
//! 150 000 pods and 10 000 Services, 15 pods each, on 100 networks (100 Services per network,
//! so each Service's policy sees 1 500 candidates), on the real local control plane, the node
//! simulator's nodes, and the controller binary.
//!
//! 1. Cold start: the controller starts with every pod and Service there and no slice; the time
//!    until every Service's slice holds its 15 ready endpoints, from a watch on the slices.
//! 2. Ready flips, one at a time, spread over the Services and networks: the time from the pod's
//!    watch event to the slice's, and, as the API server's own floor, from sending the pod's
//!    status write to its watch event.
//! 3. Writes per flip, and the API server's own mean time per slice write in each phase.
//! 4. The controller's peak RSS and CPU seconds.
//! 5. The API's own time for the cold start's writes: after the controller stopped, a plain
//!    client makes the same slice creates (copies of the controller's slices, applied as it
//!    applies them) in a scratch namespace, as many at once as the controller's
//!    `--concurrent-syncs`; the cold start is measured against it.
//!
//! `NSC_BENCH_SOURCE=claims` is the claim variant: the Services name a DeviceClass of their
//! network (`isim.dev/device-class`) and each pod gets its address from a ResourceClaim of its
//! own, allocated and reserved for it, its status as DRANET writes it (one claim a pod; no
//! Multus annotations), instead of from `network-status`.
//!
//! Setting the pods up takes most of the run: each pod is one create (bound to a simulated node,
//! its network-status already set) and one status write; the simulated nodes' heartbeats run
//! from the start to the end (a node without them goes NotReady, and the controller manager
//! then marks every pod on it not ready). `NSC_BENCH_KEEP=1` keeps the namespace afterwards for
//! a look; the next run removes it first. `NSC_BENCH_SCALE` (default 1) divides the number of
//! Services and networks (100 Services per network stay), for a quick look. JSON goes to
//! `$NSC_BENCH_OUT`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a measuring tool: failing loudly is right

use std::{
    net::Ipv4Addr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use futures::{StreamExt, stream};
use k8s_openapi::api::{
    core::v1::{Namespace, Pod, Service},
    discovery::v1::EndpointSlice,
    resource::v1::{DeviceClass, ResourceClaim},
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent},
};
use nad_model::labels::MANAGED_BY;
use node_sim::{SimNode, Simulator};
use serde_json::{Value, json};

#[allow(dead_code)] // shared with the tests; the benchmark uses part of it
#[path = "../tests/support/mod.rs"]
mod support;

mod cluster;
use cluster::{
    CONCURRENT_SYNCS, Controller, Flip, Flips, SliceTally, api_mean_ms, apiserver_slice_write_time,
    apiserver_slice_writes, commit, control_plane_cpu, cpu_spent, env_usize, machine, progress,
    saw_pod, saw_slice, summary, watch_from_now,
};

const NAMESPACE: &str = "bench-envelope";
/// Where the plain client's slices go, out of the controller's sight.
const SCRATCH: &str = "bench-envelope-plain";
const SERVICES_PER_NETWORK: usize = 100;
const PODS_PER_SERVICE: usize = 15;
const NODES: usize = 4;

/// Where the pods' secondary addresses come from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Source {
    /// Multus' `network-status` annotation, the network a NetworkAttachmentDefinition.
    Multus,
    /// A ResourceClaim a pod, the network a DeviceClass.
    Claims,
}

impl Source {
    fn from_env() -> Self {
        match std::env::var("NSC_BENCH_SOURCE").as_deref() {
            Ok("claims") => Self::Claims,
            Ok("multus") | Err(_) => Self::Multus,
            Ok(other) => panic!("NSC_BENCH_SOURCE is multus or claims, not {other}"),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Multus => "multus",
            Self::Claims => "claims",
        }
    }
}

/// Which Service, network and addresses pod `i` has: everything is a function of the index, so
/// a run that finds the pods already there knows them without reading them.
#[derive(Clone, Copy)]
struct Layout {
    services: usize,
    source: Source,
}

impl Layout {
    fn pods(self) -> usize {
        self.services * PODS_PER_SERVICE
    }

    fn networks(self) -> usize {
        (self.services / SERVICES_PER_NETWORK).max(1)
    }

    fn service(s: usize) -> String {
        format!("svc-{s:05}")
    }

    fn network(self, s: usize) -> String {
        format!("net-{:02}", s % self.networks())
    }

    fn pod(i: usize) -> String {
        format!(
            "{}-{:02}",
            Self::service(i / PODS_PER_SERVICE),
            i % PODS_PER_SERVICE
        )
    }

    /// The `i`th host address of `base`, skipping each /24's .0 and .255.
    fn address(base: Ipv4Addr, i: usize) -> String {
        let offset = (i / 254) * 256 + i % 254 + 1;
        Ipv4Addr::from(u32::from(base) + u32::try_from(offset).unwrap()).to_string()
    }

    fn body(self, i: usize) -> Value {
        let s = i / PODS_PER_SERVICE;
        let network = self.network(s);
        let primary = Self::address(Ipv4Addr::new(10, 0, 0, 0), i);
        let secondary = Self::address(Ipv4Addr::new(10, 128, 0, 0), i);
        let mut body = json!({
            "metadata": {
                "name": Self::pod(i),
                "labels": {"app": Self::service(s), "pod-template-hash": "5d8c7f9b6"},
            },
            "spec": {
                "nodeName": Self::node(i),
                "containers": [{"name": "web", "image": "nginx:1.27",
                                "ports": [{"name": "http", "containerPort": 8080}]}],
            },
        });
        match self.source {
            Source::Multus => {
                let status = json!([
                    {"name": "sim-default", "interface": "eth0", "ips": [primary], "default": true, "dns": {}},
                    {"name": format!("{NAMESPACE}/{network}"), "interface": "net1", "ips": [secondary], "dns": {}},
                ]);
                body["metadata"]["annotations"] = json!({
                    node_sim::NETWORKS_ANNOTATION: network,
                    node_sim::NETWORK_STATUS_ANNOTATION: status.to_string(),
                });
            }
            Source::Claims => {
                body["spec"]["resourceClaims"] =
                    json!([{"name": "nic", "resourceClaimName": Self::claim(i)}]);
            }
        }
        body
    }

    fn node(i: usize) -> String {
        format!("sim-node-{}", i % NODES)
    }

    fn claim(i: usize) -> String {
        format!("{}-nic", Self::pod(i))
    }

    /// Pod `i`'s claim: one device of its network's DeviceClass.
    fn claim_body(self, i: usize) -> Value {
        let class = self.network(i / PODS_PER_SERVICE);
        json!({
            "metadata": {"name": Self::claim(i)},
            "spec": {"devices": {"requests": [{"name": "nic", "exactly": {"deviceClassName": class}}]}},
        })
    }

    /// Pod `i`'s claim's status: allocated on the pod's node, reserved for the pod, and the
    /// device as DRANET reports it (interface, address in CIDR form, Ready and NetworkReady).
    fn claim_status(i: usize, pod_uid: &str) -> Value {
        let node = Self::node(i);
        let device = format!("nic-{i}");
        let secondary = Self::address(Ipv4Addr::new(10, 128, 0, 0), i);
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        let condition = |type_: &str, reason: &str| {
            json!({"type": type_, "status": "True",
            "reason": reason, "message": "", "lastTransitionTime": now})
        };
        json!({"status": {
            "allocation": {"devices": {"results": [
                {"request": "nic", "driver": "dra.net", "pool": node, "device": device}]}},
            "reservedFor": [{"resource": "pods", "name": Self::pod(i), "uid": pod_uid}],
            "devices": [{"driver": "dra.net", "pool": node, "device": device,
                "conditions": [condition("Ready", "NetworkDeviceReady"),
                               condition("NetworkReady", "NetworkReady")],
                "networkData": {"interfaceName": "net1", "hardwareAddress": "02:42:c0:a8:32:04",
                                "ips": [format!("{secondary}/16")]}}],
        }})
    }

    fn status(i: usize) -> Value {
        let primary = Self::address(Ipv4Addr::new(10, 0, 0, 0), i);
        json!({"status": {
            "phase": "Running",
            "hostIP": "127.0.0.1",
            "podIP": primary,
            "podIPs": [{"ip": primary}],
            "startTime": k8s_openapi::jiff::Timestamp::now().to_string(),
            "conditions": node_sim::conditions(true),
        }})
    }
}

fn simulator(client: &Client) -> Simulator {
    let config = node_sim::Config {
        nodes: (0..NODES)
            .map(|i| SimNode {
                name: format!("sim-node-{i}"),
                zone: Some(format!("zone-{}", ["a", "b"][i % 2])),
            })
            .collect(),
        ..node_sim::Config::default()
    };
    Simulator::new(client.clone(), config)
}

/// Removes what a kept run left of the namespace, and waits until it is gone.
async fn remove_kept_namespace(client: &Client, t: Instant) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if namespaces.get_opt(NAMESPACE).await.unwrap().is_some() {
        progress(t, format!("removing the {NAMESPACE} a previous run kept"));
        node_sim::delete_test_namespace(client, NAMESPACE).await;
    }
    let deadline = Instant::now() + Duration::from_secs(900);
    while namespaces.get_opt(NAMESPACE).await.unwrap().is_some() {
        assert!(
            Instant::now() < deadline,
            "{NAMESPACE} still there after 900 s"
        );
        tokio::time::sleep(Duration::from_secs(5)).await;
        // Pods the namespace controller deletes gracefully stay Terminating: no kubelet ends
        // them on the simulated nodes. A large delete may also have stopped short (the claim
        // variant's). Delete what is left at once, again.
        node_sim::delete_test_namespace(client, NAMESPACE).await;
    }
}

/// The networks: NetworkAttachmentDefinitions, or the claim variant's DeviceClasses.
async fn define_networks(client: &Client, layout: Layout) {
    let networks: Vec<String> = (0..layout.networks()).map(|s| layout.network(s)).collect();
    match layout.source {
        Source::Multus => {
            let networks: Vec<&str> = networks.iter().map(String::as_str).collect();
            node_sim::define_networks(client, NAMESPACE, &networks)
                .await
                .unwrap();
        }
        Source::Claims => {
            let classes: Api<DeviceClass> = Api::all(client.clone());
            for class in &networks {
                create_if_missing(&classes, json!({"metadata": {"name": class}, "spec": {}})).await;
            }
        }
    }
}

/// Creates the namespace, the Services and the pods (created and started), after removing
/// what a kept run left.
async fn populate(client: &Client, layout: Layout, t: Instant) -> f64 {
    let started = Instant::now();
    remove_kept_namespace(client, t).await;
    node_sim::create_test_namespace(client, NAMESPACE)
        .await
        .unwrap();
    define_networks(client, layout).await;
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), NAMESPACE);
    let services: Api<Service> = Api::namespaced(client.clone(), NAMESPACE);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let done = AtomicUsize::new(0);
    stream::iter(0..layout.services)
        .map(|s| {
            let services = services.clone();
            async move {
                let annotation = match layout.source {
                    Source::Multus => "isim.dev/network",
                    Source::Claims => "isim.dev/device-class",
                };
                let body = json!({
                    "metadata": {"name": Layout::service(s), "labels": {"app": Layout::service(s)},
                                 "annotations": {annotation: layout.network(s)}},
                    "spec": {"clusterIP": "None",
                             "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
                });
                create_if_missing(&services, body).await;
            }
        })
        .buffer_unordered(16)
        .collect::<()>()
        .await;
    progress(t, format!("{NAMESPACE}: {} Services", layout.services));
    stream::iter(0..layout.pods())
        .map(|i| {
            let (pods, claims, done) = (pods.clone(), claims.clone(), &done);
            async move {
                let uid = create_if_missing(&pods, layout.body(i)).await;
                if layout.source == Source::Claims {
                    create_if_missing(&claims, layout.claim_body(i)).await;
                    claims
                        .patch_status(
                            &Layout::claim(i),
                            &PatchParams::default(),
                            &Patch::Merge(&Layout::claim_status(i, &uid)),
                        )
                        .await
                        .unwrap();
                }
                pods.patch_status(
                    &Layout::pod(i),
                    &PatchParams::default(),
                    &Patch::Merge(&Layout::status(i)),
                )
                .await
                .unwrap();
                let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                if n % 10_000 == 0 || n == layout.pods() {
                    progress(
                        t,
                        format!("{NAMESPACE}: {n}/{} pods running", layout.pods()),
                    );
                }
            }
        })
        .buffer_unordered(32)
        .collect::<()>()
        .await;
    started.elapsed().as_secs_f64()
}

/// Creates the object unless it exists; returns its UID.
async fn create_if_missing<K>(api: &Api<K>, body: Value) -> String
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let object: K = serde_json::from_value(body).unwrap();
    let made = match api.create(&PostParams::default(), &object).await {
        Ok(made) => made,
        Err(kube::Error::Api(status)) if status.code == 409 => {
            api.get(&object.name_any()).await.unwrap()
        }
        Err(e) => panic!("creating {}: {e}", object.name_any()),
    };
    made.uid().unwrap_or_default()
}

/// Deletes every slice in the namespace and waits until none is left.
async fn remove_slices(client: &Client) {
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), NAMESPACE);
    let _ = api
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await;
    let deadline = Instant::now() + Duration::from_secs(600);
    while !api
        .list_metadata(&ListParams::default().limit(1))
        .await
        .unwrap()
        .items
        .is_empty()
    {
        assert!(Instant::now() < deadline, "slices still there after 600 s");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn cold_start(
    client: &Client,
    layout: Layout,
    log: &std::path::Path,
    t: Instant,
) -> (Controller, Value) {
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), NAMESPACE);
    let want = (0..layout.services)
        .map(|s| (Layout::service(s), PODS_PER_SERVICE))
        .collect();
    let tally = Arc::new(Mutex::new(SliceTally::new(MANAGED_BY, want)));
    let watching = watch_from_now(slices, {
        let tally = tally.clone();
        move |event| tally.lock().unwrap().on(event)
    })
    .await;
    let time_before = apiserver_slice_write_time(client).await;
    let kubeconfig = support::kubeconfig_path();
    let cpu_before = control_plane_cpu(&kubeconfig);
    let controller = Controller::start(NAMESPACE, log);
    let deadline = Instant::now() + Duration::from_secs(290);
    let mut reported = 0;
    loop {
        let correct = tally.lock().unwrap().correct;
        if correct == layout.services {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{NAMESPACE}: {correct} of {} Services correct after 290 s",
            layout.services
        );
        if correct >= reported + layout.services / 10 {
            progress(
                t,
                format!(
                    "{NAMESPACE}: {correct}/{} Services correct",
                    layout.services
                ),
            );
            reported = correct;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let seconds = controller.started.elapsed().as_secs_f64();
    let control_plane = cpu_spent(&cpu_before, &control_plane_cpu(&kubeconfig));
    let cost = controller.cost();
    watching.abort();
    progress(
        t,
        format!("{NAMESPACE}: every slice correct {seconds:.2} s after the controller started"),
    );
    controller.settle(Duration::from_secs(3)).await;
    let time_after = apiserver_slice_write_time(client).await;
    let writes = controller
        .counter("nad_service_controller_endpointslice_writes_total")
        .await;
    let result = json!({
        "services": layout.services,
        "pods": layout.pods(),
        "networks": layout.networks(),
        "seconds_to_correct_slices": seconds,
        "slice_writes": writes,
        "apiserver_ms_per_slice_write": api_mean_ms(time_before, time_after),
        "cost": cost,
        "control_plane_cpu_seconds": control_plane,
    });
    (controller, result)
}

/// Watches pods and slices from now on (no initial list), stamping each awaited state.
async fn watch_flips(client: &Client, flips: &Flips) -> Vec<tokio::task::JoinHandle<()>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), NAMESPACE);
    let on_pods = watch_from_now(pods, {
        let flips = flips.clone();
        move |event| {
            if let WatchEvent::Modified(pod) = event {
                saw_pod(&flips, &pod, Instant::now());
            }
        }
    })
    .await;
    let on_slices = watch_from_now(slices, {
        let flips = flips.clone();
        move |event| {
            if let WatchEvent::Added(slice) | WatchEvent::Modified(slice) = event {
                saw_slice(&flips, &slice, Instant::now());
            }
        }
    })
    .await;
    vec![on_pods, on_slices]
}

/// Flips the Ready condition of `count` pods, one at a time, each twice (out and back).
async fn flips(
    client: &Client,
    sim: &Simulator,
    controller: &Controller,
    layout: Layout,
    count: usize,
    t: Instant,
) -> Value {
    let flips: Flips = Arc::default();
    let watches = watch_flips(client, &flips).await;
    let writes_before = controller
        .counter("nad_service_controller_endpointslice_writes_total")
        .await;
    let api_before = apiserver_slice_writes(client).await;
    let time_before = apiserver_slice_write_time(client).await;
    let mut seen = Vec::with_capacity(2 * count);
    for i in 0..count {
        // Spread over the Services, networks and pods, deterministically.
        let name = Layout::pod((i * 7919) % layout.pods());
        for want in [false, true] {
            let ours = |f: &Flip| f.pod_seen.is_some() && f.slice_seen.is_some();
            seen.push(cluster::flip(sim, NAMESPACE, &flips, &name, want, ours).await);
        }
        if (i + 1) % 100 == 0 {
            progress(
                t,
                format!("{NAMESPACE}: {}/{count} pods flipped out and back", i + 1),
            );
        }
    }
    controller.settle(Duration::from_secs(2)).await;
    for watch in watches {
        watch.abort();
    }
    let flipped = (2 * count) as f64;
    let writes = controller
        .counter("nad_service_controller_endpointslice_writes_total")
        .await
        - writes_before;
    let api_writes = apiserver_slice_writes(client).await - api_before;
    json!({
        "flips": 2 * count,
        "pod_event_to_slice_event": summary(seen.iter().map(Flip::latency_ms).collect()),
        "apiserver_status_write_to_pod_event": summary(seen.iter().map(Flip::api_ms).collect()),
        "apiserver_ms_per_slice_write": api_mean_ms(time_before, apiserver_slice_write_time(client).await),
        "writes_per_flip": {
            "controller_metric": writes as f64 / flipped,
            "apiserver_request_total": api_writes as f64 / flipped,
        },
    })
}

// ---- the API's own time for the same writes -----------------------------------------------------

/// The controller's slices in `NAMESPACE` as it applies them: without what the API server adds
/// (identity, versions, managed fields) and without owner references, whose owners (the
/// Services) are not in the scratch namespace: the garbage collector would delete the copies.
async fn slices_as_written(client: &Client) -> Vec<EndpointSlice> {
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), NAMESPACE);
    let mut params = ListParams::default().limit(500);
    let mut slices = Vec::new();
    loop {
        let page = api.list(&params).await.unwrap();
        for mut slice in page.items {
            let name = slice.name_any();
            slice.metadata = kube::api::ObjectMeta {
                name: Some(name),
                labels: slice.metadata.labels,
                annotations: slice.metadata.annotations,
                ..kube::api::ObjectMeta::default()
            };
            slices.push(slice);
        }
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return slices,
        }
    }
}

/// Creates the scratch namespace afresh (removing what an interrupted run left).
async fn scratch_namespace(client: &Client) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let _ = namespaces.delete(SCRATCH, &DeleteParams::default()).await;
    let deadline = Instant::now() + Duration::from_secs(300);
    while namespaces.get_opt(SCRATCH).await.unwrap().is_some() {
        assert!(
            Instant::now() < deadline,
            "{SCRATCH} still there after 300 s"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let body = json!({"metadata": {"name": SCRATCH, "labels": {"nsc-test": "true"}}});
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(body).unwrap(),
        )
        .await
        .unwrap();
}

/// A plain kube client makes the cold start's slice writes, each a create of its slice (the
/// controller's kind of write), `CONCURRENT_SYNCS` at a time, in the scratch namespace, which
/// is deleted afterwards: the time the API takes for the writes alone.
async fn plain_client_writes(client: &Client, t: Instant) -> Value {
    let slices = slices_as_written(client).await;
    scratch_namespace(client).await;
    let plain = support::client().await;
    let api: Api<EndpointSlice> = Api::namespaced(plain, SCRATCH);
    let params = PostParams {
        field_manager: Some("bench-plain-client".into()),
        ..PostParams::default()
    };
    let time_before = apiserver_slice_write_time(client).await;
    let started = Instant::now();
    let count = slices.len();
    stream::iter(slices)
        .map(|slice| {
            let (api, params) = (api.clone(), params.clone());
            async move {
                api.create(&params, &slice).await.unwrap();
            }
        })
        .buffer_unordered(CONCURRENT_SYNCS)
        .collect::<()>()
        .await;
    let seconds = started.elapsed().as_secs_f64();
    let time_after = apiserver_slice_write_time(client).await;
    progress(
        t,
        format!("{SCRATCH}: a plain client made the {count} slice writes in {seconds:.1} s"),
    );
    let _ = Api::<Namespace>::all(client.clone())
        .delete(SCRATCH, &DeleteParams::default())
        .await;
    json!({
        "slice_writes": count,
        "concurrency": CONCURRENT_SYNCS,
        "seconds": seconds,
        "apiserver_ms_per_slice_write": api_mean_ms(time_before, time_after),
    })
}

fn main() {
    cluster::main(run());
}

async fn run() {
    let t = Instant::now();
    let layout = Layout {
        services: 10_000 / env_usize("NSC_BENCH_SCALE", 1).max(1),
        source: Source::from_env(),
    };
    let flip_count = env_usize("NSC_BENCH_FLIPS", 250);
    let out = cluster::output("controller_envelope.json");
    let log = out.with_file_name("controller-envelope.log");

    let client = support::client().await;
    let version = client.apiserver_version().await.unwrap_or_else(|e| {
        panic!("no control plane ({e}); start it with make local-up (make bench-scale does)")
    });
    progress(
        t,
        format!(
            "API server {}; {} Services x {PODS_PER_SERVICE} pods on {} networks, addresses from {}",
            version.git_version,
            layout.services,
            layout.networks(),
            layout.source.name()
        ),
    );
    let sim = Arc::new(simulator(&client));
    cluster::revive_nodes(&client, &sim).await;
    let heartbeat = tokio::spawn({
        let sim = sim.clone();
        async move {
            let _ = sim.heartbeat().await;
        }
    });
    let setup_seconds = populate(&client, layout, t).await;
    remove_slices(&client).await;

    progress(t, "cold start");
    let (controller, cold) = cold_start(&client, layout, &log, t).await;
    progress(
        t,
        format!("{flip_count} pods flipped out of Ready and back, one at a time"),
    );
    let flips = flips(&client, &sim, &controller, layout, flip_count, t).await;
    let cost = controller.cost();
    controller.stop();
    progress(t, "the same slice writes by a plain client");
    let plain = plain_client_writes(&client, t).await;

    let result = json!({
        "commit": commit(),
        "machine": machine(),
        "kubernetes": version.git_version,
        "date": k8s_openapi::jiff::Timestamp::now().strftime("%Y-%m-%d").to_string(),
        "source": layout.source.name(),
        "setup_seconds": setup_seconds,
        "pods_per_service": PODS_PER_SERVICE,
        "cold_start": cold,
        "plain_client_writes": plain,
        "flips": flips,
        "cost": cost,
    });
    std::fs::write(&out, serde_json::to_vec_pretty(&result).unwrap()).unwrap();
    progress(t, format!("wrote {}", out.display()));
    println!("{}", serde_json::to_string_pretty(&result).unwrap());
    // After the result is written: removing 150 000 pods takes minutes.
    if std::env::var_os("NSC_BENCH_KEEP").is_none() {
        progress(t, format!("removing {NAMESPACE}"));
        node_sim::delete_test_namespace(&client, NAMESPACE).await;
    }
    heartbeat.abort();
}
