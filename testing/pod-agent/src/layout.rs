//! Names and addresses of everything the agent creates: pure, so that setting up, tearing
//! down and cleaning up after a crash agree on them.
//!
//! ```text
//!  netns nsc-lan:   br0 172.30.0.1 ── n0 ─┐  ┌─ n1   (the nodes' "switch"; the API server's
//!                                         │  │        relay listens on 172.30.0.1:<port>)
//!                                    veth │  │ veth
//!  netns nsc-node-0: eth0 172.30.0.10   eth0 172.30.0.11 :netns nsc-node-1
//!                         fd00:172:30::10    fd00:172:30::11
//!                    cni0 10.244.0.1    cni0 10.244.1.1
//!                         fd00:10:244::1     fd00:10:244:1::1
//!                     │ (bridge CNI)     │
//!  netns nsc-p-<uid>: eth0 10.244.0.x   eth0 10.244.1.y, fd00:10:244:1::y
//!                         fd00:10:244::x     net1 192.168.2.z, fd00:192:168:2::z (macvlan on eth0)
//! ```
//!
//! Dual-stack, IPv4 first (the primary family, as the API server's service ranges list it):
//! the nodes have an address of each family on the LAN, and the pods of each family on the
//! cluster network. The macvlan network's addresses are whereabouts', from `testdata/`'s
//! NetworkAttachmentDefinition.
//!
//! The `kubernetes` Service's endpoint is [`LAN_ADDRESS`]`:<port>` (hack/local-up.sh advertises
//! it): a pod's connection to `10.96.0.1:443` is DNATed by kube-proxy on its node to it, and
//! the relay in `nsc-lan` carries it to the API server on the machine's loopback.
//!
//! Nothing lives in the machine's own namespace: the agent reaches into the nodes' namespaces
//! only through sockets it opens there (see `netns`).

use std::net::{Ipv4Addr, Ipv6Addr};

/// The prefix of every network namespace, link owner and directory the agent creates.
pub const PREFIX: &str = "nsc-";
/// The namespace holding the bridge that plays the nodes' shared network.
pub const LAN_NETNS: &str = "nsc-lan";
pub const LAN_BRIDGE: &str = "br0";
/// The LAN bridge's own address (of the nodes' /24): the API server's advertised address
/// (`--advertise-address` in hack/local-up.sh, so the `kubernetes` Service's endpoint), where
/// the relay to the API server listens.
pub const LAN_ADDRESS: Ipv4Addr = Ipv4Addr::new(172, 30, 0, 1);
/// Pods' cluster network, of each family: split into a /24 and a /64 per node.
pub const CLUSTER_CIDRS: [&str; 2] = ["10.244.0.0/16", "fd00:10:244::/56"];
/// The cluster domain CoreDNS serves.
pub const CLUSTER_DOMAIN: &str = "cluster.local";

/// One local node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeLayout {
    pub index: u8,
    /// The Node's name, which is also its network namespace's.
    pub name: String,
    /// The node end of its link to the LAN bridge (`eth0` in the node's namespace).
    pub lan_port: String,
    pub ip: Ipv4Addr,
    /// Its IPv6 address on the LAN, of `fd00:172:30::/64` (the bridge has none: the relay to
    /// the API server is IPv4).
    pub ip6: Ipv6Addr,
    /// Its pods' /24 of [`CLUSTER_CIDRS`]' IPv4 range.
    pub pod_cidr: String,
    /// Its pods' /64 of [`CLUSTER_CIDRS`]' IPv6 range.
    pub pod_cidr6: String,
    /// The cluster network bridge's address on the node: the pods' default gateway.
    pub gateway: Ipv4Addr,
    /// The same, for IPv6.
    pub gateway6: Ipv6Addr,
    pub zone: String,
}

/// The whole local data plane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub nodes: Vec<NodeLayout>,
}

