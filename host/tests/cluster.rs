//! Behaviour on a real API server (started by `make local-up`; `make test` does it): real
//! objects, real watches, the real garbage collector, the controller running in-process.
//!
//! Each test gets its own namespace and its own controller watching only that namespace; the
//! node simulator plays scheduler, kubelet and Multus for the test's pods. A controller that
//! watches every namespace has a test binary of its own (`cluster_wide.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
// A scenario on the control plane reads top to bottom, as the story it tells.
#![allow(clippy::too_many_lines)]

use std::{
    collections::BTreeSet,
    io::Write,
    path::PathBuf,
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::{FutureExt, StreamExt, stream};
use k8s_openapi::api::{
    core::v1::{Pod, Secret, Service},
    discovery::v1::EndpointSlice,
    events::v1::Event,
    resource::v1::{DeviceClass, ResourceClaim, ResourceClaimTemplate},
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use nad_core::slices::is_managed_slice_of;
use nad_model::fetch::Fetch;
use nad_model::input::network_ready;
use nad_model::labels::{MANAGED_BY, MANAGED_BY_LABEL, SERVICE_NAME_LABEL};
use nad_plugin_fetcher::{
    Credentials, OciRef, PUSH_LAYER_MEDIA_TYPE, Puller, RegistryCas, RegistryOptions, configmap_key,
};
use nad_plugin_runtime::{
    FailurePolicy, Limits, PluginDir, Plugins, Runtime, SharedPlugins, prepare,
};
use nad_service_controller::{
    leader::LeaderElector,
    watch::{
        plugin_dir::{ConfigMapSource, PluginSource},
        registry::RegistrySettings,
    },
};
use nad_test_kit::metrics::Scrape;
use node_sim::Simulator;
use serde_json::{Value, json};

const OPT_OUT: &[u8] = include_bytes!(env!("NSC_EXAMPLE_OPT_OUT_WASM"));
const PREFERRED_ZONES: &[u8] = include_bytes!(env!("NSC_EXAMPLE_PREFERRED_ZONES_WASM"));
const MISBEHAVING: &[u8] = include_bytes!(env!("NSC_TEST_MISBEHAVING_WASM"));

mod support;
use support::{WAIT, client, eventually};
#[path = "support/logs.rs"]
mod logs;
#[path = "support/promql.rs"]
mod promql;
use logs::{captured, logs};

// ---- the test environment ----------------------------------------------------------------------

struct Env {
    client: Client,
    ns: String,
    sim: Arc<Simulator>,
    heartbeat: tokio::task::JoinHandle<()>,
    controller: support::Controller,
    source: PluginSource,
    _runtime: Arc<Runtime>,
}

/// A fresh namespace, with the log capture started.
async fn namespace(client: &Client, test: &str) -> String {
    logs();
    support::namespace(client, test).await
}

async fn env(test: &str) -> Env {
    env_with(test, |_, _| {}, Followed::Nothing).await
}

/// A source of plugins the controller follows while it runs.
/// The names of the registry Secret, CA ConfigMap and verification policy ConfigMap followed.
#[derive(Default)]
struct RegistryObjects {
    secret: Option<&'static str>,
    cas: Option<&'static str>,
    policy: Option<&'static str>,
}

enum Followed {
    Nothing,
    /// A plugin directory, rescanned every 200 ms.
    Dir(PathBuf),
    /// A ConfigMap of this name in the test's namespace, watched through the API, whose
    /// `<name>.oci` entries the puller fetches.
    ConfigMap(&'static str, Option<Arc<Puller>>),
    /// That ConfigMap, and the registry objects of these names the puller pulls with.
    ConfigMapAndRegistry(&'static str, Arc<Puller>, RegistryObjects),
}

/// An environment whose plugins are the built-in one, `opt-out`, whatever `configure` adds,
/// and what the source it follows holds.
async fn env_with(
    test: &str,
    configure: impl FnOnce(&Runtime, &mut Plugins),
    followed: Followed,
) -> Env {
    let client = client().await;
    let ns = namespace(&client, test).await;
    let runtime = Arc::new(Runtime::new(Limits::default()).unwrap());
    let mut plugins = Plugins::built_in(&runtime).unwrap();
    plugins.insert(
        "opt-out",
        prepare(&runtime, "opt-out", OPT_OUT, "").unwrap(),
    );
    configure(&runtime, &mut plugins);
    let (dir, configmap, registry) = match followed {
        Followed::Nothing => (None, None, None),
        Followed::Dir(d) => {
            let mut dir = PluginDir::new(d);
            dir.scan(&runtime, &mut plugins);
            (Some(Arc::new(Mutex::new(dir))), None, None)
        }
        Followed::ConfigMap(name, puller) => {
            let fetcher = puller.map(|puller| -> Arc<dyn Fetch> { puller });
            (None, Some(ConfigMapSource::new(&ns, name, fetcher)), None)
        }
        Followed::ConfigMapAndRegistry(name, puller, objects) => {
            let configmap = ConfigMapSource::new(&ns, name, Some(puller.clone()));
            let registry = RegistrySettings {
                namespace: ns.clone(),
                secret: objects.secret.map(str::to_owned),
                ca_configmap: objects.cas.map(str::to_owned),
                policy_configmap: objects.policy.map(str::to_owned),
                file_cas: RegistryCas::default(),
                puller,
            };
            (None, Some(configmap), Some(registry))
        }
    };
    let source = PluginSource {
        runtime: runtime.clone(),
        plugins: Arc::new(SharedPlugins::new(plugins)),
        dir,
        poll: Duration::from_millis(200),
        configmap,
        registry,
    };
    let controller = support::Controller::start(&client, &ns, source.clone());
    let (sim, heartbeat) = Simulator::for_tests(client.clone()).await.unwrap();
    Env {
        client,
        ns,
        sim,
        heartbeat,
        controller,
        source,
        _runtime: runtime,
    }
}

impl Env {
    fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    async fn service(&self, name: &str, labels: Value, annotations: Value, spec: Value) -> Service {
        let svc = json!({"metadata": {"name": name, "labels": labels, "annotations": annotations}, "spec": spec});
        self.api::<Service>()
            .create(
                &PostParams::default(),
                &serde_json::from_value(svc).unwrap(),
            )
            .await
            .unwrap()
    }

    async fn headless(&self, name: &str) -> Service {
        self.service(
            name,
            json!({"app": name}),
            json!({"isim.dev/network": "macvlan"}),
            json!({"clusterIP": "None", "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}),
        )
        .await
    }

    /// Creates a pod asking for `networks`, then lets the simulator run it.
    async fn pod(&self, name: &str, labels: Value, networks: &str, ready: bool) -> Pod {
        let pod = json!({
            "metadata": {"name": name, "labels": labels, "annotations": {"k8s.v1.cni.cncf.io/networks": networks}},
            "spec": {"containers": [{"name": "web", "image": "nginx:1.27",
                     "ports": [{"name": "http", "containerPort": 8080}]}]},
        });
        self.sim
            .create_and_start(&self.ns, pod, ready)
            .await
            .unwrap()
    }

    /// Sets `pod`'s readiness on network `macvlan` of this namespace, as the network prober
    /// writes it (a strategic merge of its own condition type).
    async fn set_network_ready(&self, pod: &str, status: &str, reason: &str, message: &str) {
        let condition = network_ready::condition_type(&format!("{}/macvlan", self.ns));
        let patch = json!({"status": {"conditions": [{"type": condition, "status": status,
            "reason": reason, "message": message,
            "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string()}]}});
        self.api::<Pod>()
            .patch_status(pod, &PatchParams::default(), &Patch::Strategic(&patch))
            .await
            .unwrap();
    }

    async fn slices(&self, service: &str) -> Vec<EndpointSlice> {
        let mut slices = self
            .api::<EndpointSlice>()
            .list(&ListParams::default().labels(&format!("{SERVICE_NAME_LABEL}={service}")))
            .await
            .unwrap()
            .items;
        slices.sort_by_key(ResourceExt::name_any);
        slices
    }

    /// Waits until the Service's slices satisfy `ok`.
    async fn wait_slices(
        &self,
        service: &str,
        what: &str,
        ok: impl Fn(&[EndpointSlice]) -> bool,
    ) -> Vec<EndpointSlice> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let slices = self.slices(service).await;
            if ok(&slices) {
                return slices;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {what}; slices of {service}: {}\nthe controller's log for {}:\n{}",
                serde_json::to_string_pretty(&slices.iter().map(summary).collect::<Vec<_>>())
                    .unwrap(),
                self.ns,
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The Service `web` of the plugin `tenant`, with the pods `web-a` (which opts out) and
    /// `web-b`.
    async fn tenant_service(&self) {
        self.service(
            "web",
            json!({}),
            json!({"isim.dev/network": "macvlan", "isim.dev/endpoint-policy": "tenant"}),
            json!({"clusterIP": "None", "ports": [{"port": 80}]}),
        )
        .await;
        self.pod(
            "web-a",
            json!({"endpoints.isim.dev/opt-out": "true"}),
            "macvlan",
            true,
        )
        .await;
        self.pod("web-b", json!({}), "macvlan", true).await;
    }

    /// The note of an Event on the Service `name` that contains `text`, once there is one.
    async fn event_note(&self, name: &str, text: &str) -> String {
        eventually(&format!("an Event on {name} saying {text:?}"), || async {
            self.events_for(name)
                .await
                .into_iter()
                .filter_map(|e| e.note)
                .find(|n| n.contains(text))
        })
        .await
    }

    async fn events_for(&self, name: &str) -> Vec<Event> {
        self.api::<Event>()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .collect()
    }

    /// Merges `patch` into the Service `name`.
    async fn patch_service(&self, name: &str, patch: &Value) {
        self.api::<Service>()
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .unwrap();
    }

    /// Waits for an Event of `reason` on `name`; returns it.
    async fn event(&self, name: &str, reason: &str) -> Event {
        eventually(&format!("a {reason} Event on {name}"), || async {
            self.events_for(name)
                .await
                .into_iter()
                .find(|e| e.reason.as_deref() == Some(reason))
        })
        .await
    }

    /// The last lines the controller logged about this namespace.
    fn log_tail(&self) -> String {
        let log = captured();
        let lines: Vec<&str> = log.lines().filter(|l| l.contains(&self.ns)).collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    fn writes(&self) -> u64 {
        metric_with(
            self,
            "nad_service_controller_endpointslice_writes_total",
            "",
        )
    }

    /// Changes the Service in a way no plan reads (an unrelated annotation): a reconcile
    /// that must write nothing.
    async fn touch_service(&self, name: &str) {
        let touch = json!({"metadata": {"annotations": {"example.com/touched": "1"}}});
        self.api::<Service>()
            .patch(name, &PatchParams::default(), &Patch::Merge(&touch))
            .await
            .unwrap();
    }

    /// Waits until the controller has seen this test's changes and is idle after them
    /// ([`support::Controller::settled`]).
    async fn settled(&self) {
        self.controller.settled(&self.client, &[&self.ns]).await;
    }

    /// Waits until the reconcile count passes `count`.
    async fn reconciled_after(&self, count: u64) {
        eventually("a reconcile", || async {
            (self.reconciles() > count).then_some(())
        })
        .await;
    }

    fn reconciles(&self) -> u64 {
        metric_with(self, "nad_service_controller_reconciles_total", "")
    }

    /// Stops the controller and starts a new one with the same plugins, as a restarted pod
    /// would (fresh caches and metrics).
    async fn restart(&mut self) {
        self.controller.stop().await;
        self.controller = support::Controller::start(&self.client, &self.ns, self.source.clone());
    }

    async fn finish(mut self) {
        self.controller.stop().await;
        self.heartbeat.abort();
        node_sim::delete_test_namespace(&self.client, &self.ns).await;
    }
}

/// A test that fails shows what the controller last logged about its namespace.
impl Drop for Env {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "the controller's last log lines naming {}:\n{}",
                self.ns,
                self.log_tail()
            );
        }
    }
}

/// The series `name{labels}` in `text`, summed over its label sets (those with `labels`,
/// all when empty); `None` when there is none.
fn metric(text: &str, name: &str, labels: &str) -> Option<u64> {
    let scrape = Scrape::new(text);
    let series = if labels.is_empty() {
        name.to_owned()
    } else {
        format!("{name}{{{labels}}}")
    };
    scrape.get(&series)?;
    Some(scrape.sum(&series) as u64)
}

fn endpoints(slice: &EndpointSlice) -> &[k8s_openapi::api::discovery::v1::Endpoint] {
    slice.endpoints.as_deref().unwrap_or_default()
}

fn endpoint_count(slices: &[EndpointSlice]) -> usize {
    slices.iter().map(|s| endpoints(s).len()).sum()
}

/// (address, ready, serving, terminating) of every endpoint.
fn conditions(slices: &[EndpointSlice]) -> Vec<(String, bool, bool, bool)> {
    let mut out: Vec<_> = slices
        .iter()
        .flat_map(endpoints)
        .map(|e| {
            let c = e.conditions.clone().unwrap_or_default();
            (
                e.addresses[0].clone(),
                c.ready == Some(true),
                c.serving == Some(true),
                c.terminating == Some(true),
            )
        })
        .collect();
    out.sort();
    out
}

fn summary(slice: &EndpointSlice) -> Value {
    json!({"name": slice.name_any(), "addressType": slice.address_type, "endpoints": conditions(std::slice::from_ref(slice))})
}

/// The pod's IPs on `network`, from its network-status annotation.
fn network_ips(pod: &Pod, network: &str) -> Vec<String> {
    let status: Vec<Value> =
        serde_json::from_str(&pod.annotations()["k8s.v1.cni.cncf.io/network-status"]).unwrap();
    status
        .iter()
        .filter(|e| e["name"] == network)
        .flat_map(|e| {
            e["ips"]
                .as_array()
                .unwrap()
                .iter()
                .map(|ip| ip.as_str().unwrap().to_owned())
        })
        .collect()
}

// ---- the tests ---------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_ready_pods_give_one_ipv4_slice_with_everything_set() {
    let env = env("basic").await;
    let svc = env.headless("web").await;
    let net = format!("{}/macvlan", env.ns);
    let a = env
        .pod("web-a", json!({"app": "web"}), "macvlan", true)
        .await;
    let b = env
        .pod("web-b", json!({"app": "web"}), "macvlan", true)
        .await;
    env.pod("other", json!({"app": "other"}), "macvlan", true)
        .await;
    let slices = env
        .wait_slices("web", "two endpoints", |s| endpoint_count(s) == 2)
        .await;

    assert_eq!(slices.len(), 1);
    let slice = &slices[0];
    assert_eq!(slice.name_any(), "web-ipv4-0");
    assert_eq!(slice.address_type, "IPv4");
    let labels = slice.labels();
    assert_eq!(labels[SERVICE_NAME_LABEL], "web");
    assert_eq!(labels[MANAGED_BY_LABEL], MANAGED_BY);
    assert_eq!(labels["service.kubernetes.io/headless"], "");
    assert_eq!(labels["app"], "web");
    let owner = &slice.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("Service", "web")
    );
    assert_eq!(Some(owner.uid.clone()), svc.uid());
    assert_eq!(owner.controller, Some(true));
    let port = &slice.ports.as_ref().unwrap()[0];
    assert_eq!(
        (port.name.as_deref(), port.port, port.protocol.as_deref()),
        (Some("http"), Some(8080), Some("TCP"))
    );
    let mut want: Vec<_> = [&a, &b]
        .iter()
        .flat_map(|p| network_ips(p, &net))
        .map(|ip| (ip, true, true, false))
        .collect();
    want.sort();
    assert_eq!(conditions(&slices), want);
    for e in endpoints(slice) {
        let target = e.target_ref.as_ref().unwrap();
        assert_eq!(target.kind.as_deref(), Some("Pod"));
        assert!(
            e.node_name
                .as_deref()
                .is_some_and(|n| n.starts_with("sim-node-")),
            "{e:?}"
        );
        assert!(
            e.zone.as_deref().is_some_and(|z| z.starts_with("zone-")),
            "{e:?}"
        );
    }
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditions_follow_readiness_termination_and_removal() {
    let env = env("conditions").await;
    env.headless("web").await;
    let pod = env
        .pod("web-a", json!({"app": "web"}), "macvlan", true)
        .await;
    let ip = network_ips(&pod, &format!("{}/macvlan", env.ns))[0].clone();
    let state = |r, s, t| vec![(ip.clone(), r, s, t)];

    env.wait_slices("web", "T/T/F", |s| {
        conditions(s) == state(true, true, false)
    })
    .await;
    env.sim.set_ready(&env.ns, "web-a", false).await.unwrap();
    env.wait_slices("web", "F/F/F after Ready=False", |s| {
        conditions(s) == state(false, false, false)
    })
    .await;
    env.sim.set_ready(&env.ns, "web-a", true).await.unwrap();
    env.wait_slices("web", "T/T/F after Ready=True", |s| {
        conditions(s) == state(true, true, false)
    })
    .await;

    // Without a kubelet a deleted pod stays terminating.
    env.api::<Pod>()
        .delete("web-a", &DeleteParams::default())
        .await
        .unwrap();
    env.wait_slices("web", "F/T/T while terminating", |s| {
        conditions(s) == state(false, true, true)
    })
    .await;
    let patch = json!({"spec": {"publishNotReadyAddresses": true}});
    env.patch_service("web", &patch).await;
    env.wait_slices("web", "T/T/T with publishNotReadyAddresses", |s| {
        conditions(s) == state(true, true, true)
    })
    .await;

    env.sim.finalize(&env.ns, "web-a").await.unwrap();
    env.wait_slices("web", "no endpoints once the pod is gone", |s| s.is_empty())
        .await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_fifty_pods_give_three_slices_and_scale_down_removes_them() {
    let env = env("scale").await;
    env.headless("web").await;
    let names: Vec<String> = (0..250).map(|i| format!("web-{i:03}")).collect();
    stream::iter(&names)
        .for_each_concurrent(16, |name| {
            env.pod(name, json!({"app": "web"}), "macvlan", true)
                .map(|_| ())
        })
        .await;
    let slices = env
        .wait_slices("web", "250 endpoints", |s| endpoint_count(s) == 250)
        .await;
    assert_eq!(
        slices.iter().map(ResourceExt::name_any).collect::<Vec<_>>(),
        ["web-ipv4-0", "web-ipv4-1", "web-ipv4-2"]
    );
    // Which slice holds the 50 depends on how the pods arrived between reconciles: a batch
    // that fills a new slice gets one (as upstream places endpoints), so [100, 50, 100] is as
    // right as [100, 100, 50].
    let mut sizes: Vec<usize> = slices.iter().map(|s| endpoints(s).len()).collect();
    sizes.sort_unstable();
    assert_eq!(sizes, [50, 100, 100]);
    let pods: BTreeSet<String> = slices
        .iter()
        .flat_map(endpoints)
        .map(|e| e.target_ref.as_ref().unwrap().name.clone().unwrap())
        .collect();
    assert_eq!(pods.len(), 250, "each pod exactly once");

    stream::iter(&names[1..])
        .for_each_concurrent(16, |name| {
            env.sim.finalize(&env.ns, name).map(|r| r.unwrap())
        })
        .await;
    let slices = env
        .wait_slices("web", "one slice with one endpoint", |s| {
            s.len() == 1 && endpoint_count(s) == 1
        })
        .await;
    assert_eq!(slices[0].name_any(), "web-ipv4-0");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dual_stack_pod_lands_in_an_ipv4_and_an_ipv6_slice() {
    let env = env("dualstack").await;
    let svc = env
        .service(
            "web",
            json!({}),
            json!({"isim.dev/network": "macvlan"}),
            json!({"clusterIP": "None", "ipFamilyPolicy": "PreferDualStack", "ports": [{"port": 80}]}),
        )
        .await;
    assert_eq!(
        svc.spec.as_ref().unwrap().ip_families.as_deref(),
        Some(&["IPv4".to_string(), "IPv6".to_string()][..]),
        "the local control plane is dual-stack"
    );
    env.pod(
        "web-a",
        json!({}),
        r#"[{"name": "macvlan", "ips": ["192.168.2.50", "fd00:2::50"]}]"#,
        true,
    )
    .await;
    let slices = env
        .wait_slices("web", "an IPv4 and an IPv6 slice", |s| s.len() == 2)
        .await;
    let got: Vec<_> = slices
        .iter()
        .map(|s| {
            (
                s.name_any(),
                s.address_type.clone(),
                conditions(std::slice::from_ref(s))[0].0.clone(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("web-ipv4-0".into(), "IPv4".into(), "192.168.2.50".into()),
            ("web-ipv6-0".into(), "IPv6".into(), "fd00:2::50".into()),
        ]
    );
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_with_broken_network_status_is_skipped_and_logged_while_siblings_stay() {
    let env = env("badstatus").await;
    env.headless("web").await;
    env.pod("web-a", json!({"app": "web"}), "macvlan", true)
        .await;
    env.pod("web-b", json!({"app": "web"}), "macvlan", true)
        .await;
    env.wait_slices("web", "two endpoints", |s| endpoint_count(s) == 2)
        .await;
    let broken = json!({
        "metadata": {"name": "web-broken", "labels": {"app": "web"},
                     "annotations": {"k8s.v1.cni.cncf.io/network-status": "[{\"name\": \"macvlan\", oops"}},
        "spec": {"nodeName": "sim-node-0", "containers": [{"name": "web", "image": "nginx:1.27"}]},
    });
    env.api::<Pod>()
        .create(
            &PostParams::default(),
            &serde_json::from_value(broken).unwrap(),
        )
        .await
        .unwrap();
    let line = eventually("a log line about the broken pod", || async {
        captured()
            .lines()
            .find(|l| {
                l.contains("pod=web-broken")
                    && l.contains("annotation cannot be read")
                    && l.contains(&env.ns)
            })
            .map(str::to_owned)
    })
    .await;
    assert!(line.contains("not a JSON list"), "{line}");
    let slices = env.slices("web").await;
    assert_eq!(endpoint_count(&slices), 2, "the siblings stay published");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_services_get_a_warning_and_no_slices() {
    let env = env("invalid").await;
    env.pod("web-a", json!({"app": "web"}), "macvlan", true)
        .await;
    env.service(
        "clustered",
        json!({"app": "web"}),
        json!({"isim.dev/network": "macvlan"}),
        json!({"ports": [{"port": 80}]}),
    )
    .await;
    env.service(
        "selected",
        json!({"app": "web"}),
        json!({"isim.dev/network": "macvlan"}),
        json!({"clusterIP": "None", "selector": {"app": "web"}, "ports": [{"port": 80}]}),
    )
    .await;
    for (service, hint) in [
        ("clustered", "spec.clusterIP: None"),
        ("selected", "spec.selector is set"),
    ] {
        let event = eventually(&format!("a Warning Event on {service}"), || async {
            env.events_for(service)
                .await
                .into_iter()
                .find(|e| e.reason.as_deref() == Some("InvalidService"))
        })
        .await;
        assert_eq!(event.type_.as_deref(), Some("Warning"));
        assert!(
            event.note.as_deref().unwrap_or_default().contains(hint),
            "{:?}",
            event.note
        );
        let ours: Vec<_> = env
            .slices(service)
            .await
            .into_iter()
            .filter(|s| s.labels().get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY))
            .collect();
        assert!(
            ours.is_empty(),
            "no slices from this controller for {service}"
        );
    }
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_the_annotation_or_the_service_removes_the_slices() {
    let env = env("removal").await;
    env.headless("web").await;
    env.pod("web-a", json!({"app": "web"}), "macvlan", true)
        .await;
    env.wait_slices("web", "a slice", |s| s.len() == 1).await;

    let remove = json!({"metadata": {"annotations": {"isim.dev/network": null}}});
    env.patch_service("web", &remove).await;
    env.wait_slices("web", "no slices without the annotation", |s| s.is_empty())
        .await;

    let add = json!({"metadata": {"annotations": {"isim.dev/network": "macvlan"}}});
    env.patch_service("web", &add).await;
    env.wait_slices("web", "the slice back", |s| s.len() == 1)
        .await;

    // A network the pod is not on: the old slice goes.
    let other = json!({"metadata": {"annotations": {"isim.dev/network": "sriov"}}});
    env.patch_service("web", &other).await;
    env.wait_slices("web", "no slices on another network", |s| s.is_empty())
        .await;
    env.patch_service("web", &add).await;
    env.wait_slices("web", "the slice back", |s| s.len() == 1)
        .await;

    // Deleting the Service: the garbage collector removes the owned slices.
    env.api::<Service>()
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    env.wait_slices("web", "garbage collection", |s| s.is_empty())
        .await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slices_deleted_or_edited_by_hand_are_restored() {
    let env = env("restore").await;
    env.headless("web").await;
    env.pod("web-a", json!({"app": "web"}), "macvlan", true)
        .await;
    let original = env
        .wait_slices("web", "a ready endpoint", |s| {
            conditions(s).iter().map(|c| c.1).collect::<Vec<_>>() == [true]
        })
        .await;
    let want = conditions(&original);

    env.api::<EndpointSlice>()
        .delete("web-ipv4-0", &DeleteParams::default())
        .await
        .unwrap();
    let restored = env
        .wait_slices("web", "the deleted slice back", |s| {
            s.len() == 1 && s[0].uid() != original[0].uid()
        })
        .await;
    assert_eq!(conditions(&restored), want);

    let edit = json!({"endpoints": [{"addresses": ["10.9.9.9"], "conditions": {"ready": false}}]});
    env.api::<EndpointSlice>()
        .patch("web-ipv4-0", &PatchParams::default(), &Patch::Merge(&edit))
        .await
        .unwrap();
    env.wait_slices("web", "the edited slice restored", |s| {
        conditions(s) == want
    })
    .await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_nothing_changing_a_reconcile_writes_nothing() {
    let env = env("nowrite").await;
    env.headless("web").await;
    env.pod("web-a", json!({"app": "web"}), "macvlan", true)
        .await;
    env.pod("web-b", json!({"app": "web"}), "macvlan", true)
        .await;
    let before = env
        .wait_slices("web", "two endpoints", |s| endpoint_count(s) == 2)
        .await;
    env.settled().await;
    let before = env
        .slices("web")
        .await
        .into_iter()
        .chain(before)
        .take(1)
        .collect::<Vec<_>>();
    let (writes, reconciles) = (env.writes(), env.reconciles());

    // Changes that move no endpoint: an unrelated Service annotation, a pod label the
    // policy ignores, Ready re-set to what it was. One at a time, each followed by the
    // reconcile it triggers (queued triggers for one Service merge into one reconcile).
    env.touch_service("web").await;
    env.reconciled_after(reconciles).await;
    let label = json!({"metadata": {"labels": {"example.com/irrelevant": "x"}}});
    let count = env.reconciles();
    env.api::<Pod>()
        .patch("web-a", &PatchParams::default(), &Patch::Merge(&label))
        .await
        .unwrap();
    env.reconciled_after(count).await;
    // The API keeps whole seconds: a Ready re-set within the second it was set changes
    // nothing, and no event comes. Re-set it in a later second, so that one does.
    let set = env.api::<Pod>().get("web-b").await.unwrap();
    let ready_since = set
        .status
        .and_then(|s| s.conditions)
        .and_then(|cs| cs.into_iter().find(|c| c.type_ == "Ready"))
        .and_then(|c| c.last_transition_time)
        .unwrap()
        .0;
    eventually("a second after web-b became Ready", || async {
        (k8s_openapi::jiff::Timestamp::now().as_second() > ready_since.as_second()).then_some(())
    })
    .await;
    let count = env.reconciles();
    env.sim.set_ready(&env.ns, "web-b", true).await.unwrap();
    env.reconciled_after(count).await;

    let after = env.slices("web").await;
    assert_eq!(
        after[0].resource_version(),
        before[0].resource_version(),
        "the slice was not written"
    );
    assert_eq!(env.writes(), writes, "no EndpointSlice writes");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_named_by_the_service_changes_its_slice_without_a_restart() {
    let env = env("plugin").await;
    env.service(
        "web",
        json!({}),
        json!({"isim.dev/network": "macvlan"}),
        json!({"clusterIP": "None", "ports": [{"port": 80}]}),
    )
    .await;
    env.pod(
        "web-a",
        json!({"endpoints.isim.dev/opt-out": "true"}),
        "macvlan",
        true,
    )
    .await;
    env.pod("web-b", json!({}), "macvlan", true).await;
    env.wait_slices("web", "both pods with the default plugin", |s| {
        endpoint_count(s) == 2
    })
    .await;

    let select = json!({"metadata": {"annotations": {"isim.dev/endpoint-policy": "opt-out"}}});
    env.patch_service("web", &select).await;
    let slices = env
        .wait_slices("web", "only web-b with opt-out", |s| endpoint_count(s) == 1)
        .await;
    assert_eq!(
        endpoints(&slices[0])[0]
            .target_ref
            .as_ref()
            .unwrap()
            .name
            .as_deref(),
        Some("web-b")
    );

    // A plugin that is not loaded: a Warning Event, and the slices stay as they are.
    let missing = json!({"metadata": {"annotations": {"isim.dev/endpoint-policy": "nope"}}});
    env.patch_service("web", &missing).await;
    let event = env.event("web", "UnknownPlugin").await;
    assert!(event.note.unwrap_or_default().contains("\"nope\""));
    assert_eq!(
        endpoint_count(&env.slices("web").await),
        1,
        "the slices stay as last applied"
    );
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_one_replica_leads_and_a_released_lease_passes_on() {
    let env = env("leader").await;
    let a = LeaderElector::new(env.client.clone(), &env.ns, "nsc", "a".into());
    let b = LeaderElector::new(env.client.clone(), &env.ns, "nsc", "b".into());
    assert!(a.try_acquire_or_renew().await.unwrap());
    assert!(
        !b.try_acquire_or_renew().await.unwrap(),
        "the lease is held"
    );
    assert!(a.try_acquire_or_renew().await.unwrap(), "the holder renews");
    a.release().await;
    assert!(
        b.try_acquire_or_renew().await.unwrap(),
        "a released lease is taken over at once"
    );
    assert!(!a.try_acquire_or_renew().await.unwrap());
    env.finish().await;
}

/// The series `name{labels}` of the test's controller (summed over label sets when `labels` is
/// empty); a missing series fails the test rather than reading as 0.
fn metric_with(env: &Env, name: &str, labels: &str) -> u64 {
    let text = env.controller.metrics.encode();
    metric(&text, name, labels)
        .unwrap_or_else(|| panic!("no series {name}{{{labels}}} in:\n{text}"))
}

/// The series, once it exists (for polling for one that appears later).
fn metric_once(env: &Env, name: &str, labels: &str) -> Option<u64> {
    metric(&env.controller.metrics.encode(), name, labels)
}

fn pod_names(slices: &[EndpointSlice]) -> Vec<String> {
    let mut names: Vec<String> = slices
        .iter()
        .flat_map(endpoints)
        .map(|e| e.target_ref.as_ref().unwrap().name.clone().unwrap())
        .collect();
    names.sort();
    names
}

/// A plugin source changed while the controller runs, as both sources are: `tenant` added (the
/// opt-out example), replaced (the default policy), replaced by a broken file (which never
/// serves: the previous version does), and removed (the Service keeps its slices). `set`
/// changes the source's `tenant` component, `None` removes it.
async fn a_changing_plugin_source<F, Fut>(env: &Env, set: F)
where
    F: Fn(Option<&'static [u8]>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    env.tenant_service().await;
    let unknown = "nad_service_controller_reconciles_total";
    eventually("a reconcile naming the missing plugin", || async {
        (metric_with(env, unknown, "result=\"unknown_plugin\"") > 0).then_some(())
    })
    .await;
    assert!(env.slices("web").await.is_empty());

    // Added: the opt-out example serves as "tenant".
    let at = std::time::Instant::now();
    set(Some(OPT_OUT)).await;
    env.wait_slices("web", "web-b only, with tenant = opt-out", |s| {
        pod_names(s) == ["web-b"]
    })
    .await;
    eprintln!("plugin added -> served in {:?}", at.elapsed());

    // Replaced with a new version: the default policy publishes both.
    let at = std::time::Instant::now();
    set(Some(include_bytes!(env!("NSC_DEFAULT_PLUGIN_WASM")))).await;
    env.wait_slices("web", "both pods with the new version", |s| {
        pod_names(s) == ["web-a", "web-b"]
    })
    .await;
    eprintln!("plugin changed -> served in {:?}", at.elapsed());

    // Replaced with a broken file: a Warning Event, and the previous version keeps serving.
    set(Some(b"\0asm\x0d\0\x01\0 truncated")).await;
    let event = env.event("web", "PluginLoadFailed").await;
    let note = event.note.unwrap_or_default();
    assert!(
        note.contains("compile check failed") && note.contains("previous version keeps serving"),
        "{note}"
    );
    env.pod(
        "web-c",
        json!({"endpoints.isim.dev/opt-out": "true"}),
        "macvlan",
        true,
    )
    .await;
    env.wait_slices("web", "web-c added by the version still serving", |s| {
        pod_names(s).len() == 3
    })
    .await;
    assert_eq!(
        metric_with(
            env,
            "nad_service_controller_plugin_loads_total",
            "plugin=\"tenant\",result=\"compile\""
        ),
        1
    );

    // Removed: the Service keeps its slices (failure policy keep) and is told.
    let before = metric_with(env, unknown, "result=\"unknown_plugin\"");
    set(None).await;
    eventually("a reconcile after the removal", || async {
        (metric_with(env, unknown, "result=\"unknown_plugin\"") > before).then_some(())
    })
    .await;
    assert_eq!(
        pod_names(&env.slices("web").await),
        ["web-a", "web-b", "web-c"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_directory_changed_while_running_changes_slices_and_never_serves_a_broken_file() {
    let dir = std::env::temp_dir().join(format!("nsc-plugins-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let env = env_with("reload", |_, _| {}, Followed::Dir(dir.clone())).await;
    let file = dir.join("tenant.wasm");
    a_changing_plugin_source(&env, |component| {
        match component {
            Some(bytes) => std::fs::write(&file, bytes).unwrap(),
            None => std::fs::remove_file(&file).unwrap(),
        }
        std::future::ready(())
    })
    .await;
    env.finish().await;
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The plugin ConfigMap read through the API (--plugin-configmap): a change serves as soon as
/// the watch delivers it (no kubelet sync), through the same pipeline, keeping the last good
/// version; a deleted ConfigMap unloads its plugins and the Services keep their slices.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_configmap_changed_through_the_api_serves_at_once_and_keeps_the_last_good_version()
{
    use k8s_openapi::{ByteString, api::core::v1::ConfigMap};
    let env = env_with("cmreload", |_, _| {}, Followed::ConfigMap("plugins", None)).await;
    let configmaps = env.api::<ConfigMap>();
    a_changing_plugin_source(&env, |component| {
        let configmaps = configmaps.clone();
        async move {
            let entries = component.map(|bytes| ConfigMap {
                binary_data: Some([("tenant.wasm".to_owned(), ByteString(bytes.to_vec()))].into()),
                ..ConfigMap::default()
            });
            set_plugin_configmap(&configmaps, entries).await;
        }
    })
    .await;
    env.finish().await;
}

/// Sets the test's plugin ConfigMap `plugins` to `entries` (its data and binaryData), or
/// deletes it.
async fn set_plugin_configmap(
    configmaps: &Api<k8s_openapi::api::core::v1::ConfigMap>,
    entries: Option<k8s_openapi::api::core::v1::ConfigMap>,
) {
    match entries {
        Some(entries) => {
            let configmap = k8s_openapi::api::core::v1::ConfigMap {
                metadata: kube::api::ObjectMeta {
                    name: Some("plugins".into()),
                    ..Default::default()
                },
                ..entries
            };
            configmaps
                .patch(
                    "plugins",
                    &PatchParams::apply("cluster-test").force(),
                    &Patch::Apply(&configmap),
                )
                .await
                .unwrap();
        }
        None => {
            configmaps
                .delete("plugins", &Default::default())
                .await
                .unwrap();
        }
    }
}

/// A ConfigMap's `tenant.oci` entry naming `repository@digest`.
fn oci_entry(repository: &str, digest: &str) -> k8s_openapi::api::core::v1::ConfigMap {
    k8s_openapi::api::core::v1::ConfigMap {
        data: Some([("tenant.oci".to_owned(), format!("{repository}@{digest}"))].into()),
        ..Default::default()
    }
}

/// The plugin ConfigMap naming OCI artifacts (`tenant.oci: oci://…@sha256:…`), pushed to the
/// distribution registry on loopback: each new digest is pulled, checked and served as a
/// component in the ConfigMap is, through the same pipeline and keep-last-good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_configmap_naming_oci_artifacts_serves_each_pinned_digest() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let registry = support::registry::Registry::start("cluster");
    let cache = std::env::temp_dir().join(format!("nsc-oci-cluster-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cache);
    let puller = Arc::new(
        Puller::new(&RegistryOptions {
            http: vec![registry.host.clone()],
            cache_dir: Some(cache.clone()),
            ..RegistryOptions::default()
        })
        .unwrap(),
    );
    let env = env_with(
        "ocireload",
        |_, _| {},
        Followed::ConfigMap("plugins", Some(puller.clone())),
    )
    .await;
    let configmaps = env.api::<ConfigMap>();
    let repository = registry.reference("plugins/tenant");
    a_changing_plugin_source(&env, |component| {
        let (configmaps, puller, repository) =
            (configmaps.clone(), puller.clone(), repository.clone());
        async move {
            let entries = match component {
                Some(bytes) => {
                    let target = OciRef::parse(&repository).unwrap();
                    let digest = puller
                        .push(&target, bytes, PUSH_LAYER_MEDIA_TYPE, Default::default())
                        .await
                        .unwrap();
                    Some(oci_entry(&repository, &digest))
                }
                None => None,
            };
            set_plugin_configmap(&configmaps, entries).await;
        }
    })
    .await;
    assert!(captured().contains("plugin artifact pulled"));

    // A new artifact whose registry is down: a Warning Event, and once the registry is back,
    // the fetch tried again (every 30 s) serves it, with no change to the ConfigMap. (An
    // annotation makes it another artifact than the opt-out one above, which the cache has.)
    let target = OciRef::parse(&repository).unwrap();
    let annotations = [("test".to_owned(), "unreachable".to_owned())].into();
    let digest = puller
        .push(&target, OPT_OUT, PUSH_LAYER_MEDIA_TYPE, annotations)
        .await
        .unwrap();
    let mut registry = registry;
    registry.stop();
    set_plugin_configmap(&configmaps, Some(oci_entry(&repository, &digest))).await;
    // No version of the plugin serves now: the Service is told why (UnknownPlugin).
    let event = eventually("an Event naming the unreachable registry", || async {
        env.events_for("web").await.into_iter().find(|e| {
            e.reason.as_deref() == Some("UnknownPlugin")
                && e.note
                    .as_deref()
                    .is_some_and(|n| n.contains("cannot fetch it"))
        })
    })
    .await;
    let note = event.note.unwrap_or_default();
    assert!(
        note.contains(&format!("cannot reach the registry {}", registry.host)),
        "{note}"
    );
    registry.restart();
    let at = std::time::Instant::now();
    eventually("the artifact served once the registry is back", || async {
        (pod_names(&env.slices("web").await) == ["web-b"]).then_some(())
    })
    .await;
    eprintln!("registry back -> served in {:?}", at.elapsed());
    env.finish().await;
    drop(registry);
    std::fs::remove_dir_all(&cache).unwrap();
}

/// A `kubernetes.io/dockerconfigjson` Secret `name` with `user:password` for `registry`.
fn registry_secret(name: &str, registry: &str, user: &str, password: &str) -> Secret {
    let config = json!({"auths": {registry: {"username": user, "password": password}}});
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": config.to_string()},
    }))
    .unwrap()
}

/// The registry Secret and CA ConfigMap: plugins from a registry behind TLS with a private CA
/// that asks for a password are pulled with the CAs and credentials the controller watches. A
/// missing CA, a missing Secret and a wrong password are told on the Service, naming the
/// registry and what to give where, and the version serving keeps serving; a corrected Secret
/// is used at once, not at the next 30 s retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_registry_secret_and_ca_configmap_give_what_plugins_are_pulled_with() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use support::registry::{Registry, TestCa};
    let ca = TestCa::new("nsc cluster test CA");
    let registry = Registry::start_tls("cluster-secret", &[("ci", "s3cret")], &ca);
    let host = registry.host.clone();
    let options = RegistryOptions {
        http: Vec::new(),
        cache_dir: None,
        ..RegistryOptions::default()
    };
    let author = Puller::new(&options).unwrap();
    let mut cas = RegistryCas::default();
    cas.add_pem(&host, "the test's CA", ca.pem.as_bytes())
        .unwrap();
    author.set_cas(cas).unwrap();
    let config = json!({"auths": {&host: {"username": "ci", "password": "s3cret"}}});
    let author_credentials = Credentials::parse("author", config.to_string().as_bytes());
    author
        .set_credentials(Some(author_credentials.unwrap()))
        .unwrap();
    let repository = registry.reference("plugins/tenant");
    let target = OciRef::parse(&repository).unwrap();
    let opt_out = author
        .push(&target, OPT_OUT, PUSH_LAYER_MEDIA_TYPE, Default::default())
        .await
        .unwrap();
    let default_plugin = include_bytes!(env!("NSC_DEFAULT_PLUGIN_WASM"));
    let default = author
        .push(
            &target,
            default_plugin,
            PUSH_LAYER_MEDIA_TYPE,
            Default::default(),
        )
        .await
        .unwrap();

    let puller = Arc::new(Puller::new(&options).unwrap());
    let objects = RegistryObjects {
        secret: Some("registry"),
        cas: Some("cas"),
        policy: None,
    };
    let followed = Followed::ConfigMapAndRegistry("plugins", puller.clone(), objects);
    let env = env_with("ocisecret", |_, _| {}, followed).await;
    let (configmaps, secrets) = (env.api::<ConfigMap>(), env.api::<Secret>());
    env.tenant_service().await;

    // No CA yet: the registry is not trusted, and the Service is told where to give its CA.
    set_plugin_configmap(&configmaps, Some(oci_entry(&repository, &opt_out))).await;
    env.event_note("web", &format!(
        "the registry {host} was refused over TLS (invalid peer certificate: UnknownIssuer): it \
         is not signed by a CA this host trusts: give the CA that signed it (the key {} of the \
         ConfigMap {}/cas)",
        configmap_key(&host),
        env.ns
    ))
    .await;
    let cas: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "cas"},
        "data": {configmap_key(&host): ca.pem},
    }))
    .unwrap();
    configmaps
        .create(&PostParams::default(), &cas)
        .await
        .unwrap();
    // Trusted now, but no Secret yet: read anonymously, refused, and told to create the Secret.
    env.event_note("web", &format!(
        "the registry {host} refused anonymous access to plugins/tenant: the Secret {}/registry \
         that is to hold the credential for {host} does not exist: create it",
        env.ns
    ))
    .await;
    // A wrong password, named with the Secret it came from.
    let generation = puller.generation();
    let wrong = registry_secret("registry", &host, "ci", "guess");
    secrets
        .create(&PostParams::default(), &wrong)
        .await
        .unwrap();
    env.event_note(
        "web",
        &format!(
            "the registry {host} refused the user name and password from Secret {}/registry for \
         plugins/tenant",
            env.ns
        ),
    )
    .await;
    assert!(puller.generation() > generation);

    // Corrected: the refused fetch is tried again as soon as the credentials change, well
    // before the 30 s retry.
    let at = std::time::Instant::now();
    let good = registry_secret("registry", &host, "ci", "s3cret");
    let replace = PatchParams::apply("test").force();
    secrets
        .patch("registry", &replace, &Patch::Apply(&good))
        .await
        .unwrap();
    env.wait_slices("web", "web-b only, the private opt-out plugin", |s| {
        pod_names(s) == ["web-b"]
    })
    .await;
    let served = at.elapsed();
    eprintln!("registry Secret corrected -> served in {served:?}");
    assert!(served < Duration::from_secs(20), "{served:?}");

    // The password wrong again, and a new version: refused, and the one serving keeps serving.
    let generation = puller.generation();
    secrets
        .patch("registry", &replace, &Patch::Apply(&wrong))
        .await
        .unwrap();
    eventually("the wrong password read", || async {
        (puller.generation() > generation).then_some(())
    })
    .await;
    set_plugin_configmap(&configmaps, Some(oci_entry(&repository, &default))).await;
    env.event_note(
        "web",
        &format!("@{default}: the registry {host} refused the user name and password"),
    )
    .await;
    env.pod("web-c", json!({}), "macvlan", true).await;
    env.pod(
        "web-d",
        json!({"endpoints.isim.dev/opt-out": "true"}),
        "macvlan",
        true,
    )
    .await;
    env.wait_slices("web", "web-c added, web-d left out by opt-out", |s| {
        pod_names(s) == ["web-b", "web-c"]
    })
    .await;
    env.finish().await;
}

/// The verification policy ConfigMap: plugin artifacts serve only with the signatures it asks
/// for (cosign, with keys, offline). Before it exists nothing loads; an artifact signed by
/// another key is told on the Service and counted, and serves once the policy names its key; a
/// policy that cannot be used keeps the last good one in force.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_verification_policy_configmap_lets_only_signed_plugins_serve() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use support::registry::{Cosign, Registry};
    let registry = Registry::start("cluster-signed");
    let cosign = Cosign::new("cluster-signed");
    let (a, a_pub) = cosign.key("a");
    let (b, b_pub) = cosign.key("b");
    let options = RegistryOptions {
        http: vec![registry.host.clone()],
        cache_dir: None,
        ..RegistryOptions::default()
    };
    let author = Puller::new(&options).unwrap();
    let repository = registry.reference("plugins/tenant");
    let target = OciRef::parse(&repository).unwrap();
    let mut digests = Vec::new();
    for (component, key) in [
        (OPT_OUT, &a),
        (
            include_bytes!(env!("NSC_DEFAULT_PLUGIN_WASM")).as_slice(),
            &b,
        ),
    ] {
        let digest = author
            .push(
                &target,
                component,
                PUSH_LAYER_MEDIA_TYPE,
                Default::default(),
            )
            .await
            .unwrap();
        cosign.sign(key, &format!("{}/plugins/tenant@{digest}", registry.host));
        digests.push(digest);
    }
    let puller = Arc::new(Puller::new(&options).unwrap());
    let objects = RegistryObjects {
        policy: Some("policy"),
        ..RegistryObjects::default()
    };
    let followed = Followed::ConfigMapAndRegistry("plugins", puller.clone(), objects);
    let env = env_with("ocisigned", |_, _| {}, followed).await;
    let configmaps = env.api::<ConfigMap>();
    env.tenant_service().await;
    let set_policy = |key: &str| {
        let indented: String = key.lines().map(|l| format!("      {l}\n")).collect();
        let configmap: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "policy"},
            "data": {"policy.yaml": format!("allOf:\n  - publicKey: |\n{indented}")},
        }))
        .unwrap();
        let configmaps = configmaps.clone();
        async move {
            configmaps
                .patch(
                    "policy",
                    &PatchParams::apply("test").force(),
                    &Patch::Apply(&configmap),
                )
                .await
                .unwrap();
        }
    };

    // No policy yet: nothing loads unchecked.
    set_plugin_configmap(&configmaps, Some(oci_entry(&repository, &digests[0]))).await;
    env.event_note(
        "web",
        &format!(
            "plugin tenant: not loaded unverified: oci://{}/plugins/tenant@{}: the verification \
         policy ConfigMap {}/policy does not exist",
            registry.host, digests[0], env.ns
        ),
    )
    .await;
    // A policy of b's key: a's signature is not enough, and the Service is told.
    set_policy(&b_pub).await;
    env.event_note("web", "not signed by allOf[0] (public key)")
        .await;
    let refused = "nad_service_controller_plugin_loads_total";
    assert!(metric_with(&env, refused, "plugin=\"tenant\",result=\"signature\"") > 0);
    // a's key: it serves.
    set_policy(&a_pub).await;
    env.wait_slices("web", "web-b only, the signed opt-out plugin", |s| {
        pod_names(s) == ["web-b"]
    })
    .await;

    // A policy that cannot be used keeps a's in force: b's artifact is refused, and the
    // version serving keeps serving.
    let typo: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "policy"},
        "data": {"policy.yaml": "allOf:\n  - publikKey: x\n"},
    }))
    .unwrap();
    let generation = puller.generation();
    configmaps
        .patch(
            "policy",
            &PatchParams::apply("test").force(),
            &Patch::Apply(&typo),
        )
        .await
        .unwrap();
    set_plugin_configmap(&configmaps, Some(oci_entry(&repository, &digests[1]))).await;
    env.event_note(
        "web",
        &format!("@{}: its 1 signature(s) do not satisfy", digests[1]),
    )
    .await;
    assert_eq!(
        puller.generation(),
        generation,
        "the unusable policy changed nothing"
    );
    env.pod("web-c", json!({}), "macvlan", true).await;
    env.wait_slices("web", "web-c added by the version still serving", |s| {
        pod_names(s) == ["web-b", "web-c"]
    })
    .await;
    env.finish().await;
}

/// Puts `key` (PEM) in the verification policy ConfigMap `policy` as its one signer.
async fn set_verification_policy(
    configmaps: &Api<k8s_openapi::api::core::v1::ConfigMap>,
    key: &str,
) {
    let indented: String = key.lines().map(|l| format!("      {l}\n")).collect();
    let configmap: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "policy"},
        "data": {"policy.yaml": format!("allOf:\n  - publicKey: |\n{indented}")},
    }))
    .unwrap();
    configmaps
        .patch(
            "policy",
            &PatchParams::apply("test").force(),
            &Patch::Apply(&configmap),
        )
        .await
        .unwrap();
}

/// A change of the verification policy ConfigMap verifies again the plugins serving from the
/// registry: a plugin whose signer the policy no longer lists stops serving within one reload,
/// its Service gets its failure policy (here `fallback`: the built-in plugin decides), and a
/// Warning Event names the plugin, the policy and what to do; the signer back, it serves again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_whose_signer_the_policy_drops_stops_serving() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use support::registry::{Cosign, Registry};
    let registry = Registry::start("cluster-reverify");
    let cosign = Cosign::new("cluster-reverify");
    let (a, a_pub) = cosign.key("a");
    let (_, b_pub) = cosign.key("b");
    let options = RegistryOptions {
        http: vec![registry.host.clone()],
        cache_dir: None,
        ..RegistryOptions::default()
    };
    let repository = registry.reference("plugins/tenant");
    let digest = Puller::new(&options)
        .unwrap()
        .push(
            &OciRef::parse(&repository).unwrap(),
            OPT_OUT,
            PUSH_LAYER_MEDIA_TYPE,
            Default::default(),
        )
        .await
        .unwrap();
    cosign.sign(&a, &format!("{}/plugins/tenant@{digest}", registry.host));
    let puller = Arc::new(Puller::new(&options).unwrap());
    let objects = RegistryObjects {
        policy: Some("policy"),
        ..RegistryObjects::default()
    };
    let followed = Followed::ConfigMapAndRegistry("plugins", puller.clone(), objects);
    let fallback = |_: &Runtime, plugins: &mut Plugins| {
        plugins.set_failure_policies(
            FailurePolicy::Keep,
            [("tenant".to_owned(), FailurePolicy::Fallback)].into(),
        );
    };
    let env = env_with("ocireverify", fallback, followed).await;
    let configmaps = env.api::<ConfigMap>();
    set_verification_policy(&configmaps, &a_pub).await;
    set_plugin_configmap(&configmaps, Some(oci_entry(&repository, &digest))).await;
    env.tenant_service().await;
    env.wait_slices("web", "web-b only, the signed opt-out plugin", |s| {
        pod_names(s) == ["web-b"]
    })
    .await;

    // a's key replaced by b's: the plugin serving stops, and the built-in plugin decides.
    let changed = std::time::Instant::now();
    set_verification_policy(&configmaps, &b_pub).await;
    env.wait_slices("web", "both pods, by the built-in plugin", |s| {
        pod_names(s) == ["web-a", "web-b"]
    })
    .await;
    eprintln!(
        "from the policy change to the built-in plugin's slices: {:?}",
        changed.elapsed()
    );
    let note = env
        .event_note("web", "the verification policy changed while it served")
        .await;
    for part in [
        format!("plugin tenant: not loaded unverified: {repository}@{digest}"),
        format!(
            "the verification policy (ConfigMap {}/policy data.policy.yaml): not signed by allOf[0] (public key)",
            env.ns
        ),
        "sign the artifact as the policy asks, or change the policy".to_owned(),
    ] {
        assert!(note.contains(&part), "{part:?} not in {note:?}");
    }
    env.event_note("web", "(failure policy: fallback)").await;
    let refused = "nad_service_controller_plugin_loads_total";
    assert!(metric_with(&env, refused, "plugin=\"tenant\",result=\"signature\"") > 0);

    // a's key back: the plugin is pulled, verified and serves again.
    set_verification_policy(&configmaps, &a_pub).await;
    env.wait_slices("web", "web-b only, the plugin serving again", |s| {
        pod_names(s) == ["web-b"]
    })
    .await;
    env.finish().await;
}

/// `explain` on the live cluster: every pod of the namespace with its candidacy, decision,
/// conditions and publishing slice, the plugin read from the controller's plugin ConfigMap,
/// in text and JSON; an invalid Service is explained by its validation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_tells_for_every_pod_what_the_controller_made_of_it() {
    use k8s_openapi::{ByteString, api::core::v1::ConfigMap};
    let env = env("explain").await;
    let ns = env.ns.clone();
    env.service(
        "web",
        json!({"app": "web"}),
        json!({"isim.dev/network": "macvlan", "isim.dev/endpoint-policy": "opt-out"}),
        json!({"clusterIP": "None", "ports": [{"port": 80}]}),
    )
    .await;
    env.pod("web-a", json!({"app": "web"}), "macvlan", true)
        .await;
    env.pod(
        "web-b",
        json!({"app": "web", "endpoints.isim.dev/opt-out": "true"}),
        "macvlan",
        true,
    )
    .await;
    env.pod("web-c", json!({"app": "web"}), "macvlan", false)
        .await;
    env.pod("db", json!({"app": "web"}), "sriov", true).await;
    let slices = env
        .wait_slices("web", "web-a and web-c", |s| {
            pod_names(s) == ["web-a", "web-c"]
        })
        .await;
    let slice = slices[0].name_any();
    // web-a does not answer on the network although it is Ready: published, not serving.
    env.set_network_ready(
        "web-a",
        "False",
        "ConnectFailed",
        "192.168.2.10:8080: connection timed out",
    )
    .await;
    env.wait_slices("web", "web-a not serving", |s| {
        s[0].endpoints.iter().flatten().any(|e| {
            e.target_ref.as_ref().and_then(|r| r.name.as_deref()) == Some("web-a")
                && e.conditions.as_ref().and_then(|c| c.serving) == Some(false)
        })
    })
    .await;
    // The simulator's own status writes (Ready, as kubelet) keep the prober's condition.
    env.sim.set_ready(&ns, "web-a", true).await.unwrap();
    set_plugin_configmap(
        &env.api::<ConfigMap>(),
        Some(ConfigMap {
            binary_data: Some([("opt-out.wasm".to_owned(), ByteString(OPT_OUT.to_vec()))].into()),
            ..ConfigMap::default()
        }),
    )
    .await;
    let explain = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_nad-service-controller"))
            .arg("explain")
            .args(args)
            .args([
                "--plugin-configmap",
                "plugins",
                "--plugin-configmap-namespace",
                &ns,
            ])
            .env("KUBECONFIG", support::kubeconfig_path())
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, text, err) = explain(&[&format!("{ns}/web")]);
    assert!(ok, "{err}");
    let line = |pod: &str| {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(pod))
            .unwrap_or_else(|| panic!("no line for {pod}:\n{text}"))
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert!(
        text.starts_with(&format!(
            "Service {ns}/web: valid; network {ns}/macvlan; plugin opt-out "
        )) && text.contains(&format!(
            "(ConfigMap {ns}/plugins, opt-out.wasm); 1 EndpointSlice"
        )) && text.contains(&format!(
            "Readiness on the network: pod condition network-ready.isim.dev/{ns}.macvlan\n"
        )),
        "{text}"
    );
    assert_eq!(
        line("web-a"),
        format!(
            "web-a yes False (ConnectFailed: 192.168.2.10:8080: connection timed out) include \
             ready=false serving=false terminating=false {slice}"
        )
    );
    assert_eq!(
        line("web-c"),
        format!("web-c yes - include ready=false serving=false terminating=false {slice}")
    );
    assert_eq!(
        line("web-b"),
        "web-b yes - exclude - - pod opted out with label endpoints.isim.dev/opt-out=\"true\""
    );
    assert_eq!(
        line("db"),
        format!(
            "db no - - - - annotation k8s.v1.cni.cncf.io/network-status has no entry for \
             network {ns}/macvlan (it lists: {ns}/sriov)"
        )
    );
    assert!(
        text.contains("3 of 4 pods are candidates: 1 has no network-status entry for"),
        "{text}"
    );
    let (ok, json, err) = explain(&[&format!("{ns}/web"), "-o", "json"]);
    assert!(ok, "{err}");
    let doc: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(doc["plugin"]["name"], "opt-out");
    assert_eq!(doc["included"], 2);
    let pods = doc["pods"].as_array().unwrap();
    let web_a = pods.iter().find(|p| p["name"] == "web-a").unwrap();
    assert_eq!(web_a["conditions"]["serving"], false);
    assert_eq!(web_a["networkReady"]["status"], "False");
    assert_eq!(web_a["networkReady"]["reason"], "ConnectFailed");
    assert_eq!(web_a["slices"], json!([slice]));
    assert_eq!(
        doc["networkReadyCondition"],
        format!("network-ready.isim.dev/{ns}.macvlan")
    );
    let web_c = pods.iter().find(|p| p["name"] == "web-c").unwrap();
    assert_eq!(web_c["networkReady"], Value::Null);
    let db = pods.iter().find(|p| p["name"] == "db").unwrap();
    assert_eq!(db["candidate"], false);

    env.service(
        "clustered",
        json!({}),
        json!({"isim.dev/network": "macvlan"}),
        json!({"ports": [{"port": 80}]}),
    )
    .await;
    let (ok, _, err) = explain(&[&format!("{ns}/clustered")]);
    assert!(!ok);
    assert!(
        err.contains(&format!("Service {ns}/clustered is invalid")),
        "{err}"
    );
    let (ok, _, err) = explain(&[&format!("{ns}/nothing")]);
    assert!(!ok);
    assert!(
        err.contains(&format!("there is no Service {ns}/nothing")),
        "{err}"
    );
    env.finish().await;
}

/// A misspelt network (no NetworkAttachmentDefinition of that name): a Warning Event naming
/// it and the closest existing one, and the slices the Service had are kept; once the
/// definition exists, the Service is reconciled again and follows its network (no pod is on
/// it: its slices go), with no Event any more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_network_that_does_not_exist_is_warned_about_and_cleared_when_it_is_created() {
    let env = env("nonetwork").await;
    env.headless("web").await;
    env.pod("web-a", json!({"app": "web"}), "macvlan", true)
        .await;
    env.wait_slices("web", "web-a published", |s| pod_names(s) == ["web-a"])
        .await;
    let misspelt = json!({"metadata": {"annotations": {"isim.dev/network": "macvlann"}}});
    env.patch_service("web", &misspelt).await;
    let event = env.event("web", "NetworkNotFound").await;
    let ns = &env.ns;
    assert_eq!(
        event.note.as_deref(),
        Some(
            format!(
                "web: network {ns}/macvlann names no NetworkAttachmentDefinition (did you mean \
                 {ns}/macvlan?): set the annotation isim.dev/network to {ns}/macvlan, or create \
                 the NetworkAttachmentDefinition; its EndpointSlices are kept until then"
            )
            .as_str()
        )
    );
    // The Service planned again (a label of its own; the one Service of this controller, so the
    // reconcile count says it was): with nothing to publish on the missing network, the slices
    // stay, and no second Event is sent. (A pod of the network's own that the policy selects
    // would be published, the network still reported: the step's table tests say so.)
    let before = env.reconciles();
    env.patch_service(
        "web",
        &json!({"metadata": {"labels": {"replanned": "yes"}}}),
    )
    .await;
    env.reconciled_after(before).await;
    env.settled().await;
    assert_eq!(pod_names(&env.slices("web").await), ["web-a"]);
    node_sim::define_networks(&env.client, ns, &["macvlann"])
        .await
        .unwrap();
    env.wait_slices(
        "web",
        "the slices of the now existing network, where it selects no pod",
        |s| pod_names(s).is_empty(),
    )
    .await;
    let warnings = env
        .events_for("web")
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("NetworkNotFound"))
        .map(|e| e.series.map_or(1, |s| s.count))
        .sum::<i32>();
    assert_eq!(warnings, 1, "told once while it lasted");
    env.finish().await;
}

