//! Shared helpers of the end-to-end tests.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use tempfile::TempDir;
use tideway_api::Workload;
use tideway_api::client::{Client, ListQuery};
use tideway_testkit::ProcCluster;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A cluster of real processes and the directory it lives in; dropped together.
pub struct TestCluster {
    pub c: ProcCluster,
    _dir: TempDir,
    _guard: tokio::sync::MutexGuard<'static, ()>,
}

/// The harness lock, for tests that start their own processes.
pub async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    SERIAL.lock().await
}

pub const BIN: &str = env!("CARGO_BIN_EXE_tideway");

/// The binary the clusters run: `TIDEWAY_E2E_BIN` when set (a copy, so that a long chaos run
/// is not switched to a newer build halfway when its processes restart), else [`BIN`].
pub fn cluster_bin() -> String {
    std::env::var("TIDEWAY_E2E_BIN").unwrap_or_else(|_| BIN.to_string())
}

/// The harness lock alone, for a test that starts its own processes (e.g. `tideway dev`).
pub async fn exclusive() -> tokio::sync::MutexGuard<'static, ()> {
    SERIAL.lock().await
}

pub async fn cluster(n: u64, extra: &[&str]) -> TestCluster {
    let guard = SERIAL.lock().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let c = ProcCluster::start(cluster_bin(), dir.path(), n, extra)
        .await
        .expect("start cluster");
    TestCluster {
        c,
        _dir: dir,
        _guard: guard,
    }
}

/// A three-node cluster once all three are voters: the cluster, its leader and a follower.
pub async fn three_voters(extra: &[&str]) -> (TestCluster, u64, u64) {
    let tc = cluster(3, extra).await;
    let leader =
        tc.c.wait_for_leader(Duration::from_secs(15))
            .await
            .expect("leader");
    tc.c.wait_for_voters(3, Duration::from_secs(30))
        .await
        .expect("three voters");
    let follower =
        tc.c.nodes
            .keys()
            .copied()
            .find(|id| *id != leader)
            .expect("a follower");
    (tc, leader, follower)
}

/// As [`cluster`], for servers that require a bearer token; the harness sends `token`.
pub async fn cluster_with_token(n: u64, extra: &[&str], token: &str) -> TestCluster {
    let guard = SERIAL.lock().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let c =
        ProcCluster::start_with_token(cluster_bin(), dir.path(), n, extra, Some(token.to_string()))
            .await
            .expect("start cluster");
    TestCluster {
        c,
        _dir: dir,
        _guard: guard,
    }
}

pub fn workload_json(name: &str) -> String {
    format!(
        r#"{{"apiVersion":"tideway.dev/v1alpha1","kind":"Workload","metadata":{{"name":"{name}"}},"spec":{{"queue":"default","class":"training","priorityClass":"normal","podSets":[{{"name":"worker","count":2,"gpusPerPod":8,"flavor":"H100"}}],"gang":{{"minCount":2}},"topology":{{"required":"rack"}},"runtimeEstimateSeconds":7200,"checkpoint":{{"intervalSeconds":600}}}}}}"#
    )
}

/// Submits with retries across `addrs` (same name and key each time) until acknowledged or
/// the deadline passes. Returns whether it was acknowledged.
pub async fn submit_until_acked(
    addrs: &[String],
    start_at: usize,
    name: &str,
    deadline: Instant,
) -> bool {
    let clients: Vec<Client> = addrs
        .iter()
        .map(|a| Client::new(a).expect("client"))
        .collect();
    submit_with(&clients, start_at, name, deadline).await
}

