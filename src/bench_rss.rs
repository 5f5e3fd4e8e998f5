//! `tideway bench rss`: the leader's memory over a long run. Starts `tideway dev` (one node,
//! simulated members that finish work fast on a scaled clock, a short retention), pushes N
//! small workloads through it to the end, and reports the node's resident set size at the
//! start, at its peak, when the last one was submitted, and after the finished workloads were
//! compacted out of the live state.

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use tideway_api::client::Client;
use tideway_api::clock::{Clock, RealClock};

/// Settings of one run.
pub struct RssRun {
    pub workloads: u64,
    pub clients: usize,
    pub time_scale: f64,
    pub retain_terminal: u64,
    /// Submissions pause while the live state holds more workloads than this, so the run
    /// measures a federation that keeps up, not a backlog growing without bound.
    pub max_live: u64,
    /// dev's member heartbeat (and status report) interval, in milliseconds.
    pub member_heartbeat_ms: u64,
    /// An RSS line every this many acknowledged submissions.
    pub every: u64,
    /// Give up waiting for compaction after this long.
    pub settle_timeout: Duration,
}

fn body(name: &str) -> String {
    format!(
        r#"{{"apiVersion":"tideway.dev/v1alpha1","kind":"Workload","metadata":{{"name":"{name}"}},"spec":{{"queue":"default","class":"training","priorityClass":"normal","podSets":[{{"name":"worker","count":1,"gpusPerPod":1,"flavor":"H100"}}],"gang":{{"minCount":1}},"runtimeEstimateSeconds":60}}}}"#
    )
}

/// Resident set size of `pid` in KiB, from /proc (Linux only).
pub(crate) fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    tideway_federation::memory::vm_rss_kib(&s).context("no VmRSS line")
}

struct Dev {
    child: Child,
    _dir: tempfile::TempDir,
}

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `tideway dev` and answers it with its address and admin token.
fn start_dev(run: &RssRun) -> anyhow::Result<(Dev, String, String)> {
    let dir = tempfile::Builder::new().prefix("tideway-rss-").tempdir()?;
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        l.local_addr()?.to_string()
    };
    let mut child = Command::new(std::env::current_exe()?)
        .args(["dev", "--listen", &addr])
        .args(["--time-scale", &run.time_scale.to_string()])
        .args(["--retain-terminal", &run.retain_terminal.to_string()])
        .args([
            "--member-heartbeat-ms",
            &run.member_heartbeat_ms.to_string(),
        ])
        .arg("--data")
        .arg(dir.path().join("data"))
        .env("TIDEWAY_CONFIG", dir.path().join("config"))
        .env("TIDEWAY_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("starting tideway dev")?;
    let out = child.stdout.take().context("dev's stdout")?;
    let mut token = None;
    for line in std::io::BufReader::new(out).lines() {
        let line = line?;
        if let Some(t) = line.strip_prefix("admin token: ") {
            token = Some(t.trim().to_string());
            break;
        }
    }
    let dev = Dev { child, _dir: dir };
    let token = token.context("tideway dev printed no admin token")?;
    Ok((dev, addr, token))
}

/// Workloads in the live state by phase, from `/metrics` (a count over the state, far
/// cheaper than `/v1/cluster/status`, which encodes the whole state for its digest).
#[derive(Debug, Clone, Copy, Default)]
struct Live {
    /// Every workload the state holds (finished ones until compaction).
    total: u64,
    /// Not finished: pending, assigned, running.
    active: u64,
}

fn parse_live(metrics: &str) -> Live {
    let mut live = Live::default();
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix("tideway_workloads{phase=\"") else {
            continue;
        };
        let Some((phase, value)) = rest.split_once("\"}") else {
            continue;
        };
        let n: u64 = value.trim().parse().unwrap_or(0);
        live.total += n;
        if !matches!(phase, "Succeeded" | "Failed" | "Cancelled") {
            live.active += n;
        }
    }
    live
}