/// A warning whose Event the API server refuses is told again by the next reconcile, not lost
/// while the problem lasts: here an admission policy refuses the Service's NetworkNotFound
/// Events, then goes; the next reconcile (the Service labelled) publishes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warning_whose_event_was_refused_is_told_at_the_next_reconcile() {
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    let env = env("untold").await;
    let ns = env.ns.clone();
    let name = format!("nsc-refuse-events-{ns}");
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(env.client.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(env.client.clone());
    let policy = json!({
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                "resourceRules": [{"apiGroups": ["", "events.k8s.io"], "apiVersions": ["v1"],
                    "operations": ["CREATE", "UPDATE"], "resources": ["events"]}],
            },
            "validations": [{"expression": "object.reason != 'NetworkNotFound'",
                "message": "refused by the test"}],
        },
    });
    policies
        .create(
            &PostParams::default(),
            &serde_json::from_value(policy).unwrap(),
        )
        .await
        .unwrap();
    let binding = json!({
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    });
    bindings
        .create(
            &PostParams::default(),
            &serde_json::from_value(binding).unwrap(),
        )
        .await
        .unwrap();
    // In force once a NetworkNotFound Event of the test's own is refused (a dry run).
    let probe: Event = serde_json::from_value(json!({
        "metadata": {"generateName": "probe-"},
        "eventTime": k8s_openapi::jiff::Timestamp::now().to_string(),
        "reportingController": "nsc-test", "reportingInstance": "nsc-test",
        "action": "Validate", "reason": "NetworkNotFound", "type": "Warning", "note": "probe",
        "regarding": {"apiVersion": "v1", "kind": "Service", "namespace": ns, "name": "web"},
    }))
    .unwrap();
    let refused = || async {
        env.api::<Event>()
            .create(
                &PostParams {
                    dry_run: true,
                    ..PostParams::default()
                },
                &probe,
            )
            .await
            .is_err()
    };
    eventually("the policy refusing NetworkNotFound Events", || async {
        refused().await.then_some(())
    })
    .await;

    env.headless("web").await;
    env.pod("web-a", json!({"app": "web"}), "macvlan", true)
        .await;
    env.wait_slices("web", "web-a published", |s| pod_names(s) == ["web-a"])
        .await;
    let misspelt = json!({"metadata": {"annotations": {"isim.dev/network": "macvlann"}}});
    env.patch_service("web", &misspelt).await;
    eventually("the controller's NetworkNotFound Event refused", || async {
        captured()
            .lines()
            .any(|l| {
                l.contains("could not publish Event")
                    && l.contains("NetworkNotFound")
                    && l.contains(&ns)
            })
            .then_some(())
    })
    .await;

    bindings
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    policies
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    eventually("NetworkNotFound Events allowed again", || async {
        (!refused().await).then_some(())
    })
    .await;
    assert!(
        !env.events_for("web")
            .await
            .iter()
            .any(|e| e.reason.as_deref() == Some("NetworkNotFound")),
        "published while refused"
    );
    // The next reconcile (the Service changed) tells it.
    let touched = json!({"metadata": {"labels": {"touched": "yes"}}});
    env.patch_service("web", &touched).await;
    let event = env.event("web", "NetworkNotFound").await;
    assert!(
        event
            .note
            .as_deref()
            .unwrap_or_default()
            .starts_with(&format!(
                "web: network {ns}/macvlann names no NetworkAttachmentDefinition"
            )),
        "{event:?}"
    );
    assert_eq!(
        pod_names(&env.slices("web").await),
        ["web-a"],
        "the slices kept"
    );
    env.finish().await;
}

