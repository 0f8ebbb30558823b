//! The controller's flags (`run`), each also settable through an environment variable. The
//! binary's `main` parses them beside the other commands' (`plugin`, `explain`).

use std::{collections::BTreeMap, net::SocketAddr, time::Duration};

use nad_core::slices::{DEFAULT_MAX_ENDPOINTS_PER_SLICE, MAX_ENDPOINTS_PER_SLICE};
use nad_plugin_fetcher::RegistryArgs;
use nad_plugin_runtime::FailurePolicy;
use nad_process::telemetry::LogFormat;

#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// Address of the Prometheus /metrics endpoint.
    #[arg(long, env = "NSC_METRICS_ADDRESS", default_value = "0.0.0.0:8080")]
    pub metrics_address: SocketAddr,

    /// Address of the /healthz and /readyz endpoints.
    #[arg(long, env = "NSC_HEALTH_ADDRESS", default_value = "0.0.0.0:8081")]
    pub health_address: SocketAddr,

    /// Elect a leader through a Lease, so that only one replica reconciles.
    #[arg(long, env = "NSC_LEADER_ELECTION", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_election: bool,

    /// Namespace of the leader-election Lease (in a cluster: the controller's own namespace).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub leader_election_namespace: String,

    /// Name of the leader-election Lease.
    #[arg(
        long,
        env = "NSC_LEADER_ELECTION_LEASE",
        default_value = "nad-service-controller"
    )]
    pub leader_election_lease: String,

    /// Manage Services of this namespace only (default: all namespaces). Nodes are always
    /// read cluster-wide, for zones.
    #[arg(long, env = "NSC_WATCH_NAMESPACE")]
    pub watch_namespace: Option<String>,

    /// Most endpoints in one EndpointSlice (1 to 1000).
    #[arg(long, env = "NSC_MAX_ENDPOINTS_PER_SLICE", default_value_t = DEFAULT_MAX_ENDPOINTS_PER_SLICE,
          value_parser = parse_max_endpoints)]
    pub max_endpoints_per_slice: usize,

    /// Services reconciled at once (as kube-controller-manager's
    /// --concurrent-endpointslice-syncs). A reconcile mostly waits for its slice write.
    #[arg(long, env = "NSC_CONCURRENT_SYNCS", default_value_t = 5,
          value_parser = clap::value_parser!(u16).range(1..=64))]
    pub concurrent_syncs: u16,

    /// Directory of plugin components (`<name>.wasm`, or `<name>.oci` holding an
    /// `oci://<registry>/<repository>@sha256:<digest>` reference; optional `<name>.json`
    /// configuration); in a cluster, a mounted ConfigMap. Services pick one with the
    /// annotation isim.dev/endpoint-policy: <name>.
    #[arg(long, env = "NSC_PLUGIN_DIR")]
    pub plugin_dir: Option<std::path::PathBuf>,

    /// A ConfigMap (in --plugin-configmap-namespace) holding plugins (binaryData
    /// `<name>.wasm`, or data `<name>.oci` with an oci:// reference; optional `<name>.json`),
    /// watched through the API: a change serves within a second, without kubelet's volume
    /// sync. Instead of --plugin-dir.
    #[arg(long, env = "NSC_PLUGIN_CONFIGMAP", conflicts_with = "plugin_dir")]
    pub plugin_configmap: Option<String>,

    /// The namespace of --plugin-configmap and --plugin-registry-secret: in a cluster, the
    /// controller's own.
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub plugin_configmap_namespace: String,

    /// A `kubernetes.io/dockerconfigjson` Secret (in --plugin-configmap-namespace) whose
    /// credentials plugins are pulled with, watched through the API: a change takes effect
    /// without a restart, and fetches it refused are tried again at once. While it does not
    /// exist, registries are read anonymously. Instead of --registry-config.
    #[arg(
        long,
        env = "NSC_PLUGIN_REGISTRY_SECRET",
        value_name = "NAME",
        conflicts_with = "registry_config"
    )]
    pub plugin_registry_secret: Option<String>,

    /// A ConfigMap (in --plugin-configmap-namespace) of registry CAs: `data` keys name a
    /// registry (`host`, or `host_port` for `host:port`), values are PEM bundles trusted for
    /// that registry only, beside --registry-ca files. Watched: a change takes effect without
    /// a restart.
    #[arg(long, env = "NSC_PLUGIN_REGISTRY_CA_CONFIGMAP", value_name = "NAME")]
    pub plugin_registry_ca_configmap: Option<String>,

    /// A ConfigMap (in --plugin-configmap-namespace) whose `policy.yaml` is the verification
    /// policy every plugin artifact is checked against (as --verification-policy), watched.
    /// While it does not exist or has never been valid, no plugin artifact loads.
    #[arg(
        long,
        env = "NSC_PLUGIN_VERIFICATION_CONFIGMAP",
        value_name = "NAME",
        conflicts_with = "verification_policy"
    )]
    pub plugin_verification_configmap: Option<String>,

    #[command(flatten)]
    pub registry: RegistryArgs,

    /// The plugin for Services without the isim.dev/endpoint-policy annotation.
    #[arg(long, env = "NSC_DEFAULT_PLUGIN")]
    pub default_plugin: Option<String>,

    /// How often the plugin directory is checked for new, changed and deleted plugins.
    #[arg(long, env = "NSC_PLUGIN_POLL_INTERVAL", default_value = "2s", value_parser = humantime::parse_duration)]
    pub plugin_poll_interval: Duration,

    /// What a Service gets when its plugin is missing or fails: `keep` its slices as last
    /// applied, or `fallback` to the built-in plugin. `<plugin>=<policy>` sets one plugin's;
    /// repeat the flag for several.
    #[arg(
        long,
        env = "NSC_PLUGIN_FAILURE_POLICY",
        value_delimiter = ',',
        default_value = "keep"
    )]
    pub plugin_failure_policy: Vec<String>,

    /// Deadline of one plugin call, e.g. 100ms or 1s.
    #[arg(long, env = "NSC_PLUGIN_DEADLINE", default_value = "100ms", value_parser = humantime::parse_duration)]
    pub plugin_deadline: Duration,

    /// Memory limit of one plugin call, in MiB.
    #[arg(long, env = "NSC_PLUGIN_MEMORY_LIMIT_MIB", default_value_t = 64,
          value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub plugin_memory_limit_mib: u32,

    /// Log format.
    #[arg(long, env = "NSC_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Log filter (tracing EnvFilter syntax), e.g. info or nad_service_controller=debug.
    #[arg(long, env = "RUST_LOG", default_value = "info")]
    pub log_filter: String,
}

