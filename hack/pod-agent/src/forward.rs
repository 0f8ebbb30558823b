//! The API server inside a node: a listener on the node's own `127.0.0.1:<port>` whose
//! connections are relayed to the machine's `127.0.0.1:<port>`, where the local API server
//! listens. So Multus, whereabouts, kube-proxy and CoreDNS on a node use the very kubeconfig
//! of the host (its certificate names 127.0.0.1), and the API server listens on loopback only.

use std::net::{Ipv4Addr, SocketAddr};

use anyhow::Context as _;
use tokio::net::{TcpListener, TcpStream};

use crate::netns::NetnsRuntime;

/// Serves `127.0.0.1:port` inside `node`'s namespace until the process ends.
pub async fn api_server(node: &NetnsRuntime, port: u16) -> anyhow::Result<()> {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let listener = node
        .run(async move { TcpListener::bind(address).await })
        .await?
        .with_context(|| format!("listening on {address} in {}", node.name()))?;
    let name = node.name().to_owned();
    // The relay runs on the caller's runtime: connections out are made from the host.
    tokio::spawn(async move {
        loop {
            let (mut inbound, _) = match listener.accept().await {
                Ok(conn) => conn,
                Err(e) => {
                    tracing::warn!(node = %name, error = %e, "API relay: accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                    continue;
                }
            };
            tokio::spawn(async move {
                match TcpStream::connect(address).await {
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