/// A probe annotation with bad values: one Warning Event naming each field, the slices still
/// published (the network prober uses the default probe), and the Service's problem metric;
/// fixed, the problem goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_probe_annotation_is_warned_about_naming_the_field() {
    let env = env("badprobe").await;
    env.service(
        "web",
        json!({"app": "web"}),
        json!({"isim.dev/network": "macvlan",
               "isim.dev/probe": r#"{"periodSeconds": 0, "tcpSocket": {"port": "No_Such"}}"#}),
        json!({"clusterIP": "None", "ports": [{"port": 80}]}),
    )
    .await;
    env.pod("web-a", json!({"app": "web"}), "macvlan", true)
        .await;
    env.wait_slices("web", "web-a published", |s| pod_names(s) == ["web-a"])
        .await;
    let event = env.event("web", "InvalidProbe").await;
    let note = event.note.unwrap_or_default();
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert!(
        note.starts_with(
            "web: isim.dev/probe: periodSeconds is 0, out of its range 1 to 300; \
             isim.dev/probe: tcpSocket.port is \"No_Such\""
        ) && note.contains("the network prober uses the default probe"),
        "{note}"
    );
    let labels = format!(
        "service_namespace=\"{}\",service_name=\"web\",reason=\"InvalidProbe\",plugin=\"\"",
        env.ns
    );
    let problem = |env: &Env| metric_once(env, "nad_service_controller_service_problem", &labels);
    assert_eq!(problem(&env), Some(1));
    let fixed = json!({"metadata": {"annotations": {"isim.dev/probe": r#"{"periodSeconds": 5}"#}}});
    env.patch_service("web", &fixed).await;
    eventually("the problem gone", || async {
        problem(&env).is_none().then_some(())
    })
    .await;
    env.finish().await;
}

/// The network readiness condition's type is one the API server accepts as a pod condition
/// and as a readiness gate, for short, dotted and the longest valid network names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_condition_types_are_valid_condition_types_and_readiness_gates() {
    let env = env("condnames").await;
    let long_name = format!("{}.{}", "a".repeat(63), "b".repeat(189));
    let networks = [
        format!("{}/macvlan", env.ns),
        format!("{}/net.with.dots", env.ns),
        format!("{}/{long_name}", "n".repeat(63)),
        format!("{}/{}", env.ns, "c".repeat(70)),
    ];
    let types: Vec<String> = networks
        .iter()
        .map(|n| network_ready::condition_type(n))
        .collect();
    let gates: Vec<Value> = types.iter().map(|t| json!({"conditionType": t})).collect();
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "gated"},
        "spec": {"readinessGates": gates, "containers": [{"name": "c", "image": "nginx"}]},
    }))
    .unwrap();
    env.api::<Pod>()
        .create(&PostParams::default(), &pod)
        .await
        .expect("the API server accepts every type as a readiness gate");
    let conditions: Vec<Value> = types
        .iter()
        .map(|t| json!({"type": t, "status": "False", "reason": "ProbeFailed", "message": "m"}))
        .collect();
    let patched = env
        .api::<Pod>()
        .patch_status(
            "gated",
            &PatchParams::default(),
            &Patch::Strategic(&json!({"status": {"conditions": conditions}})),
        )
        .await
        .expect("the API server accepts every type as a pod condition");
    let written: Vec<String> = patched
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.type_)
        .collect();
    for t in &types {
        assert!(written.contains(t), "{t} in {written:?}");
    }
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_plugin_keeps_the_last_slices_or_falls_back_as_configured() {
    let env = env_with(
        "failpolicy",
        |rt, plugins| {
            for name in ["buggy", "buggy-fallback"] {
                plugins.insert(
                    name,
                    prepare(rt, name, MISBEHAVING, "trap-on-team-red").unwrap(),
                );
            }
            plugins.set_failure_policies(
                FailurePolicy::Keep,
                [("buggy-fallback".to_string(), FailurePolicy::Fallback)].into(),
            );
        },
        Followed::Nothing,
    )
    .await;
    for (service, plugin) in [("keep", "buggy"), ("fall", "buggy-fallback")] {
        env.service(
            service,
            json!({}),
            json!({"isim.dev/network": "macvlan", "isim.dev/endpoint-policy": plugin}),
            json!({"clusterIP": "None", "ports": [{"port": 80}]}),
        )
        .await;
    }
    env.pod("web-b", json!({"team": "blue"}), "macvlan", true)
        .await;
    env.wait_slices("keep", "web-b", |s| pod_names(s) == ["web-b"])
        .await;
    env.wait_slices("fall", "web-b", |s| pod_names(s) == ["web-b"])
        .await;

    // A pod that makes the plugin trap.
    env.pod("web-r", json!({"team": "red"}), "macvlan", true)
        .await;
    env.wait_slices("fall", "both pods, decided by the built-in plugin", |s| {
        pod_names(s) == ["web-b", "web-r"]
    })
    .await;
    let failed = env.event("keep", "PluginFailed").await;
    let note = failed.note.unwrap_or_default();
    assert!(
        note.contains("plugin buggy") && note.contains("deliberate trap on team=red"),
        "{note}"
    );
    assert_eq!(
        pod_names(&env.slices("keep").await),
        ["web-b"],
        "keep: the slices stay as last applied"
    );
    let fell_back = env.event("fall", "PluginFallback").await;
    assert!(
        fell_back
            .note
            .unwrap_or_default()
            .contains("built-in default plugin")
    );
    assert!(
        metric_with(
            &env,
            "nad_service_controller_plugin_fallbacks_total",
            "plugin=\"buggy-fallback\""
        ) >= 1
    );
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_preferred_zones_example_keeps_a_service_zone_local() {
    let env = env_with(
        "zones",
        |rt, plugins| {
            plugins.insert(
                "preferred-zones",
                prepare(rt, "preferred-zones", PREFERRED_ZONES, "").unwrap(),
            )
        },
        Followed::Nothing,
    )
    .await;
    env.service(
        "web",
        json!({}),
        json!({"isim.dev/network": "macvlan", "isim.dev/endpoint-policy": "preferred-zones",
               "endpoints.isim.dev/preferred-zones": "zone-a"}),
        json!({"clusterIP": "None", "ports": [{"port": 80}]}),
    )
    .await;
    // The simulator places pods on its two nodes in turn: zone-a, zone-b, zone-a, zone-b.
    for name in ["web-0", "web-1", "web-2", "web-3"] {
        env.pod(name, json!({}), "macvlan", true).await;
    }
    let slices = env
        .wait_slices("web", "the zone-a pods", |s| endpoint_count(s) == 2)
        .await;
    assert!(
        slices
            .iter()
            .flat_map(endpoints)
            .all(|e| e.zone.as_deref() == Some("zone-a"))
    );
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_change_is_checked_alone_by_services_that_do_not_publish_it() {
    let env = env("scoped").await;
    env.headless("web").await;
    env.headless("other").await;
    env.pod("web-a", json!({"app": "web"}), "macvlan", true)
        .await;
    env.pod("stray", json!({"app": "nobody"}), "macvlan", true)
        .await;
    env.wait_slices("web", "web-a published", |s| endpoint_count(s) == 1)
        .await;

    // web publishes web-a, so it plans again; other only asks its policy about web-a.
    env.sim.set_ready(&env.ns, "web-a", false).await.unwrap();
    env.wait_slices("web", "web-a not ready", |s| {
        conditions(s).first().is_some_and(|c| !c.1)
    })
    .await;
    eventually("other checking web-a alone", || async {
        captured()
            .lines()
            .any(|l| {
                l.contains(&env.ns)
                    && l.contains("service=other")
                    && l.contains("changed pods move no endpoint")
            })
            .then_some(())
    })
    .await;

    // A pod that starts to match other's policy is published by it.
    let relabel = json!({"metadata": {"labels": {"app": "other"}}});
    env.api::<Pod>()
        .patch("stray", &PatchParams::default(), &Patch::Merge(&relabel))
        .await
        .unwrap();
    let slices = env
        .wait_slices("other", "stray published", |s| endpoint_count(s) == 1)
        .await;
    assert_eq!(pod_names(&slices), vec!["stray".to_owned()]);
    assert_eq!(endpoint_count(&env.slices("web").await), 1);
    env.finish().await;
}

/// A write the API server refuses is a bug here (the controller checks what the API checks),
/// but must still be contained: counted, reported once naming the pod, not sent again while
/// its content is unchanged, and never holding back the Service's other slices. An admission
/// policy refusing one address stands in for a rule this controller does not know.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_slice_is_reported_once_and_not_sent_again() {
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    let env = env("refused").await;
    let name = format!("nsc-refuse-{}", env.ns);
    let policy: ValidatingAdmissionPolicy = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": ["discovery.k8s.io"],
                "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["endpointslices"]}]},
            "validations": [{"reason": "Invalid", "message": "192.168.7.77 is reserved",
                "expression": "!has(object.endpoints) || !object.endpoints.exists(e, e.addresses.exists(a, a == '192.168.7.77'))"}]},
    }))
    .unwrap();
    let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": env.ns}}}},
    }))
    .unwrap();
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(env.client.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(env.client.clone());
    policies
        .create(&PostParams::default(), &policy)
        .await
        .unwrap();
    bindings
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let probe: EndpointSlice = serde_json::from_value(json!({"metadata": {"name": "probe"},
        "addressType": "IPv4", "endpoints": [{"addresses": ["192.168.7.77"]}]}))
    .unwrap();
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    eventually("the admission policy in force", || async {
        match env.api::<EndpointSlice>().create(&dry_run, &probe).await {
            Err(kube::Error::Api(status)) if status.code == 422 => Some(()),
            _ => None,
        }
    })
    .await;

    env.service(
        "web",
        json!({"app": "web"}),
        json!({"isim.dev/network": "macvlan"}),
        json!({"clusterIP": "None", "ipFamilyPolicy": "PreferDualStack", "ports": [{"port": 80}]}),
    )
    .await;
    let app = json!({"app": "web"});
    env.pod(
        "web-v6",
        app.clone(),
        r#"[{"name": "macvlan", "ips": ["fd00:7::7/64"]}]"#,
        true,
    )
    .await;
    env.pod("web-good", app.clone(), "macvlan", true).await;
    env.wait_slices("web", "both slices", |s| s.len() == 2)
        .await;
    env.pod(
        "web-bad",
        app.clone(),
        r#"[{"name": "macvlan", "ips": ["192.168.7.77/24"]}]"#,
        true,
    )
    .await;
    let refused = || {
        metric_with(
            &env,
            "nad_service_controller_endpointslice_refused_total",
            "by=\"api\"",
        )
    };
    eventually("the refusal counted", || async {
        (refused() >= 1).then_some(())
    })
    .await;
    // The pod's start is two changes (attached, then Ready): at most one refusal each.
    env.settled().await;
    let refusals = refused();
    assert!(refusals <= 2, "{refusals} refusals for two contents");
    let slices = env.slices("web").await;
    assert_eq!(
        pod_names(&slices),
        vec!["web-good", "web-v6"],
        "the refused update left the slice as it was"
    );
    let events = env.events_for("web").await;
    let refusal: Vec<_> = events
        .iter()
        .filter(|e| e.reason.as_deref() == Some("EndpointSliceRefused"))
        .collect();
    assert!(!refusal.is_empty(), "{events:#?}");
    let note = refusal[0].note.as_deref().unwrap_or_default();
    assert!(
        note.contains("web-ipv4-0") && note.contains("web-bad") && note.contains("422 Invalid"),
        "{note}"
    );

    // Reconciles go on (the IPv6 slice follows its pod); the refused content is not resent.
    for ready in [false, true] {
        let before = env.reconciles();
        env.sim.set_ready(&env.ns, "web-v6", ready).await.unwrap();
        env.wait_slices("web", "the IPv6 slice following its pod", |s| {
            conditions(s)
                .iter()
                .any(|c| c.0.contains(':') && c.1 == ready)
        })
        .await;
        env.reconciled_after(before).await;
    }
    assert_eq!(refused(), refusals, "the same refused slice was sent again");

    // With the refused address gone, the next content of the IPv4 slice is written at once.
    // (The address is changed rather than the pod deleted: a deletion may first show the pod
    // terminating, a new content that is rightly refused once more.)
    let status = env.api::<Pod>().get("web-bad").await.unwrap().annotations()
        ["k8s.v1.cni.cncf.io/network-status"]
        .replace("192.168.7.77", "192.168.7.78");
    let moved = json!({"metadata": {"annotations": {"k8s.v1.cni.cncf.io/network-status": status}}});
    env.api::<Pod>()
        .patch("web-bad", &PatchParams::default(), &Patch::Merge(&moved))
        .await
        .unwrap();
    let slices = env
        .wait_slices("web", "the IPv4 slice with the new address", |s| {
            pod_names(s).contains(&"web-bad".to_owned())
        })
        .await;
    assert_eq!(pod_names(&slices), vec!["web-bad", "web-good", "web-v6"]);
    assert_eq!(
        refused(),
        refusals,
        "an accepted content was counted as refused"
    );
    let _ = bindings.delete(&name, &DeleteParams::default()).await;
    let _ = policies.delete(&name, &DeleteParams::default()).await;
    env.finish().await;
}

