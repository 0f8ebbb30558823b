//! The local nodes as the API server sees them: registered with their address and pod range,
//! and kept Ready by a status heartbeat (without one the node lifecycle controller would mark
//! them unreachable and evict their pods).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::layout::{Layout, NodeLayout};

const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// The label every node of the agent has (the tests and hack/pod-agent.sh select them by it).
pub const LOCAL_LABEL: &str = "pod-agent.isim.dev/local";

/// Registers (or refreshes) every node and marks it Ready.
pub async fn register(client: &Client, layout: &Layout) -> anyhow::Result<()> {
    let api: Api<Node> = Api::all(client.clone());
    for node in &layout.nodes {
        api.patch(
            &node.name,
            &PatchParams::apply("pod-agent").force(),
            &Patch::Apply(&spec(node)),
        )
        .await
        .with_context(|| format!("registering node {}", node.name))?;
        heartbeat(&api, node).await?;
    }
    Ok(())
}

/// Keeps the nodes Ready, every 10 s, until the process ends.
pub async fn keep_ready(client: Client, layout: Layout) {
    let api: Api<Node> = Api::all(client);
    loop {
        tokio::time::sleep(Duration::from_secs(10)).await;
        for node in &layout.nodes {
            if let Err(e) = heartbeat(&api, node).await {
                tracing::warn!(node = %node.name, error = format!("{e:#}"), "node heartbeat failed");
            }
        }
    }
}

/// The labels the agent registers `node` with (kubelet's well-known ones, its zone, and
/// [`LOCAL_LABEL`]).
pub fn labels(node: &NodeLayout) -> BTreeMap<String, String> {
    [
        ("kubernetes.io/hostname", node.name.as_str()),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", go_arch()),
        (ZONE_LABEL, node.zone.as_str()),
        (LOCAL_LABEL, "true"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

/// This machine's architecture as Go (and so `kubernetes.io/arch`) names it.
fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

fn spec(node: &NodeLayout) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": node.name, "labels": labels(node)},
        "spec": {"podCIDR": node.pod_cidr, "podCIDRs": [node.pod_cidr, node.pod_cidr6]}})
}

async fn heartbeat(api: &Api<Node>, node: &NodeLayout) -> anyhow::Result<()> {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let status = json!({"status": {
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                        "message": "pod-agent is posting ready status",
                        "lastHeartbeatTime": now, "lastTransitionTime": now}],
        "addresses": [{"type": "InternalIP", "address": node.ip.to_string()},
                      {"type": "InternalIP", "address": node.ip6.to_string()},
                      {"type": "Hostname", "address": node.name}],
        "capacity": {"cpu": "2", "memory": "4Gi", "pods": "110"},
        "allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"},
        "nodeInfo": {"kubeletVersion": "v1.37.2", "kubeProxyVersion": "v1.37.2",
                     "operatingSystem": "linux", "architecture": go_arch(),
                     "containerRuntimeVersion": "pod-agent://0.1.0", "osImage": "pod-agent",
                     "kernelVersion": "", "machineID": "", "systemUUID": "", "bootID": ""}},
    });
    api.patch_status(&node.name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .with_context(|| format!("marking node {} Ready", node.name))?;
    Ok(())
}
