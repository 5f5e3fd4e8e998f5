//! `tideway bench submit`: acknowledged submissions per second on a real three-node loopback
//! cluster, latency percentiles, and the distribution of the time from kill -9 of the leader to
//! the next ack over any number of kills.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tideway_api::clock::{Clock, RealClock};

use crate::launcher::Launcher;
use clap::Subcommand;
use tokio::sync::Mutex;

/// How long a killed and restarted node may take to keep pace with the leader again before
/// the failover bench gives up.
const IN_STEP_TIMEOUT: Duration = Duration::from_secs(180);

#[derive(Subcommand, Debug)]
pub enum BenchCmd {
    /// Submission throughput and failover time on a three-node loopback cluster.
    Submit(SubmitArgs),
    /// The leader's resident memory over a long run: N small workloads submitted to
    /// `tideway dev` and run to the end, then compacted out (Linux: reads /proc).
    Rss {
        /// Workloads to submit (each one runs to Finished).
        #[arg(long, default_value_t = 200_000)]
        workloads: u64,
        /// Concurrent submitting clients.
        #[arg(long, default_value_t = 32)]
        clients: usize,
        /// dev's clock speed: each workload runs 60 simulated seconds. Keep it modest: a
        /// real second of CPU starvation is `time_scale` seconds of fleet time, and beyond a
        /// few heartbeat intervals the members are declared lost.
        #[arg(long, default_value_t = 60.0)]
        time_scale: f64,
        /// Simulated seconds finished workloads stay readable before compaction.
        #[arg(long, default_value_t = 60)]
        retain_terminal: u64,
        /// Pause submitting while the live state holds more workloads than this.
        #[arg(long, default_value_t = 3000)]
        max_live: u64,
        /// dev's member heartbeat interval (milliseconds): fast, so a status report follows a
        /// finish quickly and the fleet turns over.
        #[arg(long, default_value_t = 200)]
        member_heartbeat_ms: u64,
        /// Print the RSS every this many acknowledged submissions.
        #[arg(long, default_value_t = 20_000)]
        every: u64,
        /// Seconds to wait, after the last submission, for the live state to empty.
        #[arg(long, default_value_t = 900)]
        settle_timeout: u64,
    },
    /// A three-node federation holding `--pending` workloads, built through the API: what the
    /// backlog costs in submission and list latency, status, cycle, memory, snapshot, restart.
    Scale {
        /// Pending workloads to build up.
        #[arg(long, default_value_t = 100_000)]
        pending: u64,
        /// Concurrent clients while filling.
        #[arg(long, default_value_t = 64)]
        clients: usize,
        /// Submissions timed on the empty and on the loaded cluster.
        #[arg(long, default_value_t = 2000)]
        probe: u64,
        /// Member clusters to register (agent loops on simulated clusters, in this process).
        #[arg(long, default_value_t = 100)]
        members: usize,
    },
}

/// `tideway bench submit`'s flags.
#[derive(clap::Args, Debug)]
pub struct SubmitArgs {
    /// Concurrent clients (each keeps one request in flight).
    #[arg(long, default_value_t = 64)]
    clients: usize,
    /// Seconds of steady load.
    #[arg(long, default_value_t = 15)]
    duration: u64,
    /// Federation nodes to start.
    #[arg(long, default_value_t = 3)]
    nodes: u64,
    /// Drive these existing nodes (comma-separated) instead of starting a cluster.
    #[arg(long)]
    targets: Option<String>,
    /// Skip the kill -9 failover measurement.
    #[arg(long)]
    no_failover: bool,
    /// Leader kills in the failover measurement (each killed leader is restarted and
    /// keeps pace with the leader again before the next kill), for a distribution rather
    /// than one sample.
    #[arg(long, default_value_t = 1)]
    kills: usize,
    /// Keep the clients submitting while a killed node restarts and catches up. By
    /// default they pause then and resume a second before the next kill, so the state the
    /// bench piles up (nothing it submits ever runs) stays bounded over many kills.
    #[arg(long)]
    catch_up_under_load: bool,
}