// ---- monitoring ---------------------------------------------------------------------------------

/// Names that Prometheus itself records for each target, not the controller.
const PROMETHEUS_SERIES: &[&str] = &["up"];

/// GET /metrics from the controller's own HTTP server (the router `run` serves), on loopback.
async fn scrape(metrics: Arc<nad_service_controller::metrics::Metrics>) -> String {
    use nad_service_controller::server;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let router = server::router(metrics, server::Readiness::default());
    let serving = tokio::spawn(server::serve(listener, router, async move {
        let _ = stopped.await;
    }));
    let response = tokio::task::spawn_blocking(move || {
        use std::io::Read;
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        response
    })
    .await
    .unwrap();
    let _ = stop.send(());
    serving.await.unwrap().unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_owned()
}

/// Every query of the dashboard (panels and template variables) and every rule expression,
/// with where it is: `(where, expression)`.
fn monitoring_queries() -> Vec<(String, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/monitoring");
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("dashboard.json")).unwrap())
            .unwrap();
    let mut queries = Vec::new();
    let mut panels: Vec<&Value> = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        panels.push(panel);
        panels.extend(panel["panels"].as_array().into_iter().flatten());
    }
    for panel in panels {
        for target in panel["targets"].as_array().into_iter().flatten() {
            queries.push((
                format!(
                    "dashboard panel {:?} query {}",
                    panel["title"].as_str().unwrap_or_default(),
                    target["refId"].as_str().unwrap_or_default()
                ),
                target["expr"].as_str().unwrap().to_owned(),
            ));
        }
    }
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        let query = match &variable["query"] {
            Value::Object(q) => q.get("query").and_then(Value::as_str),
            q => q.as_str(),
        };
        if variable["type"] == "query" {
            let expr = promql::template_query(query.unwrap()).unwrap();
            let name = variable["name"].as_str().unwrap();
            queries.push((format!("dashboard variable {name}"), expr));
        }
    }
    let rules: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(dir.join("rules.yaml")).unwrap()).unwrap();
    for group in rules["groups"].as_array().unwrap() {
        for rule in group["rules"].as_array().unwrap() {
            let name = rule["alert"].as_str().or(rule["record"].as_str()).unwrap();
            queries.push((
                format!("rules.yaml {name}"),
                rule["expr"].as_str().unwrap().to_owned(),
            ));
        }
    }
    queries
}

