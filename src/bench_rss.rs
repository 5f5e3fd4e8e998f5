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
    /// Give up waiting for compaction after this long.
    pub settle_timeout: Duration,
}

fn body(name: &str) -> String {
    format!(
        r#"{{"apiVersion":"tideway.dev/v1alpha1","kind":"Workload","metadata":{{"name":"{name}"}},"spec":{{"queue":"default","class":"training","priorityClass":"normal","podSets":[{{"name":"worker","count":1,"gpusPerPod":1,"flavor":"H100"}}],"gang":{{"minCount":1}},"runtimeEstimateSeconds":60}}}}"#
    )
}

/// Resident set size of `pid` in KiB, from /proc (Linux only).
fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmRSS line")
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

pub async fn run(run: RssRun) -> anyhow::Result<()> {
    let (dev, addr, token) = start_dev(&run)?;
    let pid = dev.child.id();
    let client = Client::with_token(&addr, Some(&token))?;
    let clock = RealClock;
    let start = clock.instant();
    while client.cluster_status().await.is_err() {
        if start.elapsed() > Duration::from_secs(60) {
            bail!("tideway dev did not answer within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss_start = rss_kib(pid)?;
    let peak = Arc::new(AtomicU64::new(rss_start));
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..run.clients {
        let (client, next, total) = (client.clone(), next.clone(), run.workloads);
        tasks.push(tokio::spawn(async move {
            loop {
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
            }
        }));
    }
    let sampler = {
        let (peak, next, total) = (peak.clone(), next.clone(), run.workloads);
        tokio::spawn(async move {
            let clock = RealClock;
            let t0 = clock.instant();
            loop {
                if let Ok(r) = rss_kib(pid) {
                    peak.fetch_max(r, Ordering::Relaxed);
                }
                let sent = next.load(Ordering::Relaxed).min(total);
                eprintln!(
                    "{:>6.0} s  submitted {sent}  rss {} MiB",
                    t0.elapsed().as_secs_f64(),
                    rss_kib(pid).unwrap_or(0) / 1024
                );
                tokio::time::sleep(Duration::from_secs(10)).await;
            }
        })
    };
    for t in tasks {
        t.await?;
    }
    let submitted_after = start.elapsed();
    let rss_submitted = rss_kib(pid)?;
    // The status encodes the whole state for its digest: on a loaded machine it may time out,
    // which is no reason to lose the run.
    let live_now = || async {
        loop {
            match client.cluster_status().await {
                Ok(s) => return s.workloads,
                Err(e) => eprintln!("cluster status: {e}; retrying"),
            }
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
    };
    let live_at_submitted = live_now().await;
    // Wait until every workload has finished and been compacted out of the live state.
    let settle = clock.instant();
    let mut live = live_at_submitted;
    while live > 0 && settle.elapsed() < run.settle_timeout {
        tokio::time::sleep(Duration::from_secs(5)).await;
        live = live_now().await;
    }
    let rss_after = rss_kib(pid)?;
    sampler.abort();
    let peak = peak.load(Ordering::Relaxed).max(rss_submitted);
    let mib = |k: u64| k as f64 / 1024.0;
    println!("workloads submitted:          {}", run.workloads);
    println!(
        "submission took:              {:.0} s",
        submitted_after.as_secs_f64()
    );
    println!("rss at start:                 {:.1} MiB", mib(rss_start));
    println!("rss peak:                     {:.1} MiB", mib(peak));
    println!(
        "rss when all were submitted:  {:.1} MiB ({live_at_submitted} workloads in the live state)",
        mib(rss_submitted)
    );
    println!(
        "rss after compaction:         {:.1} MiB ({live} workloads in the live state, {:.0} s later)",
        mib(rss_after),
        settle.elapsed().as_secs_f64()
    );
    if live > 0 {
        bail!(
            "{live} workloads were still live after {:?}",
            run.settle_timeout
        );
    }
    Ok(())
}
