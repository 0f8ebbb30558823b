//! `pod-agent`: a kubelet's network part for the local control plane. See hack/README.md
//! ("The data plane") and `layout` for the picture.

mod cni;
mod components;
mod containers;
mod env;
mod exec;
mod forward;
mod http;
mod kubelet;
mod layout;
mod netns;
mod network;
mod nodes;
mod probe;
mod record;
mod scheduling;
mod serviceaccount;
mod status;

use std::collections::HashMap;
use std::path::PathBuf;

use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand};

use crate::components::Parts;
use crate::containers::ProjectBinaries;
use crate::layout::Layout;

#[derive(Debug, Parser)]
#[command(about = "Nodes as network namespaces, pods wired by Multus, real processes and probes")]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Set up the nodes and run their pods until stopped (SIGTERM or Ctrl-C), then remove
    /// everything it created.
    Run(RunArgs),
    /// Remove whatever a previous run left behind (namespaces, their processes, files).
    Down,
    /// Say what this machine lacks for `run`; exit 1 if anything.
    Check,
    /// The nginx images' stand-in: serve `<root>` over HTTP on each `--port`.
    ServeHttp {
        #[arg(long = "port", required = true)]
        ports: Vec<u16>,
        #[arg(long, default_value = "usr/share/nginx/html")]
        root: PathBuf,
    },
    /// Run a container's program (the agent runs it through `ip netns exec`, in a mount
    /// namespace of its own): mount `--service-account` at
    /// /var/run/secrets/kubernetes.io/serviceaccount there (a tmpfs over /run first), then exec
    /// the program.
    ExecContainer {
        /// The pod's ServiceAccount directory (token, ca.crt, namespace).
        #[arg(long)]
        service_account: Option<PathBuf>,
        /// The program and its arguments, after `--`.
        #[arg(last = true, required = true)]
        argv: Vec<String>,
    },
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// The state directory (configuration, caches, logs, pods' files).
    #[arg(long)]
    state: PathBuf,
    /// How many nodes.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=16))]
    nodes: u8,
    /// The kubeconfig of the local API server (its server must be https://127.0.0.1:<port>).
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: PathBuf,
    /// A directory with the CNI plugins: multus, bridge, macvlan, host-local, loopback, whereabouts.
    #[arg(long)]
    cni_bin: PathBuf,
    #[arg(long)]
    cni_run: PathBuf,
    #[arg(long)]
    kube_proxy: PathBuf,
    #[arg(long)]
    coredns: PathBuf,
    /// The controller binary, which images named `…/nad-service-controller` run.
    #[arg(long)]
    controller: Option<PathBuf>,
    /// The network prober binary, which images named `…/nad-network-prober` run.
    #[arg(long)]
    prober: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,kube_client::client::builder=off".into()),
        )
        .init();
    let args = Args::parse();
    // Before any thread: it becomes the container's program.
    if let Command::ExecContainer {
        service_account,
        argv,
    } = &args.command
    {
        let error = exec::exec_container(service_account.as_deref(), argv);
        eprintln!("pod-agent: error: {error:#}");
        std::process::exit(127);
    }
    let runtime = tokio::runtime::Runtime::new().context("starting tokio")?;
    let result = runtime.block_on(async {
        match args.command {
            Command::Run(run_args) => run(run_args).await,
            Command::Down => network::tear_down().await,
            Command::Check => {
                let missing = missing().await;
                for what in &missing {
                    println!("missing: {what}");
                }
                if missing.is_empty() {
                    println!("ok: root, ip (iproute2) with network namespaces, nft, overlayfs");
                    Ok(())
                } else {
                    std::process::exit(1);
                }
            }
            Command::ServeHttp { ports, root } => http::serve(ports, root).await,
            Command::ExecContainer { .. } => Ok(()),
        }
    });
    // Components and containers are children: do not wait for blocking reads of theirs.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    if let Err(e) = &result {
        eprintln!("pod-agent: error: {e:#}");
        std::process::exit(1);
    }
    Ok(())
}

