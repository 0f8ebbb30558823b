//! Command-line flags (each also settable through an environment variable).

use std::{collections::BTreeMap, net::SocketAddr, path::PathBuf, time::Duration};

use clap::{Parser, Subcommand, ValueEnum};

pub mod plugin;

use crate::{
    plugin::FailurePolicy,
    reconcile::slices::{DEFAULT_MAX_ENDPOINTS_PER_SLICE, MAX_ENDPOINTS_PER_SLICE},
};

#[derive(Debug, Parser)]
#[command(
    name = "nad-service-controller",
    version,
    about = "Publishes EndpointSlices with the Multus secondary-network IPs of pods, for Services \
             annotated isim.dev/network: <network>; which pods count is decided by a WebAssembly \
             policy plugin.",
    long_about = None,
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,

    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the controller (the default).
    Run,
    /// Work with plugin files offline, through the same pipeline and plan as the controller.
    #[command(subcommand)]
    Plugin(PluginCommand),
}

#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Print the EndpointSlices a plugin would make for a Service and pods (YAML on stdout;
    /// skipped and excluded pods with their reasons on stderr).
    Eval(EvalArgs),
    /// Print a plugin's name, version, WIT version, size and hash, and whether this host runs it.
    Inspect(InspectArgs),
}

#[derive(Debug, clap::Args)]
pub struct EvalArgs {
    /// The plugin component (`.wasm`).
    #[arg(long)]
    pub plugin: PathBuf,
    /// Its configuration (JSON), as `<name>.json` beside it would be.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// YAML with the Service (other documents in the file are ignored).
    #[arg(long)]
    pub service: PathBuf,
    /// YAML with the pods: Pod documents, or a List of them.
    #[arg(long)]
    pub pods: PathBuf,
    /// YAML with the Nodes (for zones); without it, nodes are taken to exist, without zones.
    #[arg(long)]
    pub nodes: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// The plugin component (`.wasm`).
    pub plugin: PathBuf,
    /// Its configuration (JSON), for the config and self-test steps.
    #[arg(long)]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// Address of the Prometheus /metrics endpoint.
    #[arg(
        long,
        env = "NSC_METRICS_ADDRESS",
        default_value = "0.0.0.0:8080",
        global = true
    )]
    pub metrics_address: SocketAddr,

    /// Address of the /healthz and /readyz endpoints.
    #[arg(
        long,
        env = "NSC_HEALTH_ADDRESS",
        default_value = "0.0.0.0:8081",
        global = true
    )]
    pub health_address: SocketAddr,

    /// Elect a leader through a Lease, so that only one replica reconciles.
    #[arg(long, env = "NSC_LEADER_ELECTION", default_value_t = true, action = clap::ArgAction::Set, global = true)]
    pub leader_election: bool,

    /// Namespace of the leader-election Lease (in a cluster: the controller's own namespace).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default", global = true)]
    pub leader_election_namespace: String,

    /// Name of the leader-election Lease.
    #[arg(
        long,
        env = "NSC_LEADER_ELECTION_LEASE",
        default_value = "nad-service-controller",
        global = true
    )]
    pub leader_election_lease: String,

    /// Manage Services of this namespace only (default: all namespaces). Nodes are always
    /// read cluster-wide, for zones.
    #[arg(long, env = "NSC_WATCH_NAMESPACE", global = true)]
    pub watch_namespace: Option<String>,

    /// Most endpoints in one EndpointSlice (1 to 1000).
    #[arg(long, env = "NSC_MAX_ENDPOINTS_PER_SLICE", default_value_t = DEFAULT_MAX_ENDPOINTS_PER_SLICE,
          value_parser = parse_max_endpoints, global = true)]
    pub max_endpoints_per_slice: usize,

    /// Services reconciled at once (as kube-controller-manager's
    /// --concurrent-endpointslice-syncs). A reconcile mostly waits for its slice write.
    #[arg(long, env = "NSC_CONCURRENT_SYNCS", default_value_t = 5,
          value_parser = clap::value_parser!(u16).range(1..=64), global = true)]
    pub concurrent_syncs: u16,

    /// Directory of plugin components (`<name>.wasm`, optional `<name>.json` configuration);
    /// in a cluster, a mounted ConfigMap. Services pick one with the annotation
    /// isim.dev/endpoint-policy: <name>.
    #[arg(long, env = "NSC_PLUGIN_DIR", global = true)]
    pub plugin_dir: Option<std::path::PathBuf>,

    /// The plugin for Services without the isim.dev/endpoint-policy annotation.
    #[arg(long, env = "NSC_DEFAULT_PLUGIN", global = true)]
    pub default_plugin: Option<String>,

    /// How often the plugin directory is checked for new, changed and deleted plugins.
    #[arg(long, env = "NSC_PLUGIN_POLL_INTERVAL", default_value = "2s", value_parser = humantime::parse_duration, global = true)]
    pub plugin_poll_interval: Duration,

    /// What a Service gets when its plugin is missing or fails: `keep` its slices as last
    /// applied, or `fallback` to the built-in plugin. `<plugin>=<policy>` sets one plugin's;
    /// repeat the flag for several.
    #[arg(
        long,
        env = "NSC_PLUGIN_FAILURE_POLICY",
        value_delimiter = ',',
        default_value = "keep",
        global = true
    )]
    pub plugin_failure_policy: Vec<String>,

    /// Deadline of one plugin call, e.g. 100ms or 1s.
    #[arg(long, env = "NSC_PLUGIN_DEADLINE", default_value = "100ms", value_parser = humantime::parse_duration, global = true)]
    pub plugin_deadline: Duration,

    /// Memory limit of one plugin call, in MiB.
    #[arg(long, env = "NSC_PLUGIN_MEMORY_LIMIT_MIB", default_value_t = 64,
          value_parser = clap::value_parser!(u32).range(1..=4096), global = true)]
    pub plugin_memory_limit_mib: u32,

    /// Log format.
    #[arg(long, env = "NSC_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,

    /// Log filter (tracing EnvFilter syntax), e.g. info or nad_service_controller=debug.
    #[arg(long, env = "RUST_LOG", default_value = "info", global = true)]
    pub log_filter: String,
}

