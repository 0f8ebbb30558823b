//! CNI as kubelet's runtime does it: `cni-run` (libcni) calls Multus, in the node's network
//! namespace, with the pod's namespace, name, UID and sandbox ID in `CNI_ARGS`. Multus reads
//! the pod's `k8s.v1.cni.cncf.io/networks`, fetches the NetworkAttachmentDefinitions, calls the
//! cluster network (bridge + host-local) and each attachment's plugins, and writes the pod's
//! `network-status`.
//!
//! whereabouts reads its own settings (the kubeconfig) only from fixed paths under `/etc`
//! (`/etc/cni/net.d/whereabouts.d/whereabouts.conf` among them). Each invocation therefore runs
//! in a private mount namespace (that of `ip netns exec`) where an overlay puts a directory of
//! `.local/dataplane/` over `/etc`: the machine's `/etc` is never written, and nothing is left
//! behind when the invocation ends. Every other file (Multus' and libcni's caches, host-local's
//! leases, logs) is under `.local/dataplane/` by configuration.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use serde_json::{Value, json};

use crate::components::Parts;
use crate::layout::{NodeLayout, sandbox_id};

/// One pod's sandbox as CNI sees it.
#[derive(Debug, Clone)]
pub struct Sandbox {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// The pod's network namespace.
    pub netns: String,
}

impl Sandbox {
    fn args(&self) -> String {
        format!(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE={};K8S_POD_NAME={};K8S_POD_INFRA_CONTAINER_ID={};K8S_POD_UID={}",
            self.namespace,
            self.name,
            sandbox_id(&self.uid),
            self.uid
        )
    }
}

/// The Multus configuration list of `node` (as `00-multus.conflist` on a real node): its
/// cluster network is a bridge (`cni0`) with host-local addresses from the node's pod range.
pub fn multus_conf(parts: &Parts, node: &NodeLayout) -> Value {
    json!({
        "cniVersion": "0.3.1",
        "name": "multus-cni-network",
        "plugins": [multus_plugin(parts, node)],
    })
}

fn multus_plugin(parts: &Parts, node: &NodeLayout) -> Value {
    let cni = parts.state.join("cni");
    json!({
        "type": "multus",
        "kubeconfig": parts.kubeconfig,
        "cniDir": cni.join("multus"),
        "binDir": parts.cni_bin,
        "logFile": parts.logs().join(format!("multus-{}.log", node.name)),
        "logLevel": "verbose",
        "delegates": [{
            "cniVersion": "0.3.1",
            "name": "nsc-pods",
            "plugins": [{
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": true,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    // Dual-stack: an address of each family, IPv4 first (the pod's podIP).
                    "ranges": [
                        [{"subnet": node.pod_cidr, "gateway": node.gateway.to_string()}],
                        [{"subnet": node.pod_cidr6, "gateway": node.gateway6.to_string()}],
                    ],
                    // The gateways named, so that network-status shows them for the default
                    // routes.
                    "routes": [
                        {"dst": "0.0.0.0/0", "gw": node.gateway.to_string()},
                        {"dst": "::/0", "gw": node.gateway6.to_string()},
                    ],
                    "dataDir": cni.join("host-local").join(&node.name),
                },
            }],
        }],
    })
}

/// whereabouts' settings file, found through the `/etc` overlay.
pub fn whereabouts_conf(parts: &Parts) -> Value {
    json!({
        "datastore": "kubernetes",
        "kubernetes": {"kubeconfig": parts.kubeconfig},
        "log_file": parts.logs().join("whereabouts.log"),
        "log_level": "verbose",
    })
}

/// Writes the configuration files for `nodes`.
pub fn write_confs(parts: &Parts, nodes: &[NodeLayout]) -> anyhow::Result<()> {
    let cni = parts.state.join("cni");
    let etc = cni.join("etc-overlay");
    std::fs::create_dir_all(etc.join("upper/cni/net.d/whereabouts.d"))?;
    std::fs::write(
        etc.join("upper/cni/net.d/whereabouts.d/whereabouts.conf"),
        serde_json::to_vec_pretty(&whereabouts_conf(parts))?,
    )?;
    for node in nodes {
        std::fs::write(
            conf_path(parts, &node.name),
            serde_json::to_vec_pretty(&multus_conf(parts, node))?,
        )?;
    }
    Ok(())
}

fn conf_path(parts: &Parts, node: &str) -> PathBuf {
    parts
        .state
        .join("cni")
        .join(format!("multus-{node}.conflist"))
}

/// CNI ADD: returns the pod's addresses on the cluster network.
pub async fn add(parts: &Parts, node: &str, sandbox: &Sandbox) -> anyhow::Result<Vec<IpAddr>> {
    let out = run(parts, node, "add", sandbox).await?;
    let result: Value =
        serde_json::from_str(&out).with_context(|| format!("reading the CNI result {out:?}"))?;
    let ips = cluster_ips(&result);
    if ips.is_empty() {
        bail!("the CNI result has no address: {out}");
    }
    Ok(ips)
}

