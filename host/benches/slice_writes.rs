//! What one EndpointSlice write costs the API server and etcd, by the two ways a controller can
//! write: server-side apply (with `force` and the `resourceVersion` seen, as this controller
//! wrote until issue 46) against create and update at the `resourceVersion` seen (Kubernetes'
//! own EndpointSlice controller's way, this controller's now). A plain client makes the writes,
//! one at a time, on the real local control plane (`make bench` starts it); nothing else writes
//! slices meanwhile.
//!
//! For 15- and 100-endpoint slices, each way makes `NSC_BENCH_WRITES` (default 100) writes of
//! each kind, the two ways' writes in turn so that both meet the same API server:
//! - create: a new slice;
//! - change: one endpoint's conditions flip (a Ready flip);
//! - repair: a hand edit (a JSON patch by another field manager turning an endpoint not ready)
//!   is undone by writing the slice as desired; only the repairs are counted.
//!
//! Per kind and way: the API server's own mean time (`apiserver_request_duration_seconds` of
//! the way's verb on `endpointslices`, `APPLY` or `POST`/`PUT`, read before and after), the
//! client's round trip (median), and what etcd stores for the slice afterwards (its protobuf
//! encoding, which each write puts whole).
//!
//! Writes JSON to `$NSC_BENCH_OUT` (default `<target>/bench/slice_writes.json`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a measuring tool: failing loudly is right

use std::time::Instant;

use k8s_openapi::api::{
    core::v1::{ObjectReference, Service},
    discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice},
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{
    Api, Client, ResourceExt,
    api::{Patch, PatchParams, PostParams},
};
use nad_model::labels::{HEADLESS_LABEL, MANAGED_BY, MANAGED_BY_LABEL, SERVICE_NAME_LABEL};
// Both ways write as the controller's field manager.
use nad_service_controller::apply::FIELD_MANAGER;
use nad_test_kit::metrics::Scrape;
use serde_json::{Value, json};

#[allow(dead_code)] // shared with the tests; the benchmark uses part of it
#[path = "../tests/support/mod.rs"]
mod support;

mod cluster;
use cluster::{commit, env_usize, machine, percentile, progress};

/// The field manager of the hand edits the repairs undo.
const HAND: &str = "kubectl-edit";
const SIZES: [usize; 2] = [15, 100];

#[derive(Clone, Copy, PartialEq)]
enum Way {
    /// Server-side apply: a create without force, later writes forced at the version seen.
    Apply,
    /// `POST` to create, `PUT` at the version seen to change.
    Update,
}

impl Way {
    fn name(self) -> &'static str {
        match self {
            Way::Apply => "apply",
            Way::Update => "update",
        }
    }

    /// The API server's verb label for this way's create and its later writes.
    fn verbs(self) -> (&'static str, &'static str) {
        match self {
            Way::Apply => ("APPLY", "APPLY"),
            Way::Update => ("POST", "PUT"),
        }
    }
}

/// The Service every slice belongs to (the owner reference must name a live object, or the
/// garbage collector removes the slices under the benchmark).
async fn service(client: &Client, ns: &str) -> Service {
    let api: Api<Service> = Api::namespaced(client.clone(), ns);
    let service = serde_json::from_value(json!({
        "metadata": {
            "name": "bench",
            "labels": {"app.kubernetes.io/name": "bench", "team": "network"},
            "annotations": {"isim.dev/network": "macvlan"},
        },
        "spec": {"clusterIP": "None", "ports": [{"name": "http", "port": 8080}]},
    }))
    .unwrap();
    api.create(&PostParams::default(), &service).await.unwrap()
}

/// A slice of `size` endpoints as the controller builds one: the Service's labels and the
/// controller's, the trigger-time annotation, the owner reference, each endpoint with its
/// conditions, node and pod.
fn slice(service: &Service, name: &str, size: usize, flipped: Option<usize>) -> EndpointSlice {
    let ns = service.namespace().unwrap();
    let mut labels = service.labels().clone();
    labels.insert(SERVICE_NAME_LABEL.into(), service.name_any());
    labels.insert(MANAGED_BY_LABEL.into(), MANAGED_BY.into());
    labels.insert(HEADLESS_LABEL.into(), String::new());
    let endpoints = (0..size)
        .map(|i| {
            let ready = flipped != Some(i);
            Endpoint {
                addresses: vec![format!(
                    "10.{}.{}.{}",
                    100 + size / 100,
                    i / 250,
                    i % 250 + 1
                )],
                conditions: Some(EndpointConditions {
                    ready: Some(ready),
                    serving: Some(ready),
                    terminating: Some(false),
                }),
                node_name: Some(format!("node-{}", i % 8)),
                target_ref: Some(ObjectReference {
                    kind: Some("Pod".into()),
                    namespace: Some(ns.clone()),
                    name: Some(format!("{name}-pod-{i:04}")),
                    uid: Some(format!("00000000-0000-4000-8000-{i:012}")),
                    ..ObjectReference::default()
                }),
                ..Endpoint::default()
            }
        })
        .collect();
    EndpointSlice {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns),
            labels: Some(labels),
            annotations: Some(
                [(
                    "endpoints.kubernetes.io/last-change-trigger-time".to_owned(),
                    "2026-12-07T10:00:00Z".to_owned(),
                )]
                .into(),
            ),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Service".into(),
                name: service.name_any(),
                uid: service.uid().unwrap(),
                controller: Some(true),
                ..OwnerReference::default()
            }]),
            ..ObjectMeta::default()
        },
        address_type: "IPv4".into(),
        endpoints: Some(endpoints),
        ports: Some(vec![EndpointPort {
            name: Some("http".into()),
            port: Some(8080),
            protocol: Some("TCP".into()),
            ..EndpointPort::default()
        }]),
    }
}