impl RunArgs {
    /// The default failure policy and the per-plugin ones.
    pub fn failure_policies(
        &self,
    ) -> anyhow::Result<(FailurePolicy, BTreeMap<String, FailurePolicy>)> {
        let parse = |s: &str| {
            s.trim()
                .parse::<FailurePolicy>()
                .map_err(|e| anyhow::anyhow!("--plugin-failure-policy: {e}"))
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
    use clap::{CommandFactory, Parser};

    /// The controller's flags alone, as `run` takes them.
    #[derive(Debug, Parser)]
    struct Flags {
        #[command(flatten)]
        run: RunArgs,
    }

    fn parse(args: &[&str]) -> Result<RunArgs, clap::Error> {
        Flags::try_parse_from(std::iter::once("nsc").chain(args.iter().copied())).map(|f| f.run)
    }

    #[test]
    fn flags_parse_and_have_safe_defaults() {
        Flags::command().debug_assert();
        let run = parse(&[]).unwrap();
        assert!(run.leader_election);
        assert_eq!(run.max_endpoints_per_slice, 100);
        assert_eq!(run.concurrent_syncs, 5);
        assert_eq!(run.plugin_deadline, Duration::from_millis(100));
        let run = parse(&[
            "--leader-election=false",
            "--max-endpoints-per-slice",
            "1000",
            "--plugin-deadline",
            "2s",
            "--log-format",
            "json",
        ])
        .unwrap();
        assert!(!run.leader_election);
        assert_eq!(run.max_endpoints_per_slice, 1000);
        assert_eq!(run.plugin_deadline, Duration::from_secs(2));
        assert_eq!(run.log_format, LogFormat::Json);
    }

    #[test]
    fn failure_policies_have_a_default_and_per_plugin_values() {
        assert_eq!(
            parse(&[]).unwrap().failure_policies().unwrap(),
            (FailurePolicy::Keep, BTreeMap::new())
        );
        let run = parse(&[
            "--plugin-failure-policy",
            "fallback,zones=keep",
            "--plugin-failure-policy",
            "opt-out=fallback",
        ])
        .unwrap();
        let (default, per_plugin) = run.failure_policies().unwrap();
        assert_eq!(default, FailurePolicy::Fallback);
        assert_eq!(per_plugin["zones"], FailurePolicy::Keep);
        assert_eq!(per_plugin["opt-out"], FailurePolicy::Fallback);
        let run = parse(&["--plugin-failure-policy", "x=maybe"]).unwrap();
        assert!(
            run.failure_policies()
                .unwrap_err()
                .to_string()
                .contains("\"maybe\"")
        );
    }

    #[test]
    fn plugins_come_from_a_directory_or_a_configmap() {
        let run = parse(&["--plugin-configmap", "plugins"]).unwrap();
        assert_eq!(run.plugin_configmap.as_deref(), Some("plugins"));
        let err = parse(&["--plugin-configmap", "p", "--plugin-dir", "/d"]).unwrap_err();
        assert!(err.to_string().contains("cannot be used with"), "{err}");
    }

    #[test]
    fn out_of_range_values_are_refused_with_the_limit() {
        let err = parse(&["--max-endpoints-per-slice", "1001"]).unwrap_err();
        assert!(err.to_string().contains("between 1 and 1000"), "{err}");
        assert!(parse(&["--max-endpoints-per-slice", "0"]).is_err());
        assert!(parse(&["--concurrent-syncs", "0"]).is_err());
        assert!(parse(&["--concurrent-syncs", "65"]).is_err());
    }
}
