//! Heap per cached pod: what the pod index and the shared observations keep of each pod; heap
//! per cached claim: what the pod index keeps of each ResourceClaim of a pod on a DRA network
//! (the envelope benchmark's claim variant: one claim a pod); and heap per cached slice: what
//! the slice store keeps of each of this controller's slices, against the whole object a
//! reflector store keeps.
//!
//! Feeds the index the pods of the scalability envelope's shape (`make bench-scale`: 15 pods a
//! Service, 100 Services a network, the Multus network-status of a primary and one secondary
//! network, the default plugin's kept labels) as one relist, then observes every network once,
//! as the Services of a network share one observation. The pods' slices (one of 15 endpoints
//! a Service, as the API server returns them) are fed to a [`SliceStore`], then kept whole.
//! Counted by `dhat`'s heap statistics (bytes asked of the allocator and live blocks; the
//! allocator's own rounding and headers come on top, about 8 to 16 bytes a block with glibc). Not timed. `NSC_BENCH_PODS` sets the number
//! of pods (default 15 000); JSON goes to `$NSC_BENCH_OUT` when set.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a measuring tool: failing loudly is right

use std::{collections::HashMap, net::Ipv4Addr, sync::Arc};

use k8s_openapi::api::{core::v1::Pod, discovery::v1::EndpointSlice, resource::v1::ResourceClaim};
use k8s_openapi::jiff::Timestamp;
use nad_core::{
    index::{NodeZones, PodIndex, SliceStore},
    observe,
};
use nad_model::input::target::{self, ServiceTarget, Target};
use nad_model::keys::{KeySet, Keys};
use nad_model::watch::Event;
use serde_json::json;

#[global_allocator]
static ALLOCATOR: dhat::Alloc = dhat::Alloc;

const NAMESPACE: &str = "bench-envelope";
const PODS_PER_SERVICE: usize = 15;
const PODS_PER_NETWORK: usize = 1_500;
const NODES: usize = 4;

fn address(base: Ipv4Addr, i: usize) -> String {
    let offset = (i / 254) * 256 + i % 254 + 1;
    Ipv4Addr::from(u32::from(base) + u32::try_from(offset).unwrap()).to_string()
}

/// Pod `i` as the envelope benchmark creates it, after the node simulator started it.
fn pod(i: usize) -> Pod {
    let service = format!("svc-{:05}", i / PODS_PER_SERVICE);
    let network = format!("net-{:02}", i / PODS_PER_NETWORK);
    let (primary, secondary) = (
        address(Ipv4Addr::new(10, 0, 0, 0), i),
        address(Ipv4Addr::new(10, 128, 0, 0), i),
    );
    let status = json!([
        {"name": "sim-default", "interface": "eth0", "ips": [primary], "default": true, "dns": {}},
        {"name": format!("{NAMESPACE}/{network}"), "interface": "net1", "ips": [secondary], "dns": {}},
    ]);
    let condition = |type_: &str| json!({"type": type_, "status": "True", "lastTransitionTime": "2026-12-01T10:00:00Z"});
    serde_json::from_value(json!({
        "metadata": {
            "name": format!("{service}-{:02}", i % PODS_PER_SERVICE),
            "namespace": NAMESPACE,
            "uid": format!("6f1c2a3b-4d5e-4f60-8a7b-{i:012x}"),
            "creationTimestamp": "2026-12-01T10:00:00Z",
            "labels": {"app": service, "pod-template-hash": "5d8c7f9b6"},
            "annotations": {
                "k8s.v1.cni.cncf.io/networks": network,
                "k8s.v1.cni.cncf.io/network-status": status.to_string(),
            },
        },
        "spec": {
            "nodeName": format!("sim-node-{}", i % NODES),
            "containers": [{"name": "web", "image": "nginx:1.27",
                            "ports": [{"name": "http", "containerPort": 8080}]}],
        },
        "status": {
            "phase": "Running",
            "podIP": primary,
            "podIPs": [{"ip": primary}],
            "conditions": [condition("PodScheduled"), condition("Initialized"),
                           condition("ContainersReady"), condition("Ready")],
        },
    }))
    .unwrap()
}