/// Every metric the dashboard and the alerts name is one the controller exports: scraped from
/// its /metrics after it has done what makes each family show (a family without samples is
/// not in the exposition at all, so each is driven: a reconcile that writes, a plugin that
/// fails and falls back, a plugin loaded while running), or one the network prober exports
/// (its alerts'), from its metrics after a probe, a write and a count of its pods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboards_and_alerts_name_only_exported_metrics() {
    let queries = monitoring_queries();
    assert!(queries.len() > 30, "{queries:?}");
    let dir = std::env::temp_dir().join(format!("nsc-monitoring-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let env = env_with(
        "monitoring",
        |rt, plugins| {
            plugins.insert(
                "buggy",
                prepare(rt, "buggy", MISBEHAVING, "trap-on-team-red").unwrap(),
            );
            plugins.set_failure_policies(
                FailurePolicy::Keep,
                [("buggy".to_string(), FailurePolicy::Fallback)].into(),
            );
        },
        Followed::Dir(dir.clone()),
    )
    .await;
    env.headless("web").await;
    env.service(
        "fall",
        json!({}),
        json!({"isim.dev/network": "macvlan", "isim.dev/endpoint-policy": "buggy"}),
        json!({"clusterIP": "None", "ports": [{"port": 80}]}),
    )
    .await;
    env.pod(
        "web-a",
        json!({"app": "web", "team": "red"}),
        "macvlan",
        true,
    )
    .await;
    env.wait_slices("web", "web-a published", |s| pod_names(s) == ["web-a"])
        .await;
    env.wait_slices("fall", "web-a, decided by the built-in plugin", |s| {
        pod_names(s) == ["web-a"]
    })
    .await;
    std::fs::write(dir.join("tenant.wasm"), OPT_OUT).unwrap();
    eventually("the plugin loaded while running", || async {
        metric_once(
            &env,
            "nad_service_controller_plugin_loads_total",
            "plugin=\"tenant\",result=\"ok\"",
        )
        .is_some_and(|n| n > 0)
        .then_some(())
    })
    .await;

    let exposition = scrape(env.controller.metrics.clone()).await;
    // The network prober's (nad_prober_*, its own /metrics): every family driven, as its probe
    // tasks do (a probe, a condition write, the pods it probes).
    let prober = nad_prober::metrics::ProbeMetrics::default();
    prober.probed("default/macvlan", false, Duration::from_millis(3));
    prober.wrote("default/macvlan", Some(false));
    prober.set_targets("default/macvlan", 1);
    let prober_exposition = prober.encode();
    let mut exported = promql::sample_names(&exposition);
    exported.extend(promql::sample_names(&prober_exposition));
    let mut families = promql::families(&exposition);
    families.extend(promql::families(&prober_exposition));
    assert!(
        exposition.contains("nad_service_controller_service_problem{service_namespace=\"")
            && exposition.contains("reason=\"PluginFallback\",plugin=\"buggy\"} 1"),
        "the fallback is a problem of Service fall:\n{exposition}"
    );
    let mut unknown = Vec::new();
    let mut checked = BTreeSet::new();
    for (place, expr) in &queries {
        let names = promql::metric_names(expr);
        assert!(!names.is_empty(), "{place}: no metric in {expr}");
        for name in names {
            if PROMETHEUS_SERIES.contains(&name.as_str()) {
                continue;
            }
            if !exported.contains(&name) {
                unknown.push(format!(
                    "{place}: {name} is not exported ({})",
                    promql::hint(&name, &families)
                ));
            }
            checked.insert(name);
        }
    }
    assert!(
        unknown.is_empty(),
        "metrics named but not exported:\n{}\n\nexported: {:?}",
        unknown.join("\n"),
        exported
    );
    assert!(checked.len() > 20, "{checked:?}");
    env.finish().await;
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The slices of `service` that this controller manages.
fn ours<'a>(slices: &'a [EndpointSlice], service: &str) -> Vec<&'a EndpointSlice> {
    slices
        .iter()
        .filter(|s| is_managed_slice_of(s, service))
        .collect()
}

