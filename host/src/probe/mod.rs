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
//! - [`guard`]: no write while the admission policy that confines the writes is not in force;
//! - [`run`]: the watches, the probe tasks and the writes; [`metrics`].

pub mod check;
pub mod guard;
pub mod metrics;
pub mod run;
pub use nad_model::probe as spec;
pub mod targets;
pub mod tracker;

use std::{
    net::{IpAddr, SocketAddr},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use anyhow::Context as _;
use axum::{Router, extract::State, http::StatusCode, response::IntoResponse, routing::get};
use k8s_openapi::api::core::v1::ObjectReference;
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

    /// Address of /healthz, /readyz and /metrics: `<ip>:<port>`, an IPv6 address with or
    /// without brackets. Never every interface: the prober's pod is attached to tenant networks,
    /// so the DaemonSet gives its primary-network address (`$(POD_IP):9090`).
    #[arg(long, env = "NSC_PROBE_ADDRESS", default_value = "127.0.0.1:9090",
          value_parser = parse_address)]
    pub address: SocketAddr,

    /// The ValidatingAdmissionPolicy that confines this prober's writes; it writes no
    /// condition while the policy is missing or not enforcing.
    #[arg(
        long,
        env = "NSC_PROBE_ADMISSION_POLICY",
        default_value = "nad-network-prober-own-node"
    )]
    pub admission_policy: String,

    /// The policy's ValidatingAdmissionPolicyBinding.
    #[arg(
        long,
        env = "NSC_PROBE_ADMISSION_POLICY_BINDING",
        default_value = "nad-network-prober-own-node"
    )]
    pub admission_policy_binding: String,

    /// How often the policy and its binding are read (seconds).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub admission_policy_check_seconds: u64,

    /// The prober's own pod (`metadata.name` through the downward API), on which it tells of
    /// the admission policy with Events.
    #[arg(long, env = "POD_NAME")]
    pub pod_name: Option<String>,

    /// The namespace of the prober's own pod.
    #[arg(long, env = "POD_NAMESPACE")]
    pub pod_namespace: Option<String>,

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

/// `<ip>:<port>`; an IPv6 address may come without brackets (`$(POD_IP):9090`).
fn parse_address(value: &str) -> Result<SocketAddr, String> {
    if let Ok(address) = value.parse() {
        return Ok(address);
    }
    value
        .rsplit_once(':')
        .and_then(|(ip, port)| {
            Some(SocketAddr::new(
                ip.parse::<IpAddr>().ok()?,
                port.parse().ok()?,
            ))
        })
        .ok_or_else(|| format!("{value:?} is not <ip>:<port>"))
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
    let in_force = Arc::new(AtomicBool::new(false));
    let own_pod = args.pod_name.as_ref().map(|name| ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some(name.clone()),
        namespace: args.pod_namespace.clone(),
        ..ObjectReference::default()
    });
    let guard = guard::watch(
        client.clone(),
        guard::Names {
            policy: args.admission_policy,
            binding: args.admission_policy_binding,
        },
        std::time::Duration::from_secs(args.admission_policy_check_seconds),
        in_force.clone(),
        metrics.clone(),
        run::recorder(&client, &args.node_name),
        own_pod,
    );
    let run = run::run(
        client,
        args.node_name,
        args.networks,
        run::Gates { ready, in_force },
        metrics,
        stop,
    );
    tokio::select! {
        () = guard => Ok(()),
        result = run => result,
    }
}
