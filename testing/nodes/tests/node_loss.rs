//! A node that stops answering (its kubelet frozen with SIGSTOP: no status, no lease) ends with
//! its pods not ready, as the node lifecycle controller decides, and comes back. Alone in its
//! test binary: the other tests need every node.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code

use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Node};
use kube::api::{Api, ListParams};
use nad_node_tests::{Scene, condition, image};
use serde_json::json;

/// The kubelet of a node, frozen until dropped.
struct Frozen(String);

impl Frozen {
    fn kubelet_of(node: &str) -> Self {
        let out = std::process::Command::new("ip")
            .args(["netns", "pids", node])
            .output()
            .unwrap();
        let pid = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .find(|pid| {
                std::fs::read_link(format!("/proc/{pid}/exe"))
                    .is_ok_and(|exe| exe.file_name().is_some_and(|n| n == "kubelet"))
            })
            .unwrap_or_else(|| panic!("no kubelet in {node}"))
            .to_owned();
        Self::signal(&pid, "STOP");
        Self(pid)
    }

    fn signal(pid: &str, signal: &str) {
        let status = std::process::Command::new("kill")
            .args([&format!("-{signal}"), pid])
            .status()
            .unwrap();
        assert!(status.success(), "kill -{signal} {pid}");
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        Self::signal(&self.0, "CONT");
    }
}

fn node_ready(node: &Node) -> Option<String> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.clone())
}

#[tokio::test]
async fn a_node_that_stops_answering_ends_with_its_pods_not_ready_and_comes_back() {
    let scene = Scene::new("node-loss").await;
    let node = "nsc-node-1";
    scene
        .create(json!({"metadata": {"name": "app"},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": image("netutils"),
            "command": ["sleep", "infinity"]}]}}))
        .await;
    scene.condition_is("app", "Ready", "True").await;
    let nodes: Api<Node> = Api::all(scene.client.clone());
    nad_node_tests::eventually("the node Ready before", || async {
        (node_ready(&nodes.get(node).await.unwrap()).as_deref() == Some("True")).then_some(())
    })
    .await;

    let frozen = Frozen::kubelet_of(node);
    // kube-controller-manager's node-monitor-grace-period (50 s) without a lease renewal.
    let wait = Duration::from_secs(120);
    nad_test_kit::wait::eventually("the node's Ready Unknown", wait, || async {
        (node_ready(&nodes.get(node).await.unwrap()).as_deref() == Some("Unknown")).then_some(())
    })
    .await;
    nad_test_kit::wait::eventually("the pod's Ready False", wait, || async {
        let pod = scene.pod("app").await;
        (condition(&pod, "Ready")?.status == "False").then_some(())
    })
    .await;
    // Said by the node lifecycle controller, on the pod. Its Events are written apart from the
    // status, and may come after it (CI of e55ce0c listed none right after Ready went False).
    let events: Api<Event> = Api::namespaced(scene.client.clone(), &scene.ns);
    nad_test_kit::wait::eventually("the node controller's NodeNotReady Event", wait, || async {
        let said = events
            .list(&ListParams::default().fields("involvedObject.name=app,reason=NodeNotReady"))
            .await
            .unwrap()
            .items;
        said.iter()
            .any(|e| {
                e.type_.as_deref() == Some("Warning")
                    && e.source.as_ref().and_then(|s| s.component.as_deref())
                        == Some("node-controller")
            })
            .then_some(())
    })
    .await;

    drop(frozen);
    nad_test_kit::wait::eventually("the node Ready again", wait, || async {
        (node_ready(&nodes.get(node).await.unwrap()).as_deref() == Some("True")).then_some(())
    })
    .await;
    scene.condition_is("app", "Ready", "True").await;
    scene.finish().await;
}
