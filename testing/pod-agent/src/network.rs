//! The nodes' network: a bridge in its own namespace, and each node a namespace with `eth0` on
//! it (an IPv4 and an IPv6 address), routes to the other nodes' pod ranges of both families,
//! and nothing else. Traffic for anywhere else is dropped silently (a blackhole default route
//! of each family), as a packet to an unrouted network dies in a real one: a client without
//! the secondary network times out (curl exit 28).
//!
//! The bridge has an address of the nodes' /24 ([`LAN_ADDRESS`]), where the relay to the API
//! server listens, and a route back to each node's pod range through that node: pods reach
//! the API server through the `kubernetes` Service as in a cluster.

use crate::layout::{LAN_ADDRESS, LAN_BRIDGE, LAN_NETNS, Layout, PREFIX};
use crate::netns::{self, ip, ip_in};

/// Creates the LAN and the nodes' namespaces (replacing any left over).
pub async fn set_up(layout: &Layout) -> anyhow::Result<()> {
    netns::create(LAN_NETNS).await?;
    ip_in(LAN_NETNS, &["link", "add", LAN_BRIDGE, "type", "bridge"]).await?;
    let lan_address = format!("{LAN_ADDRESS}/24");
    ip_in(LAN_NETNS, &["addr", "add", &lan_address, "dev", LAN_BRIDGE]).await?;
    ip_in(LAN_NETNS, &["link", "set", LAN_BRIDGE, "up"]).await?;
    for node in &layout.nodes {
        netns::create(&node.name).await?;
        // Both ends are created in their namespaces: nothing appears in the machine's own.
        ip(&[
            "link",
            "add",
            "eth0",
            "netns",
            &node.name,
            "type",
            "veth",
            "peer",
            "name",
            &node.lan_port,
            "netns",
            LAN_NETNS,
        ])
        .await?;
        ip_in(
            LAN_NETNS,
            &["link", "set", &node.lan_port, "master", LAN_BRIDGE, "up"],
        )
        .await?;
        let address = format!("{}/24", node.ip);
        ip_in(&node.name, &["addr", "add", &address, "dev", "eth0"]).await?;
        // No duplicate address detection: the address is usable at once, and the LAN is ours.
        let address6 = format!("{}/64", node.ip6);
        ip_in(
            &node.name,
            &["-6", "addr", "add", &address6, "dev", "eth0", "nodad"],
        )
        .await?;
        ip_in(&node.name, &["link", "set", "eth0", "up"]).await?;
        for other in layout.nodes.iter().filter(|o| o.index != node.index) {
            for (range, via) in [
                (&other.pod_cidr, other.ip.to_string()),
                (&other.pod_cidr6, other.ip6.to_string()),
            ] {
                ip_in(&node.name, &["route", "add", range, "via", &via]).await?;
            }
        }
        ip_in(&node.name, &["route", "add", "blackhole", "default"]).await?;
        ip_in(&node.name, &["-6", "route", "add", "blackhole", "default"]).await?;
        netns::sysctl(&node.name, "net.ipv4.ip_forward", "1").await?;
        netns::sysctl(&node.name, "net.ipv6.conf.all.forwarding", "1").await?;
        // Answers of the API server's relay to the node's pods.
        ip_in(
            LAN_NETNS,
            &["route", "add", &node.pod_cidr, "via", &node.ip.to_string()],
        )
        .await?;
    }
    Ok(())
}

/// Removes every namespace the agent made (nodes, LAN, pods), killing what runs in them, and
/// the pods' `/etc/netns` files. Also what a crashed agent left behind.
pub async fn tear_down() -> anyhow::Result<()> {
    for name in netns::list(PREFIX).await? {
        netns::remove(&name).await?;
    }
    remove_etc_netns().await
}

/// The `/etc/netns/nsc-*` directories (the pods' `resolv.conf`).
async fn remove_etc_netns() -> anyhow::Result<()> {
    let Ok(mut dir) = tokio::fs::read_dir("/etc/netns").await else {
        return Ok(());
    };
    while let Some(entry) = dir.next_entry().await? {
        if entry.file_name().to_string_lossy().starts_with(PREFIX) {
            tokio::fs::remove_dir_all(entry.path()).await?;
        }
    }
    Ok(())
}