/// The slice of Service `s` as the API server returns it: its 15 pods, Ready.
fn slice(s: usize) -> EndpointSlice {
    let service = format!("svc-{s:05}");
    let endpoints: Vec<_> = (s * PODS_PER_SERVICE..(s + 1) * PODS_PER_SERVICE)
        .map(|i| {
            json!({
                "addresses": [address(Ipv4Addr::new(10, 128, 0, 0), i)],
                "conditions": {"ready": true, "serving": true, "terminating": false},
                "nodeName": format!("sim-node-{}", i % NODES),
                "targetRef": {"kind": "Pod", "namespace": NAMESPACE,
                              "name": format!("{service}-{:02}", i % PODS_PER_SERVICE),
                              "uid": format!("6f1c2a3b-4d5e-4f60-8a7b-{i:012x}")},
            })
        })
        .collect();
    serde_json::from_value(json!({
        "metadata": {
            "name": format!("{service}-ipv4-0"),
            "namespace": NAMESPACE,
            "uid": format!("7a1c2a3b-4d5e-4f60-8a7b-{s:012x}"),
            "resourceVersion": format!("{}", 1_000_000 + s),
            "generation": 1,
            "creationTimestamp": "2026-12-01T10:00:00Z",
            "labels": {"kubernetes.io/service-name": service,
                       "endpointslice.kubernetes.io/managed-by": "nad-service-controller.isim.dev",
                       "service.kubernetes.io/headless": ""},
            "annotations": {"endpoints.kubernetes.io/last-change-trigger-time": "2026-12-01T10:00:00Z"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": service,
                                 "uid": format!("8b1c2a3b-4d5e-4f60-8a7b-{s:012x}"), "controller": true}],
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": endpoints,
    }))
    .unwrap()
}

/// Pod `i` as the envelope benchmark's claim variant creates it: no Multus annotations, its
/// one claim `<pod>-nic` named in `spec.resourceClaims`.
fn dra_pod(i: usize) -> Pod {
    let mut pod = pod(i);
    pod.metadata.annotations = None;
    let claim = format!("{}-nic", pod.metadata.name.as_deref().unwrap());
    pod.spec.as_mut().unwrap().resource_claims = Some(vec![
        serde_json::from_value(json!({"name": "nic", "resourceClaimName": claim})).unwrap(),
    ]);
    pod
}

/// Pod `i`'s claim as the envelope benchmark's claim variant writes it: allocated one device of
/// the network's DeviceClass on the pod's node, reserved for the pod, its status as DRANET
/// writes it (interface, hardware address, the address in CIDR form, Ready and NetworkReady).
fn claim(i: usize) -> ResourceClaim {
    let pod = format!(
        "svc-{:05}-{:02}",
        i / PODS_PER_SERVICE,
        i % PODS_PER_SERVICE
    );
    let class = format!("net-{:02}", i / PODS_PER_NETWORK);
    let node = format!("sim-node-{}", i % NODES);
    let condition = |type_: &str, reason: &str| {
        json!({"type": type_, "status": "True",
        "reason": reason, "message": "", "lastTransitionTime": "2026-12-01T10:00:00Z"})
    };
    serde_json::from_value(json!({
        "metadata": {"name": format!("{pod}-nic"), "namespace": NAMESPACE,
                     "uid": format!("9c1c2a3b-4d5e-4f60-8a7b-{i:012x}"),
                     "resourceVersion": format!("{}", 2_000_000 + i),
                     "creationTimestamp": "2026-12-01T10:00:00Z"},
        "spec": {"devices": {"requests": [{"name": "nic", "exactly": {"deviceClassName": class}}]}},
        "status": {
            "allocation": {"devices": {"results": [
                {"request": "nic", "driver": "dra.net", "pool": node, "device": format!("nic-{i}")}]}},
            "reservedFor": [{"resource": "pods", "name": pod,
                             "uid": format!("6f1c2a3b-4d5e-4f60-8a7b-{i:012x}")}],
            "devices": [{"driver": "dra.net", "pool": node, "device": format!("nic-{i}"),
                "conditions": [condition("Ready", "NetworkDeviceReady"), condition("NetworkReady", "NetworkReady")],
                "networkData": {"interfaceName": "net1", "hardwareAddress": "02:42:c0:a8:32:04",
                    "ips": [format!("{}/16", address(Ipv4Addr::new(10, 128, 0, 0), i))]}}],
        },
    }))
    .unwrap()
}

