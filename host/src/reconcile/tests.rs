//! Table tests of the reconcile against a mocked API that checks each call it gets, in order
//! (method, path, and what was sent), and that no other call comes. Every branch: unmanaged,
//! invalid, deleting, stale cache, pod-scoped change, missing node, plugin failure under each
//! policy. What only a real API server shows is in `host/tests/cluster.rs`.

use std::{
    collections::BTreeMap,
    sync::{Arc, OnceLock},
    time::Duration,
};

use crate::mock_api::Handle;
use http::{Method, Response};
use k8s_openapi::api::{
    core::v1::{Node, Pod, Service},
    discovery::v1::EndpointSlice,
};
use kube::{Client, ResourceExt, client::Body, runtime::controller::Action};
use nad_model::input::service_record::ServiceRecord;
use nad_test_kit::metrics::Scrape;
use serde_json::{Value, json};

use super::{
    Context,
    publish::{NODE_RETRY, RESYNC, STALE_RETRY},
    reconcile,
};
use crate::{error::Error, metrics::Metrics, watch::shared::write};
use k8s_openapi::jiff::Timestamp;
use nad_core::index::NodeZones;
use nad_core::{
    book::{Entry, Wrote},
    scope::Scope,
};
use nad_model::{service_ref::ServiceRef, watch::Event};
use nad_plugin_runtime::{FailurePolicy, Limits, Plugins, Runtime, prepare};

const MISBEHAVING: &[u8] = include_bytes!(env!("NSC_TEST_MISBEHAVING_WASM"));

fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| Runtime::new(Limits::default()).unwrap())
}

fn built_in() -> Plugins {
    static PLUGINS: OnceLock<Plugins> = OnceLock::new();
    PLUGINS
        .get_or_init(|| Plugins::built_in(runtime()).unwrap())
        .clone()
}

