//! The stock install on the nodes, as a user applies it, only the image references changed (the
//! nodes pull from no registry): `testdata/` in `default`; `deploy/overlays/default`, the
//! controller as a Deployment with its ServiceAccount's token, leader election and probes; the
//! seed's four curls; then `deploy/overlays/with-prober`, the network prober as a DaemonSet on
//! every node, and pods it probes. Alone in its test binary: it installs cluster-wide objects
//! and uses `default`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
// A scenario on the nodes reads top to bottom, as the story it tells.
#![allow(clippy::too_many_lines)]

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use nad_node_tests::{
    client, condition, eventually, kubectl, kubectl_with, local_images, network_ips, nodes,
    pods_of, repo, resolve, testdata,
};

async fn must(args: &[&str]) -> String {
    let (code, out) = kubectl(args).await;
    assert_eq!(code, 0, "kubectl {}: {out}", args.join(" "));
    out
}

/// Waits (at most 120 s) until `what` (`deploy/<name>`, `daemonset/<name>`) in `namespace` has
/// rolled out.
async fn rolled_out(namespace: &str, what: &str) {
    must(&["-n", namespace, "rollout", "status", what, "--timeout=120s"]).await;
}

/// `curl` from `pod` in `default` (see [`nad_node_tests::curl`]).
async fn curl(pod: &str, url: &str) -> (String, i32) {
    nad_node_tests::curl("default", pod, &[], url).await
}

#[tokio::test]
async fn the_stock_install_runs_on_the_nodes_and_the_seeds_curls_answer() {
    let client = client().await;
    let nodes = nodes(&client).await;
    // testdata/ first: the prober's pods are attached to default/macvlan, which it defines.
    let manifests = testdata();
    kubectl_with(&["apply", "-n", "default", "-f", "-"], &manifests).await;
    for app in ["nginx-basic", "nginx-nad", "netutils-base", "netutils-nad"] {
        rolled_out("default", &format!("deploy/{app}")).await;
    }
    let overlay = repo().join("deploy/overlays/default");
    let rendered = must(&["kustomize", overlay.to_str().unwrap()]).await;
    kubectl_with(&["apply", "-f", "-"], &local_images(&rendered)).await;
    rolled_out("nad-service-controller", "deploy/nad-service-controller").await;
    let api: Api<Pod> = Api::namespaced(client.clone(), "default");
    let nad = pods_of(&api, "app=netutils-nad").await[0].name_any();
    let base = pods_of(&api, "app=netutils-base").await[0].name_any();
    let macvlan: BTreeSet<String> = pods_of(&api, "app=nginx-nad")
        .await
        .iter()
        .flat_map(|p| network_ips(p, "default/macvlan"))
        .filter(|ip| !ip.contains(':'))
        .collect();
    assert_eq!(macvlan.len(), 2, "{macvlan:?}");
    // The in-cluster controller's slices, through CoreDNS.
    eventually("nginx-nad resolving to its pods' macvlan IPs", || async {
        (resolve("default", &nad, "ahostsv4", "nginx-nad").await == macvlan).then_some(())
    })
    .await;

    assert_eq!(curl(&nad, "nginx-nad").await, ("200".into(), 0));
    assert_eq!(curl(&nad, "nginx-basic").await, ("200".into(), 0));
    assert_eq!(curl(&base, "nginx-basic").await, ("200".into(), 0));
    let started = Instant::now();
    assert_eq!(
        curl(&base, "nginx-nad").await,
        ("000".into(), 28),
        "a pod without the secondary network times out"
    );
    assert!(
        started.elapsed() >= Duration::from_secs(3),
        "a timeout, not a refusal"
    );

    // The network prober beside it (the with-prober overlay: the same controller, and the
    // prober's DaemonSet on default/macvlan).
    let overlay = repo().join("deploy/overlays/with-prober");
    let rendered = must(&["kustomize", overlay.to_str().unwrap()]).await;
    kubectl_with(&["apply", "-f", "-"], &local_images(&rendered)).await;
    rolled_out("nad-service-controller", "daemonset/nad-network-prober").await;
    let probers: Api<Pod> = Api::namespaced(client.clone(), "nad-service-controller");
    let placed: BTreeSet<String> = probers
        .list(&ListParams::default().labels("app.kubernetes.io/component=network-prober"))
        .await
        .unwrap()
        .items
        .iter()
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();
    assert_eq!(
        placed.len(),
        nodes.len(),
        "a prober on every node: {placed:?}"
    );

    // Its default probe, a connect to each published port, finds the seed's nginx-nad pods
    // answering on both (80, and 443 as testdata's ConfigMap configures nginx).
    for pod in pods_of(&api, "app=nginx-nad").await {
        let name = pod.name_any();
        eventually(&format!("{name} ready on default/macvlan"), || async {
            let pod = api.get(&name).await.unwrap();
            let ready = condition(&pod, NETWORK_READY)?;
            (ready.status == "True").then_some(ready)
        })
        .await;
    }

    probed_pods_follow_the_prober_and_kubelet(&client).await;

    kubectl_with(
        &["delete", "-n", "default", "--wait=false", "-f", "-"],
        &manifests,
    )
    .await;
    kubectl_with(
        &["delete", "--wait=false", "-f", "-"],
        &local_images(&rendered),
    )
    .await;
}