/// What `run` needs that this machine lacks, each said so that it can be fixed.
async fn missing() -> Vec<String> {
    let mut missing = Vec::new();
    if !rustix::process::geteuid().is_root() {
        missing
            .push("root: network namespaces, veth links and mounts need it (run as root)".into());
    }
    let works = |program: &'static str, args: &'static [&'static str]| async move {
        tokio::process::Command::new(program)
            .args(args)
            .output()
            .await
            .is_ok_and(|o| o.status.success())
    };
    if !works("ip", &["netns", "list"]).await {
        missing.push("ip (iproute2) with network namespaces: apt-get install iproute2".into());
    }
    if !works("nft", &["--version"]).await {
        missing.push("nft, which kube-proxy's nftables mode runs: apt-get install nftables".into());
    }
    if !std::fs::read_to_string("/proc/filesystems").is_ok_and(|f| f.contains("overlay")) {
        missing
            .push("overlayfs in the kernel (modprobe overlay), for whereabouts' settings".into());
    }
    missing
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    let missing = missing().await;
    if !missing.is_empty() {
        bail!(
            "this machine cannot run the data plane: {}",
            missing.join("; ")
        );
    }
    let absolute = |p: PathBuf| std::path::absolute(&p).with_context(|| format!("{}", p.display()));
    let parts = Parts {
        cni_bin: absolute(args.cni_bin)?,
        cni_run: absolute(args.cni_run)?,
        kube_proxy: absolute(args.kube_proxy)?,
        coredns: absolute(args.coredns)?,
        kubeconfig: absolute(args.kubeconfig)?,
        state: absolute(args.state)?,
    };
    let binaries = ProjectBinaries {
        controller: args.controller.map(absolute).transpose()?,
        prober: args.prober.map(absolute).transpose()?,
    };
    let absent = cni::plugins_missing(&parts.cni_bin);
    if !absent.is_empty() {
        bail!(
            "{} lacks the CNI plugins {absent:?} (hack/pod-agent.sh links them)",
            parts.cni_bin.display()
        );
    }
    std::fs::create_dir_all(parts.logs())?;
    record::init(&parts.state);
    let config = kube::Config::infer()
        .await
        .context("reading the kubeconfig")?;
    let port = match (config.cluster_url.host(), config.cluster_url.port_u16()) {
        (Some("127.0.0.1"), Some(port)) => port,
        _ => bail!(
            "the kubeconfig's server is {}; the pod agent needs the local API server on https://127.0.0.1:<port>",
            config.cluster_url
        ),
    };
    let ca_pem = serviceaccount::pem(config.root_cert.as_deref().unwrap_or_default())
        .context("reading the API server's CA from the kubeconfig")?;
    node_sim::install_crypto_provider();
    let client = kube::Client::try_from(config).context("connecting to the API server")?;
    let layout = Layout::new(args.nodes);

    network::tear_down()
        .await
        .context("removing what an earlier run left")?;
    let result = serve(&client, &layout, &parts, port, binaries, ca_pem).await;
    tracing::info!("removing the nodes' namespaces");
    network::tear_down().await?;
    result
}

async fn serve(
    client: &kube::Client,
    layout: &Layout,
    parts: &Parts,
    port: u16,
    binaries: ProjectBinaries,
    ca_pem: String,
) -> anyhow::Result<()> {
    network::set_up(layout)
        .await
        .context("setting up the nodes' network")?;
    let lan = netns::NetnsRuntime::start(layout::LAN_NETNS)?;
    forward::api_server_on_lan(&lan, port).await?;
    warn_unless_advertised(client, port).await;
    let mut runtimes = HashMap::new();
    for node in &layout.nodes {
        let runtime = netns::NetnsRuntime::start(&node.name)?;
        forward::api_server(&runtime, port).await?;
        runtimes.insert(node.name.clone(), runtime);
    }
    nodes::register(client, layout).await?;
    tokio::spawn(nodes::keep_ready(client.clone(), layout.clone()));
    cni::write_confs(parts, &layout.nodes)?;
    for node in &layout.nodes {
        components::kube_proxy(parts, node);
    }
    if let Some(first) = layout.nodes.first() {
        components::coredns(parts, first)?;
    }
    let kubelet = kubelet::Kubelet::new(
        client.clone(),
        layout.clone(),
        parts.clone(),
        runtimes,
        binaries,
        ca_pem,
    )?;
    tracing::info!(nodes = layout.nodes.len(), "nodes up; running their pods");
    let result = tokio::select! {
        result = kubelet.run() => result,
        () = stop_signal() => Ok(()),
    };
    tracing::info!("stopping the pods");
    kubelet.shut_down().await;
    result
}

/// Warns when the `kubernetes` Service's endpoint is not the relay on the LAN (a control plane
/// started by an older hack/local-up.sh): pods could not reach the API server through it.
async fn warn_unless_advertised(client: &kube::Client, port: u16) {
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    let slices: kube::Api<EndpointSlice> = kube::Api::namespaced(client.clone(), "default");
    let listed = slices
        .list(&kube::api::ListParams::default().labels("kubernetes.io/service-name=kubernetes"))
        .await;
    let address = layout::LAN_ADDRESS.to_string();
    let advertised = listed.as_ref().is_ok_and(|list| {
        list.items.iter().any(|slice| {
            slice
                .endpoints
                .iter()
                .flatten()
                .any(|e| e.addresses.contains(&address))
                && slice
                    .ports
                    .iter()
                    .flatten()
                    .any(|p| p.port == Some(i32::from(port)))
        })
    });
    if !advertised {
        tracing::warn!(
            expected = %format!("{address}:{port}"),
            "the kubernetes Service has no endpoint at the LAN's relay, so pods cannot reach the API \
             server through it (10.96.0.1:443); restart the control plane with hack/local-up.sh, which \
             advertises that address (hack/local-down.sh && hack/local-up.sh)"
        );
    }
}

async fn stop_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                term.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
}