/// Heap per cached claim: `pods` pods of the claim variant's shape fed to a pod index as one
/// relist, then their claims (one a pod) as the claims' relist. A claim's cost is its record,
/// the index's maps, and its pod's record made again with the device's attachment.
fn claim_memory(pods: usize, keys: &Keys) -> serde_json::Value {
    let mut index = PodIndex::new(keys.clone());
    index.expect_claims();
    let (before, before_blocks) = heap();
    index.on_event(Event::Init, Timestamp::UNIX_EPOCH);
    for i in 0..pods {
        index.on_event(Event::InitApply(&dra_pod(i)), Timestamp::UNIX_EPOCH);
    }
    index.on_event(Event::InitDone, Timestamp::UNIX_EPOCH);
    let (pods_bytes, pods_blocks) = heap();
    index.on_claim_event(Event::Init, Timestamp::UNIX_EPOCH);
    for i in 0..pods {
        index.on_claim_event(Event::InitApply(&claim(i)), Timestamp::UNIX_EPOCH);
    }
    index.on_claim_event(Event::InitDone, Timestamp::UNIX_EPOCH);
    let (claims_bytes, claims_blocks) = heap();
    assert_eq!(index.claim_count(), pods);
    assert!(index.claims_synced());
    #[allow(clippy::cast_precision_loss)]
    let per = |b: usize, a: usize| (b - a) as f64 / pods as f64;
    json!({
        "claims": pods,
        "claim_pod_index_bytes_per_pod": per(pods_bytes, before),
        "claim_pod_index_blocks_per_pod": per(pods_blocks, before_blocks),
        "claim_bytes_per_claim": per(claims_bytes, pods_bytes),
        "claim_blocks_per_claim": per(claims_blocks, pods_blocks),
    })
}