/// A call the mocked API expects, and how it answers.
#[derive(Debug)]
enum Call {
    /// A write of this slice: its create, or its update when it carries the version seen;
    /// answered with what was sent, at generation 1.
    Write(&'static str),
    /// An update of this slice, answered `409`: it changed since it was seen.
    Outdated(&'static str),
    /// A delete of this slice.
    Delete(&'static str),
    /// A Warning Event with this reason.
    Event(&'static str),
    /// A Warning Event with this reason, sent when the Service's problem of the same reason
    /// is among the metrics already.
    Problem(&'static str),
}

/// Serves `calls` in order, then checks that nothing else comes; returns the bodies sent.
async fn verify(mut handle: Handle, calls: Vec<Call>, metrics: Arc<Metrics>) -> Vec<Value> {
    let mut sent = Vec::new();
    for call in calls {
        let (request, reply) = tokio::time::timeout(Duration::from_secs(5), handle.next_request())
            .await
            .unwrap_or_else(|_| panic!("expected {call:?}, got no call"))
            .unwrap_or_else(|| panic!("expected {call:?}, the client is gone"));
        let (method, path) = (request.method().clone(), request.uri().path().to_owned());
        let body = request.into_body().collect_bytes().await.unwrap();
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let slices = "/apis/discovery.k8s.io/v1/namespaces/ns/endpointslices";
        let mut code = 200;
        let answer = match &call {
            Call::Outdated(name) => {
                assert_eq!(
                    (&method, path.as_str()),
                    (&Method::PUT, &*format!("{slices}/{name}"))
                );
                assert!(body["metadata"]["resourceVersion"].is_string(), "{body}");
                code = 409;
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 409,
                    "reason": "Conflict", "message": "the object has been modified"})
            }
            Call::Write(name) => {
                assert_eq!(body["metadata"]["name"], *name, "{body}");
                if body["metadata"]["resourceVersion"].is_string() {
                    assert_eq!(
                        (&method, path.as_str()),
                        (&Method::PUT, &*format!("{slices}/{name}"))
                    );
                } else {
                    assert_eq!((&method, path.as_str()), (&Method::POST, slices));
                }
                let mut stored = body.clone();
                stored["metadata"]["generation"] = json!(1);
                stored["metadata"]["uid"] = json!(format!("uid-{name}"));
                stored
            }
            Call::Delete(name) => {
                assert_eq!(
                    (&method, path.as_str()),
                    (&Method::DELETE, &*format!("{slices}/{name}"))
                );
                json!({"kind": "Status", "apiVersion": "v1", "status": "Success"})
            }
            Call::Event(reason) | Call::Problem(reason) => {
                if let Call::Problem(_) = call {
                    let text = metrics.encode();
                    let series = format!("reason=\"{reason}\"");
                    assert!(
                        text.lines()
                            .any(|l| l.starts_with("nad_service_controller_service_problem{")
                                && l.contains(&series)),
                        "its Event came before the problem {reason} was counted:\n{text}"
                    );
                }
                assert_eq!(method, Method::POST, "{path}");
                assert!(path.ends_with("/namespaces/ns/events"), "{path}");
                assert_eq!(body["reason"], *reason, "{body}");
                body.clone()
            }
        };
        sent.push(body);
        reply.send_response(
            Response::builder()
                .status(code)
                .body(Body::from(serde_json::to_vec(&answer).unwrap()))
                .unwrap(),
        );
    }
    if let Some((request, _)) = handle.next_request().await {
        panic!("unexpected call: {} {}", request.method(), request.uri());
    }
    sent
}

/// A Context over in-memory caches and a mocked API.
struct Harness {
    ctx: Arc<Context>,
    handle: Option<Handle>,
    gates: super::context::TestGates,
}

impl Harness {
    fn new(plugins: Plugins) -> Self {
        let (service, handle) = crate::mock_api::pair();
        let mut zones = NodeZones::default();
        zones.on_event(Event::Apply(&node("n1", "zone-a")));
        let (ctx, gates) = Context::for_tests(Client::new(service, "default"), plugins, zones);
        Harness {
            ctx: Arc::new(ctx),
            handle: Some(handle),
            gates,
        }
    }

    fn pod(&self, name: &str, app: &str, ready: bool, node: &str) {
        self.pod_with(name, app, ready, node, None);
    }

    /// A pod with its readiness on `ns/macvlan` as the network prober writes it.
    fn pod_on_network(&self, name: &str, ready: bool, network_ready: &str) {
        self.pod_with(name, "web", ready, "n1", Some(network_ready));
    }

    fn pod_with(&self, name: &str, app: &str, ready: bool, node: &str, network: Option<&str>) {
        // An address of its own, the same each time the pod changes.
        let host = name.bytes().map(u32::from).sum::<u32>() % 250 + 1;
        let status = json!([{"name": "ns/macvlan", "ips": [format!("192.168.2.{host}")]}]);
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                "creationTimestamp": "2026-12-01T00:00:00Z", "labels": {"app": app},
                "annotations": {"k8s.v1.cni.cncf.io/network-status": status.to_string()}},
            "spec": {"nodeName": node, "containers": []},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
        }))
        .unwrap();
        let mut pod = pod;
        if let (Some(status), Some(s)) = (network, pod.status.as_mut()) {
            s.conditions.get_or_insert_default().push(
                serde_json::from_value(json!({"type": "network-ready.isim.dev/ns.macvlan",
                    "status": status, "reason": "Probed", "message": "192.168.2.9:80"}))
                .unwrap(),
            );
        }
        let change = write(&self.ctx.shared().pods).on_event(Event::Apply(&pod), Timestamp::now());
        if let Some((pod, at)) = change.pod {
            self.ctx.book().pod_changed(&key(), &pod, at);
        }
    }

    fn everything_changed(&self) {
        self.ctx.book().input_changed(&key(), Timestamp::now());
    }

    /// The slices as the watch would show them after `sent` applies.
    fn stored(&mut self, sent: &[Value]) {
        for body in sent {
            let mut slice: EndpointSlice = serde_json::from_value(body.clone()).unwrap();
            slice.metadata.generation = Some(1);
            slice.metadata.uid = Some(format!("uid-{}", slice.name_any()));
            slice.metadata.resource_version = Some("1".into());
            self.store_slice(slice);
        }
    }

    /// A slice event as the slice watch handles it.
    fn store_slice(&mut self, slice: EndpointSlice) {
        write(&self.ctx.shared().slices).on_event(Event::Apply(&slice));
    }

    /// The watch events of `sent` as the slice watch handles them: whether any of them asks
    /// for a reconcile.
    fn echo(&mut self, sent: &[Value]) -> bool {
        let mut reconciles = false;
        for body in sent {
            let mut slice: EndpointSlice = serde_json::from_value(body.clone()).unwrap();
            slice.metadata.generation = Some(1);
            slice.metadata.uid = Some(format!("uid-{}", slice.name_any()));
            slice.metadata.resource_version = Some("1".into());
            self.store_slice(slice.clone());
            reconciles |=
                self.ctx
                    .book()
                    .slice_event(&key(), &slice, false, false, Timestamp::now());
        }
        reconciles
    }

    /// Runs one reconcile of `service` against the expected `calls`.
    async fn reconcile(
        &mut self,
        service: &Service,
        calls: Vec<Call>,
    ) -> (Result<Action, Error>, Vec<Value>) {
        let (service_handle, ctx) = (self.handle.take().unwrap(), self.ctx.clone());
        // The verifier ends when every client is gone: the harness is rebuilt around a new
        // mock for the next reconcile.
        let (service_mock, handle) = crate::mock_api::pair();
        let metrics = Arc::clone(&self.ctx.shared().metrics);
        let verifier = tokio::spawn(verify(service_handle, calls, metrics));
        let result = reconcile(Arc::new(ServiceRecord::from(service)), ctx).await;
        let ctx = Arc::get_mut(&mut self.ctx).expect("the reconcile holds no context");
        ctx.set_client(Client::new(service_mock, "default"));
        self.handle = Some(handle);
        let sent = verifier.await.unwrap();
        (result, sent)
    }

    fn metric(&self, name: &str) -> u64 {
        metric(self.ctx.metrics(), name)
    }

    fn metric_once(&self, name: &str) -> Option<u64> {
        metric_once(self.ctx.metrics(), name)
    }

    /// The Service's problem series: `reason` or `reason/plugin`.
    fn problems(&self) -> Vec<String> {
        let text = self.ctx.metrics().encode();
        text.lines()
            .filter_map(|l| l.strip_prefix("nad_service_controller_service_problem{"))
            .map(|l| {
                assert!(
                    l.starts_with("service_namespace=\"ns\",service_name=\"web\","),
                    "{l}"
                );
                let label = |name: &str| {
                    l.split(&format!("{name}=\""))
                        .nth(1)
                        .unwrap()
                        .split('"')
                        .next()
                        .unwrap()
                        .to_owned()
                };
                match label("plugin").as_str() {
                    "" => label("reason"),
                    plugin => format!("{}/{plugin}", label("reason")),
                }
            })
            .collect()
    }
}

