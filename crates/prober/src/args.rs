//! The prober's flags.

use std::net::{IpAddr, SocketAddr};

use clap::Parser;
use nad_process::telemetry::LogFormat;

/// `nad-network-prober`'s flags (each also settable through an environment variable).
#[derive(Debug, Clone, Parser)]
#[command(
    name = "nad-network-prober",
    version,
    about = "Probes the pods of this node on their secondary networks, from those networks, and \
             writes their network readiness condition (network-ready.isim.dev/<namespace>.<name>) \
             when it changes. Runs as a DaemonSet attached to the networks it probes.",
    long_about = None,
)]
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
