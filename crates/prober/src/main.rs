//! `nad-network-prober`: the network prober's program, one per node (a DaemonSet).

use std::process::ExitCode;

use clap::Parser;
use nad_prober::ProbeArgs;

/// Errors are printed as their chain of causes on one line, for the operator.
fn main() -> ExitCode {
    nad_process::install_crypto_provider();
    let args = ProbeArgs::parse();
    if let Err(e) = nad_process::telemetry::init(args.log_format, &args.log_filter) {
        eprintln!("error: {e:#}");
        return ExitCode::FAILURE;
    }
    match nad_process::block_on(nad_prober::main(args, nad_process::shutdown_signal())) {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(e)) | Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
