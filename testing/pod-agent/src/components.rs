//! What runs on the nodes besides pods: kube-proxy on each (nftables mode, the node's own
//! rules, for IPv4 and IPv6), and CoreDNS on the first, reading the API server's Services and
//! EndpointSlices for `cluster.local` (answers rotated, as the default Corefile's `loadbalance`
//! does). Each is a child process kept running (restarted if it exits).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context as _;

use crate::layout::{CLUSTER_CIDRS, CLUSTER_DOMAIN, NodeLayout};
use crate::netns;

/// Where the agent finds the networking parts and keeps its files.
#[derive(Debug, Clone)]
pub struct Parts {
    /// CNI plugins: multus, bridge, macvlan, host-local, loopback, whereabouts.
    pub cni_bin: PathBuf,
    pub cni_run: PathBuf,
    pub kube_proxy: PathBuf,
    pub coredns: PathBuf,
    /// The kubeconfig every component uses (its server is `https://127.0.0.1:<port>`).
    pub kubeconfig: PathBuf,
    /// The agent's state directory (`.local/dataplane`).
    pub state: PathBuf,
}

impl Parts {
    pub fn logs(&self) -> PathBuf {
        self.state.join("logs")
    }
}

/// Starts kube-proxy in `node`'s namespace.
pub fn kube_proxy(parts: &Parts, node: &NodeLayout) {
    let program = parts.kube_proxy.display().to_string();
    let args = vec![
        format!("--kubeconfig={}", parts.kubeconfig.display()),
        format!("--hostname-override={}", node.name),
        "--proxy-mode=nftables".into(),
        // Both families: kube-proxy runs a proxier for each (the node has an address of each).
        format!("--cluster-cidr={}", CLUSTER_CIDRS.join(",")),
        // Leave the kernel's conntrack settings (machine-wide ones among them) alone.
        "--conntrack-max-per-core=0".into(),
        "--conntrack-tcp-timeout-established=0".into(),
        "--conntrack-tcp-timeout-close-wait=0".into(),
        "--healthz-bind-address=127.0.0.1:10256".into(),
        "--metrics-bind-address=127.0.0.1:10249".into(),
    ];
    supervise(
        parts,
        &format!("kube-proxy-{}", node.name),
        &node.name,
        program,
        args,
    );
}

/// Starts CoreDNS in `node`'s namespace, serving `cluster.local` on port 53 of the node.
pub fn coredns(parts: &Parts, node: &NodeLayout) -> anyhow::Result<()> {
    let corefile = parts.state.join("Corefile");
    std::fs::write(&corefile, corefile_text(&parts.kubeconfig))
        .with_context(|| format!("writing {}", corefile.display()))?;
    supervise(
        parts,
        "coredns",
        &node.name,
        parts.coredns.display().to_string(),
        vec!["-conf".into(), corefile.display().to_string()],
    );
    Ok(())
}

/// The Corefile: the cluster domain from the API server, and nothing beyond it (no upstream:
/// no packet leaves the machine).
fn corefile_text(kubeconfig: &Path) -> String {
    format!(
        ".:53 {{\n    errors\n    ready 127.0.0.1:8181\n    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{\n        kubeconfig {}\n        pods insecure\n        ttl 5\n    }}\n    loadbalance\n}}\n",
        kubeconfig.display()
    )
}

/// Runs `program args` in namespace `netns`, logging to `<logs>/<name>.log`, and starts it
/// again a second after it exits, for as long as the agent runs.
fn supervise(parts: &Parts, name: &str, netns: &str, program: String, args: Vec<String>) {
    let log_path = parts.logs().join(format!("{name}.log"));
    let (name, netns) = (name.to_owned(), netns.to_owned());
    tokio::spawn(async move {
        loop {
            let child = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log_path)
                .and_then(|log| Ok((log.try_clone()?, log)))
                .and_then(|(out, err)| {
                    netns::command_in(&netns, &program)
                        .args(&args)
                        .stdin(Stdio::null())
                        .stdout(out)
                        .stderr(err)
                        .kill_on_drop(true)
                        .spawn()
                });
            match child {
                Ok(mut child) => {
                    tracing::info!(component = %name, node = %netns, pid = child.id(), log = %log_path.display(), "started");
                    match child.wait().await {
                        Ok(status) => {
                            tracing::warn!(component = %name, %status, log = %log_path.display(), "exited; starting it again");
                        }
                        Err(e) => tracing::warn!(component = %name, error = %e, "waiting failed"),
                    }
                }
                Err(e) => {
                    tracing::error!(component = %name, program = %program, error = %e, "could not start");
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_corefile_serves_the_cluster_domain_from_the_kubeconfig() {
        let text = corefile_text(Path::new("/state/kubeconfig"));
        assert!(text.contains("kubernetes cluster.local in-addr.arpa ip6.arpa {"));
        assert!(text.contains("kubeconfig /state/kubeconfig\n"));
        assert!(!text.contains("forward"), "no upstream: {text}");
    }
}
