//! The flags every command that runs a plugin shares: its sandbox's limits, verbosity and
//! registry access.

use std::time::Duration;

use anyhow::Context as _;
use nad_plugin_runtime::{Limits, Runtime};

/// The sandbox a plugin runs in, as the controller's flags of the same names set it.
#[derive(Debug, Clone, clap::Args)]
pub struct SandboxArgs {
    /// Deadline of one plugin call (instantiation included), e.g. 100ms or 1s.
    #[arg(long, default_value = "100ms", value_parser = humantime::parse_duration)]
    pub plugin_deadline: Duration,
    /// Memory limit of one plugin call, in MiB.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub plugin_memory_limit_mib: u32,
    /// Show more: the plugin's debug log lines and every wasm frame of a trap (-vv: all logs).
    #[arg(short, long, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// For `--plugin oci://…`.
    #[command(flatten)]
    pub registry: nad_plugin_fetcher::RegistryArgs,
}

impl SandboxArgs {
    pub fn runtime(&self) -> anyhow::Result<Runtime> {
        Runtime::new(Limits {
            deadline: self.plugin_deadline,
            memory_bytes: self.plugin_memory_limit_mib as usize * 1024 * 1024,
        })
        .context("starting the plugin runtime")
    }
}
