//! `tideway bench scale`: a three-node federation filled with `--pending` workloads through
//! the real API, and what that backlog costs: submission latency loaded against empty, list
//! pages, `cluster status`, the scheduler cycle, the leader's memory, a snapshot, and a
//! restarted node's way back into service.
//!
//! Every figure is taken from outside, the way an operator would see it: HTTP round trips,
//! the leader's own `/metrics`, `/proc/<pid>/status`. The same run therefore measures the
//! binary as shipped, at any size the machine can hold.
//!
//! `--members` real agent loops (in this process, on simulated clusters of the dev layouts)
//! register and heartbeat as shipped agents do, so every cycle has capacity to consider: a
//! few hundred workloads fit, the rest of the backlog stays pending and is looked at again
//! every cycle.

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
    pub members: usize,
}

/// Timed `cluster status` calls under submissions: 500 puts the p99 at the fifth slowest,
/// where 50 made it the slowest call alone.
const STATUS_CALLS: u64 = 500;

/// The layouts the members take in turn (the `tideway dev` clusters: 40 to 80 GPUs each).
const LAYOUTS: [(&str, &[u8]); 3] = [
    ("eu-west", include_bytes!("../deploy/dev/sim-eu.yaml")),
    ("us-east", include_bytes!("../deploy/dev/sim-us.yaml")),
    ("ap-south", include_bytes!("../deploy/dev/sim-ap.yaml")),
];