/// The value of the first series `name` (a metric, or a metric with some of its labels); a
/// series that is not there fails the test rather than reading as 0.
fn metric(metrics: &Metrics, name: &str) -> u64 {
    Scrape::new(metrics.encode()).value(name) as u64
}

/// The value of the first series `name`, if there is one.
fn metric_once(metrics: &Metrics, name: &str) -> Option<u64> {
    Scrape::new(metrics.encode()).get(name).map(|v| v as u64)
}

fn key() -> ServiceRef {
    ServiceRef::new("ns", "web")
}

fn node(name: &str, zone: &str) -> Node {
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": zone}}}),
    )
    .unwrap()
}

fn service(annotations: Value, spec: Value) -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "ns", "uid": "svc-uid", "labels": {"app": "web"},
                     "annotations": annotations},
        "spec": spec,
    }))
    .unwrap()
}

fn headless(annotations: Value) -> Service {
    let mut all = json!({"isim.dev/network": "macvlan"});
    for (k, v) in annotations.as_object().unwrap() {
        all[k] = v.clone();
    }
    service(
        all,
        json!({"clusterIP": "None", "ports": [{"name": "http", "port": 80}]}),
    )
}

fn addresses(sent: &Value) -> BTreeMap<String, bool> {
    sent["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["targetRef"]["name"].as_str().unwrap().to_owned(),
                e["conditions"]["ready"].as_bool().unwrap(),
            )
        })
        .collect()
}