/// The endpoints of `service` in this controller's slices.
fn our_endpoints(slices: &[EndpointSlice], service: &str) -> usize {
    ours(slices, service)
        .iter()
        .map(|s| endpoints(s).len())
        .sum()
}

/// An EndpointSlice of another controller that happens to have the name this controller would
/// choose is never written: it stays byte for byte as it was, and the Service is published
/// under the next free name. A slice of this controller whose `managed-by` someone changes is
/// no longer its own: left alone too, and the Service's endpoints published beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_slice_with_the_chosen_name_is_never_written() {
    let env = env("foreign").await;
    let api = env.api::<EndpointSlice>();
    let someone = PostParams {
        field_manager: Some("someone-else".into()),
        ..PostParams::default()
    };
    let foreign: EndpointSlice = serde_json::from_value(json!({
        "metadata": {"name": "web-ipv4-0",
            "labels": {MANAGED_BY_LABEL: "someone-else.example.com", SERVICE_NAME_LABEL: "web"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["192.168.99.1"], "conditions": {"ready": true}}],
        "ports": [{"name": "http", "port": 9999, "protocol": "TCP"}],
    }))
    .unwrap();
    let foreign = api.create(&someone, &foreign).await.unwrap();
    env.headless("web").await;
    env.pod("web-a", json!({"app": "web"}), "macvlan", true)
        .await;
    let slices = env
        .wait_slices("web", "web-a published by this controller", |s| {
            our_endpoints(s, "web") == 1
        })
        .await;
    assert_eq!(ours(&slices, "web")[0].name_any(), "web-ipv4-1");
    env.pod("web-b", json!({"app": "web"}), "macvlan", true)
        .await;
    env.wait_slices("web", "web-b added to this controller's slice", |s| {
        our_endpoints(s, "web") == 2
    })
    .await;
    let unchanged = |slice: &EndpointSlice, before: &EndpointSlice, what: &str| {
        assert_eq!(
            serde_json::to_value(slice).unwrap(),
            serde_json::to_value(before).unwrap(),
            "{what} was written"
        );
    };
    unchanged(
        &api.get("web-ipv4-0").await.unwrap(),
        &foreign,
        "the foreign slice",
    );

    // Ours relabelled by someone: theirs now.
    let relabel = json!({"metadata": {"labels": {MANAGED_BY_LABEL: "someone-else.example.com"}}});
    let taken = api
        .patch(
            "web-ipv4-1",
            &PatchParams {
                field_manager: Some("someone-else".into()),
                ..PatchParams::default()
            },
            &Patch::Merge(&relabel),
        )
        .await
        .unwrap();
    let slices = env
        .wait_slices(
            "web",
            "both pods published beside the relabelled slice",
            |s| our_endpoints(s, "web") == 2,
        )
        .await;
    assert_eq!(ours(&slices, "web")[0].name_any(), "web-ipv4-2");
    env.pod("web-c", json!({"app": "web"}), "macvlan", true)
        .await;
    env.wait_slices("web", "web-c added", |s| our_endpoints(s, "web") == 3)
        .await;
    unchanged(
        &api.get("web-ipv4-0").await.unwrap(),
        &foreign,
        "the foreign slice",
    );
    unchanged(
        &api.get("web-ipv4-1").await.unwrap(),
        &taken,
        "the relabelled slice",
    );
    assert!(
        env.log_tail().contains("does not manage has this name"),
        "the controller says why it chose another name:\n{}",
        env.log_tail()
    );
    env.finish().await;
}

