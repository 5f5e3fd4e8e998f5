//! `tideway bench scale`: a three-node federation filled with `--pending` workloads through
//! the real API, and what that backlog costs: submission latency loaded against empty, list
//! pages, `cluster status`, the scheduler cycle, the leader's memory, a snapshot, and a
//! restarted node's way back into service.
//!
//! Every figure is taken from outside, the way an operator would see it: HTTP round trips,
//! the leader's own `/metrics`, `/proc/<pid>/status`. The same run therefore measures the
//! binary as shipped, at any size the machine can hold.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use tideway_api::client::{Client, ListQuery};
use tideway_api::clock::{Clock, RealClock};

use crate::launcher::Launcher;

/// What to build and how hard to push.
pub struct ScaleArgs {
    pub pending: u64,
    pub clients: usize,
    pub probe: u64,
}

/// Latency percentiles in ms of a set of samples (sorted in place).
struct Percentiles {
    p50: f64,
    p99: f64,
    max: f64,
}

fn percentiles(samples: &mut [Duration]) -> Percentiles {
    samples.sort_unstable();
    let pick = |p: f64| {
        if samples.is_empty() {
            return 0.0;
        }
        let i = ((samples.len() as f64 - 1.0) * p).round() as usize;
        samples[i].as_secs_f64() * 1000.0
    };
    Percentiles {
        p50: pick(0.5),
        p99: pick(0.99),
        max: pick(1.0),
    }
}

impl std::fmt::Display for Percentiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms",
            self.p50, self.p99, self.max
        )
    }
}

/// Submits `count` new workloads named `scale-{tag}-{i}` with `clients` in flight, each
/// request to `target`; returns every acknowledged submission's latency. A submission that
/// fails is retried under the same idempotency key, so the count is exact.
async fn submit_n(
    http: &reqwest::Client,
    target: &str,
    clients: usize,
    count: u64,
    tag: &str,
) -> anyhow::Result<Vec<Duration>> {
    let next = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..clients.max(1) {
        let (http, next, done) = (http.clone(), next.clone(), done.clone());
        let url = format!("http://{target}/v1/workloads");
        let tag = tag.to_string();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    return Ok::<_, anyhow::Error>(lat);
                }
                let name = format!("scale-{tag}-{i}");
                let body = crate::bench::workload_body(&name);
                let mut attempts = 0;
                loop {
                    let sent = RealClock.instant();
                    let res = http
                        .post(&url)
                        .header("content-type", "application/json")
                        .header("idempotency-key", &name)
                        .body(body.clone())
                        .timeout(Duration::from_secs(30))
                        .send()
                        .await;
                    match res {
                        Ok(r) if r.status().is_success() => {
                            lat.push(sent.elapsed());
                            break;
                        }
                        other => {
                            attempts += 1;
                            if attempts >= 20 {
                                anyhow::bail!(
                                    "submitting {name} failed 20 times, last: {}",
                                    other
                                        .map_or_else(|e| e.to_string(), |r| r.status().to_string())
                                );
                            }
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    }
                }
                let d = done.fetch_add(1, Ordering::Relaxed) + 1;
                if count >= 10_000 && d.is_multiple_of(count / 10) {
                    eprintln!("  {tag}: {d}/{count} submitted");
                }
            }
        }));
    }
    let mut all = Vec::with_capacity(count as usize);
    for t in tasks {
        all.extend(t.await??);
    }
    Ok(all)
}

/// The sum and count of a Prometheus histogram in a text exposition.
fn histogram_mean(text: &str, name: &str) -> Option<(f64, f64)> {
    let value = |suffix: &str| {
        // The registry may prefix the name (`tideway_...`); labels may follow it.
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .find(|l| {
                l.split([' ', '{'])
                    .next()
                    .is_some_and(|m| m.ends_with(&format!("{name}{suffix}")))
            })
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
    };
    Some((value("_sum")?, value("_count")?))
}

/// The resident set of a process, in MiB, from `/proc` (Linux only).
fn rss_mib(pid: u32) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: f64 = s
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

pub async fn run(args: ScaleArgs) -> anyhow::Result<()> {
    let mut c = Launcher::start(3).await?;
    let leader = c.wait_for_leader(Duration::from_secs(30)).await?;
    let addr = c.addr(leader).context("the leader has no address")?;
    let http = tideway_api::http::client_builder()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(args.clients.max(16))
        .build()?;
    let client = Client::with_http(&addr, http.clone());
    println!(
        "scale: 3 nodes, leader {leader}; {} pending workloads through POST /v1/workloads",
        args.pending
    );

    let mut empty = submit_n(&http, &addr, 16, args.probe, "empty").await?;
    let empty = percentiles(&mut empty);

    let fill_started = RealClock.instant();
    submit_n(&http, &addr, args.clients, args.pending, "fill").await?;
    let fill = fill_started.elapsed();

    let mut loaded = submit_n(&http, &addr, 16, args.probe, "loaded").await?;
    let loaded = percentiles(&mut loaded);
    println!(
        "  filled in {:.1} s ({:.0} submissions/s with {} clients)",
        fill.as_secs_f64(),
        args.pending as f64 / fill.as_secs_f64(),
        args.clients
    );
    println!(
        "  submission latency, {} at 16 in flight: empty {empty}",
        args.probe
    );
    println!(
        "  submission latency, {} at 16 in flight: loaded {loaded}  (p99 {:.2}x empty)",
        args.probe,
        loaded.p99 / empty.p99.max(f64::EPSILON)
    );

    // List: 200 successive pages of 100, following the continue tokens (the last page
    // starts over), each page its own request.
    let mut after = None;
    let mut pages = Vec::with_capacity(200);
    for _ in 0..200 {
        let q = ListQuery {
            limit: Some(100),
            after,
            ..Default::default()
        };
        let t = RealClock.instant();
        let page = client.list(&q).await?;
        pages.push(t.elapsed());
        after = page.continue_;
    }
    println!("  list, 200 pages of 100: {}", percentiles(&mut pages));

    let mut status = Vec::with_capacity(50);
    for _ in 0..50 {
        let t = RealClock.instant();
        client.cluster_status().await?;
        status.push(t.elapsed());
    }
    println!("  cluster status x50: {}", percentiles(&mut status));

    let metrics = http
        .get(format!("http://{addr}/metrics"))
        .send()
        .await?
        .text()
        .await?;
    match histogram_mean(&metrics, "scheduler_cycle_seconds") {
        Some((sum, n)) if n > 0.0 => println!(
            "  scheduler cycle: {n:.0} cycles, mean {:.1} ms",
            sum / n * 1000.0
        ),
        _ => println!("  scheduler cycle: no cycle recorded in /metrics"),
    }

    if let Some(rss) = c.pid(leader).and_then(rss_mib) {
        println!("  leader RSS: {rss:.0} MiB");
    }

    let t = RealClock.instant();
    let snap = client.cluster_snapshot().await?;
    println!(
        "  snapshot at index {} written in {:.2} s",
        snap.snapshot,
        t.elapsed().as_secs_f64()
    );

    // A follower, killed and restarted: snapshot load plus log replay until it has applied
    // what the leader had committed.
    let follower = c
        .ids()
        .into_iter()
        .find(|id| *id != leader)
        .context("no follower")?;
    c.kill9(follower)?;
    let t = RealClock.instant();
    c.restart(follower)?;
    c.wait_caught_up(follower, Duration::from_secs(600)).await?;
    println!(
        "  node {follower} restarted and caught up in {:.2} s",
        t.elapsed().as_secs_f64()
    );
    Ok(())
}