fn a_slice(name: &str) -> EndpointSlice {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"), "generation": 1, "resourceVersion": "1",
            "labels": {"endpointslice.kubernetes.io/managed-by": "nad-service-controller.isim.dev",
                       "kubernetes.io/service-name": "web"}},
        "addressType": "IPv4", "endpoints": [{"addresses": ["192.168.2.1"]}]}))
    .unwrap()
}

#[tokio::test]
async fn an_unannotated_service_has_its_slices_removed() {
    let mut h = Harness::new(built_in());
    h.store_slice(a_slice("web-ipv4-0"));
    let (result, _) = h
        .reconcile(
            &service(json!({}), json!({"clusterIP": "None"})),
            vec![Call::Delete("web-ipv4-0")],
        )
        .await;
    assert_eq!(result.unwrap(), Action::await_change());
    assert!(h.ctx.book().known(|_| true).is_empty(), "forgotten");
}

#[tokio::test]
async fn an_invalid_service_is_warned_about_and_its_slices_removed() {
    let mut h = Harness::new(built_in());
    h.store_slice(a_slice("web-ipv4-0"));
    let with_selector = service(
        json!({"isim.dev/network": "macvlan"}),
        json!({"clusterIP": "None", "selector": {"app": "web"}}),
    );
    let (result, sent) = h
        .reconcile(
            &with_selector,
            vec![Call::Delete("web-ipv4-0"), Call::Event("InvalidService")],
        )
        .await;
    assert_eq!(result.unwrap(), Action::await_change());
    assert!(
        sent[1]["note"].as_str().unwrap().contains("selector"),
        "{}",
        sent[1]
    );
    assert_eq!(h.problems(), ["InvalidService"]);
    let (result, _) = h
        .reconcile(
            &service(json!({}), json!({"clusterIP": "None"})),
            vec![Call::Delete("web-ipv4-0")],
        )
        .await;
    assert_eq!(result.unwrap(), Action::await_change());
    assert!(h.problems().is_empty(), "unannotated: no longer a problem");
}

#[tokio::test]
async fn a_deleting_service_is_left_to_the_garbage_collector() {
    let mut h = Harness::new(built_in());
    h.store_slice(a_slice("web-ipv4-0"));
    let mut deleting = headless(json!({}));
    deleting.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
    let (result, _) = h.reconcile(&deleting, vec![]).await;
    assert_eq!(result.unwrap(), Action::await_change());
}

/// The graceful shutdown waits for every reconcile in flight: one waiting for caches that have
/// not synced (right after a start, say) ends at the stop rather than hold it up.
#[tokio::test]
async fn a_reconcile_waiting_for_the_caches_ends_at_the_stop() {
    let h = Harness::new(built_in());
    h.gates.ready.send_replace(false);
    let waiting = tokio::spawn(reconcile(
        Arc::new(headless(json!({})).into()),
        h.ctx.clone(),
    ));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiting.is_finished(), "it waits for the caches");
    h.gates.stop.send_replace(true);
    let result = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("it ends at the stop, without the caches")
        .unwrap();
    assert_eq!(result.unwrap(), Action::await_change());
}

#[tokio::test]
async fn a_cache_behind_this_controllers_writes_is_waited_for() {
    let mut h = Harness::new(built_in());
    h.store_slice(a_slice("web-ipv4-0"));
    let wrote = Wrote {
        applied: vec![("web-ipv4-0".to_owned(), Some(2))],
        ..Wrote::default()
    };
    let entry = Entry {
        wrote: Some(wrote),
        ..Entry::default()
    };
    let existing = h.ctx.slices_of(&key());
    h.ctx
        .book()
        .record(&key(), &existing, entry, Timestamp::now());
    h.pod("web-a", "web", true, "n1");
    let (result, _) = h.reconcile(&headless(json!({})), vec![]).await;
    assert_eq!(result.unwrap(), Action::requeue(STALE_RETRY));
    assert_eq!(
        h.metric("nad_service_controller_syncs_total{result=\"stale\"}"),
        1
    );
    assert_eq!(
        h.ctx
            .book()
            .begin(&key(), &[], Timestamp::now())
            .unwrap()
            .taken
            .scope,
        Scope::Pods(["web-a".to_owned()].into()),
        "the pod change stays pending for the reconcile that sees the cache current"
    );
}