pub async fn run(cmd: BenchCmd) -> anyhow::Result<()> {
    match cmd {
        BenchCmd::Submit(args) => submit(args).await,
        BenchCmd::Rss {
            workloads,
            clients,
            time_scale,
            retain_terminal,
            max_live,
            member_heartbeat_ms,
            every,
            settle_timeout,
        } => {
            crate::bench_rss::run(crate::bench_rss::RssRun {
                workloads,
                clients,
                time_scale,
                retain_terminal,
                max_live,
                member_heartbeat_ms,
                every,
                settle_timeout: Duration::from_secs(settle_timeout),
            })
            .await
        }
        BenchCmd::Scale {
            pending,
            clients,
            probe,
            members,
        } => {
            crate::bench_scale::run(crate::bench_scale::ScaleArgs {
                pending,
                clients,
                probe,
                members,
            })
            .await
        }
    }
}

pub fn workload_body(name: &str) -> String {
    format!(
        r#"{{"apiVersion":"tideway.dev/v1alpha1","kind":"Workload","metadata":{{"name":"{name}"}},"spec":{{"queue":"default","class":"training","priorityClass":"normal","podSets":[{{"name":"worker","count":1,"gpusPerPod":8,"flavor":"H100"}}],"gang":{{"minCount":1}},"topology":{{"required":"rack"}},"runtimeEstimateSeconds":7200,"checkpoint":{{"intervalSeconds":600}}}}}}"#
    )
}

/// The kill being measured: when it happened, and how long after it the first request sent
/// after it was acknowledged.
#[derive(Default)]
struct KillWindow {
    inner: Mutex<Option<(Instant, Option<Duration>)>>,
}

impl KillWindow {
    async fn open(&self, at: Instant) {
        *self.inner.lock().await = Some((at, None));
    }

    async fn acked(&self, sent: Instant) {
        let mut g = self.inner.lock().await;
        if let Some((at, first)) = g.as_mut()
            && sent >= *at
        {
            let d = RealClock.instant() - *at;
            if first.is_none_or(|cur| d < cur) {
                *first = Some(d);
            }
        }
    }

    async fn first(&self) -> Option<Duration> {
        self.inner.lock().await.and_then(|(_, f)| f)
    }
}

/// What the bench tells its clients: stop for good, or hold off for now (while a killed node
/// catches up).
#[derive(Default)]
struct Flow {
    stop: AtomicBool,
    paused: AtomicBool,
}

#[derive(Default)]
struct Tally {
    latencies_us: Mutex<Vec<u32>>,
    acked: AtomicU64,
    errors: AtomicU64,
}

