//! `tideway`: the one binary. Server, dev mode, client verbs and benchmarks.

mod agent_cmd;
mod bench;
mod cli;
mod config;
mod demo;
mod launcher;
mod output;
mod simulate_cmd;

use clap::Parser;

fn main() -> anyhow::Result<()> {
    let cli = cli::Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_env("TIDEWAY_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(cli.default_log_filter()));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(cli.run())
}