/// Each plugin call's memory is reported by plugin: its instance's linear memory at its
/// largest, whole Wasm pages.
#[tokio::test]
async fn a_plugin_calls_memory_is_reported_by_plugin() {
    let mut h = Harness::new(built_in());
    let web = headless(json!({}));
    h.pod("web-a", "web", true, "n1");
    h.everything_changed();
    let (result, _) = h.reconcile(&web, vec![Call::Write("web-ipv4-0")]).await;
    assert_eq!(result.unwrap(), Action::requeue(RESYNC));
    let memory = "nad_service_controller_plugin_call_memory_bytes";
    assert_eq!(
        h.metric(&format!("{memory}_count{{plugin=\"default\"}}")),
        1
    );
    let bytes = h.metric(&format!("{memory}_sum{{plugin=\"default\"}}"));
    assert!(bytes >= 65_536 && bytes.is_multiple_of(65_536), "{bytes}");
}

/// The incremental path: after a pod change, a per-pod plugin is asked about that pod alone,
/// and the slice is updated in place with one write.
#[tokio::test]
async fn a_pod_change_asks_about_that_pod_alone_and_writes_one_slice() {
    let mut h = Harness::new(built_in());
    let web = headless(json!({}));
    for name in ["web-a", "web-b", "web-c"] {
        h.pod(name, "web", true, "n1");
    }
    h.everything_changed();
    let (result, sent) = h.reconcile(&web, vec![Call::Write("web-ipv4-0")]).await;
    assert_eq!(result.unwrap(), Action::requeue(RESYNC));
    assert_eq!(
        h.metric("nad_service_controller_plugin_evaluated_pods_total"),
        3
    );
    let flip = "nad_service_controller_endpoint_flip_duration_seconds";
    assert_eq!(
        h.metric(&format!("{flip}_bucket{{le=\"300.0\"}}")),
        0,
        "the pods were created a while ago"
    );
    assert_eq!(h.metric(&format!("{flip}_count")), 1);
    assert!(h.problems().is_empty());
    // The watch event of that write costs no reconcile; the decisions are kept.
    assert!(
        !h.echo(&sent),
        "the echo of its own write reconciles nothing"
    );

    h.pod("web-b", "web", false, "n1");
    let locked = h.ctx.shared().book.times_locked();
    let (result, sent) = h.reconcile(&web, vec![Call::Write("web-ipv4-0")]).await;
    result.unwrap();
    assert_eq!(
        h.ctx.shared().book.times_locked() - locked,
        3,
        "a flip's reconcile takes the Book three times: to begin, to write, to record"
    );
    assert_eq!(
        h.metric("nad_service_controller_plugin_evaluated_pods_total"),
        4,
        "only the changed pod was evaluated"
    );
    assert_eq!(
        addresses(&sent[0]),
        BTreeMap::from([
            ("web-a".into(), true),
            ("web-b".into(), false),
            ("web-c".into(), true)
        ])
    );
    assert!(
        sent[0]["metadata"]["annotations"]["endpoints.kubernetes.io/last-change-trigger-time"]
            .is_string(),
        "{}",
        sent[0]
    );
    assert_eq!(
        h.metric(&format!("{flip}_bucket{{le=\"1.0\"}}")),
        1,
        "a change seen just now (a condition without a transition time) flips at once"
    );
    assert_eq!(h.metric(&format!("{flip}_count")), 2);
    assert_eq!(
        h.metric("nad_service_controller_endpoints_published"),
        3,
        "the cache at this reconcile's start"
    );
    h.stored(&sent);

    // A pod of another app changes: excluded without asking (the default plugin's Service
    // selects app=web), nothing to plan or write.
    h.pod("db-a", "db", true, "n1");
    let (result, _) = h.reconcile(&web, vec![]).await;
    assert_eq!(result.unwrap(), Action::requeue(RESYNC));
    assert_eq!(
        h.metric("nad_service_controller_plugin_evaluated_pods_total"),
        4
    );
    assert_eq!(
        h.metric("nad_service_controller_changes_total{operation=\"create\"}"),
        1
    );
    assert_eq!(
        h.metric("nad_service_controller_changes_total{operation=\"update\"}"),
        1
    );
    assert_eq!(h.metric("nad_service_controller_endpoints_desired"), 3);
}