/// kubernetes#136502: the API stores `ports: []` as no ports at all. A headless Service without
/// ports is written once; neither a reconcile with nothing changed nor a restarted controller
/// (fresh caches) rewrites its slice or recreates it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_without_ports_is_written_once_also_across_a_restart() {
    let mut env = env("noports").await;
    env.service(
        "web",
        json!({"app": "web"}),
        json!({"isim.dev/network": "macvlan"}),
        json!({"clusterIP": "None"}),
    )
    .await;
    env.pod("web-a", json!({"app": "web"}), "macvlan", true)
        .await;
    env.wait_slices("web", "one endpoint", |s| endpoint_count(s) == 1)
        .await;
    env.settled().await;
    let before = env.slices("web").await;
    assert_eq!(before.len(), 1);
    assert!(
        before[0].ports.as_ref().is_none_or(Vec::is_empty),
        "{:?}",
        before[0].ports
    );
    let (writes, reconciles) = (env.writes(), env.reconciles());
    env.touch_service("web").await;
    env.reconciled_after(reconciles).await;
    assert_eq!(env.writes(), writes, "no EndpointSlice writes");

    env.restart().await;
    env.reconciled_after(0).await;
    env.settled().await;
    let after = env.slices("web").await;
    assert_eq!(
        (after[0].uid(), after[0].resource_version()),
        (before[0].uid(), before[0].resource_version()),
        "the slice was neither recreated nor written"
    );
    assert_eq!(env.writes(), 0, "no write by the restarted controller");
    env.finish().await;
}

/// `Controller::stop` fails the test when the controller task panicked.
#[tokio::test]
async fn a_controller_that_panicked_fails_the_test_when_stopped() {
    let mut dead = support::Controller::of_task(tokio::spawn(async { panic!("deliberate") }));
    let stopped = std::panic::AssertUnwindSafe(dead.stop())
        .catch_unwind()
        .await;
    assert!(stopped.is_err(), "a panic was swallowed");
}

/// One Ready flip costs one reconcile and one slice write, and the write's echo none, flip
/// after flip (`make bench` measures the same over 500 flips at scale).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ready_flip_is_one_reconcile_and_one_write() {
    let env = env("flip").await;
    env.headless("web").await;
    for pod in ["web-a", "web-b"] {
        env.pod(pod, json!({"app": "web"}), "macvlan", true).await;
    }
    env.wait_slices("web", "two endpoints", |s| endpoint_count(s) == 2)
        .await;
    env.settled().await;
    for (flip, ready) in [false, true, false, true].into_iter().enumerate() {
        let (writes, reconciles) = (env.writes(), env.reconciles());
        env.sim.set_ready(&env.ns, "web-a", ready).await.unwrap();
        env.wait_slices("web", "the flip published", |s| {
            s.iter()
                .flat_map(|s| s.endpoints.iter().flatten())
                .filter(|e| e.target_ref.as_ref().and_then(|r| r.name.as_deref()) == Some("web-a"))
                .any(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(ready))
        })
        .await;
        env.settled().await;
        assert_eq!(
            (env.reconciles() - reconciles, env.writes() - writes),
            (1, 1),
            "flip {flip}: (reconciles, writes)\n{}",
            env.log_tail()
        );
    }
    env.finish().await;
}

/// `Controller::settled` waits for the test's own change to be seen: a controller whose watches
/// saw nothing of the pod the test created is not settled, however quiet it is; once its pod
/// watch shows that version, it is.
#[tokio::test]
async fn settled_waits_for_the_tests_own_change_to_be_seen() {
    let client = support::client().await;
    let ns = namespace(&client, "settled").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "web-a"},
        "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
    }))
    .unwrap();
    let created = pods.create(&PostParams::default(), &pod).await.unwrap();
    let deaf = support::Controller::of_task(tokio::spawn(std::future::pending()));
    // Its watches, started, have seen nothing.
    for resource in ["pods", "services", "endpointslices"] {
        drop(deaf.metrics.watch.progress(resource));
    }
    let early = tokio::time::timeout(Duration::from_secs(3), deaf.settled(&client, &[&ns])).await;
    assert!(early.is_err(), "settled before its watches saw the pod");
    let pods_watch = deaf.metrics.watch.progress("pods");
    pods_watch.saw(created.metadata.resource_version.as_deref());
    tokio::time::timeout(Duration::from_secs(10), deaf.settled(&client, &[&ns]))
        .await
        .expect("settled once the pod's version was seen");
    node_sim::delete_test_namespace(&client, &ns).await;
}

/// `Controller::stop` fails the test when the controller does not stop within its bound
/// (10 s): a shutdown held up by a reconcile must not pass for one that stopped.
#[tokio::test]
async fn a_controller_that_does_not_stop_fails_the_test() {
    let mut stuck = support::Controller::of_task(tokio::spawn(std::future::pending()));
    let stopped = std::panic::AssertUnwindSafe(stuck.stop())
        .catch_unwind()
        .await;
    assert!(stopped.is_err(), "a stop slower than the bound passed");
}

// ---- DRA networks: addresses from ResourceClaims, written as the drivers write them ------------

/// A DeviceClass of this test's own (cluster-scoped, so named after the namespace).
async fn device_class(env: &Env, suffix: &str) -> String {
    let name = format!("{}-{suffix}", env.ns);
    let class: DeviceClass =
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": {}})).unwrap();
    Api::<DeviceClass>::all(env.client.clone())
        .create(&PostParams::default(), &class)
        .await
        .unwrap();
    name
}

/// A running pod naming the ResourceClaim `claim` directly.
async fn pod_with_claim(env: &Env, name: &str, claim: &str, ready: bool) -> Pod {
    let pod = json!({
        "metadata": {"name": name, "labels": {"app": "nics"}},
        "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}],
                 "resourceClaims": [{"name": "nic", "resourceClaimName": claim}]},
    });
    env.sim.create_and_start(&env.ns, pod, ready).await.unwrap()
}

/// A claim with the request `nic` of `class` and the request `gpu` of another class.
async fn claim(env: &Env, name: &str, class: &str, other_class: &str) {
    let claim: ResourceClaim = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [
            {"name": "nic", "exactly": {"deviceClassName": class}},
            {"name": "gpu", "exactly": {"deviceClassName": other_class}},
        ]}},
    }))
    .unwrap();
    env.api::<ResourceClaim>()
        .create(&PostParams::default(), &claim)
        .await
        .unwrap();
}

/// A device's status as DRANET v1.0.1 writes it (pkg/driver/nri_hooks.go).
fn dranet_device(device: &str, ips: &[&str], ready: &str) -> Value {
    json!({
        "driver": "dra.net", "pool": "node-0", "device": device,
        "conditions": [
            {"type": "Ready", "status": ready, "reason": "NetworkDeviceReady", "message": "",
             "lastTransitionTime": "2026-12-07T00:00:00Z"},
            {"type": "NetworkReady", "status": "True", "reason": "NetworkReady", "message": "",
             "lastTransitionTime": "2026-12-07T00:00:00Z"},
        ],
        "networkData": {"interfaceName": "net1", "hardwareAddress": "02:42:c0:a8:32:04", "ips": ips},
    })
}

