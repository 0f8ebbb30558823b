//! `node-sim`: runs the node simulator against the current kubeconfig until stopped.

use std::collections::BTreeMap;

use anyhow::Context as _;
use clap::Parser;
use node_sim::{Config, Range, SimNode, Simulator};

#[derive(Debug, Parser)]
#[command(about = "Plays scheduler, kubelet and Multus for pods on a control plane without nodes")]
struct Args {
    /// Nodes to register, as <name>[=<zone>].
    #[arg(long = "node", default_values = ["sim-node-0=zone-a", "sim-node-1=zone-b"])]
    nodes: Vec<String>,
    /// A secondary network's address range, as <network>=<ipv4 cidr> (network: <name> or <ns>/<name>).
    #[arg(long = "range")]
    ranges: Vec<String>,
    /// The range of networks without their own.
    #[arg(long, default_value = "192.168.2.0/24")]
    default_range: Range,
    /// Only pods of this namespace (default: all).
    #[arg(long)]
    namespace: Option<String>,
    /// Leave terminating pods terminating instead of removing them.
    #[arg(long)]
    keep_terminating: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = Args::parse();
    let nodes = args
        .nodes
        .iter()
        .map(|n| match n.split_once('=') {
            Some((name, zone)) => SimNode {
                name: name.into(),
                zone: Some(zone.into()),
            },
            None => SimNode {
                name: n.clone(),
                zone: None,
            },
        })
        .collect();
    let network_ranges = args
        .ranges
        .iter()
        .map(|r| {
            let (network, cidr) = r.split_once('=').context("--range is <network>=<cidr>")?;
            Ok((network.to_owned(), cidr.parse()?))
        })
        .collect::<anyhow::Result<BTreeMap<_, _>>>()?;
    let config = Config {
        nodes,
        network_ranges,
        default_network_range: args.default_range,
        finalize_terminating: !args.keep_terminating,
        ..Config::default()
    };
    nad_test_kit::install_crypto_provider();
    let client = kube::Client::try_default()
        .await
        .context("connecting to Kubernetes")?;
    let sim = Simulator::new(client, config);
    sim.ensure_nodes().await?;
    tracing::info!("nodes registered; simulating pods");
    tokio::select! {
        result = sim.run(args.namespace.as_deref()) => result,
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}