/// A plugin that does not declare per-pod decisions gets every candidate once a changed pod
/// is published.
#[tokio::test]
async fn a_whole_set_plugin_is_asked_about_every_candidate() {
    let mut plugins = built_in();
    let bytes = include_bytes!(env!("NSC_TEST_CONTRACT_1_0_WASM"));
    plugins.insert("v1", prepare(runtime(), "v1", bytes, "").unwrap());
    let mut h = Harness::new(plugins);
    let web = headless(json!({"isim.dev/endpoint-policy": "v1"}));
    for name in ["web-a", "web-b", "web-c"] {
        h.pod(name, "web", true, "n1");
    }
    h.everything_changed();
    let (_, sent) = h.reconcile(&web, vec![Call::Write("web-ipv4-0")]).await;
    h.stored(&sent);
    h.pod("web-b", "web", false, "n1");
    let (result, _) = h.reconcile(&web, vec![Call::Write("web-ipv4-0")]).await;
    result.unwrap();
    assert_eq!(
        h.metric("nad_service_controller_plugin_evaluated_pods_total"),
        3 + 3,
        "the published pod changed: every candidate again"
    );
}

/// The network prober's condition reaches the endpoints: a pod that does not answer on the
/// Service's network is published not serving and not ready although its `Ready` is `True`;
/// a change of that condition alone moves the slice. A 1.1 plugin, which cannot read
/// conditions, decides as it always did.
#[tokio::test]
async fn a_pod_that_does_not_answer_on_the_network_is_published_not_serving() {
    let mut plugins = built_in();
    let bytes = include_bytes!(env!("NSC_TEST_CONTRACT_1_1_WASM"));
    plugins.insert("v11", prepare(runtime(), "v11", bytes, "").unwrap());
    let mut h = Harness::new(plugins);
    h.pod("web-a", "web", true, "n1");
    h.pod_on_network("web-b", true, "False");
    h.everything_changed();
    let web = headless(json!({}));
    let (_, sent) = h.reconcile(&web, vec![Call::Write("web-ipv4-0")]).await;
    assert_eq!(
        addresses(&sent[0]),
        BTreeMap::from([("web-a".into(), true), ("web-b".into(), false)])
    );
    let b = &sent[0]["endpoints"][1];
    assert_eq!(b["targetRef"]["name"], "web-b");
    assert_eq!(b["conditions"]["serving"], false);
    assert_eq!(b["conditions"]["terminating"], false);
    h.stored(&sent);

    h.pod_on_network("web-b", true, "True");
    let (_, sent) = h.reconcile(&web, vec![Call::Write("web-ipv4-0")]).await;
    assert_eq!(
        addresses(&sent[0]),
        BTreeMap::from([("web-a".into(), true), ("web-b".into(), true)]),
        "the condition alone changed: the slice moved"
    );

    h.pod_on_network("web-b", true, "False");
    h.everything_changed();
    let v11 = headless(json!({"isim.dev/endpoint-policy": "v11"}));
    let (_, sent) = h.reconcile(&v11, vec![Call::Write("web-ipv4-0")]).await;
    assert_eq!(
        addresses(&sent[0]),
        BTreeMap::from([("web-a".into(), true), ("web-b".into(), true)]),
        "a 1.1 plugin does not see the condition"
    );
}

#[tokio::test]
async fn a_pod_on_an_unknown_node_is_left_out_and_retried_soon() {
    let mut h = Harness::new(built_in());
    h.pod("web-a", "web", true, "n1");
    h.pod("web-b", "web", true, "ghost");
    h.everything_changed();
    let (result, sent) = h
        .reconcile(&headless(json!({})), vec![Call::Write("web-ipv4-0")])
        .await;
    assert_eq!(result.unwrap(), Action::requeue(NODE_RETRY));
    assert_eq!(
        addresses(&sent[0]),
        BTreeMap::from([("web-a".into(), true)])
    );
    assert_eq!(sent[0]["endpoints"][0]["zone"], "zone-a");
}

