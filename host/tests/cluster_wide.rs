//! A controller that watches every namespace, on the local control plane (`make local-up`).
//! A test binary of its own: cargo runs test binaries one after the other, so no other test's
//! controller runs beside this one, which reconciles every annotated Service of the cluster.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code

use k8s_openapi::api::{core::v1::Service, discovery::v1::EndpointSlice};
use kube::{
    Api, Client,
    api::{ListParams, PostParams},
};
use nad_model::labels::SERVICE_NAME_LABEL;
use nad_plugin_runtime::{Limits, Plugins, Runtime, SharedPlugins};
use nad_service_controller::watch::plugin_dir::PluginSource;
use node_sim::Simulator;
use serde_json::json;
use std::{sync::Arc, time::Duration};

mod support;
use support::{client, eventually};

async fn headless(client: &Client, ns: &str, network: &str) {
    let svc = json!({"metadata": {"name": "web", "labels": {"app": "web"},
            "annotations": {"isim.dev/network": network}},
        "spec": {"clusterIP": "None", "ports": [{"name": "http", "port": 80}]}});
    Api::<Service>::namespaced(client.clone(), ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(svc).unwrap(),
        )
        .await
        .unwrap();
}

/// The pods the Service `web` of `ns` publishes: each endpoint's target, namespace and name.
async fn published(client: &Client, ns: &str) -> Vec<(String, String)> {
    let slices = Api::<EndpointSlice>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("{SERVICE_NAME_LABEL}=web")))
        .await
        .unwrap();
    let mut pods: Vec<(String, String)> = slices
        .items
        .iter()
        .flat_map(|s| s.endpoints.iter().flatten())
        .filter_map(|e| {
            let target = e.target_ref.as_ref()?;
            Some((target.namespace.clone()?, target.name.clone()?))
        })
        .collect();
    pods.sort();
    pods
}

/// A pod of another namespace attached to the Service's very network (`<ns>/macvlan`), with the
/// Service's labels and the same name as its own pod, is never one of its endpoints: the
/// controller sees it (it publishes it for a Service of its own namespace on that network), and
/// leaves it out of the first's. The endpoints' targets name their namespace, so a pod of the
/// other namespace in a Service's slices is told apart from its own pod of the same name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_in_other_namespaces_are_never_published() {
    let client = client().await;
    let (a, b) = (
        support::namespace(&client, "wide-a").await,
        support::namespace(&client, "wide-b").await,
    );
    let runtime = Arc::new(Runtime::new(Limits::default()).unwrap());
    let source = PluginSource {
        runtime: runtime.clone(),
        plugins: Arc::new(SharedPlugins::new(Plugins::built_in(&runtime).unwrap())),
        dir: None,
        poll: Duration::from_millis(200),
        configmap: None,
        registry: None,
    };
    let mut controller = support::Controller::start_cluster_wide(&client, source);
    let (sim, heartbeat) = Simulator::for_tests(client.clone()).await.unwrap();
    let network = format!("{a}/macvlan");
    headless(&client, &a, "macvlan").await;
    headless(&client, &b, &network).await;
    for ns in [&a, &b] {
        let pod = json!({
            "metadata": {"name": "web-0", "labels": {"app": "web"},
                "annotations": {"k8s.v1.cni.cncf.io/networks": network}},
            "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
        });
        sim.create_and_start(ns, pod, true).await.unwrap();
    }
    let own = |ns: &str| vec![(ns.to_owned(), "web-0".to_owned())];
    eventually(
        "each Service publishing the pod of its own namespace",
        || async {
            (published(&client, &a).await == own(&a) && published(&client, &b).await == own(&b))
                .then_some(())
        },
    )
    .await;
    controller.settled(&client, &[&a, &b]).await;
    assert_eq!(published(&client, &a).await, own(&a));
    assert_eq!(published(&client, &b).await, own(&b));
    controller.stop().await;
    heartbeat.abort();
    node_sim::delete_test_namespace(&client, &a).await;
    node_sim::delete_test_namespace(&client, &b).await;
}
