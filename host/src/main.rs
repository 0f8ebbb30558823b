use std::process::ExitCode;

use clap::Parser;
use nad_service_controller::{cli::Cli, run, telemetry};

/// Errors are printed as their chain of causes on one line, never with a stack trace (even
/// with `RUST_BACKTRACE` set): they are meant for the operator, not a debugger.
fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(e) = telemetry::init(cli.run.log_format, &cli.run.log_filter) {
        eprintln!("error: {e:#}");
        return ExitCode::FAILURE;
    }
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