#[tokio::test]
async fn an_unknown_plugin_keeps_the_slices_and_says_why() {
    let mut h = Harness::new(built_in());
    h.pod("web-a", "web", true, "n1");
    let (result, sent) = h
        .reconcile(
            &headless(json!({"isim.dev/endpoint-policy": "nope"})),
            vec![Call::Event("UnknownPlugin")],
        )
        .await;
    assert!(matches!(result, Err(Error::UnknownPlugin(_))), "{result:?}");
    assert_eq!(h.problems(), ["UnknownPlugin/nope"]);
    assert!(
        sent[0]["note"]
            .as_str()
            .unwrap()
            .contains("stay as last applied"),
        "{}",
        sent[0]
    );
}

#[tokio::test]
async fn an_unknown_plugin_under_fallback_is_replaced_by_the_built_in_one() {
    let mut plugins = built_in();
    plugins.set_failure_policies(FailurePolicy::Fallback, BTreeMap::new());
    let mut h = Harness::new(plugins);
    h.pod("web-a", "web", true, "n1");
    let (result, sent) = h
        .reconcile(
            &headless(json!({"isim.dev/endpoint-policy": "nope"})),
            vec![Call::Write("web-ipv4-0"), Call::Problem("PluginFallback")],
        )
        .await;
    result.unwrap();
    assert_eq!(
        addresses(&sent[0]),
        BTreeMap::from([("web-a".into(), true)])
    );
    assert_eq!(
        h.metric("nad_service_controller_plugin_fallbacks_total"),
        1,
        "counted once"
    );
}

#[tokio::test]
async fn a_trapping_plugin_under_each_policy() {
    for (policy, calls, writes) in [
        (
            FailurePolicy::Keep,
            vec![Call::Event("PluginFailed")],
            false,
        ),
        (
            FailurePolicy::Fallback,
            vec![Call::Write("web-ipv4-0"), Call::Event("PluginFallback")],
            true,
        ),
    ] {
        let mut plugins = built_in();
        plugins.insert(
            "trap",
            prepare(runtime(), "trap", MISBEHAVING, "echo").unwrap(),
        );
        let mut configured = plugins.get("trap").unwrap().clone();
        configured.config = "trap".into();
        plugins.insert("trap", configured);
        plugins.set_failure_policies(policy, BTreeMap::new());
        let mut h = Harness::new(plugins);
        h.pod("web-a", "web", true, "n1");
        let (result, _) = h
            .reconcile(
                &headless(json!({"isim.dev/endpoint-policy": "trap"})),
                calls,
            )
            .await;
        assert_eq!(result.is_ok(), writes, "{policy:?}: {result:?}");
        let problem = if writes {
            "PluginFallback/trap"
        } else {
            "PluginFailed/trap"
        };
        assert_eq!(h.problems(), [problem], "{policy:?}");
        assert_eq!(
            h.metric_once("nad_service_controller_plugin_fallbacks_total"),
            writes.then_some(1),
            "{policy:?}: a fallback is counted, and no series exists without one"
        );
    }
}

/// A slice edited by someone else is restored from the remembered decisions: no input
/// changed, so the plugin is not asked again.
#[tokio::test]
async fn a_slice_edited_by_hand_is_restored_without_asking_the_plugin() {
    let mut h = Harness::new(built_in());
    let web = headless(json!({}));
    for name in ["web-a", "web-b"] {
        h.pod(name, "web", true, "n1");
    }
    h.everything_changed();
    let (_, sent) = h.reconcile(&web, vec![Call::Write("web-ipv4-0")]).await;
    let evaluated = h.metric("nad_service_controller_plugin_evaluated_pods_total");
    let mut edited: EndpointSlice = serde_json::from_value(sent[0].clone()).unwrap();
    edited.endpoints.as_mut().unwrap().truncate(1);
    edited.metadata.generation = Some(2);
    h.store_slice(edited.clone());
    assert!(
        h.ctx
            .book()
            .slice_event(&key(), &edited, false, false, Timestamp::now())
    );
    let (result, sent) = h.reconcile(&web, vec![Call::Write("web-ipv4-0")]).await;
    result.unwrap();
    assert_eq!(
        addresses(&sent[0]),
        BTreeMap::from([("web-a".into(), true), ("web-b".into(), true)])
    );
    assert_eq!(
        h.metric("nad_service_controller_plugin_evaluated_pods_total"),
        evaluated
    );
}