impl Layout {
    pub fn new(nodes: u8) -> Self {
        let zones = ["zone-a", "zone-b", "zone-c"];
        Self {
            nodes: (0..nodes)
                .map(|i| NodeLayout {
                    index: i,
                    name: format!("{PREFIX}node-{i}"),
                    lan_port: format!("n{i}"),
                    ip: Ipv4Addr::new(172, 30, 0, 10 + i),
                    ip6: Ipv6Addr::new(0xfd00, 0x172, 0x30, 0, 0, 0, 0, 0x10 + u16::from(i)),
                    pod_cidr: format!("10.244.{i}.0/24"),
                    pod_cidr6: format!(
                        "{}/64",
                        Ipv6Addr::new(0xfd00, 0x10, 0x244, u16::from(i), 0, 0, 0, 0)
                    ),
                    gateway: Ipv4Addr::new(10, 244, i, 1),
                    gateway6: Ipv6Addr::new(0xfd00, 0x10, 0x244, u16::from(i), 0, 0, 0, 1),
                    zone: zones[usize::from(i) % zones.len()].to_owned(),
                })
                .collect(),
        }
    }

    /// Where pods send DNS queries: CoreDNS, on the first node.
    pub fn dns_server(&self) -> Option<Ipv4Addr> {
        self.nodes.first().map(|n| n.ip)
    }

    pub fn node(&self, name: &str) -> Option<&NodeLayout> {
        self.nodes.iter().find(|n| n.name == name)
    }
}

/// The network namespace of the pod with this UID: short (names show in `ip netns`) and
/// stable across agent restarts.
pub fn pod_netns(uid: &str) -> String {
    let hex: String = uid
        .chars()
        .filter(char::is_ascii_hexdigit)
        .take(12)
        .collect();
    format!("{PREFIX}p-{hex}")
}

/// The CNI sandbox (infra container) ID of a pod: what Multus and whereabouts key their state by.
pub fn sandbox_id(uid: &str) -> String {
    format!("nsc{}", uid.replace('-', ""))
}

/// `resolv.conf` for a pod in `namespace`, as kubelet writes it for `dnsPolicy: ClusterFirst`.
pub fn resolv_conf(server: Ipv4Addr, namespace: &str) -> String {
    format!(
        "nameserver {server}\nsearch {namespace}.svc.{CLUSTER_DOMAIN} svc.{CLUSTER_DOMAIN} {CLUSTER_DOMAIN}\noptions ndots:5\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_get_their_own_addresses_and_pod_ranges() {
        let layout = Layout::new(2);
        assert_eq!(layout.nodes[1].name, "nsc-node-1");
        assert_eq!(layout.nodes[1].ip, Ipv4Addr::new(172, 30, 0, 11));
        assert_eq!(layout.nodes[1].pod_cidr, "10.244.1.0/24");
        assert_eq!(layout.nodes[1].gateway, Ipv4Addr::new(10, 244, 1, 1));
        assert_eq!(layout.nodes[1].ip6.to_string(), "fd00:172:30::11");
        assert_eq!(layout.nodes[1].pod_cidr6, "fd00:10:244:1::/64");
        assert_eq!(layout.nodes[1].gateway6.to_string(), "fd00:10:244:1::1");
        assert_eq!(layout.nodes[0].pod_cidr6, "fd00:10:244::/64");
        assert_eq!(layout.nodes[0].gateway6.to_string(), "fd00:10:244::1");
        assert_eq!(layout.dns_server(), Some(Ipv4Addr::new(172, 30, 0, 10)));
        assert_eq!(layout.node("nsc-node-0").map(|n| n.index), Some(0));
    }

    #[test]
    fn pod_names_derive_from_the_uid() {
        let uid = "0b7c4f5e-9d1a-4c2b-8e3f-112233445566";
        assert_eq!(pod_netns(uid), "nsc-p-0b7c4f5e9d1a");
        assert_eq!(sandbox_id(uid), "nsc0b7c4f5e9d1a4c2b8e3f112233445566");
    }

    #[test]
    fn resolv_conf_has_the_cluster_search_path() {
        let text = resolv_conf(Ipv4Addr::new(172, 30, 0, 10), "demo");
        assert!(text.contains("nameserver 172.30.0.10\n"));
        assert!(text.contains("search demo.svc.cluster.local svc.cluster.local cluster.local\n"));
    }
}
