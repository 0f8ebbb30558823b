//! The network prober (`nad-service-controller probe`): readiness of pods on the Service's
//! own network, where its clients are.
//!
//! A pod's `Ready` is decided by kubelet's probes on the primary network, so a pod whose
//! secondary interface is dead stays Ready and published. The prober runs as a DaemonSet whose
//! pods are attached to the networks it watches; each probes the pods of its own node that are
//! candidates of a managed Service on one of those networks, from the network itself (the
//! probe crosses the same kind of link a client does), and writes the pod condition
//! `network-ready.isim.dev/<namespace>.<name>` ([`crate::input::network_ready`]) when it flips,
//! never per probe. The controller's default plugin publishes a pod whose condition is
//! `False` not serving; a pod's owner can also gate its `Ready` on it (`readinessGates`).
//!
//! - [`spec`]: the probe a Service asks for (`isim.dev/probe`), its defaults and bounds;
//! - [`targets`]: which pods, addresses and checks (pure);
//! - [`tracker`]: the success and failure thresholds (pure);
//! - [`check`]: one TCP or HTTP attempt;
//! - [`run`]: the watches, the probe tasks and the writes; [`metrics`].

pub mod check;
pub mod metrics;
pub mod run;
pub use nad_model::probe as spec;
pub mod targets;
pub mod tracker;

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use anyhow::Context as _;
use axum::{Router, extract::State, http::StatusCode, response::IntoResponse, routing::get};
use kube::Client;

use crate::telemetry::LogFormat;

/// `nad-service-controller probe`'s flags.
#[derive(Debug, Clone, clap::Args)]
pub struct ProbeArgs {
    /// The node whose pods this prober probes (in a DaemonSet: `spec.nodeName` through the
    /// downward API).
    #[arg(long, env = "NODE_NAME")]
    pub node_name: String,

    /// The networks to probe on (`<namespace>/<name>` of NetworkAttachmentDefinitions); the
    /// prober's pod must be attached to each. Repeat the flag, or separate with commas.
    #[arg(long = "network", env = "NSC_PROBE_NETWORKS", value_delimiter = ',', required = true,
          value_parser = parse_network)]
    pub networks: Vec<String>,

    /// Address of /healthz, /readyz and /metrics.
    #[arg(long, env = "NSC_PROBE_ADDRESS", default_value = "0.0.0.0:9090")]
    pub address: SocketAddr,

    /// Log format.
    #[arg(long, env = "NSC_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Log filter (tracing EnvFilter syntax).
    #[arg(long, env = "RUST_LOG", default_value = "info")]
    pub log_filter: String,
}

fn parse_network(value: &str) -> Result<String, String> {
    let value = value.trim();
    match value.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok(value.to_owned())
        }
        _ => Err(format!(
            "{value:?} is not <namespace>/<name> of a NetworkAttachmentDefinition"
        )),
    }
}

#[derive(Clone)]
struct Served {
    metrics: Arc<metrics::ProbeMetrics>,
    ready: Arc<AtomicBool>,
}

fn router(served: Served) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(|State(s): State<Served>| async move {
                if s.ready.load(Ordering::Relaxed) {
                    (StatusCode::OK, "ok")
                } else {
                    (
                        StatusCode::SERVICE_UNAVAILABLE,
                        "not ready: the watches have not listed yet",
                    )
                }
            }),
        )
        .route(
            "/metrics",
            get(|State(s): State<Served>| async move {
                (
                    [("content-type", "text/plain; version=0.0.4; charset=utf-8")],
                    s.metrics.encode(),
                )
                    .into_response()
            }),
        )
        .with_state(served)
}

/// Runs the prober until `stop` resolves.
pub async fn main(
    args: ProbeArgs,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let client = Client::try_default()
        .await
        .context("connecting to Kubernetes (in-cluster config, KUBECONFIG or ~/.kube/config)")?;
    let metrics = Arc::new(metrics::ProbeMetrics::default());
    let ready = Arc::new(AtomicBool::new(false));
    let listener = tokio::net::TcpListener::bind(args.address)
        .await
        .with_context(|| format!("listening on {}", args.address))?;
    let served = Served {
        metrics: metrics.clone(),
        ready: ready.clone(),
    };
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router(served)).await {
            tracing::error!(error = %e, "the /metrics server stopped");
        }
    });
    tracing::info!(node = %args.node_name, networks = ?args.networks, address = %args.address, "probing");
    run::run(client, args.node_name, args.networks, metrics, ready, stop).await
}