/// As [`submit_until_acked`], over clients that keep their connections.
pub async fn submit_with(
    clients: &[Client],
    start_at: usize,
    name: &str,
    deadline: Instant,
) -> bool {
    let mut at = start_at;
    while Instant::now() < deadline {
        let client = &clients[at % clients.len()];
        match client
            .submit_raw(workload_json(name).into_bytes(), false, Some(name))
            .await
        {
            Ok(_) => return true,
            Err(_) => {
                at += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    false
}

/// Every workload a node holds in its own copy (stale reads, so each node answers for itself).
pub async fn all_workloads(addr: &str) -> Vec<Workload> {
    let client = Client::new(addr).expect("client");
    let mut q = ListQuery {
        limit: Some(1000),
        stale: true,
        ..Default::default()
    };
    let mut out = Vec::new();
    loop {
        let page = client.list(&q).await.expect("list");
        out.extend(page.items);
        match page.continue_ {
            Some(c) => q.after = Some(c),
            None => return out,
        }
    }
}

/// Asserts that the node at `addr` holds exactly the names in `acked` (each once), and maybe
/// others that were committed but whose acknowledgement the client never saw.
pub async fn assert_holds_exactly_once(addr: &str, acked: &BTreeSet<String>) -> usize {
    let items = all_workloads(addr).await;
    let names: Vec<&str> = items.iter().map(|w| w.metadata.name.as_str()).collect();
    let distinct: BTreeSet<&str> = names.iter().copied().collect();
    assert_eq!(
        names.len(),
        distinct.len(),
        "{addr}: a workload is listed twice"
    );
    let uids: BTreeSet<_> = items.iter().map(|w| w.metadata.uid.clone()).collect();
    assert_eq!(uids.len(), items.len(), "{addr}: two workloads share a UID");
    for n in acked {
        assert!(
            distinct.contains(n.as_str()),
            "{addr}: acknowledged workload {n} is missing"
        );
    }
    items.len()
}

/// Runs the `tideway` CLI against `addr` the way a user would; (success, stdout, stderr).
/// It reads no CLI configuration (the runner's ~/.config is none of a test's business).
pub fn tideway(addr: &str, args: &[&str]) -> (bool, String, String) {
    tideway_with_config(
        &std::env::temp_dir().join("tideway-e2e-no-config"),
        addr,
        args,
    )
}

/// As [`tideway`], with the CLI configuration at `config` (e.g. the one `tideway dev` wrote,
/// with its admin token).
pub fn tideway_with_config(
    config: &std::path::Path,
    addr: &str,
    args: &[&str],
) -> (bool, String, String) {
    let out = std::process::Command::new(BIN)
        .args(args)
        .env("TIDEWAY_ADDR", addr)
        .env("TIDEWAY_CONFIG", config)
        .output()
        .expect("run tideway");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A process's log once every one of `needles` is in it, or as it is after `within` (the
/// caller's assertion then shows it). A server writes its log lines from a thread of its own
/// within about 5 ms, so a line is not in the file the instant the request that logged it
/// returns.
pub async fn log_within(path: &std::path::Path, needles: &[&str], within: Duration) -> String {
    let deadline = Instant::now() + within;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if needles.iter().all(|n| text.contains(n)) || Instant::now() > deadline {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// [`log_within`] 10 s: for a line logged by a request that has already returned.
pub async fn log_with(path: &std::path::Path, needles: &[&str]) -> String {
    log_within(path, needles, Duration::from_secs(10)).await
}

/// The `admin token: <token>` line `tideway dev` prints, read from its log.
pub async fn dev_admin_token(log: &std::path::Path) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(t) = text.lines().find_map(|l| l.strip_prefix("admin token: ")) {
            return t.trim().to_string();
        }
        assert!(
            Instant::now() < deadline,
            "tideway dev printed no admin token"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A `tideway dev` process for a test: its data, log and CLI context in the test's
/// directory (never the runner's `~/.config`), killed when the test ends however it ends.
pub struct DevProcess {
    child: std::process::Child,
    /// Its API address.
    pub addr: String,
    /// Where its stdout and stderr go.
    pub log: std::path::PathBuf,
}

impl DevProcess {
    /// Starts `tideway dev` on a free port with `args` after the listen address, and `envs`.
    pub fn start(dir: &std::path::Path, args: &[&str], envs: &[(&str, &str)]) -> Self {
        let addr = tideway_testkit::free_addr().expect("a free port");
        let log = dir.join("dev.log");
        let out = std::fs::File::create(&log).expect("log file");
        let child = std::process::Command::new(BIN)
            .args(["dev", "--listen", &addr, "--data"])
            .arg(dir.join("data"))
            .args(args)
            .env("TIDEWAY_CONFIG", dir.join("cli-config"))
            .envs(envs.iter().copied())
            .stdin(std::process::Stdio::null())
            .stdout(out.try_clone().expect("log"))
            .stderr(out)
            .spawn()
            .expect("tideway dev starts");
        Self { child, addr, log }
    }

    /// The admin token it printed.
    pub async fn token(&self) -> String {
        dev_admin_token(&self.log).await
    }

    /// The last `n` lines of its log, for a failure message.
    pub fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

impl Drop for DevProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The applied index once it has stopped moving (a join's last membership entry, a new
/// leader's blank entry, the scheduler recording a reason): what a refusal must not move.
pub async fn settled_applied(c: &tideway_api::client::Client) -> Option<u64> {
    let mut last = None;
    for _ in 0..40 {
        let idx = c.cluster_status().await.unwrap().last_applied;
        if last == Some(idx) {
            return idx;
        }
        last = Some(idx);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!("the applied index never settled: {last:?}");
}

/// A `deploy/dev` member layout by name (`sim-eu`, `sim-us`, `sim-ap`).
pub fn dev_layout(name: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/dev"))
        .join(format!("{name}.yaml"))
}

/// Polls `probe` every 200 ms until it answers, failing the test after `within`.
pub async fn wait_for<T>(
    what: &str,
    within: Duration,
    mut probe: impl AsyncFnMut() -> Option<T>,
) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(start.elapsed() < within, "{what} not within {within:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One node that compacts finished work after 3 s, with the `sim-eu` member's agent
/// (300 ms heartbeats) Ready: the node, a client of it, and the fleet's idle capacity.
pub async fn one_node_with_sim_eu() -> (TestCluster, Client, tideway_api::capacity::CapacitySummary)
{
    let mut tc = cluster(
        1,
        &["--member-heartbeat-ms", "300", "--retain-terminal", "3"],
    )
    .await;
    tc.c.add_agent(
        "sim-eu",
        "eu-west",
        &dev_layout("sim-eu"),
        &["--heartbeat-ms", "300"],
    )
    .await
    .expect("agent");
    let addr = tc.c.addrs()[0].clone();
    let c = Client::new(&addr).expect("client");
    let idle = wait_for("capacity of sim-eu", Duration::from_secs(20), async || {
        let v = c.capacity(false).await.ok()?;
        (v.fleet.total > 0).then_some(v.fleet)
    })
    .await;
    (tc, c, idle)
}

/// The audit records of `kind` as `tideway events --kind KIND -o json` prints them (one JSON
/// object a line), or the CLI's standard error when it fails.
pub fn cli_events(addr: &str, token: &str, kind: &str) -> Result<Vec<serde_json::Value>, String> {
    let out = std::process::Command::new(BIN)
        .args([
            "events", "--kind", kind, "-o", "json", "--addr", addr, "--token", token,
        ])
        .output()
        .expect("tideway events runs");
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect())
}