impl RunArgs {
    /// The default failure policy and the per-plugin ones.
    pub fn failure_policies(
        &self,
    ) -> anyhow::Result<(FailurePolicy, BTreeMap<String, FailurePolicy>)> {
        let parse = |s: &str| {
            <FailurePolicy as ValueEnum>::from_str(s.trim(), true).map_err(|_| {
                anyhow::anyhow!("--plugin-failure-policy: {s:?} is not keep or fallback")
            })
        };
        let mut default = FailurePolicy::Keep;
        let mut per_plugin = BTreeMap::new();
        for item in &self.plugin_failure_policy {
            match item.split_once('=') {
                Some((plugin, policy)) => {
                    per_plugin.insert(plugin.trim().to_owned(), parse(policy)?);
                }
                None => default = parse(item)?,
            }
        }
        Ok((default, per_plugin))
    }
}

fn parse_max_endpoints(s: &str) -> Result<usize, String> {
    let n: usize = s.parse().map_err(|e| format!("{e}"))?;
    if (1..=MAX_ENDPOINTS_PER_SLICE).contains(&n) {
        Ok(n)
    } else {
        Err(format!("must be between 1 and {MAX_ENDPOINTS_PER_SLICE}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn flags_parse_and_have_safe_defaults() {
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from(["nsc"]).unwrap();
        assert!(cli.command.is_none());
        assert!(cli.run.leader_election);
        assert_eq!(cli.run.max_endpoints_per_slice, 100);
        assert_eq!(cli.run.concurrent_syncs, 5);
        assert_eq!(cli.run.plugin_deadline, Duration::from_millis(100));
        let cli = Cli::try_parse_from([
            "nsc",
            "run",
            "--leader-election=false",
            "--max-endpoints-per-slice",
            "1000",
            "--plugin-deadline",
            "2s",
            "--log-format",
            "json",
        ])
        .unwrap();
        assert!(matches!(cli.command, Some(Command::Run)));
        assert!(!cli.run.leader_election);
        assert_eq!(cli.run.max_endpoints_per_slice, 1000);
        assert_eq!(cli.run.plugin_deadline, Duration::from_secs(2));
        assert_eq!(cli.run.log_format, LogFormat::Json);
    }

    #[test]
    fn failure_policies_have_a_default_and_per_plugin_values() {
        let cli = Cli::try_parse_from(["nsc"]).unwrap();
        assert_eq!(
            cli.run.failure_policies().unwrap(),
            (FailurePolicy::Keep, BTreeMap::new())
        );
        let cli = Cli::try_parse_from([
            "nsc",
            "--plugin-failure-policy",
            "fallback,zones=keep",
            "--plugin-failure-policy",
            "opt-out=fallback",
        ])
        .unwrap();
        let (default, per_plugin) = cli.run.failure_policies().unwrap();
        assert_eq!(default, FailurePolicy::Fallback);
        assert_eq!(per_plugin["zones"], FailurePolicy::Keep);
        assert_eq!(per_plugin["opt-out"], FailurePolicy::Fallback);
        let cli = Cli::try_parse_from(["nsc", "--plugin-failure-policy", "x=maybe"]).unwrap();
        assert!(
            cli.run
                .failure_policies()
                .unwrap_err()
                .to_string()
                .contains("\"maybe\"")
        );
    }

    #[test]
    fn plugin_subcommands_parse() {
        let cli = Cli::try_parse_from([
            "nsc",
            "plugin",
            "eval",
            "--plugin",
            "p.wasm",
            "--service",
            "s.yaml",
            "--pods",
            "p.yaml",
        ])
        .unwrap();
        assert!(matches!(
            cli.command,
            Some(Command::Plugin(PluginCommand::Eval(EvalArgs {
                nodes: None,
                ..
            })))
        ));
        let cli = Cli::try_parse_from(["nsc", "plugin", "inspect", "p.wasm"]).unwrap();
        assert!(matches!(
            cli.command,
            Some(Command::Plugin(PluginCommand::Inspect(_)))
        ));
    }

    #[test]
    fn out_of_range_values_are_refused_with_the_limit() {
        let err = Cli::try_parse_from(["nsc", "--max-endpoints-per-slice", "1001"]).unwrap_err();
        assert!(err.to_string().contains("between 1 and 1000"), "{err}");
        assert!(Cli::try_parse_from(["nsc", "--max-endpoints-per-slice", "0"]).is_err());
        assert!(Cli::try_parse_from(["nsc", "--concurrent-syncs", "0"]).is_err());
        assert!(Cli::try_parse_from(["nsc", "--concurrent-syncs", "65"]).is_err());
    }
}
