//! `tideway dev --demo`: workloads sampled from the traces (or the built-in synthetic stream
//! when there are none) are submitted and assigned to the simulated members without any
//! client submitting anything.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tideway_api::client::{Client, ListQuery};

use crate::common::BIN;

/// `tideway dev`, killed when the test ends however it ends.
struct Dev(Child);

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(dir: &Path, addr: &str, traces: Option<&Path>) -> Dev {
    let log = std::fs::File::create(dir.join("dev.log")).expect("log file");
    let mut cmd = Command::new(BIN);
    cmd.args([
        "dev",
        "--demo",
        "--demo-interval-ms",
        "200",
        "--listen",
        addr,
    ])
    .args(["--start-at", "2026-01-05T12:00:00+01:00", "--data"])
    .arg(dir.join("data"))
    .env("TIDEWAY_CONFIG", dir.join("cli-config"))
    .env_remove("TRACES")
    .stdin(Stdio::null())
    .stdout(log.try_clone().expect("log"))
    .stderr(log);
    if let Some(t) = traces {
        cmd.env("TRACES", t);
    }
    Dev(cmd.spawn().expect("tideway dev starts"))
}

/// Waits until at least `n` demo workloads are assigned to a member; returns their clusters.
async fn assigned_demo_workloads(addr: &str, n: usize, log: &Path) -> BTreeSet<String> {
    let c = Client::new(addr).expect("client");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let q = ListQuery {
            limit: Some(1000),
            stale: true,
            ..Default::default()
        };
        if let Ok(page) = c.list(&q).await {
            assert!(
                page.items
                    .iter()
                    .all(|w| w.metadata.name.starts_with("demo-")),
                "a workload nobody submitted that is not the demo's"
            );
            let assigned: Vec<String> = page
                .items
                .iter()
                .filter_map(|w| w.status.as_ref()?.cluster.clone())
                .collect();
            if assigned.len() >= n {
                return assigned.into_iter().collect();
            }
        }
        if Instant::now() > deadline {
            let tail = std::fs::read_to_string(log).unwrap_or_default();
            panic!("fewer than {n} demo workloads assigned within 60 s; dev log:\n{tail}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn banner(log: &Path) -> String {
    std::fs::read_to_string(log).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_fleet_moves_without_anyone_submitting() {
    let _serial = crate::common::serial().await;
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let traces = repo.join("../shared/traces");

    // The traces as a user finds them next to the repo (the synthetic stream when absent).
    let dir = tempfile::tempdir().expect("tempdir");
    let addr = tideway_testkit::free_addr().expect("a free port");
    let dev = start(dir.path(), &addr, None);
    let clusters = assigned_demo_workloads(&addr, 5, &dir.path().join("dev.log")).await;
    assert!(!clusters.is_empty());
    let log = banner(&dir.path().join("dev.log"));
    let want = if traces.join("philly/philly.csv").is_file() {
        "sampled from the traces"
    } else {
        "built-in synthetic stream"
    };
    assert!(
        log.contains(want),
        "the banner does not say '{want}':\n{log}"
    );
    drop(dev);

    // No traces at all: the built-in stream still moves every view.
    let dir = tempfile::tempdir().expect("tempdir");
    let empty = dir.path().join("no-traces");
    std::fs::create_dir(&empty).unwrap();
    let addr = tideway_testkit::free_addr().expect("a free port");
    let _dev = start(dir.path(), &addr, Some(&empty));
    assigned_demo_workloads(&addr, 5, &dir.path().join("dev.log")).await;
    let log = banner(&dir.path().join("dev.log"));
    assert!(
        log.contains("built-in synthetic stream"),
        "the banner does not name the synthetic stream:\n{log}"
    );
}
