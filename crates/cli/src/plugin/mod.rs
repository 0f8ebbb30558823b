//! `nad-service-controller plugin ...`: a plugin author's tools, run offline through the same
//! load pipeline, sandbox, observation and plan as the controller.

mod bench;
pub(crate) mod case;
pub(crate) mod eval;
mod files;
mod fixtures;
mod inspect;
mod push;
mod render;
pub(crate) mod sandbox;
mod scaffold;
pub(crate) mod source;
mod verify;

use std::{io::Write, path::PathBuf};

use anyhow::Context as _;
use clap::Subcommand;

pub use render::Output;
pub use source::PluginArg;

use bench::BenchArgs;
use fixtures::TestArgs;
use inspect::InspectArgs;
use push::PushArgs;
use sandbox::SandboxArgs;
use scaffold::{NewArgs, WIT, WIT_FILE};
use verify::VerifyArgs;

use nad_core::slices::DEFAULT_MAX_ENDPOINTS_PER_SLICE;
use nad_plugin_runtime::{PLUGIN_LOG_TARGET, WIT_PACKAGE};

#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Evaluate a plugin on a Service and its pods: the EndpointSlices the controller would
    /// apply, or each pod's decision.
    Eval(EvalArgs),
    /// Run fixture directories through a plugin and compare with their expected decisions
    /// and slices (golden files); --update rewrites them.
    Test(TestArgs),
    /// What a plugin file is: its WIT version, imports and exports, name, keys, and whether
    /// this host runs it (the whole load pipeline).
    Inspect(InspectArgs),
    /// Time a plugin's calls on generated pods: p50 and p99 of making the instance and of
    /// the call, per pod, and the guest's memory peak.
    Bench(BenchArgs),
    /// Print the WIT package this host speaks, or write it to a directory.
    Wit(WitArgs),
    /// Create a plugin project of its own (Rust or C) that builds and passes its `plugin
    /// test` on the first try: the default policy, the WIT vendored, a fixture case.
    New(NewArgs),
    /// Publish a plugin to an OCI registry (one application/wasm layer) once it passes the
    /// load pipeline, and print the oci://…@sha256:… reference a plugin source names.
    Push(PushArgs),
    /// Check an artifact's cosign signatures against a verification policy file, as the
    /// controller does before it loads a plugin.
    Verify(VerifyArgs),
}

impl PluginCommand {
    fn sandbox(&self) -> Option<&SandboxArgs> {
        match self {
            PluginCommand::Eval(a) => Some(&a.sandbox),
            PluginCommand::Test(a) => Some(&a.sandbox),
            PluginCommand::Inspect(a) => Some(&a.sandbox),
            PluginCommand::Bench(a) => Some(&a.sandbox),
            PluginCommand::Push(a) => Some(&a.sandbox),
            PluginCommand::Wit(_) | PluginCommand::New(_) | PluginCommand::Verify(_) => None,
        }
    }

