//! The local nodes as the API server sees them: registered with their address and pod range,
//! and kept Ready by a status heartbeat (without one the node lifecycle controller would mark
//! them unreachable and evict their pods).

use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::layout::{Layout, NodeLayout};

const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

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

fn spec(node: &NodeLayout) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": node.name, "labels": {
            "kubernetes.io/hostname": node.name, "kubernetes.io/os": "linux",
            ZONE_LABEL: node.zone, "pod-agent.isim.dev/local": "true"}},
        "spec": {"podCIDR": node.pod_cidr, "podCIDRs": [node.pod_cidr]}})
}

async fn heartbeat(api: &Api<Node>, node: &NodeLayout) -> anyhow::Result<()> {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let status = json!({"status": {
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                        "message": "pod-agent is posting ready status",
                        "lastHeartbeatTime": now, "lastTransitionTime": now}],
        "addresses": [{"type": "InternalIP", "address": node.ip.to_string()},
                      {"type": "Hostname", "address": node.name}],
        "capacity": {"cpu": "2", "memory": "4Gi", "pods": "110"},
        "allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"},
        "nodeInfo": {"kubeletVersion": "v1.37.2", "kubeProxyVersion": "v1.37.2",
                     "operatingSystem": "linux", "architecture": std::env::consts::ARCH,
                     "containerRuntimeVersion": "pod-agent://0.1.0", "osImage": "pod-agent",
                     "kernelVersion": "", "machineID": "", "systemUUID": "", "bootID": ""}},
    });
    api.patch_status(&node.name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .with_context(|| format!("marking node {} Ready", node.name))?;
    Ok(())
}