/// One client: submits unique workloads back to back, moving to the next node on errors.
async fn client_loop(
    http: reqwest::Client,
    targets: Arc<Vec<String>>,
    mut at: usize,
    tag: String,
    flow: Arc<Flow>,
    tally: Arc<Tally>,
    window: Option<Arc<KillWindow>>,
) {
    let mut n = 0u64;
    let mut local = Vec::with_capacity(4096);
    let mut failed_in_a_row = 0usize;
    while !flow.stop.load(Ordering::Relaxed) {
        if flow.paused.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        }
        n += 1;
        let name = format!("bench-{tag}-{n}");
        let sent = RealClock.instant();
        let res = http
            .post(format!(
                "http://{}/v1/workloads",
                targets[at % targets.len()]
            ))
            .header("content-type", "application/json")
            .header("idempotency-key", &name)
            .body(workload_body(&name))
            .timeout(Duration::from_secs(15))
            .send()
            .await;
        match res {
            Ok(r) if r.status().as_u16() == 201 || r.status().as_u16() == 200 => {
                failed_in_a_row = 0;
                let took = sent.elapsed();
                local.push(took.as_micros().min(u32::MAX as u128) as u32);
                tally.acked.fetch_add(1, Ordering::Relaxed);
                // Only a creation proves a commit by the new leader: a replay of a key whose
                // first attempt committed before the kill is answered from a follower's state.
                if let Some(w) = &window
                    && r.status().as_u16() == 201
                {
                    w.acked(sent).await;
                }
            }
            _ => {
                tally.errors.fetch_add(1, Ordering::Relaxed);
                at += 1;
                n -= 1; // retry the same name and key elsewhere: it must not be lost.
                // A dead node refuses at once and any live one forwards to the leader, so the
                // next node is tried immediately; only a whole round of failures (no node
                // answering at all) pauses, so that a cluster that is down is not spun on.
                failed_in_a_row += 1;
                if failed_in_a_row.is_multiple_of(targets.len().max(1)) {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        }
    }
    tally.latencies_us.lock().await.extend(local);
}

fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

async fn load(
    targets: Arc<Vec<String>>,
    clients: usize,
    dur: Duration,
    round: &str,
) -> anyhow::Result<(u64, u64, Vec<u32>, Duration)> {
    let flow = Arc::new(Flow::default());
    let run = load_until(targets, clients, round, None, flow.clone());
    let timer = async {
        tokio::time::sleep(dur).await;
        flow.stop.store(true, Ordering::Relaxed);
    };
    let (out, ()) = tokio::join!(run, timer);
    out
}

/// Keeps `clients` requests in flight until `flow` says stop (none while it says pause).
async fn load_until(
    targets: Arc<Vec<String>>,
    clients: usize,
    round: &str,
    window: Option<Arc<KillWindow>>,
    flow: Arc<Flow>,
) -> anyhow::Result<(u64, u64, Vec<u32>, Duration)> {
    let http = tideway_api::http::client_builder()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(clients)
        .build()?;
    let tally = Arc::new(Tally::default());
    let start = RealClock.instant();
    let mut tasks = Vec::new();
    for c in 0..clients {
        tasks.push(tokio::spawn(client_loop(
            http.clone(),
            targets.clone(),
            c,
            format!("{round}-{c}-{}", std::process::id()),
            flow.clone(),
            tally.clone(),
            window.clone(),
        )));
    }
    for t in tasks {
        let _ = t.await;
    }
    let elapsed = start.elapsed();
    let mut lat = std::mem::take(&mut *tally.latencies_us.lock().await);
    lat.sort_unstable();
    Ok((
        tally.acked.load(Ordering::Relaxed),
        tally.errors.load(Ordering::Relaxed),
        lat,
        elapsed,
    ))
}

/// Kills the leader `kills` times under load and prints the distribution of the time from the
/// kill to the first acknowledgement of a submission sent after it. Each killed node is
/// restarted and keeps pace with the leader again before the next kill, so every kill leaves
/// a quorum of two nodes in step.
///
/// Nothing the clients submit ever runs (there are no members), so the state only grows. With
/// the load kept up through each restart and catch-up, 50 kills at 5,000 submissions/s pile
/// up about three million workloads, and the restarted node's snapshot load, replay and
/// catch-up grow with them until one takes minutes: the bench then measures the state it
/// built, not the failover. So by default the clients pause from the kill's first ack until
/// the restarted node is in step, and submit for a steady second before the next kill.
async fn failover(
    c: &mut Launcher,
    targets: Arc<Vec<String>>,
    clients: usize,
    kills: usize,
    catch_up_under_load: bool,
) -> anyhow::Result<()> {
    let window = Arc::new(KillWindow::default());
    let flow = Arc::new(Flow::default());
    let bg = tokio::spawn({
        let (window, flow) = (window.clone(), flow.clone());
        async move { load_until(targets, clients, "failover", Some(window), flow).await }
    });
    let steady = if catch_up_under_load {
        Duration::from_millis(300)
    } else {
        Duration::from_secs(1)
    };
    let mut samples = Vec::with_capacity(kills);
    let mut missed = 0usize;
    let outcome: anyhow::Result<()> = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        for k in 0..kills {
            // Steady load on the current leader before the kill; the leader is looked up last,
            // so that a kill is never of a node that just lost leadership.
            c.wait_for_leader(Duration::from_secs(15)).await?;
            flow.paused.store(false, Ordering::Relaxed);
            tokio::time::sleep(steady).await;
            let leader = c.wait_for_leader(Duration::from_secs(15)).await?;
            let at = RealClock.instant();
            window.open(at).await;
            c.kill9(leader)?;
            let give_up = at + Duration::from_secs(10);
            let first = loop {
                if let Some(d) = window.first().await {
                    break Some(d);
                }
                if RealClock.instant() > give_up {
                    break None;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            };
            match first {
                Some(d) => samples.push(d),
                None => missed += 1,
            }
            eprintln!(
                "kill {}/{kills}: leader {leader} -> first ack {}",
                k + 1,
                first.map_or("none within 10 s".to_string(), |d| format!(
                    "{:.0} ms",
                    d.as_secs_f64() * 1000.0
                ))
            );
            if !catch_up_under_load {
                flow.paused.store(true, Ordering::Relaxed);
            }
            c.restart(leader)?;
            let back = RealClock.instant();
            c.wait_in_step(leader, IN_STEP_TIMEOUT).await?;
            eprintln!(
                "  node {leader} back in step after {:.1} s",
                back.elapsed().as_secs_f64()
            );
        }
        Ok(())
    }
    .await;
    flow.stop.store(true, Ordering::Relaxed);
    let (acked, _, _, _) = bg.await??;
    outcome?;
    let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    ms.sort_by(f64::total_cmp);
    let pick = |p: f64| {
        if ms.is_empty() {
            return 0.0;
        }
        ms[((ms.len() as f64 - 1.0) * p).round() as usize]
    };
    println!(
        "failover: {} leader kills (kill -9 under load -> first ack of a submission sent after the kill)",
        kills
    );
    println!(
        "  ms: min {:.0}  p50 {:.0}  p90 {:.0}  p99 {:.0}  max {:.0}  (no ack within 10 s: {missed})",
        pick(0.0),
        pick(0.5),
        pick(0.9),
        pick(0.99),
        pick(1.0)
    );
    let over_1s = ms.iter().filter(|m| **m >= 1000.0).count();
    let over_1_5s = ms.iter().filter(|m| **m >= 1500.0).count();
    println!("  at or over 1 s: {over_1s}, at or over 1.5 s: {over_1_5s}");
    println!(
        "  submissions acknowledged over the kills: {acked} ({})",
        if catch_up_under_load {
            "load kept up through every catch-up"
        } else {
            "load paused while each killed node caught up"
        }
    );
    Ok(())
}

async fn submit(args: SubmitArgs) -> anyhow::Result<()> {
    let SubmitArgs {
        clients,
        duration,
        nodes,
        targets,
        no_failover,
        kills,
        catch_up_under_load,
    } = args;
    let mut cluster = None;
    let addrs = match targets {
        Some(t) => t.split(',').map(str::to_string).collect(),
        None => {
            let c = Launcher::start(nodes).await?;
            let a = c.addrs();
            cluster = Some(c);
            a
        }
    };
    let targets = Arc::new(addrs);
    eprintln!("warm-up 2 s");
    load(targets.clone(), clients, Duration::from_secs(2), "warm").await?;
    let (acked, errors, lat, elapsed) = load(
        targets.clone(),
        clients,
        Duration::from_secs(duration),
        "run",
    )
    .await?;
    let rate = acked as f64 / elapsed.as_secs_f64();
    println!(
        "submissions: {clients} clients over {} nodes, {:.1} s",
        targets.len(),
        elapsed.as_secs_f64()
    );
    println!("  acknowledged: {acked} ({rate:.0}/s), errors: {errors}");
    println!(
        "  latency ms: p50 {:.2}  p90 {:.2}  p99 {:.2}  max {:.2}",
        percentile(&lat, 0.50),
        percentile(&lat, 0.90),
        percentile(&lat, 0.99),
        percentile(&lat, 1.0)
    );
    if let Some(c) = cluster.as_ref()
        && let Ok(l) = c.wait_for_leader(Duration::from_secs(10)).await
        && let Ok(s) = c.status(l).await
    {
        let entries = s.log_entries.max(1);
        println!(
            "  batching on leader {l}: {} log entries, {} fsyncs for {} workloads ({:.1} submissions per entry)",
            s.log_entries,
            s.log_syncs,
            s.workloads,
            s.workloads as f64 / entries as f64
        );
    }
    if let Some(c) = cluster.as_mut()
        && !no_failover
        && kills > 0
    {
        failover(c, targets.clone(), clients, kills, catch_up_under_load).await?;
    }
    drop(cluster);
    Ok(())
}
