//! Structured logging to stderr (stdout stays free for command output such as
//! `plugin eval`'s YAML): human-readable text or one JSON object per line.

use std::io::IsTerminal;

use tracing_subscriber::{EnvFilter, fmt, prelude::*};

/// How log lines are written: text for a terminal, JSON for a log pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// The Kubernetes client logs every failed request at ERROR, under this target; the controller
/// logs each failure once, in its own terms, so these lines are off unless the filter names
/// `kube_client`.
const CLIENT_REQUEST_LOG: &str = "kube_client::client::builder";

/// The filter in effect for `--log-filter` `filter`.
pub fn directives(filter: &str) -> String {
    if filter.contains("kube_client") {
        filter.to_owned()
    } else {
        format!("{filter},{CLIENT_REQUEST_LOG}=off")
    }
}

pub fn init(format: LogFormat, filter: &str) -> anyhow::Result<()> {
    let filter = EnvFilter::try_new(directives(filter))
        .map_err(|e| anyhow::anyhow!("invalid --log-filter {filter:?}: {e}"))?;
    let registry = tracing_subscriber::registry().with(filter);
    match format {
        LogFormat::Text => registry
            .with(
                fmt::layer()
                    .with_writer(std::io::stderr)
                    // Colours only for a person at a terminal, not in files and log collectors.
                    .with_ansi(std::io::stderr().is_terminal()),
            )
            .try_init()?,
        LogFormat::Json => registry
            .with(
                fmt::layer()
                    .with_writer(std::io::stderr)
                    .json()
                    .flatten_event(true)
                    .with_current_span(true)
                    .with_span_list(false),
            )
            .try_init()?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clients_per_request_errors_are_off_unless_asked_for() {
        assert_eq!(directives("info"), "info,kube_client::client::builder=off");
        assert_eq!(
            directives("info,kube_client=debug"),
            "info,kube_client=debug"
        );
        assert!(EnvFilter::try_new(directives("nad_service_controller=debug")).is_ok());
    }
}
