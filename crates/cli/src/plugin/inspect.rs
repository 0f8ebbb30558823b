//! `plugin inspect`: what a plugin file is and whether this host runs it.

use std::{io::Write, path::PathBuf};

use anyhow::bail;

use super::{
    sandbox::SandboxArgs,
    source::{self, PluginArg},
};
use nad_model::decision::Decision;
use nad_plugin_runtime::{HOST_WIT_VERSION, Inspection, Plugin, WIT_PACKAGE};

#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// The plugin component (`.wasm`), or `default` for the built-in plugin.
    #[arg(value_parser = PluginArg::parse)]
    pub plugin: PluginArg,
    /// Its configuration (JSON), for the config and self-test steps.
    #[arg(long)]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

/// Prints what a plugin file is and whether this host runs it; fails when it does not.
pub fn inspect(args: &InspectArgs, out: &mut impl Write) -> anyhow::Result<()> {
    let runtime = args.sandbox.runtime()?;
    let name = args.plugin.name();
    let bytes = args.plugin.bytes(&args.sandbox.registry)?;
    let config = source::config(args.config.as_deref())?;
    let report = nad_plugin_runtime::inspect(&runtime, &name, &bytes, &config);
    write_file(args, &report, out)?;
    let configured = match report.result {
        Ok(configured) => configured,
        Err(e) => {
            writeln!(out, "runs here:       no ({} step failed)", e.step.as_str())?;
            return Err(anyhow::Error::new(source::Failed(
                args.plugin.to_string(),
                e,
            )));
        }
    };
    let info = configured.plugin.info();
    write_plugin(&configured.plugin, out)?;
    match &args.config {
        Some(path) => writeln!(out, "config:          accepted ({})", path.display())?,
        None => writeln!(out, "config:          accepted (none: the empty document)")?,
    }
    writeln!(
        out,
        "self-test:       {}",
        self_test(&configured.plugin, &config)?
    )?;
    writeln!(out, "runs here:       yes")?;
    if let Some(warning) = nad_plugin_runtime::name_mismatch(&name, info) {
        writeln!(out, "warning:         {warning}")?;
    }
    Ok(())
}

/// What the file holds, whether or not it runs: its size and hash, the WIT it targets
/// against what this host runs, and its imports and exports.
fn write_file(args: &InspectArgs, report: &Inspection, out: &mut impl Write) -> anyhow::Result<()> {
    writeln!(out, "file:            {}", args.plugin)?;
    writeln!(out, "size:            {} bytes", report.size)?;
    writeln!(out, "sha256:          {}", report.hash)?;
    match report.wit_version {
        Some((major, minor, patch)) => writeln!(
            out,
            "targets:         {WIT_PACKAGE}@{major}.{minor}.{patch}"
        )?,
        None => writeln!(out, "targets:         (no {WIT_PACKAGE} policy export)")?,
    }
    writeln!(
        out,
        "host runs:       {WIT_PACKAGE}@{}.0 to {}.{}",
        HOST_WIT_VERSION.0, HOST_WIT_VERSION.0, HOST_WIT_VERSION.1
    )?;
    for (title, names) in [("imports:", &report.imports), ("exports:", &report.exports)] {
        if names.is_empty() {
            writeln!(out, "{title:<17}(none)")?;
        } else {
            writeln!(out, "{title}")?;
        }
        for name in names {
            writeln!(out, "  {name}")?;
        }
    }
    Ok(())
}

/// What the plugin says of itself: its name, version and keys, how it decides, and the
/// conditions it reads.
fn write_plugin(plugin: &Plugin, out: &mut impl Write) -> anyhow::Result<()> {
    let info = plugin.info();
    writeln!(out, "name:            {}", info.name)?;
    writeln!(out, "version:         {}", info.version)?;
    writeln!(out, "label keys:      {}", keys(&info.label_keys))?;
    writeln!(out, "annotation keys: {}", keys(&info.annotation_keys))?;
    writeln!(out, "decisions:       {}", plugin.decision_scope().as_str())?;
    writeln!(out, "conditions:      {}", conditions(plugin))?;
    writeln!(out, "devices:         {}", devices(plugin))?;
    writeln!(out, "candidates:      {}", candidates(plugin))?;
    Ok(())
}

/// Which candidates the plugin is asked about.
fn candidates(plugin: &Plugin) -> &'static str {
    if plugin.selects() {
        "those with the labels it names per Service (it exports candidate-labels)"
    } else {
        "every one (it does not export candidate-labels)"
    }
}

/// Whether the plugin reads its pods' DRA devices.
fn devices(plugin: &Plugin) -> &'static str {
    if plugin.reads_devices() {
        "yes (it imports network-devices)"
    } else {
        "no (it does not import network-devices)"
    }
}

/// The keys, comma-separated, or `(none)`.
fn keys(keys: &[String]) -> String {
    if keys.is_empty() {
        "(none)".to_owned()
    } else {
        keys.join(", ")
    }
}

/// The pod conditions the plugin reads: none, or network readiness and the types it asks for.
fn conditions(plugin: &Plugin) -> String {
    if !plugin.reads_conditions() {
        "none (it does not import pod-conditions)".to_owned()
    } else if plugin.condition_types().is_empty() {
        "network readiness".to_owned()
    } else {
        format!("network readiness, {}", plugin.condition_types().join(", "))
    }
}

/// The self-test's decision for each made-up pod, or the plugin's refusal of the made-up
/// Service; fails when the call fails.
fn self_test(plugin: &Plugin, config: &str) -> anyhow::Result<String> {
    Ok(match nad_plugin_runtime::self_test(plugin, config) {
        Ok(Ok(decisions)) => decisions
            .iter()
            .zip(["a (ready, IPv4)", "b (not ready, IPv6)"])
            .map(|(decision, pod)| match decision {
                Decision::Include(c) => format!(
                    "{pod}: include ready={} serving={} terminating={}",
                    c.ready, c.serving, c.terminating
                ),
                Decision::Exclude(reason) => format!("{pod}: exclude {reason}"),
            })
            .collect::<Vec<_>>()
            .join("; "),
        Ok(Err(rejected)) => format!("rejected the made-up Service: {}", rejected.message),
        Err(e) => bail!("the self-test passed once, then failed: {e}"),
    })
}
