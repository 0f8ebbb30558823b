//! Kubelet, containerd and kube-scheduler as the features rely on them, on the real nodes of
//! `hack/nodes.sh` (see the crate's documentation): registration, pods on the secondary network
//! answering there, `kubectl exec` and `logs` through the API server's egress, readiness gates,
//! and the node identities' limits.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use nad_node_tests::{
    NODE_LABEL, Scene, client, condition, image, kubectl, network_ips, nodes, repo,
};
use serde_json::json;

#[tokio::test]
async fn the_nodes_are_kubelets_and_containerd_of_the_pinned_versions() {
    let client = client().await;
    let nodes = nodes(&client).await;
    assert_eq!(nodes.len(), 2, "two nodes");
    for node in &nodes {
        let name = node.metadata.name.clone().unwrap();
        let status = node.status.clone().unwrap();
        let info = status.node_info.unwrap();
        assert_eq!(info.kubelet_version, "v1.37.2", "{name}");
        assert_eq!(
            info.container_runtime_version, "containerd://2.4.2",
            "{name}"
        );
        let ready = status
            .conditions
            .unwrap()
            .into_iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(ready.status, "True", "{name}: {ready:?}");
        assert_eq!(ready.reason.as_deref(), Some("KubeletReady"), "{name}");
        let addresses: Vec<String> = status
            .addresses
            .unwrap()
            .into_iter()
            .filter(|a| a.type_ == "InternalIP")
            .map(|a| a.address)
            .collect();
        assert!(
            addresses.iter().any(|a| a.starts_with("172.30.0.")),
            "{name}: {addresses:?}"
        );
        assert!(
            addresses.iter().any(|a| a.starts_with("fd00:172:30::")),
            "{name}: {addresses:?}"
        );
        assert!(
            node.metadata
                .labels
                .as_ref()
                .unwrap()
                .contains_key("topology.kubernetes.io/zone"),
            "{name}"
        );
    }
}

#[tokio::test]
async fn a_pod_on_the_secondary_network_answers_there_and_exec_and_logs_reach_it() {
    let scene = Scene::new("kubelet-net").await;
    let nad = repo().join("testdata/00-macvlan-nad.yaml");
    let (code, out) = kubectl(&["apply", "-n", &scene.ns, "-f", nad.to_str().unwrap()]).await;
    assert_eq!(code, 0, "{out}");
    let on_macvlan = json!({"k8s.v1.cni.cncf.io/networks": "macvlan"});
    scene
        .create(
            json!({"metadata": {"name": "web", "annotations": on_macvlan},
        "spec": {"containers": [{"name": "nginx", "image": image("nginx"),
            "readinessProbe": {"httpGet": {"port": 80}, "periodSeconds": 1}}]}}),
        )
        .await;
    scene
        .create(
            json!({"metadata": {"name": "client", "annotations": on_macvlan},
        "spec": {"containers": [{"name": "netutils", "image": image("netutils"),
            "command": ["sleep", "infinity"]}]}}),
        )
        .await;
    let web = scene.condition_is("web", "Ready", "True").await;
    let client = scene.condition_is("client", "Ready", "True").await;
    let network = format!("{}/macvlan", scene.ns);
    let web_ip = network_ips(&web, &network)
        .into_iter()
        .find(|ip| !ip.contains(':'))
        .unwrap();
    let client_ip = network_ips(&client, &network)
        .into_iter()
        .find(|ip| !ip.contains(':'))
        .unwrap();
    assert!(web_ip.starts_with("192.168.2."), "{web_ip}");

    // kubectl exec: API server → its egress → the node's kubelet → containerd.
    let (code, out) = scene
        .exec(
            "client",
            &[
                "curl",
                "-sS",
                "-m",
                "5",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                &format!("http://{web_ip}/"),
            ],
        )
        .await;
    assert_eq!(
        (code, out.as_str()),
        (0, "200"),
        "curl from client to web on macvlan"
    );
    // kubectl logs: nginx saw the client's macvlan address, so the request came on that network.
    let (code, logs) = kubectl(&["logs", "-n", &scene.ns, "web"]).await;
    assert_eq!(code, 0, "{logs}");
    assert!(
        logs.lines()
            .any(|l| l.starts_with(&format!("{client_ip} - ")) && l.contains("curl/")),
        "{logs}"
    );
    scene.finish().await;
}

