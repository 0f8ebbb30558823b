//! Structured logging to stderr (stdout stays free for command output such as
//! `plugin eval`'s YAML): human-readable text or one JSON object per line.

use std::io::IsTerminal;

use tracing_subscriber::{EnvFilter, fmt, prelude::*};

use crate::cli::LogFormat;

pub fn init(format: LogFormat, filter: &str) -> anyhow::Result<()> {
    let filter = EnvFilter::try_new(filter)
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
