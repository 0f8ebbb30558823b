//! `plugin inspect`: what a plugin file is and whether this host runs it.

use std::io::Write;

use anyhow::bail;

use super::{InspectArgs, source};
use crate::{
    plugin::{self, HOST_WIT_VERSION, WIT_PACKAGE},
    reconcile::plan::Decision,
};

/// Prints what a plugin file is and whether this host runs it; fails when it does not.
pub fn inspect(args: &InspectArgs, out: &mut impl Write) -> anyhow::Result<()> {
    let runtime = args.sandbox.runtime()?;
    let name = args.plugin.name();
    let bytes = args.plugin.bytes(&args.sandbox.registry)?;
    let config = source::config(args.config.as_deref())?;
    let report = plugin::inspect(&runtime, &name, &bytes, &config);
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
    let keys = |k: &[String]| {
        if k.is_empty() {
            "(none)".to_owned()
        } else {
            k.join(", ")
        }
    };
    writeln!(out, "name:            {}", info.name)?;
    writeln!(out, "version:         {}", info.version)?;
    writeln!(out, "label keys:      {}", keys(&info.label_keys))?;
    writeln!(out, "annotation keys: {}", keys(&info.annotation_keys))?;
    writeln!(
        out,
        "decisions:       {}",
        configured.plugin.decision_scope().as_str()
    )?;
    let plugin = &configured.plugin;
    let conditions = if !plugin.reads_conditions() {
        "none (it does not import pod-conditions)".to_owned()
    } else if plugin.condition_types().is_empty() {
        "network readiness".to_owned()
    } else {
        format!("network readiness, {}", plugin.condition_types().join(", "))
    };
    writeln!(out, "conditions:      {conditions}")?;
    match &args.config {
        Some(path) => writeln!(out, "config:          accepted ({})", path.display())?,
        None => writeln!(out, "config:          accepted (none: the empty document)")?,
    }
    let self_test = match plugin::self_test(&configured.plugin, &config) {
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
    };
    writeln!(out, "self-test:       {self_test}")?;
    writeln!(out, "runs here:       yes")?;
    if let Some(warning) = plugin::name_mismatch(&name, info) {
        writeln!(out, "warning:         {warning}")?;
    }
    Ok(())
}