fn target(network: usize) -> ServiceTarget {
    let service = serde_json::from_value(json!({
        "metadata": {"name": "svc", "namespace": NAMESPACE, "uid": "s",
                     "annotations": {"isim.dev/network": format!("net-{network:02}")}},
        "spec": {"clusterIP": "None", "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
    }))
    .unwrap();
    match target::classify(&service) {
        Target::Managed(target) => (*target).clone(),
        other => panic!("not a managed Service: {other:?}"),
    }
}

fn heap() -> (usize, usize) {
    let stats = dhat::HeapStats::get();
    (stats.curr_bytes, stats.curr_blocks)
}

/// Heap per slice of `services` slices (one a Service): kept by the slice store, and whole.
fn slice_memory(services: usize) -> serde_json::Value {
    let mut store = SliceStore::default();
    let (before_slices, before_slice_blocks) = heap();
    store.on_event(Event::Init);
    for s in 0..services {
        store.on_event(Event::InitApply(&slice(s)));
    }
    store.on_event(Event::InitDone);
    let (stored_bytes, stored_blocks) = heap();
    assert_eq!(
        store.counts(),
        (services, 0),
        "every slice kept as a record"
    );
    // Whole, keyed by namespace and name: less than a reflector store, whose keys hold more.
    let whole: HashMap<(String, String), Arc<EndpointSlice>> = (0..services)
        .map(|s| {
            let slice = slice(s);
            let key = (NAMESPACE.to_owned(), slice.metadata.name.clone().unwrap());
            (key, Arc::new(slice))
        })
        .collect();
    let (whole_bytes, whole_blocks) = heap();
    assert_eq!(whole.len(), services);
    #[allow(clippy::cast_precision_loss)]
    let per_slice = |b: usize, a: usize| (b - a) as f64 / services as f64;
    json!({
        "slices": services,
        "endpoints_per_slice": PODS_PER_SERVICE,
        "store_bytes_per_slice": per_slice(stored_bytes, before_slices),
        "store_blocks_per_slice": per_slice(stored_blocks, before_slice_blocks),
        "whole_bytes_per_slice": per_slice(whole_bytes, stored_bytes),
        "whole_blocks_per_slice": per_slice(whole_blocks, stored_blocks),
    })
}

fn main() {
    let _profiler = dhat::Profiler::builder().testing().build();
    let pods: usize = std::env::var("NSC_BENCH_PODS")
        .ok()
        .map_or(15_000, |v| v.parse().expect("NSC_BENCH_PODS is a number"));
    let networks = pods.div_ceil(PODS_PER_NETWORK);
    // The default plugin's declared label keys.
    let keys = Keys {
        labels: KeySet::only(["app.kubernetes.io/name", "app"]),
        ..Keys::default()
    };
    let mut index = PodIndex::new(keys.clone());
    let mut zones = NodeZones::default();
    for n in 0..NODES {
        let node = serde_json::from_value(json!({"metadata": {"name": format!("sim-node-{n}")}}));
        zones.on_event(Event::Apply(&node.unwrap()));
    }
    let (bytes, blocks) = heap();
    index.on_event(Event::Init, Timestamp::UNIX_EPOCH);
    for i in 0..pods {
        index.on_event(Event::InitApply(&pod(i)), Timestamp::UNIX_EPOCH);
    }
    index.on_event(Event::InitDone, Timestamp::UNIX_EPOCH);
    let (indexed_bytes, indexed_blocks) = heap();
    let observed: Vec<_> = (0..networks)
        .map(|n| observe::from_index(&index, &zones, &target(n)))
        .collect();
    let (observed_bytes, observed_blocks) = heap();
    assert_eq!(index.len(), pods);
    assert_eq!(
        observed.iter().map(|o| o.candidates.len()).sum::<usize>(),
        pods
    );
    #[allow(clippy::cast_precision_loss)]
    let per_pod = |b: usize, a: usize| (b - a) as f64 / pods as f64;

    drop(observed);
    drop(index);
    let claims = claim_memory(pods, &keys);
    let services = pods / PODS_PER_SERVICE;
    let slices = slice_memory(services);
    let mut result = json!({
        "pods": pods,
        "networks": networks,
        "index_bytes_per_pod": per_pod(indexed_bytes, bytes),
        "index_blocks_per_pod": per_pod(indexed_blocks, blocks),
        "observation_bytes_per_pod": per_pod(observed_bytes, indexed_bytes),
        "observation_blocks_per_pod": per_pod(observed_blocks, indexed_blocks),
    });
    for part in [claims, slices] {
        let serde_json::Value::Object(part) = part else {
            unreachable!("an object")
        };
        result.as_object_mut().unwrap().extend(part);
    }
    println!(
        "{pods} pods on {networks} networks: the index keeps {:.0} bytes a pod in {:.1} blocks; \
         the shared observations {:.0} bytes a pod in {:.1} blocks",
        result["index_bytes_per_pod"].as_f64().unwrap(),
        result["index_blocks_per_pod"].as_f64().unwrap(),
        result["observation_bytes_per_pod"].as_f64().unwrap(),
        result["observation_blocks_per_pod"].as_f64().unwrap(),
    );
    println!(
        "{pods} pods of the claim variant's shape: the index keeps {:.0} bytes a pod, and {:.0} \
         bytes a claim in {:.1} blocks",
        result["claim_pod_index_bytes_per_pod"].as_f64().unwrap(),
        result["claim_bytes_per_claim"].as_f64().unwrap(),
        result["claim_blocks_per_claim"].as_f64().unwrap(),
    );
    println!(
        "{services} slices of {PODS_PER_SERVICE} endpoints: the slice store keeps {:.0} bytes a \
         slice in {:.1} blocks; whole, they take {:.0} bytes in {:.1} blocks",
        result["store_bytes_per_slice"].as_f64().unwrap(),
        result["store_blocks_per_slice"].as_f64().unwrap(),
        result["whole_bytes_per_slice"].as_f64().unwrap(),
        result["whole_blocks_per_slice"].as_f64().unwrap(),
    );
    if let Ok(out) = std::env::var("NSC_BENCH_OUT") {
        std::fs::write(&out, serde_json::to_string_pretty(&result).unwrap()).unwrap();
    }
}
