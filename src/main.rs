//! `tideway`: the one binary. Server, dev mode, client verbs and benchmarks.

mod agent_cmd;
mod bench;
mod bench_rss;
mod bench_scale;
mod broken_pipe;
mod cli;
mod config;
mod demo;
mod exit_code;
mod gang_check;
mod launcher;
mod log_sink;
mod output;
mod policy_replay;
mod schedule_out;
mod simulate_cmd;
mod token_cmd;
mod usage_out;

use clap::Parser;

fn main() -> anyhow::Result<()> {
    broken_pipe::exit_quietly_on_closed_pipe();
    let cli = cli::Cli::parse();
    let own = std::env::var("TIDEWAY_LOG").ok();
    let mut filter = tracing_subscriber::EnvFilter::try_from_env("TIDEWAY_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(cli.default_log_filter()));
    // openraft logs every failed heartbeat to a dead peer; the node logs those failures
    // itself, once per peer per interval (`raft::peer_report`). An operator whose filter
    // names these targets gets what it asks for.
    for quiet in tideway_federation::raft::peer_report::QUIET_OPENRAFT {
        let target = quiet.split('=').next().unwrap_or(quiet);
        let named = own.as_deref().is_some_and(|f| f.contains(target));
        if let (false, Ok(d)) = (named, quiet.parse()) {
            filter = filter.add_directive(d);
        }
    }
    // A service's lines go through a buffer one thread writes out (`log_sink`); a client
    // verb's few lines go straight to stderr, in order with what it prints there itself.
    let (sink, guard) = if cli.is_service() {
        let (sink, guard) = log_sink::LogSink::stderr()?;
        guard.install_panic_flush();
        (sink, Some(guard))
    } else {
        (log_sink::LogSink::direct(), None)
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(sink);
    match cli.log_format {
        cli::LogFormat::Json => builder.json().init(),
        // Colours are for people at a terminal; a file or a pipe gets plain text.
        cli::LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match rt.block_on(cli.run()) {
        Ok(()) => Ok(()),
        Err(e) if broken_pipe::is_closed_pipe(&e) => std::process::exit(0),
        Err(e) => {
            // `exit` runs no destructors: the lines that led here first.
            drop(guard);
            eprintln!("Error: {e:#}");
            std::process::exit(exit_code::of(&e));
        }
    }
}
