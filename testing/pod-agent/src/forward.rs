//! Relays to the API server, which listens on the machine's `127.0.0.1:<port>` only:
//!
//! - inside each node, a listener on the node's own `127.0.0.1:<port>`: Multus, whereabouts,
//!   kube-proxy and CoreDNS on a node use the very kubeconfig of the host (its certificate
//!   names 127.0.0.1);
//! - inside `nsc-lan`, a listener on [`LAN_ADDRESS`]`:<port>`, the API server's advertised
//!   address and so the `kubernetes` Service's endpoint: a pod's connection to `10.96.0.1:443`
//!   arrives there through kube-proxy (its certificate names 10.96.0.1).
//!
//! Each listener is a socket created by a thread inside the namespace; its connections are
//! relayed from the agent's own runtime to the machine's loopback. Nothing listens on the
//! machine's interfaces.

use std::net::{Ipv4Addr, SocketAddr};

use anyhow::Context as _;
use tokio::net::{TcpListener, TcpStream};

use crate::layout::LAN_ADDRESS;
use crate::netns::NetnsRuntime;

/// Serves `127.0.0.1:port` inside `node`'s namespace until the process ends.
pub async fn api_server(node: &NetnsRuntime, port: u16) -> anyhow::Result<()> {
    relay(node, SocketAddr::from((Ipv4Addr::LOCALHOST, port)), port).await
}

/// Serves [`LAN_ADDRESS`]`:port` inside the LAN's namespace (`lan`) until the process ends.
pub async fn api_server_on_lan(lan: &NetnsRuntime, port: u16) -> anyhow::Result<()> {
    relay(lan, SocketAddr::from((LAN_ADDRESS, port)), port).await
}

/// Listens on `address` inside `netns` and relays each connection to the machine's
/// `127.0.0.1:port`.
async fn relay(netns: &NetnsRuntime, address: SocketAddr, port: u16) -> anyhow::Result<()> {
    let listener = netns
        .run(async move { TcpListener::bind(address).await })
        .await?
        .with_context(|| format!("listening on {address} in {}", netns.name()))?;
    let target = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let name = netns.name().to_owned();
    // The relay runs on the caller's runtime: connections out are made from the host.
    tokio::spawn(async move {
        loop {
            let (mut inbound, _) = match listener.accept().await {
                Ok(conn) => conn,
                Err(e) => {
                    tracing::warn!(netns = %name, %address, error = %e, "API relay: accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                    continue;
                }
            };
            tokio::spawn(async move {
                match TcpStream::connect(target).await {
                    Ok(mut outbound) => {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                    Err(e) => tracing::debug!(error = %e, "API relay: the API server is away"),
                }
            });
        }
    });
    Ok(())
}
