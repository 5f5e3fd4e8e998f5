//! `tideway simulate`: replay traces against a fleet and a policy on a virtual clock.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use tideway_simulate::{self as simulate, Options, output, progress::ProgressBar};

#[derive(Args, Debug)]
pub struct SimulateArgs {
    /// The fleet: member clusters and their layouts (YAML).
    #[arg(long)]
    pub clusters: PathBuf,
    /// A Policy bundle with a `simulator` section (YAML).
    #[arg(long)]
    pub policy: PathBuf,
    /// KIND:PATH[?filters], e.g. philly:philly.csv?vc=6214e9&from=2017-10-09. Repeatable;
    /// kinds: philly, alibaba-dlrm, jsonl.
    #[arg(long = "trace", required = true)]
    pub traces: Vec<String>,
    /// Only work submitted at or after this time (YYYY-MM-DD[ HH:MM:SS] or RFC 3339, UTC).
    #[arg(long)]
    pub from: Option<String>,
    /// Only work submitted before this time.
    #[arg(long)]
    pub to: Option<String>,
    /// Seeds the scheduler's tie-breaks; the same seed gives the same result.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Directory for summary.json, timeseries.csv, jobs.csv and the SVG plots.
    #[arg(long)]
    pub out: PathBuf,
    /// No progress bar, even on a terminal.
    #[arg(long)]
    pub quiet: bool,
}

pub async fn run(a: SimulateArgs) -> anyhow::Result<()> {
    // CPU-bound and synchronous: keep it off the runtime's workers.
    tokio::task::spawn_blocking(move || run_blocking(a)).await?
}

fn run_blocking(a: SimulateArgs) -> anyhow::Result<()> {
    let opts = Options {
        clusters: a.clusters,
        policy: a.policy,
        traces: a.traces,
        from: a.from,
        to: a.to,
        seed: a.seed,
    };
    let input = simulate::load(&opts)?;
    let mut bar = if a.quiet {
        ProgressBar::disabled()
    } else {
        ProgressBar::stderr()
    };
    let out = simulate::run(input, &mut |p| bar.update(p));
    bar.finish();
    output::write_all(&out, &a.out)
        .with_context(|| format!("writing results to {}", a.out.display()))?;

    let s = &out.summary;
    let o = &s.overall;
    println!(
        "simulated {} .. {} ({} mode, policy {}, {} clusters, {} GPUs)",
        s.start,
        s.end,
        s.mode,
        s.policy,
        s.clusters.len(),
        s.fleet_gpus
    );
    println!(
        "workloads: {} submitted, {} succeeded, {} removed, {} unfinished, {} rejected; {} bad trace rows",
        o.jobs.submitted,
        o.jobs.succeeded,
        o.jobs.removed,
        o.jobs.unfinished,
        o.jobs.rejected,
        s.bad_rows
    );
    println!(
        "JCT mean {:.0} s (p50 {:.0}, p95 {:.0}, p99 {:.0}); queueing mean {:.0} s (p50 {:.0}, p95 {:.0}, p99 {:.0})",
        o.jct.mean,
        o.jct.p50,
        o.jct.p95,
        o.jct.p99,
        o.queueing_delay.mean,
        o.queueing_delay.p50,
        o.queueing_delay.p95,
        o.queueing_delay.p99
    );
    println!(
        "utilization {:.1}% ({:.1}% while submitting); {} preemptions, {:.1} GPU-hours lost",
        s.utilization * 100.0,
        s.utilization_while_submitting * 100.0,
        o.preemptions,
        o.work_lost_gpu_hours
    );
    println!(
        "{} events in {:.2} s wall ({:.0} events/s), {} scheduler cycles ({:.2} s)",
        s.run.events,
        s.run.wall_seconds,
        s.run.events_per_second,
        s.run.scheduler_cycles,
        s.run.scheduler_wall_seconds
    );
    if let Some(t) = &s.tidal {
        println!(
            "tidal: inference not granted within {} s grace {:.1} GPU-hours ({} workloads); training work lost {:.1} GPU-hours",
            t.grace_seconds,
            t.unserved_inference_gpu_hours,
            t.inference_waits_beyond_grace,
            t.training_work_lost_gpu_hours
        );
        for sc in &t.schedules {
            for (window, w) in &sc.windows {
                println!(
                    "  {} {window}: {:.0} h, inference {:.0} / training {:.0} of {:.0} GPU-hours; training used {:.1}% of what inference left open; utilization {:.1}%",
                    sc.schedule,
                    w.hours,
                    w.inference_gpu_hours,
                    w.training_gpu_hours,
                    w.capacity_gpu_hours,
                    w.training_share_of_open.unwrap_or(0.0) * 100.0,
                    w.utilization.unwrap_or(0.0) * 100.0
                );
            }
        }
    }
    if let Some(e) = &s.estimates {
        println!(
            "run-time estimates: {}; {} completed jobs estimated ({} under, {} over, median estimate/actual {:.2}), {} without; {:.1} GPU-hours held idle by reservations",
            e.source,
            e.estimated,
            e.under,
            e.over,
            e.median_ratio,
            e.defaulted,
            e.reserved_idle_gpu_hours
        );
    }
    for n in &s.notes {
        println!("note: {n}");
    }
    for w in &s.warnings {
        eprintln!("warning: {w}");
    }
    println!("wrote {} in {}", output::FILES.join(", "), a.out.display());
    if o.jobs.submitted > 0 && o.jobs.rejected == o.jobs.submitted {
        // Nothing was simulated: a wrong queue map or fleet, not a result to compare.
        let reasons: Vec<String> = s
            .rejected_by_reason
            .iter()
            .map(|(why, n)| format!("{n} {why}"))
            .collect();
        anyhow::bail!(
            "every workload was rejected ({}); see rejectedByReason in {}",
            reasons.join(", "),
            a.out.join("summary.json").display()
        );
    }
    Ok(())
}