/// One way's write of `desired`: a create when it carries no `resourceVersion`, else a change
/// at that version. Returns the stored slice.
async fn write(api: &Api<EndpointSlice>, way: Way, desired: &EndpointSlice) -> EndpointSlice {
    let name = desired.name_any();
    let new = desired.metadata.resource_version.is_none();
    let post = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PostParams::default()
    };
    match (way, new) {
        (Way::Apply, true) => {
            let params = PatchParams::apply(FIELD_MANAGER);
            api.patch(&name, &params, &Patch::Apply(desired)).await
        }
        (Way::Apply, false) => {
            let params = PatchParams::apply(FIELD_MANAGER).force();
            api.patch(&name, &params, &Patch::Apply(desired)).await
        }
        (Way::Update, true) => api.create(&post, desired).await,
        (Way::Update, false) => api.replace(&name, &post, desired).await,
    }
    .unwrap_or_else(|e| panic!("{} of {name}: {e}", way.name()))
}

/// The API server's request durations, read before and after a stretch of writes.
struct Reading(Scrape);

impl Reading {
    async fn take(client: &Client) -> Self {
        Reading(cluster::apiserver_metrics(client).await)
    }

    /// (seconds, requests) of `verb` on endpointslices, 0 before its first request.
    fn verb(&self, verb: &str) -> (f64, f64) {
        let series = |part: &str| {
            cluster::slice_series(
                &self.0,
                &format!("apiserver_request_duration_seconds_{part}"),
                verb,
            )
        };
        (series("sum"), series("count"))
    }
}

/// What etcd stores for the slice `name`, in bytes: the object's protobuf encoding, as the API
/// server writes it to etcd (`managedFields` included), which every write of it puts whole.
async fn stored_bytes(client: &Client, ns: &str, name: &str) -> usize {
    let request = http::Request::get(format!(
        "/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices/{name}"
    ))
    .header(http::header::ACCEPT, "application/vnd.kubernetes.protobuf")
    .body(kube::client::Body::from(Vec::new()))
    .unwrap();
    let response = client.send(request).await.unwrap();
    assert!(
        response.status().is_success(),
        "GET {name}: {}",
        response.status()
    );
    response.into_body().collect_bytes().await.unwrap().len()
}

/// One way's slices of one size, as last stored, and its round trips in the current kind of
/// write.
struct Side {
    way: Way,
    names: Vec<String>,
    stored: Vec<EndpointSlice>,
    trips: Vec<f64>,
}

impl Side {
    /// The figures of its writes between two readings: `verb` is this way's for the kind.
    fn figures(&mut self, before: &Reading, after: &Reading, verb: &str, stored: usize) -> Value {
        let (b, a) = (before.verb(verb), after.verb(verb));
        let requests = a.1 - b.1;
        assert_eq!(
            requests as usize,
            self.trips.len(),
            "the API server counted other {verb}s on endpointslices meanwhile"
        );
        let mut trips = std::mem::take(&mut self.trips);
        trips.sort_by(f64::total_cmp);
        json!({
            "writes": trips.len(),
            "verb": verb,
            "api_ms": (a.0 - b.0) / requests * 1e3,
            "round_trip_p50_ms": percentile(&trips, 50.0),
            "stored_bytes": stored,
        })
    }
}

/// The kinds of write, in the order they are made.
#[derive(Clone, Copy)]
enum Kind {
    Create,
    Change,
    Repair,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Create => "create",
            Kind::Change => "change",
            Kind::Repair => "repair",
        }
    }
}

