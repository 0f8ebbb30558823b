use std::process::ExitCode;

use clap::Parser;
use nad_service_controller::{
    cli::{Cli, Command, plugin},
    run,
};

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
    match run(command) {
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