    /// The log filter: warnings, and the plugin's own log lines from `info` (but for `test`;
    /// `-v`: from `debug`, `-vv`: everything). `RUST_LOG` overrides it.
    pub fn log_filter(&self) -> String {
        if let Ok(filter) = std::env::var("RUST_LOG") {
            return filter;
        }
        let plugin_log = PLUGIN_LOG_TARGET;
        match self.sandbox().map_or(0, |s| s.verbose) {
            // A test or bench run reports its results, not the plugin's lines.
            0 if matches!(self, PluginCommand::Test(_) | PluginCommand::Bench(_)) => {
                "warn".to_owned()
            }
            0 => format!("warn,{plugin_log}=info"),
            1 => format!("info,{plugin_log}=debug"),
            _ => "trace".to_owned(),
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct EvalArgs {
    /// The plugin component (`.wasm`), or `default` for the built-in plugin.
    #[arg(long, value_parser = PluginArg::parse)]
    pub plugin: PluginArg,
    /// Its configuration (JSON), as `<name>.json` beside it would be.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// YAML with the Service (other kinds in the file are ignored).
    #[arg(long)]
    pub service: PathBuf,
    /// YAML with the pods: Pod documents, or a List of them (`kubectl get pods -o yaml`).
    #[arg(long)]
    pub pods: PathBuf,
    /// YAML with the Nodes (for zones); without it, nodes are taken to exist, without zones.
    #[arg(long)]
    pub nodes: Option<PathBuf>,
    /// What to print on stdout.
    #[arg(short, long, value_enum, default_value_t = Output::Slices)]
    pub output: Output,
    /// Also print exactly what crossed the boundary (the Service record and each pod's), and
    /// the labels and annotations the pods carry that the plugin does not declare.
    #[arg(long)]
    pub show_inputs: bool,
    /// Most endpoints in one EndpointSlice, as the controller's flag of the same name.
    #[arg(long, default_value_t = DEFAULT_MAX_ENDPOINTS_PER_SLICE)]
    pub max_endpoints_per_slice: usize,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

#[derive(Debug, clap::Args)]
pub struct WitArgs {
    /// Write the package as `<DIR>/nad-endpoints.wit` (for a plugin's `wit/` directory)
    /// instead of printing it.
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
}

/// Runs a plugin subcommand, writing its output to `out` and its messages to `err`.
pub fn run(
    command: &PluginCommand,
    out: &mut impl Write,
    err: &mut impl Write,
) -> anyhow::Result<()> {
    match command {
        PluginCommand::Eval(args) => eval_command(args, out, err),
        PluginCommand::Test(args) => fixtures::test(args, out),
        PluginCommand::Inspect(args) => inspect::inspect(args, out),
        PluginCommand::Bench(args) => bench::bench(args, out),
        PluginCommand::Wit(args) => wit(args, out),
        PluginCommand::New(args) => scaffold::new(args, out),
        PluginCommand::Push(args) => push::push(args, out),
        PluginCommand::Verify(args) => verify::verify(args, out),
    }
}

/// `-v` shows what the short form of an error leaves out (a trap's wasm frames).
pub fn verbose(command: &PluginCommand) -> bool {
    command.sandbox().is_some_and(|s| s.verbose > 0)
}

fn wit(args: &WitArgs, out: &mut impl Write) -> anyhow::Result<()> {
    match &args.out_dir {
        None => render::emit(out, WIT),
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("{}: cannot create it", dir.display()))?;
            let path = dir.join(WIT_FILE);
            std::fs::write(&path, WIT)
                .with_context(|| format!("{}: cannot write it", path.display()))?;
            writeln!(out, "wrote {} ({WIT_PACKAGE})", path.display())?;
            Ok(())
        }
    }
}

fn eval_command(args: &EvalArgs, out: &mut impl Write, err: &mut impl Write) -> anyhow::Result<()> {
    let runtime = args.sandbox.runtime()?;
    let config = source::config(args.config.as_deref())?;
    let loaded = source::load(&runtime, &args.sandbox.registry, &args.plugin, &config)?;
    let case = files::case(&args.service, &args.pods, args.nodes.as_deref())?;
    let evaluation = eval::evaluate(&loaded, &case, args.max_endpoints_per_slice)?;
    let summary = evaluation.candidate_summary();
    match args.output {
        Output::Json => {
            let doc = render::json(&evaluation, &loaded, args.show_inputs);
            let text = serde_json::to_string_pretty(&doc).context("rendering JSON")?;
            render::emit(out, &format!("{text}\n"))?;
        }
        output => {
            if output == Output::Slices {
                render::emit(out, &render::slices(&evaluation)?)?;
                for row in &evaluation.rows {
                    match &row.verdict {
                        eval::Verdict::Exclude(reason) => {
                            writeln!(err, "excluded pod {}: {reason}", row.name)?;
                        }
                        eval::Verdict::Skipped(_, reason) => {
                            writeln!(err, "skipped pod {}: {reason}", row.name)?;
                        }
                        eval::Verdict::Include(_) => {}
                    }
                }
            } else {
                render::emit(out, &render::decisions(&evaluation))?;
            }
            if args.show_inputs {
                write!(err, "{}", render::inputs(&evaluation, &loaded))?;
            }
            for note in &evaluation.notes {
                writeln!(err, "{note}")?;
            }
            for warning in &evaluation.warnings {
                writeln!(err, "warning: {warning}")?;
            }
            if let Some(warning) = render::undeclared_warning(&evaluation) {
                if args.show_inputs {
                    writeln!(err, "warning: {warning}")?;
                } else {
                    let n = evaluation.undeclared.labels.len()
                        + evaluation.undeclared.annotations.len();
                    writeln!(
                        err,
                        "note: the pods carry {n} label or annotation {} the plugin does not \
                         declare (it never sees them); --show-inputs lists them",
                        if n == 1 { "key" } else { "keys" }
                    )?;
                }
            }
            if evaluation.candidates > 0 {
                writeln!(
                    err,
                    "{}: {summary}; {} included; {}",
                    loaded.name,
                    evaluation.included(),
                    render::timing(&evaluation)
                )?;
                if let Some(selection) = render::selection(&evaluation) {
                    writeln!(err, "{}: {selection}", loaded.name)?;
                }
                if output == Output::Slices && evaluation.slices.is_empty() {
                    writeln!(err, "no EndpointSlices: no pod is included")?;
                }
            }
        }
    }
    if evaluation.candidates == 0 {
        anyhow::bail!("{summary}; the plugin was not called");
    }
    Ok(())
}

/// What the one-line error leaves out: a trap's wasm frames with `-v`, else how to see them.
pub fn details(error: &anyhow::Error, verbose: bool) -> Option<String> {
    let frames = &error.downcast_ref::<source::Failed>()?.1.frames;
    if frames.is_empty() {
        None
    } else if verbose {
        Some(format!(
            "wasm backtrace (innermost first):\n{}",
            frames
                .iter()
                .enumerate()
                .map(|(i, f)| format!("  {i:>2}: {f}"))
                .collect::<Vec<_>>()
                .join("\n")
        ))
    } else {
        Some(format!("({} wasm frames: -v shows them)", frames.len()))
    }
}