/// Merges `status` into the claim's status, as the scheduler, kubelet and the drivers do.
async fn claim_status(env: &Env, name: &str, status: Value) {
    env.api::<ResourceClaim>()
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": status})),
        )
        .await
        .unwrap();
}

/// The scheduler's allocation (`nic` to device `device`, `gpu` to `gpu-0`) and kubelet's
/// reservation for `pod`.
async fn allocate(env: &Env, name: &str, device: &str, pod: &Pod) {
    let status = json!({
        "allocation": {"devices": {"results": [
            {"request": "nic", "driver": "dra.net", "pool": "node-0", "device": device},
            {"request": "gpu", "driver": "gpu.example.com", "pool": "node-0", "device": "gpu-0"},
        ]}},
        "reservedFor": [reservation(pod)],
    });
    claim_status(env, name, status).await;
}

fn reservation(pod: &Pod) -> Value {
    json!({"resource": "pods", "name": pod.name_any(), "uid": pod.uid().unwrap()})
}

/// `explain <ns>/<service>` as text and as JSON; both must succeed.
fn explain_dra(env: &Env, service: &str) -> (String, Value) {
    let run = |extra: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_nad-service-controller"))
            .args(["explain", &format!("{}/{service}", env.ns)])
            .args(extra)
            .env("KUBECONFIG", support::kubeconfig_path())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "explain {extra:?}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    };
    let text = run(&[]);
    let doc = serde_json::from_str(&run(&["-o", "json"])).unwrap();
    (text, doc)
}

fn addresses(slices: &[EndpointSlice]) -> Vec<String> {
    let mut all: Vec<String> = slices
        .iter()
        .flat_map(endpoints)
        .flat_map(|e| e.addresses.clone())
        .collect();
    all.sort();
    all
}

/// The mapping on a real API server (with kube-controller-manager's claim controller): a
/// Service on a DeviceClass publishes the addresses its pods' claims report (DRANET's write,
/// link-local left out, another class's device ignored), follows a driver's late write, a
/// device going not Ready and a claim deallocated, and a pod of a reused name once the claim
/// is reserved for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_on_a_device_class_publishes_the_addresses_its_pods_claims_report() {
    let env = env("dra-map").await;
    let class = device_class(&env, "nics").await;
    let gpus = device_class(&env, "gpus").await;
    env.service(
        "nics",
        json!({"app": "nics"}),
        json!({"isim.dev/device-class": class}),
        json!({"clusterIP": "None", "ports": [{"name": "http", "port": 80}]}),
    )
    .await;

    // DRANET's write: CIDRs, a link-local address beside the routable one; the GPU of the
    // same claim reports an address of its own, on another class.
    claim(&env, "web-0-nic", &class, &gpus).await;
    let web0 = pod_with_claim(&env, "web-0", "web-0-nic", true).await;
    let gpu = json!({"driver": "gpu.example.com", "pool": "node-0", "device": "gpu-0",
                     "networkData": {"ips": ["10.99.0.1/24"]}});
    allocate(&env, "web-0-nic", "eth1", &web0).await;
    let devices = json!([
        dranet_device("eth1", &["192.168.50.4/24", "fe80::4/64"], "True"),
        gpu
    ]);
    claim_status(&env, "web-0-nic", json!({"devices": devices})).await;
    let slices = env
        .wait_slices("nics", "web-0's NIC address", |s| {
            addresses(s) == ["192.168.50.4"]
        })
        .await;
    assert_eq!(
        conditions(&slices),
        [("192.168.50.4".to_owned(), true, true, false)]
    );

    // SR-IOV standalone's late write: allocated and reserved, no status yet, then the address.
    claim(&env, "web-1-nic", &class, &gpus).await;
    let web1 = pod_with_claim(&env, "web-1", "web-1-nic", true).await;
    allocate(&env, "web-1-nic", "eth2", &web1).await;
    env.settled().await;
    assert_eq!(addresses(&env.slices("nics").await), ["192.168.50.4"]);
    let devices = json!([dranet_device("eth2", &["192.168.50.5/24"], "True")]);
    claim_status(&env, "web-1-nic", json!({"devices": devices})).await;
    env.wait_slices("nics", "web-1's late address", |s| {
        addresses(s) == ["192.168.50.4", "192.168.50.5"]
    })
    .await;

    // A device that goes not Ready: its pod is published not serving.
    let devices = json!([dranet_device("eth1", &["192.168.50.4/24"], "False")]);
    claim_status(&env, "web-0-nic", json!({"devices": devices})).await;
    env.wait_slices("nics", "web-0 not serving", |s| {
        conditions(s).contains(&("192.168.50.4".to_owned(), false, false, false))
    })
    .await;

    // `explain` shows, per pod, the claim, the device, its interface, addresses and conditions.
    let (text, doc) = explain_dra(&env, "nics");
    assert!(
        text.contains(
            "device: pod web-0: claim web-0-nic, request nic, device dra.net/node-0/eth1, \
             interface net1 (02:42:c0:a8:32:04), addresses 192.168.50.4, \
             conditions NetworkReady=True Ready=False\n"
        ) && text.contains(
            "device: pod web-1: claim web-1-nic, request nic, device dra.net/node-0/eth2, \
             interface net1 (02:42:c0:a8:32:04), addresses 192.168.50.5, \
             conditions NetworkReady=True Ready=True\n"
        ),
        "{text}"
    );
    assert!(
        !text.contains("gpu-0"),
        "another class's device shown:\n{text}"
    );
    let pods = doc["pods"].as_array().unwrap();
    let row = pods.iter().find(|p| p["name"] == "web-0").unwrap();
    assert_eq!(row["conditions"]["serving"], false, "{row}");
    assert_eq!(row["devices"][0]["claim"], "web-0-nic");
    assert_eq!(row["devices"][0]["device"], "eth1");
    assert_eq!(row["devices"][0]["ips"], json!(["192.168.50.4"]));
    let ready = row["devices"][0]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap();
    assert_eq!(ready["status"], "False", "{row}");
    assert_eq!(doc["networkReadyCondition"], Value::Null);

    // A claim deallocated while its pod runs: the pod leaves the Service.
    let deallocated = json!({"allocation": null, "reservedFor": null, "devices": null});
    claim_status(&env, "web-1-nic", deallocated).await;
    env.wait_slices("nics", "web-1 gone with its allocation", |s| {
        addresses(s) == ["192.168.50.4"]
    })
    .await;

    // A new pod of the same name names the same claim. kube-controller-manager's claim
    // controller drops the old pod's reservation and reserves the claim for the new one (it
    // was scheduled); the new pod is published once the claim is reserved for its UID, never
    // on the strength of its name (the window before is unit-tested: nad-core's index).
    env.api::<Pod>()
        .delete("web-0", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    env.wait_slices("nics", "web-0 gone", |s| addresses(s).is_empty())
        .await;
    let again = pod_with_claim(&env, "web-0", "web-0-nic", true).await;
    assert_ne!(again.uid(), web0.uid());
    env.wait_slices("nics", "the new web-0, once reserved for it", |s| {
        addresses(s) == ["192.168.50.4"]
    })
    .await;
    let reserved: Vec<String> = env
        .api::<ResourceClaim>()
        .get("web-0-nic")
        .await
        .unwrap()
        .status
        .and_then(|s| s.reserved_for)
        .unwrap_or_default()
        .into_iter()
        .map(|r| r.uid)
        .collect();
    assert!(
        reserved.contains(&again.uid().unwrap()),
        "published while the claim is reserved for {reserved:?}, not the new web-0"
    );
    // The driver reports the new sandbox's address.
    let devices = json!([dranet_device("eth1", &["192.168.50.6/24"], "True")]);
    claim_status(&env, "web-0-nic", json!({"devices": devices})).await;
    env.wait_slices("nics", "the new web-0's address", |s| {
        addresses(s) == ["192.168.50.6"]
    })
    .await;

    for name in [class, gpus] {
        let _ = Api::<DeviceClass>::all(env.client.clone())
            .delete(&name, &DeleteParams::default())
            .await;
    }
    env.finish().await;
}

/// A claim made from a template (its name generated by kube-controller-manager, found through the
/// pod's `status.resourceClaimStatuses`) and written as the CNI DRA driver writes a shared device:
/// a share ID on the allocation and the status, the CNI result as opaque `data`, an IPv6-only
/// device with the 16 addresses the API allows. Each address is an endpoint of the IPv6 slice;
/// the IPv4 slice has none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generated_claim_of_a_shared_ipv6_device_publishes_all_its_addresses() {
    let env = env("dra-cni").await;
    let class = device_class(&env, "cni").await;
    env.service(
        "cni",
        json!({"app": "cni"}),
        json!({"isim.dev/device-class": class}),
        json!({"clusterIP": "None", "ipFamilyPolicy": "PreferDualStack",
               "ports": [{"name": "http", "port": 80}]}),
    )
    .await;
    let template: ResourceClaimTemplate = serde_json::from_value(json!({
        "metadata": {"name": "nic"},
        "spec": {"spec": {"devices": {"requests": [
            {"name": "nic", "exactly": {"deviceClassName": class}}]}}},
    }))
    .unwrap();
    env.api::<ResourceClaimTemplate>()
        .create(&PostParams::default(), &template)
        .await
        .unwrap();
    let pod = json!({
        "metadata": {"name": "cni-0", "labels": {"app": "cni"}},
        "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}],
                 "resourceClaims": [{"name": "net", "resourceClaimTemplateName": "nic"}]},
    });
    let pod = env.sim.create_and_start(&env.ns, pod, true).await.unwrap();
    // kube-controller-manager makes the claim and names it in the pod's status.
    let generated = eventually("the claim generated for cni-0", || async {
        let pod = env.api::<Pod>().get("cni-0").await.unwrap();
        pod.status?
            .resource_claim_statuses?
            .into_iter()
            .find(|s| s.name == "net")?
            .resource_claim_name
    })
    .await;
    let share = "8e7acdf9-0290-4ecd-a801-a654b021d2b7";
    let device = json!({"request": "nic", "driver": "cni.dra.networking.x-k8s.io",
                        "pool": "node-0", "device": "eth1", "shareID": share});
    claim_status(
        &env,
        &generated,
        json!({"allocation": {"devices": {"results": [device]}},
               "reservedFor": [reservation(&pod)]}),
    )
    .await;
    let ips: Vec<String> = (1..=16).map(|i| format!("fd00:10:1::{i:x}/64")).collect();
    let status = json!([{
        "driver": "cni.dra.networking.x-k8s.io", "pool": "node-0", "device": "eth1",
        "shareID": share,
        "conditions": [{"type": "Ready", "status": "True", "reason": "NetworkReady",
                        "message": "", "lastTransitionTime": "2026-12-07T00:00:00Z"}],
        "data": {"cniVersion": "1.0.0", "interfaces": [{"name": "net1", "sandbox": "/var/run/netns/x"}]},
        "networkData": {"interfaceName": "net1", "hardwareAddress": "5a:9f:d8:84:fb:51", "ips": ips},
    }]);
    claim_status(&env, &generated, json!({"devices": status})).await;
    let want: Vec<String> = {
        let mut all: Vec<String> = (1..=16).map(|i| format!("fd00:10:1::{i:x}")).collect();
        all.sort();
        all
    };
    let slices = env
        .wait_slices("cni", "the 16 IPv6 addresses", |s| addresses(s) == want)
        .await;
    let families: Vec<(String, usize)> = slices
        .iter()
        .map(|s| (s.address_type.clone(), endpoints(s).len()))
        .collect();
    assert!(
        families.contains(&("IPv6".to_owned(), 16))
            && families.iter().all(|(f, n)| f == "IPv6" || *n == 0),
        "{families:?}"
    );
    assert!(
        conditions(&slices)
            .iter()
            .all(|(_, ready, serving, terminating)| *ready && *serving && !*terminating),
        "{:?}",
        conditions(&slices)
    );
    let _ = Api::<DeviceClass>::all(env.client.clone())
        .delete(&class, &DeleteParams::default())
        .await;
    env.finish().await;
}

/// A Service naming a DeviceClass that does not exist is told the closest one; one naming both
/// kinds of network is invalid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_device_class_and_both_kinds_of_network_are_warned_about() {
    let env = env("dra-warn").await;
    let class = device_class(&env, "nics").await;
    env.service(
        "typo",
        json!({}),
        json!({"isim.dev/device-class": format!("{class}x")}),
        json!({"clusterIP": "None"}),
    )
    .await;
    let note = env.event_note("typo", "does not exist").await;
    assert!(
        note.contains(&format!(
            "DeviceClass {class}x does not exist (did you mean {class}?)"
        )),
        "{note}"
    );
    assert!(
        note.contains(&format!(
            "set the annotation isim.dev/device-class to {class}"
        )),
        "{note}"
    );
    env.service(
        "both",
        json!({}),
        json!({"isim.dev/device-class": class, "isim.dev/network": "macvlan"}),
        json!({"clusterIP": "None"}),
    )
    .await;
    let event = env.event("both", "InvalidService").await;
    assert!(
        event.note.unwrap_or_default().contains("not both"),
        "the Event says to keep one"
    );
    let _ = Api::<DeviceClass>::all(env.client.clone())
        .delete(&class, &DeleteParams::default())
        .await;
    env.finish().await;
}