/// Creates, changes and repairs `writes` slices of `size` endpoints both ways, one write of
/// each way in turn (the first way alternating), so that both meet the same API server: its
/// verbs tell their requests apart.
async fn measure(
    client: &Client,
    service: &Service,
    size: usize,
    writes: usize,
    tag: &str,
) -> [Value; 2] {
    let ns = service.namespace().unwrap();
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), &ns);
    let mut sides = [Way::Apply, Way::Update].map(|way| Side {
        way,
        names: (0..writes)
            .map(|i| format!("{tag}-{}-{size}-{i:03}", way.name()))
            .collect(),
        stored: Vec::new(),
        trips: Vec::new(),
    });
    let mut figures: [Vec<(Kind, Value)>; 2] = [Vec::new(), Vec::new()];
    for kind in [Kind::Create, Kind::Change, Kind::Repair] {
        if let Kind::Repair = kind {
            // The hand edits first, uncounted (a PATCH); the repairs each at the version its
            // edit left.
            let edit = PatchParams {
                field_manager: Some(HAND.into()),
                ..PatchParams::default()
            };
            for side in &mut sides {
                for (i, seen) in side.stored.iter_mut().enumerate() {
                    let at = (i + 1) % size;
                    let patch = json!([{"op": "replace",
                        "path": format!("/endpoints/{at}/conditions/ready"), "value": false}]);
                    let patch = Patch::<()>::Json(serde_json::from_value(patch).unwrap());
                    *seen = api.patch(&side.names[i], &edit, &patch).await.unwrap();
                }
            }
        }
        let before = Reading::take(client).await;
        for i in 0..writes {
            for s in [i % 2, 1 - i % 2] {
                let side = &mut sides[s];
                let mut desired = match kind {
                    Kind::Create => slice(service, &side.names[i], size, None),
                    Kind::Change | Kind::Repair => {
                        slice(service, &side.names[i], size, Some(i % size))
                    }
                };
                if let Some(seen) = side.stored.get(i) {
                    desired.metadata.resource_version = seen.resource_version();
                }
                let at = Instant::now();
                let written = write(&api, side.way, &desired).await;
                side.trips.push(at.elapsed().as_secs_f64() * 1e3);
                assert_eq!(written.endpoints, desired.endpoints, "{}", side.names[i]);
                match side.stored.get_mut(i) {
                    Some(seen) => *seen = written,
                    None => side.stored.push(written),
                }
            }
        }
        let after = Reading::take(client).await;
        for (s, side) in sides.iter_mut().enumerate() {
            let (create, change) = side.way.verbs();
            let verb = if let Kind::Create = kind {
                create
            } else {
                change
            };
            let stored = stored_bytes(client, &ns, &side.names[0]).await;
            figures[s].push((kind, side.figures(&before, &after, verb, stored)));
        }
    }
    let mut cases = Vec::new();
    for (side, figures) in sides.iter().zip(figures) {
        // What each way leaves stored: the object as the API returns it, in JSON.
        let kept = api.get(&side.names[0]).await.unwrap();
        let mut case = json!({
            "way": side.way.name(),
            "endpoints": size,
            "stored_json_bytes": serde_json::to_vec(&kept).unwrap().len(),
            "managed_fields_json_bytes":
                serde_json::to_vec(&kept.metadata.managed_fields).unwrap().len(),
        });
        for (kind, value) in figures {
            case[kind.name()] = value;
        }
        cases.push(case);
    }
    cases.try_into().unwrap()
}

fn main() {
    cluster::main(run());
}

async fn run() {
    let t = Instant::now();
    let writes = env_usize("NSC_BENCH_WRITES", 100).max(2);
    let out = cluster::output("slice_writes.json");
    let client = support::client().await;
    let version = client.apiserver_version().await.unwrap();
    let ns = support::namespace(&client, "bench-writes").await;
    let service = service(&client, &ns).await;
    progress(
        t,
        format!("API server {}; {writes} writes a case", version.git_version),
    );

    // Warm both ways' paths in the API server (its first apply builds the type converters).
    measure(&client, &service, 15, 2, "warm").await;
    let mut cases = Vec::new();
    for size in SIZES {
        progress(t, format!("{size}-endpoint slices, both ways in turn"));
        cases.extend(measure(&client, &service, size, writes, "bench").await);
    }
    progress(t, "removing the benchmark's namespace");
    node_sim::delete_test_namespace(&client, &ns).await;
    let result = json!({
        "commit": commit(),
        "machine": machine(),
        "kubernetes": version.git_version,
        "writes_per_case": writes,
        "cases": cases,
    });
    std::fs::write(&out, serde_json::to_vec_pretty(&result).unwrap()).unwrap();
    progress(t, format!("wrote {}", out.display()));
    println!("{}", serde_json::to_string_pretty(&result).unwrap());
}