async fn live_now(http: &reqwest::Client, addr: &str, token: &str) -> anyhow::Result<Live> {
    let text = http
        .get(format!("http://{addr}/metrics"))
        .bearer_auth(token)
        .timeout(Duration::from_secs(30))
        .send()
        .await?
        .error_for_status()?
        .text()
        .await?;
    Ok(parse_live(&text))
}

/// The 1-minute load average (Linux), to say how busy the machine was.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}

/// One RSS reading of the table printed at the end.
struct Mark {
    moment: String,
    secs: f64,
    rss_kib: u64,
    live: Live,
    load: String,
}

pub async fn run(run: RssRun) -> anyhow::Result<()> {
    let (dev, addr, token) = start_dev(&run)?;
    let pid = dev.child.id();
    let client = Client::with_token(&addr, Some(&token))?;
    let http = reqwest::Client::new();
    let clock = RealClock;
    let start = clock.instant();
    while client.cluster_status_brief().await.is_err() {
        if start.elapsed() > Duration::from_secs(60) {
            bail!("tideway dev did not answer within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss_start = rss_kib(pid)?;
    let marks = Arc::new(std::sync::Mutex::new(vec![Mark {
        moment: "start (dev idle)".into(),
        secs: 0.0,
        rss_kib: rss_start,
        live: live_now(&http, &addr, &token).await.unwrap_or_default(),
        load: load_average(),
    }]));
    let peak = Arc::new(AtomicU64::new(rss_start));
    let next = Arc::new(AtomicU64::new(0));
    let acked = Arc::new(AtomicU64::new(0));
    // The live count the submitters pace on, refreshed by the sampler below.
    let live_total = Arc::new(AtomicU64::new(0));
    let live_active = Arc::new(AtomicU64::new(0));
    let t0 = clock.instant();
    let sampler = {
        let (peak, acked, total) = (peak.clone(), acked.clone(), run.workloads);
        let (live_total, live_active) = (live_total.clone(), live_active.clone());
        let (http, addr, token) = (http.clone(), addr.clone(), token.clone());
        tokio::spawn(async move {
            let clock = RealClock;
            let mut last_print = clock.instant();
            let mut first = true;
            loop {
                let rss = rss_kib(pid).unwrap_or(0);
                peak.fetch_max(rss, Ordering::Relaxed);
                if let Ok(l) = live_now(&http, &addr, &token).await {
                    live_total.store(l.total, Ordering::Relaxed);
                    live_active.store(l.active, Ordering::Relaxed);
                }
                if first || last_print.elapsed() >= Duration::from_secs(10) {
                    first = false;
                    last_print = clock.instant();
                    eprintln!(
                        "{:>6.0} s  acknowledged {}/{total}  live {} (active {})  rss {} MiB  load {}",
                        t0.elapsed().as_secs_f64(),
                        acked.load(Ordering::Relaxed),
                        live_total.load(Ordering::Relaxed),
                        live_active.load(Ordering::Relaxed),
                        rss / 1024,
                        load_average()
                    );
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    };
    let mut tasks = Vec::new();
    for _ in 0..run.clients {
        let (client, next, acked, total) =
            (client.clone(), next.clone(), acked.clone(), run.workloads);
        let (live_total, live_active, marks) =
            (live_total.clone(), live_active.clone(), marks.clone());
        let (max_live, every) = (run.max_live, run.every.max(1));
        tasks.push(tokio::spawn(async move {
            loop {
                // Paced: the live state stays below max_live (the sampler refreshes it).
                while live_total.load(Ordering::Relaxed) > max_live {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= total {
                    return;
                }
                let name = format!("rss-{n}");
                // Retry the same name and key until acknowledged: none may be skipped.
                while client
                    .submit_raw(body(&name).into_bytes(), false, Some(&name))
                    .await
                    .is_err()
                {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                live_total.fetch_add(1, Ordering::Relaxed);
                let a = acked.fetch_add(1, Ordering::Relaxed) + 1;
                if a % every == 0 && a < total {
                    let mark = Mark {
                        moment: format!("{a} acknowledged"),
                        secs: t0.elapsed().as_secs_f64(),
                        rss_kib: rss_kib(pid).unwrap_or(0),
                        live: Live {
                            total: live_total.load(Ordering::Relaxed),
                            active: live_active.load(Ordering::Relaxed),
                        },
                        load: load_average(),
                    };
                    if let Ok(mut m) = marks.lock() {
                        m.push(mark);
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await?;
    }
    let submitted_after = t0.elapsed();
    let rss_submitted = rss_kib(pid)?;
    let live_at_submitted = live_now(&http, &addr, &token).await.unwrap_or_default();
    let mark = |moment: String, rss_kib: u64, live: Live| Mark {
        moment,
        secs: t0.elapsed().as_secs_f64(),
        rss_kib,
        live,
        load: load_average(),
    };
    let mut table = marks
        .lock()
        .map(|mut m| std::mem::take(&mut *m))
        .unwrap_or_default();
    table.push(mark(
        format!("all {} acknowledged", run.workloads),
        rss_submitted,
        live_at_submitted,
    ));
    // Wait until every workload has finished and been compacted out of the live state.
    let settle = clock.instant();
    let mut live = live_at_submitted;
    while live.total > 0 && settle.elapsed() < run.settle_timeout {
        tokio::time::sleep(Duration::from_secs(2)).await;
        match live_now(&http, &addr, &token).await {
            Ok(l) => live = l,
            Err(e) => eprintln!("metrics: {e}; retrying"),
        }
    }
    // A moment for the allocator to settle after the last compaction.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let rss_after = rss_kib(pid)?;
    sampler.abort();
    table.push(mark("after compaction".into(), rss_after, live));
    let peak = peak.load(Ordering::Relaxed).max(rss_submitted);
    let mib = |k: u64| k as f64 / 1024.0;
    println!("| moment | time | RSS | live (active) | load |");
    println!("|---|---:|---:|---:|---:|");
    for m in &table {
        println!(
            "| {} | {:.0} s | {:.0} MiB | {} ({}) | {} |",
            m.moment,
            m.secs,
            mib(m.rss_kib),
            m.live.total,
            m.live.active,
            m.load
        );
    }
    println!();
    println!("workloads submitted:   {}", run.workloads);
    println!(
        "submission took:       {:.0} s ({:.0} submissions/s, never more than {} live)",
        submitted_after.as_secs_f64(),
        run.workloads as f64 / submitted_after.as_secs_f64().max(0.001),
        run.max_live
    );
    println!("rss at start:          {:.1} MiB", mib(rss_start));
    println!("rss peak:              {:.1} MiB", mib(peak));
    println!(
        "rss at last ack:       {:.1} MiB ({} live)",
        mib(rss_submitted),
        live_at_submitted.total
    );
    println!(
        "rss after compaction:  {:.1} MiB ({} live, {:.0} s after the last ack)",
        mib(rss_after),
        live.total,
        settle.elapsed().as_secs_f64()
    );
    if live.total > 0 {
        bail!(
            "{} workloads were still live after {:?}",
            live.total,
            run.settle_timeout
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_counts_every_phase_and_active_only_the_unfinished() {
        let text = "# HELP tideway_workloads Workloads\n\
            tideway_workloads{phase=\"Pending\"} 5\n\
            tideway_workloads{phase=\"Running\"} 7\n\
            tideway_workloads{phase=\"Succeeded\"} 11\n\
            tideway_workloads_other{phase=\"Pending\"} 100\n\
            tideway_member_phase{cluster=\"a\"} 1\n";
        let l = parse_live(text);
        assert_eq!((l.total, l.active), (23, 12));
    }
}