#[tokio::test]
async fn a_readiness_gate_holds_ready_until_its_condition_is_true_through_restarts() {
    let scene = Scene::new("kubelet-gate").await;
    let gate = "isim.dev/example-gate";
    // TERM ends the container (its PID 1 traps it), so that kubelet restarts it.
    scene
        .create(json!({"metadata": {"name": "gated"},
        "spec": {"readinessGates": [{"conditionType": gate}],
            "containers": [{"name": "app", "image": image("netutils"),
                "command": ["bash", "-c", "trap 'exit 3' TERM; sleep infinity & wait"]}]}}))
        .await;
    let pod = scene.condition_is("gated", "ContainersReady", "True").await;
    let ready = condition(&pod, "Ready").unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_deref()),
        ("False", Some("ReadinessGatesNotReady"))
    );

    let set = |status: &'static str| {
        let pods = scene.pods.clone();
        async move {
            pods.patch_status("gated", &PatchParams::default(), &Patch::Strategic(json!({"status": {"conditions": [
                {"type": gate, "status": status, "reason": "Test", "message": "set by the test"}]}})))
                .await
                .unwrap();
        }
    };
    set("True").await;
    scene.condition_is("gated", "Ready", "True").await;

    // A restart: kubelet writes the pod's status again (Ready down, then up) and keeps the gate.
    nad_node_tests::restart(&scene.ns, "gated").await;
    let pod = scene.pod("gated").await;
    let kept = condition(&pod, gate).unwrap();
    assert_eq!(
        (kept.status.as_str(), kept.message.as_deref()),
        ("True", Some("set by the test"))
    );

    set("False").await;
    let pod = scene.condition_is("gated", "Ready", "False").await;
    assert_eq!(
        condition(&pod, "Ready").unwrap().reason.as_deref(),
        Some("ReadinessGatesNotReady")
    );
    assert_eq!(condition(&pod, "ContainersReady").unwrap().status, "True");
    scene.finish().await;
}

#[tokio::test]
async fn a_node_may_change_itself_but_not_another_node() {
    let admin = client().await;
    let mut names: Vec<String> = nodes(&admin)
        .await
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    names.sort();
    let (own, other) = (&names[0], &names[1]);
    let kubeconfig = repo().join(format!(".local/nodes/{own}/kubeconfig"));
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig).unwrap(),
        &Default::default(),
    )
    .await
    .unwrap();
    let as_node: Api<Node> = Api::all(kube::Client::try_from(config).unwrap());
    let label =
        |value: &str| Patch::Merge(json!({"metadata": {"labels": {"isim.dev/test-label": value}}}));
    as_node
        .patch(own, &PatchParams::default(), &label("own"))
        .await
        .unwrap();
    let refused = as_node
        .patch(other, &PatchParams::default(), &label("other"))
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, kube::Error::Api(s) if s.code == 403),
        "{refused:?}"
    );
    // Nor may it change the labels the node restriction keeps from kubelets.
    let refused = as_node
        .patch(
            own,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {"node-role.kubernetes.io/control-plane": ""}}}),
            ),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, kube::Error::Api(s) if s.code == 403),
        "{refused:?}"
    );
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(as_node.clone().into_client(), "kube-system");
    let refused = secrets.list(&Default::default()).await.unwrap_err();
    assert!(
        matches!(&refused, kube::Error::Api(s) if s.code == 403),
        "{refused:?}"
    );
    Api::<Node>::all(admin)
        .patch(
            own,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"isim.dev/test-label": null}}})),
        )
        .await
        .unwrap();
    assert!(
        names.iter().all(|n| n.starts_with("nsc-node-")),
        "{names:?} ({NODE_LABEL})"
    );
}
