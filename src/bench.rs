//! `tideway bench submit`: acknowledged submissions per second on a real three-node loopback
//! cluster, latency percentiles, and the time from kill -9 of the leader to the next ack.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tideway_api::clock::{Clock, RealClock};

use crate::launcher::Launcher;
use clap::Subcommand;
use tokio::sync::Mutex;

#[derive(Subcommand, Debug)]
pub enum BenchCmd {
    /// Submission throughput and failover time on a three-node loopback cluster.
    Submit {
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
    },
}

pub async fn run(cmd: BenchCmd) -> anyhow::Result<()> {
    match cmd {
        BenchCmd::Submit {
            clients,
            duration,
            nodes,
            targets,
            no_failover,
        } => submit(clients, duration, nodes, targets, no_failover).await,
    }
}

fn workload_body(name: &str) -> String {
    format!(
        r#"{{"apiVersion":"tideway.dev/v1alpha1","kind":"Workload","metadata":{{"name":"{name}"}},"spec":{{"queue":"default","class":"training","priorityClass":"normal","podSets":[{{"name":"worker","count":1,"gpusPerPod":8,"flavor":"H100"}}],"gang":{{"minCount":1}},"topology":{{"required":"rack"}},"runtimeEstimateSeconds":7200,"checkpoint":{{"intervalSeconds":600}}}}}}"#
    )
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
    stop: Arc<AtomicBool>,
    tally: Arc<Tally>,
    first_ack_after: Option<(Instant, Arc<Mutex<Option<Duration>>>)>,
) {
    let mut n = 0u64;
    let mut local = Vec::with_capacity(4096);
    while !stop.load(Ordering::Relaxed) {
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
                let took = sent.elapsed();
                local.push(took.as_micros().min(u32::MAX as u128) as u32);
                tally.acked.fetch_add(1, Ordering::Relaxed);
                if let Some((kill_at, slot)) = &first_ack_after
                    && sent >= *kill_at
                {
                    let mut s = slot.lock().await;
                    let d = RealClock.instant() - *kill_at;
                    if s.is_none_or(|cur| d < cur) {
                        *s = Some(d);
                    }
                }
            }
            _ => {
                tally.errors.fetch_add(1, Ordering::Relaxed);
                at += 1;
                n -= 1; // retry the same name and key elsewhere: it must not be lost.
                tokio::time::sleep(Duration::from_millis(20)).await;
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
    failover: Option<(Instant, Arc<Mutex<Option<Duration>>>)>,
) -> anyhow::Result<(u64, u64, Vec<u32>, Duration)> {
    let http = tideway_api::http::client_builder()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(clients)
        .build()?;
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let start = RealClock.instant();
    let mut tasks = Vec::new();
    for c in 0..clients {
        tasks.push(tokio::spawn(client_loop(
            http.clone(),
            targets.clone(),
            c,
            format!("{round}-{c}-{}", std::process::id()),
            stop.clone(),
            tally.clone(),
            failover.clone(),
        )));
    }
    tokio::time::sleep(dur).await;
    stop.store(true, Ordering::Relaxed);
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

async fn submit(
    clients: usize,
    duration: u64,
    nodes: u64,
    targets: Option<String>,
    no_failover: bool,
) -> anyhow::Result<()> {
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
    load(
        targets.clone(),
        clients,
        Duration::from_secs(2),
        "warm",
        None,
    )
    .await?;
    let (acked, errors, lat, elapsed) = load(
        targets.clone(),
        clients,
        Duration::from_secs(duration),
        "run",
        None,
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
    {
        let leader = c.wait_for_leader(Duration::from_secs(10)).await?;
        let slot = Arc::new(Mutex::new(None));
        let t2 = targets.clone();
        let kill_at = RealClock.instant() + Duration::from_secs(2);
        let bg = tokio::spawn({
            let slot = slot.clone();
            async move {
                load(
                    t2,
                    clients,
                    Duration::from_secs(6),
                    "failover",
                    Some((kill_at, slot)),
                )
                .await
            }
        });
        tokio::time::sleep_until(kill_at.into()).await;
        c.kill9(leader)?;
        let killed = RealClock.instant();
        let _ = bg.await?;
        let first = *slot.lock().await;
        let new_leader = c.wait_for_leader(Duration::from_secs(10)).await.ok();
        match first {
            Some(d) => println!(
                "failover: kill -9 of leader {leader} (after {:.0} ms of kill) -> first ack of a request sent after the kill: {:.0} ms; new leader {:?}",
                (killed - kill_at).as_secs_f64() * 1000.0,
                d.as_secs_f64() * 1000.0,
                new_leader
            ),
            None => println!(
                "failover: no submission was acknowledged within 4 s of kill -9 of leader {leader}"
            ),
        }
    }
    drop(cluster);
    Ok(())
}
