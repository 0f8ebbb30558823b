//! What one EndpointSlice write costs the API server and etcd, by the two ways a controller can
//! write: server-side apply (with `force` and the `resourceVersion` seen, as this controller
//! wrote until 46) against create and update at the `resourceVersion` seen (Kubernetes' own
//! EndpointSlice controller's way). A plain client makes the writes, one at a time, on the real
//! local control plane (`make bench` starts it); nothing else writes slices meanwhile.
//!
//! For 15- and 100-endpoint slices, each way makes `NSC_BENCH_WRITES` (default 100) writes of
//! each kind:
//! - create: a new slice;
//! - change: one endpoint's conditions flip (a Ready flip);
//! - repair: a hand edit (a JSON patch by another field manager turning an endpoint not ready)
//!   is undone by writing the slice as desired; only the repairs are counted.
//!
//! Per write: the API server's own mean time (`apiserver_request_duration_seconds` of the
//! write's verb on `endpointslices`, read before and after), the client's round trip (median),
//! and etcd's bytes put (`*_mvcc_total_put_size_in_bytes`, read before and after: the control
//! plane's own lease renewals add a little). The stored object's size in etcd's JSON view is not
//! read; the bytes put are what a write costs etcd and its watchers.
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
use nad_test_kit::metrics::Scrape;
use serde_json::{Value, json};

#[allow(dead_code)] // shared with the tests; the benchmark uses part of it
#[path = "../tests/support/mod.rs"]
mod support;

mod cluster;
use cluster::{commit, env_usize, machine, percentile, progress};

/// The field manager of both ways' writes (the controller's).
const FIELD_MANAGER: &str = "nad-service-controller.isim.dev";
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

/// The figures a measured stretch of writes is judged by, read from the API server and etcd.
struct Reading {
    api: Scrape,
    etcd_put_bytes: f64,
}

impl Reading {
    async fn take(client: &Client, etcd: &str) -> Self {
        let text = client
            .request_text(http::Request::get("/metrics").body(Vec::new()).unwrap())
            .await
            .unwrap();
        Reading {
            api: Scrape::new(text),
            etcd_put_bytes: etcd_put_bytes(etcd).await,
        }
    }

    /// (seconds, requests) of `verb` on endpointslices, 0 before its first request.
    fn verb(&self, verb: &str) -> (f64, f64) {
        let series = |part: &str| {
            let series = format!(
                "apiserver_request_duration_seconds_{part}{{resource=\"endpointslices\",verb=\"{verb}\"}}"
            );
            if self.api.get(&series).is_some() {
                self.api.sum(&series)
            } else {
                0.0
            }
        };
        (series("sum"), series("count"))
    }
}

/// etcd's bytes put so far: its `mvcc_total_put_size_in_bytes` (etcd 3.5 names it
/// `etcd_debugging_...`, later ones `etcd_...`).
async fn etcd_put_bytes(etcd: &str) -> f64 {
    let text = http_get(&format!("{etcd}/metrics")).await;
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| {
            let (name, value) = line.split_once(' ')?;
            name.ends_with("mvcc_total_put_size_in_bytes")
                .then(|| value.trim().parse().ok())
                .flatten()
        })
        .unwrap_or_else(|| panic!("etcd at {etcd} has no mvcc_total_put_size_in_bytes"))
}