/// CNI DEL: releases what ADD set up (whereabouts frees the address).
pub async fn del(parts: &Parts, node: &str, sandbox: &Sandbox) -> anyhow::Result<()> {
    run(parts, node, "del", sandbox).await.map(|_| ())
}

/// The addresses of a CNI result (any version): those of the cluster network, which is what
/// Multus returns.
fn cluster_ips(result: &Value) -> Vec<IpAddr> {
    result["ips"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|ip| ip["address"].as_str())
        .filter_map(|a| a.split('/').next()?.parse().ok())
        .collect()
}

async fn run(
    parts: &Parts,
    node: &str,
    command: &str,
    sandbox: &Sandbox,
) -> anyhow::Result<String> {
    let overlay = parts.state.join("cni").join("etc-overlay");
    // overlayfs needs a work directory of its own per mount.
    let work = overlay.join(format!("work-{}-{command}", sandbox_id(&sandbox.uid)));
    std::fs::create_dir_all(&work)?;
    let mount = format!(
        "lowerdir=/etc,upperdir={},workdir={}",
        overlay.join("upper").display(),
        work.display()
    );
    let netns_path = format!("/run/netns/{}", sandbox.netns);
    let output = crate::netns::command_in(node, "sh")
        .args([
            "-c",
            r#"mount -t overlay overlay -o "$0" /etc && exec "$@""#,
            &mount,
        ])
        .arg(&parts.cni_run)
        .args([command, "-conf"])
        .arg(conf_path(parts, node))
        .args([
            "-netns",
            &netns_path,
            "-id",
            &sandbox_id(&sandbox.uid),
            "-ifname",
            "eth0",
        ])
        .args(["-args", &sandbox.args()])
        .arg("-path")
        .arg(&parts.cni_bin)
        .arg("-cache")
        .arg(parts.state.join("cni").join("cache"))
        .env("NODENAME", node)
        .output()
        .await
        .context("running cni-run");
    let _ = std::fs::remove_dir_all(&work);
    let output = output?;
    if !output.status.success() {
        bail!(
            "CNI {} of pod {}/{} on {node}: {}",
            command.to_uppercase(),
            sandbox.namespace,
            sandbox.name,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The CNI plugins `cni_bin` lacks, for the prerequisites check.
pub fn plugins_missing(cni_bin: &Path) -> Vec<&'static str> {
    [
        "multus",
        "bridge",
        "macvlan",
        "host-local",
        "loopback",
        "whereabouts",
    ]
    .into_iter()
    .filter(|p| !cni_bin.join(p).is_file())
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Layout;

    fn parts() -> Parts {
        Parts {
            cni_bin: "/cache/cni".into(),
            cni_run: "/cache/cni-run".into(),
            kube_proxy: "/cache/kube-proxy".into(),
            coredns: "/cache/coredns".into(),
            kubeconfig: "/state/kubeconfig".into(),
            state: "/state/dataplane".into(),
        }
    }

    #[test]
    fn multus_delegates_the_cluster_network_to_a_bridge_on_the_node_range() {
        let layout = Layout::new(2);
        let list = multus_conf(&parts(), &layout.nodes[1]);
        let conf = &list["plugins"][0];
        assert_eq!(conf["type"], "multus");
        assert_eq!(conf["kubeconfig"], "/state/kubeconfig");
        let bridge = &conf["delegates"][0]["plugins"][0];
        assert_eq!(bridge["type"], "bridge");
        assert_eq!(bridge["ipam"]["ranges"][0][0]["subnet"], "10.244.1.0/24");
        assert_eq!(
            bridge["ipam"]["ranges"][1][0]["subnet"],
            "fd00:10:244:1::/64"
        );
        assert_eq!(bridge["ipam"]["routes"][1]["gw"], "fd00:10:244:1::1");
        assert_eq!(
            bridge["ipam"]["dataDir"],
            "/state/dataplane/cni/host-local/nsc-node-1"
        );
    }

    #[test]
    fn the_cluster_addresses_come_from_the_result_of_any_cni_version() {
        let v031 = json!({"cniVersion": "0.3.1", "ips": [{"version": "4", "address": "10.244.0.5/24", "interface": 2}]});
        let v100 = json!({"cniVersion": "1.0.0", "ips": [{"address": "10.244.0.6/24"}, {"address": "fd00::6/64"}]});
        assert_eq!(
            cluster_ips(&v031),
            vec!["10.244.0.5".parse::<IpAddr>().unwrap()]
        );
        assert_eq!(cluster_ips(&v100).len(), 2);
        assert!(cluster_ips(&json!({})).is_empty());
    }

    #[test]
    fn cni_args_name_the_pod_as_kubelet_does() {
        let sandbox = Sandbox {
            namespace: "demo".into(),
            name: "web-1".into(),
            uid: "aa-bb".into(),
            netns: "nsc-p-aabb".into(),
        };
        assert_eq!(
            sandbox.args(),
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=demo;K8S_POD_NAME=web-1;K8S_POD_INFRA_CONTAINER_ID=nscaabb;K8S_POD_UID=aa-bb"
        );
    }
}