/// A slice changed by someone between the plan and the write is not written over: no failure,
/// no Event, and the Service is planned again from the change.
#[tokio::test]
async fn a_slice_changed_since_it_was_seen_is_not_written_over() {
    let mut h = Harness::new(built_in());
    let web = headless(json!({}));
    h.pod("web-a", "web", true, "n1");
    h.everything_changed();
    let (_, sent) = h.reconcile(&web, vec![Call::Write("web-ipv4-0")]).await;
    h.stored(&sent);
    h.pod("web-b", "web", true, "n1");
    let (result, _) = h.reconcile(&web, vec![Call::Outdated("web-ipv4-0")]).await;
    assert_eq!(result.unwrap(), Action::requeue(STALE_RETRY));
    assert!(h.problems().is_empty(), "{:?}", h.problems());
    assert_eq!(
        h.metric("nad_service_controller_reconciles_total{result=\"ok\"}"),
        2
    );
    let (result, sent) = h.reconcile(&web, vec![Call::Write("web-ipv4-0")]).await;
    result.unwrap();
    assert_eq!(
        addresses(&sent[0]).len(),
        2,
        "planned again, web-b included"
    );
}

/// A network that names no NetworkAttachmentDefinition: one Warning Event naming it and the
/// closest existing one, and the slices of the network the Service had are kept (no pod is on
/// the misspelt one); once the definition exists, the Service is planned as any other.
#[tokio::test]
async fn a_missing_network_is_warned_about_once_and_the_slices_are_kept() {
    let mut h = Harness::new(built_in());
    h.store_slice(a_slice("web-ipv4-0"));
    {
        let mut definitions = write(&h.ctx.shared().definitions);
        definitions.on_event::<Pod>(Event::Init);
        for name in ["macvlan", "sriov"] {
            let nad: Pod =
                serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ns"}}))
                    .unwrap();
            definitions.on_event(Event::InitApply(&nad));
        }
        definitions.on_event::<Pod>(Event::InitDone);
    }
    let misspelt = headless(json!({"isim.dev/network": "macvlann"}));
    h.everything_changed();
    let (result, sent) = h
        .reconcile(&misspelt, vec![Call::Event("NetworkNotFound")])
        .await;
    result.unwrap();
    assert_eq!(
        sent[0]["note"],
        "web: network ns/macvlann names no NetworkAttachmentDefinition (did you mean ns/macvlan?): \
         set the annotation isim.dev/network to ns/macvlan, or create the NetworkAttachmentDefinition; \
         its EndpointSlices are kept until then"
    );
    assert_eq!(h.problems(), ["NetworkNotFound"]);
    // Told once while it lasts: the next reconcile writes nothing and sends no Event.
    h.everything_changed();
    let (result, _) = h.reconcile(&misspelt, vec![]).await;
    result.unwrap();
    // The definition created: the Service is planned again, and its slices follow its pods
    // (there are none on macvlann).
    let created: Pod =
        serde_json::from_value(json!({"metadata": {"name": "macvlann", "namespace": "ns"}}))
            .unwrap();
    assert_eq!(
        write(&h.ctx.shared().definitions).on_event(Event::Apply(&created)),
        ["ns/macvlann"]
    );
    h.everything_changed();
    let (result, _) = h
        .reconcile(&misspelt, vec![Call::Delete("web-ipv4-0")])
        .await;
    result.unwrap();
    assert!(h.problems().is_empty(), "{:?}", h.problems());
}

/// A slice held back by this controller's own check of the API's rules tells the Service and
/// the metrics one and the same reason.
#[tokio::test]
async fn a_slice_the_api_would_refuse_is_held_back_under_one_reason() {
    let mut h = Harness::new(built_in());
    h.pod("web-a", "web", true, "n1");
    h.everything_changed();
    let mut svc = headless(json!({}));
    // Copied to the slice, where the API refuses it (this Service never passed validation).
    svc.labels_mut()
        .insert("example.com/team".into(), "not a label value".into());
    let (result, _) = h
        .reconcile(&svc, vec![Call::Event("EndpointSliceRefused")])
        .await;
    result.unwrap();
    assert_eq!(h.problems(), ["EndpointSliceRefused"]);
    assert_eq!(
        h.metric("nad_service_controller_endpointslice_refused_total{by=\"precheck\"}"),
        1
    );
}