/// A plain HTTP GET on loopback (etcd's client URL serves /metrics without TLS locally).
async fn http_get(url: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://").expect("an http:// URL");
    let (host, path) = rest.split_once('/').map_or((rest, ""), |(h, p)| (h, p));
    let mut stream = tokio::net::TcpStream::connect(host).await.unwrap();
    let request = format!("GET /{path} HTTP/1.0\r\nHost: {host}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default()
}

/// etcd's client URL: the port `hack/local-up.sh` recorded beside the kubeconfig.
fn etcd_url() -> String {
    let ports = support::kubeconfig_path().with_file_name("ports");
    let text = std::fs::read_to_string(&ports)
        .unwrap_or_else(|e| panic!("{}: {e} (written by hack/local-up.sh)", ports.display()));
    let port = text
        .lines()
        .find_map(|line| line.strip_prefix("etcd_client="))
        .unwrap_or_else(|| panic!("{} names no etcd_client port", ports.display()));
    format!("http://127.0.0.1:{}", port.trim())
}

/// A measured stretch: `writes` writes of `verb`, their round trips in milliseconds.
fn figures(before: &Reading, after: &Reading, verb: &str, mut round_trips: Vec<f64>) -> Value {
    let (b, a) = (before.verb(verb), after.verb(verb));
    let requests = a.1 - b.1;
    assert_eq!(
        requests as usize,
        round_trips.len(),
        "the API server counted other {verb}s on endpointslices meanwhile"
    );
    round_trips.sort_by(f64::total_cmp);
    json!({
        "writes": round_trips.len(),
        "verb": verb,
        "api_ms": (a.0 - b.0) / requests * 1e3,
        "round_trip_p50_ms": percentile(&round_trips, 50.0),
        "etcd_bytes": (after.etcd_put_bytes - before.etcd_put_bytes) / requests,
    })
}

/// Creates, changes and repairs `writes` slices of `size` endpoints one way.
async fn measure(
    client: &Client,
    etcd: &str,
    service: &Service,
    way: Way,
    size: usize,
    writes: usize,
    tag: &str,
) -> Value {
    let ns = service.namespace().unwrap();
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), &ns);
    let (create_verb, change_verb) = way.verbs();
    let names: Vec<String> = (0..writes)
        .map(|i| format!("{tag}-{}-{size}-{i:03}", way.name()))
        .collect();

    let before = Reading::take(client, etcd).await;
    let mut trips = Vec::new();
    let mut stored = Vec::new();
    for name in &names {
        let at = Instant::now();
        stored.push(write(&api, way, &slice(service, name, size, None)).await);
        trips.push(at.elapsed().as_secs_f64() * 1e3);
    }
    let after = Reading::take(client, etcd).await;
    let create = figures(&before, &after, create_verb, trips);

    let before = Reading::take(client, etcd).await;
    let mut trips = Vec::new();
    for (i, seen) in stored.iter_mut().enumerate() {
        let mut desired = slice(service, &names[i], size, Some(i % size));
        desired.metadata.resource_version = seen.resource_version();
        let at = Instant::now();
        *seen = write(&api, way, &desired).await;
        trips.push(at.elapsed().as_secs_f64() * 1e3);
    }
    let after = Reading::take(client, etcd).await;
    let change = figures(&before, &after, change_verb, trips);

    // The hand edits first, uncounted; then the repairs, each at the version its edit left.
    let edit = PatchParams {
        field_manager: Some(HAND.into()),
        ..PatchParams::default()
    };
    for (i, seen) in stored.iter_mut().enumerate() {
        let at = (i + 1) % size;
        let patch = json!([{"op": "replace", "path": format!("/endpoints/{at}/conditions/ready"), "value": false}]);
        *seen = api
            .patch(
                &names[i],
                &edit,
                &Patch::<()>::Json(serde_json::from_value(patch).unwrap()),
            )
            .await
            .unwrap();
    }
    let before = Reading::take(client, etcd).await;
    let mut trips = Vec::new();
    for (i, seen) in stored.iter().enumerate() {
        let mut desired = slice(service, &names[i], size, Some(i % size));
        desired.metadata.resource_version = seen.resource_version();
        let at = Instant::now();
        let repaired = write(&api, way, &desired).await;
        trips.push(at.elapsed().as_secs_f64() * 1e3);
        assert_eq!(
            repaired.endpoints,
            desired.endpoints,
            "{} did not repair {}",
            way.name(),
            names[i]
        );
    }
    let after = Reading::take(client, etcd).await;
    let repair = figures(&before, &after, change_verb, trips);

    // What each way leaves stored: the object as the API returns it, managedFields included.
    let kept = api.get(&names[0]).await.unwrap();
    json!({
        "way": way.name(),
        "endpoints": size,
        "create": create,
        "change": change,
        "repair": repair,
        "stored_json_bytes": serde_json::to_vec(&kept).unwrap().len(),
        "managed_fields_json_bytes": serde_json::to_vec(&kept.metadata.managed_fields).unwrap().len(),
    })
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
    let etcd = etcd_url();
    let ns = support::namespace(&client, "bench-writes").await;
    let service = service(&client, &ns).await;
    progress(
        t,
        format!("API server {}; {writes} writes a case", version.git_version),
    );

    // Warm both ways' paths in the API server (its first apply builds the type converters).
    for way in [Way::Apply, Way::Update] {
        measure(&client, &etcd, &service, way, 15, 2, "warm").await;
    }
    let mut cases = Vec::new();
    // Each size by both ways in turn, on the same etcd and API server.
    for size in SIZES {
        for way in [Way::Apply, Way::Update] {
            progress(t, format!("{} of {size}-endpoint slices", way.name()));
            cases.push(measure(&client, &etcd, &service, way, size, writes, "bench").await);
        }
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
