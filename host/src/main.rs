//! `nad-service-controller`: the controller (`run`, the default) and, for people, the plugin
//! author's kit (`plugin ...`) and `explain`, from the `nad-cli` crate. The controller's
//! library never imports that crate: this dispatch is the one place both meet.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use nad_cli::{ExplainArgs, plugin};
use nad_process::telemetry::LogFormat;
use nad_service_controller::args::RunArgs;

/// The controller's flags may come first (`nad-service-controller --log-format=json`) or
/// after `run`; each subcommand takes only its own.
#[derive(Debug, Parser)]
#[command(
    name = "nad-service-controller",
    version,
    about = "Publishes EndpointSlices with the Multus secondary-network IPs of pods, for Services \
             annotated isim.dev/network: <network>; which pods count is decided by a WebAssembly \
             policy plugin.",
    long_about = None,
    args_conflicts_with_subcommands = true,
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,

    #[command(flatten)]
    run: RunArgs,
}

impl Cli {
    /// What to do: the subcommand, or `run` with the flags given without one.
    fn into_command(self) -> Command {
        self.command
            .unwrap_or_else(|| Command::Run(Box::new(self.run)))
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the controller (the default).
    Run(Box<RunArgs>),
    /// Work with plugins offline: evaluate, test, inspect, scaffold and benchmark them,
    /// through the same pipeline, sandbox and plan as the controller.
    #[command(subcommand)]
    Plugin(Box<plugin::PluginCommand>),
    /// Explain a Service on the live cluster (read-only, through the current kubeconfig): for
    /// every pod of its namespace, whether it is a candidate, the plugin's decision and
    /// reason, the conditions and the EndpointSlice that publishes it.
    Explain(Box<ExplainArgs>),
}

impl Command {
    /// The log format and filter: the controller's flags, or text for the plugin commands
    /// (their output is for a person; `-v` shows more).
    fn logging(&self) -> (LogFormat, String) {
        match self {
            Command::Run(args) => (args.log_format, args.log_filter.clone()),
            Command::Plugin(command) => (LogFormat::Text, command.log_filter()),
            Command::Explain(_) => (LogFormat::Text, "warn".to_owned()),
        }
    }

    /// Runs it. The plugin commands run without an async runtime: a plugin's (blocking) WASI
    /// calls must not run on an async runtime's threads.
    fn run(self) -> anyhow::Result<()> {
        match self {
            Command::Run(args) => nad_process::block_on(nad_service_controller::run(*args))?,
            Command::Plugin(command) => {
                plugin::run(&command, &mut std::io::stdout(), &mut std::io::stderr())
            }
            Command::Explain(args) => nad_cli::explain(&args, &mut std::io::stdout()),
        }
    }
}

/// Errors are printed as their chain of causes on one line, never with a stack trace (even
/// with `RUST_BACKTRACE` set): they are meant for the operator, not a debugger.
fn main() -> ExitCode {
    // Before any TLS client: kube's, the registries'.
    nad_process::install_crypto_provider();
    let command = Cli::parse().into_command();
    let (format, filter) = command.logging();
    if let Err(e) = nad_process::telemetry::init(format, &filter) {
        eprintln!("error: {e:#}");
        return ExitCode::FAILURE;
    }
    let verbose = matches!(&command, Command::Plugin(p) if plugin::verbose(p));
    match command.run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            if let Some(details) = plugin::details(&e, verbose) {
                eprintln!("{details}");
            }
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use plugin::{Output, PluginArg, PluginCommand};

    #[test]
    fn without_a_subcommand_the_flags_are_the_controllers() {
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from(["nsc"]).unwrap();
        assert!(cli.command.is_none());
        assert!(matches!(cli.into_command(), Command::Run(run) if run.leader_election));
        let cli = Cli::try_parse_from(["nsc", "--log-format", "json"]).unwrap();
        assert!(
            matches!(cli.into_command(), Command::Run(run) if run.log_format == LogFormat::Json)
        );
        let cli = Cli::try_parse_from(["nsc", "run", "--leader-election=false"]).unwrap();
        assert!(matches!(cli.into_command(), Command::Run(run) if !run.leader_election));
    }

    #[test]
    fn plugin_subcommands_parse_and_take_only_their_own_flags() {
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
            "-o",
            "decisions",
        ])
        .unwrap();
        let Some(Command::Plugin(command)) = cli.command else {
            panic!("expected plugin eval");
        };
        let PluginCommand::Eval(eval) = *command else {
            panic!("expected plugin eval");
        };
        assert_eq!(eval.plugin, PluginArg::File("p.wasm".into()));
        assert_eq!(eval.output, Output::Decisions);
        assert!(eval.nodes.is_none());
        let cli = Cli::try_parse_from(["nsc", "plugin", "inspect", "default"]).unwrap();
        assert!(matches!(
            cli.command,
            Some(Command::Plugin(ref c)) if matches!(**c, PluginCommand::Inspect(ref i) if i.plugin == PluginArg::BuiltIn)
        ));
        // The controller's flags are not the plugin commands'.
        let err = Cli::try_parse_from([
            "nsc",
            "plugin",
            "inspect",
            "p.wasm",
            "--leader-election=false",
        ])
        .unwrap_err();
        assert!(err.to_string().contains("--leader-election"), "{err}");
        let help = Cli::command()
            .find_subcommand_mut("plugin")
            .unwrap()
            .find_subcommand_mut("eval")
            .unwrap()
            .render_long_help()
            .to_string();
        assert!(help.contains("--show-inputs"), "{help}");
        for controller_flag in ["--metrics-address", "--leader-election", "--plugin-dir"] {
            assert!(
                !help.contains(controller_flag),
                "{controller_flag} in {help}"
            );
        }
    }
}