/// The condition the prober writes for readiness on default/macvlan (what nad-model names it).
const NETWORK_READY: &str = "network-ready.isim.dev/default.macvlan";

/// The endpoint of `pod` in the `probed` Service's slices: (ready, serving, terminating).
async fn endpoint(client: &kube::Client, pod: &str) -> Option<(bool, bool, bool)> {
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    let listed = slices
        .list(&ListParams::default().labels("kubernetes.io/service-name=probed"))
        .await
        .unwrap()
        .items;
    listed
        .iter()
        .flat_map(|s| s.endpoints.iter().flatten())
        .find(|e| e.target_ref.as_ref().and_then(|r| r.name.as_deref()) == Some(pod))
        .map(|e| {
            let c = e.conditions.clone().unwrap_or_default();
            (
                c.ready == Some(true),
                c.serving == Some(true),
                c.terminating == Some(true),
            )
        })
}

/// The kubelet-issued token of the prober on `node` (its projected ServiceAccount volume, read in
/// the node's mount namespace, where kubelet mounted it).
async fn prober_token(client: &kube::Client, node: &str) -> String {
    let probers: Api<Pod> = Api::namespaced(client.clone(), "nad-service-controller");
    let prober = probers
        .list(&ListParams::default().labels("app.kubernetes.io/component=network-prober"))
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        .unwrap();
    let pidfile = repo().join(format!(".local/pids/{node}.pid"));
    let pid = std::fs::read_to_string(&pidfile).unwrap();
    let pid = pid.split_whitespace().next().unwrap().to_owned();
    let volumes = repo().join(format!(
        ".local/nodes/{node}/kubelet/pods/{}/volumes/kubernetes.io~projected",
        prober.metadata.uid.unwrap()
    ));
    let out = tokio::process::Command::new("nsenter")
        .args([
            "-t",
            &pid,
            "-m",
            "--",
            "sh",
            "-c",
            &format!("cat {}/*/token", volumes.display()),
        ])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Pods of a probed Service on the nodes: the prober's condition gates their Ready through
/// kubelet, survives kubelet's status writes (a container restart), follows the secondary link,
/// and the slices follow; the prober's kubelet-issued token may write the condition of its own
/// node's pods only; a pod deleted gracefully is published as terminating until it is gone.
async fn probed_pods_follow_the_prober_and_kubelet(client: &kube::Client) {
    let service = serde_json::json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "probed", "labels": {"app": "probed"}, "annotations": {
            "isim.dev/network": "macvlan",
            "isim.dev/probe": r#"{"httpGet": {"port": 80}, "periodSeconds": 1, "failureThreshold": 1}"#}},
        "spec": {"clusterIP": "None", "ports": [{"name": "http", "port": 80}]}});
    kubectl_with(&["apply", "-n", "default", "-f", "-"], &service.to_string()).await;
    let api: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut names: Vec<String> = nodes(client)
        .await
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    names.sort();
    // One pod a node, serving both families (the prober probes each); TERM ends the first at
    // once (kubelet restarts it), the second after 8 s.
    for (name, node, on_term) in [
        ("probed-0", &names[0], "exit 3"),
        ("probed-1", &names[1], "sleep 8; exit 0"),
    ] {
        let pod = serde_json::json!({
            "metadata": {"name": name, "labels": {"app": "probed"},
                         "annotations": {"k8s.v1.cni.cncf.io/networks": "macvlan"}},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 30,
                "readinessGates": [{"conditionType": NETWORK_READY}],
                "containers": [{"name": "web", "image": nad_node_tests::image("netutils"),
                    "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}},
                    "command": ["bash", "-c", format!("trap '{on_term}' TERM; python3 -m http.server 80 --bind :: & wait")]}]}});
        api.create(
            &PostParams::default(),
            &serde_json::from_value(pod).unwrap(),
        )
        .await
        .unwrap();
    }
    let is = |name: &'static str, kind: &'static str, status: &'static str| {
        let api = api.clone();
        async move {
            eventually(&format!("{name}: {kind}={status}"), || async {
                let pod = api.get(name).await.unwrap();
                (condition(&pod, kind).is_some_and(|c| c.status == status)).then_some(pod)
            })
            .await
        }
    };
    // Ready waits for the prober's condition, which kubelet folds in.
    for name in ["probed-0", "probed-1"] {
        is(name, NETWORK_READY, "True").await;
        is(name, "Ready", "True").await;
        eventually(&format!("{name} ready in the slices"), || async {
            (endpoint(client, name).await == Some((true, true, false))).then_some(())
        })
        .await;
    }

    // A restart: kubelet writes the status again, and the prober's condition stays. Its
    // status may be False for a moment (the prober can probe the restarted container before
    // it listens), so it is only asked to be there, then True again.
    nad_node_tests::restart("default", "probed-0").await;
    let kept = condition(&api.get("probed-0").await.unwrap(), NETWORK_READY);
    assert!(
        kept.is_some(),
        "kubelet's status sync dropped the prober's condition"
    );
    is("probed-0", NETWORK_READY, "True").await;

    // The secondary link down: the prober says so, kubelet's Ready follows, and the slices.
    let link = |state: &'static str| async move {
        let (code, out) = kubectl(&[
            "exec", "-n", "default", "probed-0", "--", "ip", "link", "set", "net1", state,
        ])
        .await;
        assert_eq!(code, 0, "{out}");
    };
    link("down").await;
    is("probed-0", NETWORK_READY, "False").await;
    is("probed-0", "Ready", "False").await;
    eventually("probed-0 not serving in the slices", || async {
        (endpoint(client, "probed-0").await == Some((false, false, false))).then_some(())
    })
    .await;
    link("up").await;
    is("probed-0", "Ready", "True").await;

    // The prober's own token, as kubelet issued it: its node's pods only.
    let token = prober_token(client, &names[0]).await;
    let mut config = kube::Config::infer().await.unwrap();
    config.auth_info = kube::config::AuthInfo {
        token: Some(token.into()),
        ..Default::default()
    };
    let as_prober: Api<Pod> = Api::namespaced(kube::Client::try_from(config).unwrap(), "default");
    let write = |pod: &'static str| {
        let as_prober = as_prober.clone();
        async move {
            let condition = serde_json::json!({"status": {"conditions": [
                {"type": NETWORK_READY, "status": "True", "reason": "Probed", "message": "written by the test"}]}});
            as_prober
                .patch_status(pod, &PatchParams::default(), &Patch::Strategic(condition))
                .await
        }
    };
    write("probed-0").await.unwrap();
    match write("probed-1").await {
        Err(kube::Error::Api(status)) => {
            assert!(
                status.message.contains("nad-network-prober-own-node"),
                "{status:?}"
            );
        }
        other => panic!(
            "{}'s prober wrote probed-1 on {}: {other:?}",
            names[0], names[1]
        ),
    }

    // Deleted gracefully: terminating (not ready, still serving) until it is gone.
    api.delete("probed-1", &DeleteParams::default())
        .await
        .unwrap();
    eventually("probed-1 terminating in the slices", || async {
        (endpoint(client, "probed-1").await == Some((false, true, true))).then_some(())
    })
    .await;
    eventually("probed-1 gone from the slices", || async {
        endpoint(client, "probed-1").await.is_none().then_some(())
    })
    .await;
    api.delete("probed-0", &DeleteParams::default())
        .await
        .unwrap();
    kubectl(&["delete", "-n", "default", "service", "probed"]).await;
}