/// Starts `n` agent loops against `federation`, each on its own simulated cluster, and waits
/// until the federation lists them all; the sender stops them.
async fn start_members(
    n: usize,
    federation: Vec<String>,
    client: &Client,
) -> anyhow::Result<(
    tokio::sync::watch::Sender<bool>,
    Vec<tokio::task::JoinHandle<Result<(), tideway_agent::agent::AgentError>>>,
)> {
    use tideway_agent::sim_agent::{Layout, SimAgent, SimOptions};
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let mut agents = Vec::with_capacity(n);
    for i in 0..n {
        let (region, layout) = LAYOUTS[i % LAYOUTS.len()];
        let sim = SimAgent::build(&SimOptions {
            layout: Layout::Bytes(layout),
            cluster: Some(format!("scale-{i:03}")),
            region: Some(region.to_string()),
            clock: RealClock::shared(),
            data: None,
        })?;
        let cfg =
            tideway_agent::agent::AgentConfig::new(&sim.cluster, &sim.region, federation.clone());
        agents.push(tokio::spawn(tideway_agent::agent::run(
            cfg,
            Arc::new(sim.backend),
            stop.clone(),
        )));
    }
    let deadline = RealClock.instant() + Duration::from_secs(120);
    loop {
        let ready = client.members().await.map(|l| {
            l.items
                .iter()
                .filter(|m| {
                    m.status
                        .as_ref()
                        .is_some_and(|s| s.phase == tideway_api::MemberPhase::Ready)
                })
                .count()
        });
        if let Ok(r) = ready
            && r >= n
        {
            return Ok((stop_tx, agents));
        }
        if RealClock.instant() > deadline {
            anyhow::bail!("only {ready:?} of {n} members Ready after 120 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
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
                let body = tideway_federation::scale_mix::workload_json(&name, i);
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

/// A long hold of the state lock by the cycle, as the leader logged it.
#[derive(Debug, PartialEq)]
struct LongHold {
    held_us: u64,
    /// Involuntary context switches of its thread while it held the lock (absent where the
    /// leader could not count them).
    preempted: Option<u64>,
}

/// What the leader logs for each long hold of the state lock by its cycle.
const LONG_HOLD_LINE: &str = "the cycle held the state lock long";

/// What the leader logs for each whole cycle of 0.5 s or more.
const SLOW_CYCLE_LINE: &str = "a slow scheduling cycle";

/// The leader's log lines that carry `message`.
fn lines_with<'a>(log: &'a str, message: &'a str) -> impl Iterator<Item = &'a str> {
    log.lines().filter(move |l| l.contains(message))
}

/// Prints the first ten of the leader's log lines that carry `message`, from the level on.
fn print_lines_with(log: &str, message: &str) {
    for line in lines_with(log, message).take(10) {
        println!("    {}", line.split_once("INFO ").map_or(line, |(_, l)| l));
    }
}

/// The leader's long holds ([`LONG_HOLD_LINE`]).
fn long_holds(log: &str) -> Vec<LongHold> {
    let field = |line: &str, name: &str| -> Option<u64> {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
    };
    lines_with(log, LONG_HOLD_LINE)
        .filter_map(|l| {
            Some(LongHold {
                held_us: field(l, "held_us")?,
                preempted: field(l, "preempted"),
            })
        })
        .collect()
}

/// Percentiles of a Prometheus histogram in a text exposition, in seconds, interpolated
/// linearly inside the bucket they fall in (the buckets double, so a figure is good to
/// within its bucket); `None` without observations.
fn histogram_quantiles(text: &str, name: &str, qs: &[f64]) -> Option<Vec<f64>> {
    let buckets = histogram_buckets(text, name);
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    Some(
        qs.iter()
            .map(|q| {
                let want = q * total;
                let mut prev = (0.0, 0.0);
                for &(le, n) in &buckets {
                    if n >= want {
                        if le.is_infinite() {
                            return prev.0;
                        }
                        let span = (n - prev.1).max(f64::EPSILON);
                        return prev.0 + (le - prev.0) * ((want - prev.1) / span).clamp(0.0, 1.0);
                    }
                    prev = (le, n);
                }
                prev.0
            })
            .collect(),
    )
}

/// A histogram's buckets in a text exposition: (upper bound in seconds, `+Inf` as infinity;
/// cumulative count), by bound.
fn histogram_buckets(text: &str, name: &str) -> Vec<(f64, f64)> {
    let mut buckets: Vec<(f64, f64)> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.split('{')
                .next()
                .is_some_and(|m| m.ends_with(&format!("{name}_bucket")))
        })
        .filter_map(|l| {
            let le = l.split("le=\"").nth(1)?.split('"').next()?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, l.rsplit(' ').next()?.parse().ok()?))
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    buckets
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
        "scale: 3 nodes, leader {leader}; {} members; {} workloads through POST /v1/workloads",
        args.members, args.pending
    );
    let members = if args.members > 0 {
        let started = RealClock.instant();
        let m = start_members(args.members, c.addrs(), &client).await?;
        println!(
            "  {} members registered and Ready in {:.1} s",
            args.members,
            started.elapsed().as_secs_f64()
        );
        Some(m)
    } else {
        None
    };

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

    // On a loaded machine leadership can move during the fill: the reads below go to the
    // leader of now, and a move during them is retried there (and said).
    let first_leader = leader;
    let leader = c.wait_for_leader(Duration::from_secs(60)).await?;
    if leader != first_leader {
        println!("  (leadership moved during the run: node {first_leader} -> node {leader})");
    }
    let addr = c.addr(leader).context("the leader has no address")?;
    let client = Client::with_http(&addr, http.clone());

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
        let page = retried(|| client.list(&q)).await?;
        pages.push(t.elapsed());
        after = page.continue_;
    }
    println!("  list, 200 pages of 100: {}", percentiles(&mut pages));

    // The first call after a node starts digests the whole state once; every later one walks
    // only what changed since the previous call. The timed calls run while submissions flow,
    // so that each one finds a new applied index (no answer from the cache alone). There are
    // enough of them for a p99 that is not simply the slowest call.
    let t = RealClock.instant();
    retried(|| client.cluster_status()).await?;
    let first = t.elapsed();
    let flowing = tokio::spawn({
        let (http, addr) = (http.clone(), addr.clone());
        async move { submit_n(&http, &addr, 4, STATUS_CALLS * 60, "status").await }
    });
    // Each digest call is paired with one without the digest (`?digest=false`) under the
    // same load: what the request costs on a busy node apart from the digest.
    let digest_before = leader_metrics(&http, &addr).await?;
    let mut status = Vec::with_capacity(STATUS_CALLS as usize);
    let mut brief = Vec::with_capacity(STATUS_CALLS as usize);
    let mut moved = 0;
    let mut last_applied = None;
    for _ in 0..STATUS_CALLS {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let t = RealClock.instant();
        let s = retried(|| client.cluster_status()).await?;
        status.push(t.elapsed());
        if s.last_applied != last_applied {
            moved += 1;
            last_applied = s.last_applied;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        let t = RealClock.instant();
        retried(|| client.cluster_status_brief()).await?;
        brief.push(t.elapsed());
    }
    flowing.await??;
    println!(
        "  cluster status: first call {:.1} ms; then x{STATUS_CALLS} under submissions ({moved} at a new applied index): {}",
        first.as_secs_f64() * 1000.0,
        percentiles(&mut status)
    );
    println!(
        "  cluster status without the digest (?digest=false), x{STATUS_CALLS} between those: {}",
        percentiles(&mut brief)
    );
    // The leader's own timing of those digests, by part (`tideway_state_digest_seconds`).
    let digest_after = leader_metrics(&http, &addr).await?;
    for part in ["walk", "rest", "free"] {
        let only = |text: &str| {
            text.lines()
                .filter(|l| {
                    !l.contains("state_digest_seconds") || l.contains(&format!("part=\"{part}\""))
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        print_histogram(
            &format!("status digest, {part}"),
            "state_digest_seconds",
            &only(&digest_after),
            Some((&only(&digest_before), "the timed calls")),
        );
    }

    // What readers, status among them, wait for while apply holds the state for an entry.
    print_histogram(
        "apply lock held",
        "state_apply_lock_held_seconds",
        &digest_after,
        Some((&digest_before, "the timed calls")),
    );
    print_histogram(
        "apply lock held",
        "state_apply_lock_held_seconds",
        &digest_after,
        None,
    );
    // What apply itself waited for the lock: the readers' holds above, as apply met them.
    print_waits(&digest_after, Some((&digest_before, "the timed calls")));

    // The leader logs what a slow walk covered (entries, workloads, time per part).
    let log = std::fs::read_to_string(c.log_path(leader)).unwrap_or_default();
    print_lines_with(&log, "a slow state digest walk");

    // The leader has been cycling over the whole backlog while it was filled and probed;
    // a quiet half minute gives the figures of cycles over the full backlog alone.
    let before = leader_metrics(&http, &addr).await?;
    tokio::time::sleep(Duration::from_secs(30)).await;
    let metrics = leader_metrics(&http, &addr).await?;
    for (label, name) in [
        ("core", "scheduler_cycle_seconds"),
        ("whole cycle", "scheduler_cycle_wall_seconds"),
        ("lock held", "scheduler_cycle_lock_held_seconds"),
        (
            "copy made by apply",
            "scheduler_cycle_copy_by_apply_seconds",
        ),
    ] {
        let label = format!("cycle {label}");
        print_histogram(&label, name, &metrics, Some((&before, "last 30 s")));
        print_histogram(&label, name, &metrics, None);
    }
    // Whether apply was held off at all, by the cycle's own holds among other readers.
    for since in [Some((before.as_str(), "last 30 s")), None] {
        print_waits(&metrics, since);
    }
    // The leader logs each hold of 0.5 ms or more, and whether its thread was preempted.
    let log = std::fs::read_to_string(c.log_path(leader)).unwrap_or_default();
    let long = long_holds(&log);
    println!(
        "  cycle lock holds of 0.5 ms or more: {}, of them preempted while held: {}; longest {}",
        long.len(),
        long.iter()
            .filter(|h| h.preempted.is_some_and(|n| n > 0))
            .count(),
        long.iter()
            .map(|h| h.held_us)
            .max()
            .map_or("-".into(), |us| format!("{:.3} ms", us as f64 / 1000.0)),
    );
    print_lines_with(&log, LONG_HOLD_LINE);
    // Every cycle of 0.5 s or more over the whole run, with where its time went; the times
    // are the log's, to set beside the snapshot builds below.
    let slow: Vec<&str> = lines_with(&log, SLOW_CYCLE_LINE).collect();
    println!("  whole cycles of 0.5 s or more: {}", slow.len());
    for line in slow.iter().take(20) {
        println!("    {line}");
    }
    print_gauge(
        &metrics,
        "tideway_workloads",
        "workloads by phase on the leader",
    );

    if let Some(kib) = c
        .pid(leader)
        .and_then(|p| crate::bench_rss::rss_kib(p).ok())
    {
        println!("  leader RSS: {:.0} MiB", kib as f64 / 1024.0);
    }

    let t = RealClock.instant();
    let snap = client.cluster_snapshot().await?;
    println!(
        "  snapshot at index {} written in {:.2} s",
        snap.snapshot,
        t.elapsed().as_secs_f64()
    );
    // Every node builds snapshots on its own schedule: each node's last few, as it logged
    // them, show what they cost and whether one overlapped the leader's.
    for id in c.ids() {
        let log = std::fs::read_to_string(c.log_path(id)).unwrap_or_default();
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("snapshot written"))
            .collect();
        for line in &lines[lines.len().saturating_sub(3)..] {
            println!("    node {id}: {line}");
        }
    }

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
    // Where that time went, as the node itself logged it on the way up (the rest is the
    // process start, the log replay and finding the leader).
    let log = std::fs::read_to_string(c.log_path(follower)).unwrap_or_default();
    for what in ["raft log opened", "state loaded from the latest snapshot"] {
        if let Some(line) = log.lines().rev().find(|l| l.contains(what)) {
            println!("    {}", line.split_once("INFO ").map_or(line, |(_, l)| l));
        }
    }
    if let Some((stop, agents)) = members {
        let _ = stop.send(true);
        for a in agents {
            let _ = a.await;
        }
    }
    Ok(())
}

/// A request retried a few times (a leader change answers 503 for a moment).
async fn retried<T, F, Fut>(f: F) -> anyhow::Result<T>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T, tideway_api::client::ClientError>>,
{
    let mut last = None;
    for _ in 0..20 {
        match f().await {
            Ok(v) => return Ok(v),
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Err(last.map_or_else(|| anyhow::anyhow!("no attempt"), anyhow::Error::from))
}

async fn leader_metrics(http: &reqwest::Client, addr: &str) -> anyhow::Result<String> {
    Ok(http
        .get(format!("http://{addr}/metrics"))
        .send()
        .await?
        .text()
        .await?)
}

/// A histogram's count, mean, p50 and p99: over the whole run, or (given the exposition
/// of an earlier scrape and what lies between) over what was observed since.
fn print_histogram(label: &str, name: &str, now: &str, since: Option<(&str, &str)>) {
    let (text, span) = match since {
        Some((before, span)) => (difference(now, before), span),
        None => (now.to_string(), "whole run"),
    };
    let mean = histogram_mean(&text, name);
    match (mean, histogram_quantiles(&text, name, &[0.5, 0.99])) {
        (Some((sum, n)), Some(q)) if n > 0.0 => println!(
            "  {label} ({span}): {n:.0} samples, mean {:.3} ms  p50 {:.3} ms  p99 {:.3} ms  ({name})",
            sum / n * 1000.0,
            q[0] * 1000.0,
            q[1] * 1000.0
        ),
        _ => println!("  {label} ({span}): none recorded ({name})"),
    }
}

/// Apply's waits for the state lock ([`print_histogram`]), and how many were over 1 ms: the
/// issue's bound on how long the cycle may hold apply off (a bucket bound, so exact).
fn print_waits(now: &str, since: Option<(&str, &str)>) {
    const NAME: &str = "state_apply_lock_wait_seconds";
    print_histogram("apply waited for the lock", NAME, now, since);
    let text = since.map_or_else(|| now.to_string(), |(before, _)| difference(now, before));
    if let Some((over, total)) = count_over(&text, NAME, 0.001) {
        println!("    of them over 1 ms: {over:.0} of {total:.0}");
    }
}

/// How many samples of histogram `name` were above bucket bound `le` seconds, and of how
/// many; `None` when `le` is not one of its bounds.
fn count_over(text: &str, name: &str, le: f64) -> Option<(f64, f64)> {
    let buckets = histogram_buckets(text, name);
    let total = buckets.last().filter(|b| b.0.is_infinite())?.1;
    let within = buckets.iter().find(|b| (b.0 - le).abs() < 1e-12)?.1;
    Some((total - within, total))
}

/// Every sample of `now` minus the same series in `before` (counters and histograms only
/// grow, so the difference is what happened between the scrapes).
fn difference(now: &str, before: &str) -> String {
    let old: std::collections::HashMap<&str, f64> = before
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, v) = l.rsplit_once(' ')?;
            Some((series, v.parse().ok()?))
        })
        .collect();
    now.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, v) = l.rsplit_once(' ')?;
            let v: f64 = v.parse().ok()?;
            Some(format!(
                "{series} {}",
                v - old.get(series).copied().unwrap_or(0.0)
            ))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A gauge family's series (`name{labels} value`), on one line.
fn print_gauge(text: &str, name: &str, what: &str) {
    let series: Vec<&str> = text
        .lines()
        .filter(|l| l.split(['{', ' ']).next() == Some(name))
        .filter_map(|l| l.strip_prefix(name))
        .collect();
    if !series.is_empty() {
        println!("  {what}: {}", series.join(", "));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_holds_are_read_from_the_leaders_log_lines() {
        let log = "\
2026-12-06T06:21:34.285083Z  INFO tideway_federation::dispatcher::cycle: the cycle held the state lock long held_us=1043 preempted=1
2026-12-06T06:21:35.285083Z  INFO tideway_federation::raft::state_machine: snapshot written index=20041
2026-12-06T06:21:36.285083Z  INFO tideway_federation::dispatcher::cycle: the cycle held the state lock long held_us=612 preempted=0
2026-12-06T06:21:37.285083Z  INFO tideway_federation::dispatcher::cycle: the cycle held the state lock long held_us=700";
        assert_eq!(
            long_holds(log),
            vec![
                LongHold {
                    held_us: 1043,
                    preempted: Some(1)
                },
                LongHold {
                    held_us: 612,
                    preempted: Some(0)
                },
                LongHold {
                    held_us: 700,
                    preempted: None
                },
            ]
        );
    }

    /// The waits over 1 ms are read from the leader's own histogram as it encodes it (1 ms
    /// must be one of its bucket bounds), over the whole run or since an earlier scrape.
    #[test]
    fn waits_over_1_ms_are_counted_from_the_histogram_exposition() {
        use tideway_federation::metrics::{Metrics, NodeGauges};
        const NAME: &str = "state_apply_lock_wait_seconds";
        let m = Metrics::default();
        let h = m.apply_lock_wait();
        for s in [0.000_2, 0.000_9, 0.001, 0.001_1] {
            h.observe(s);
        }
        let before = m.encode(&NodeGauges::default()).expect("encode");
        assert_eq!(count_over(&before, NAME, 0.001), Some((1.0, 4.0)));
        h.observe(0.004);
        h.observe(0.000_05);
        let after = m.encode(&NodeGauges::default()).expect("encode");
        assert_eq!(count_over(&after, NAME, 0.001), Some((2.0, 6.0)));
        assert_eq!(
            count_over(&difference(&after, &before), NAME, 0.001),
            Some((1.0, 2.0)),
            "since the earlier scrape"
        );
        assert_eq!(count_over(&after, NAME, 0.0015), None, "not a bound");
        assert_eq!(count_over(&after, "no_such_seconds", 0.001), None);
    }
}
