use clap::Parser;
use nad_service_controller::{cli::Cli, run, telemetry};

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    telemetry::init(cli.run.log_format, &cli.run.log_filter)?;
    run(cli)
}
