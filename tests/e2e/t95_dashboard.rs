//! The web dashboard in a real browser: `tideway dev` as a process, workloads submitted with
//! the CLI, and Debian's headless Chromium driven by playwright-core
//! (`tests/browser/dashboard.mjs`) checking what an operator would look at: the three dev
//! clusters, a workload with the cluster it runs on, and a pending one with its reason.
//!
//! Needs `/usr/bin/chromium`, node and `tests/browser/node_modules` (`scripts/setup.sh`
//! installs them; `.ci/run` runs it first). Missing, the test fails and says so.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tideway_api::client::Client;
use tideway_testkit::free_addr;

use crate::common::*;

const CHROMIUM: &str = "/usr/bin/chromium";
const DEV_CLUSTERS: [&str; 3] = ["sim-eu", "sim-us", "sim-ap"];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Fails with the one instruction that fixes it when the browser tooling is not installed.
fn require_browser_tools() {
    let modules = repo().join("tests/browser/node_modules/playwright-core/package.json");
    let node = Command::new("node").arg("--version").output();
    let mut missing = Vec::new();
    if !Path::new(CHROMIUM).exists() {
        missing.push(format!("{CHROMIUM} (Debian package chromium)"));
    }
    if !node.is_ok_and(|o| o.status.success()) {
        missing.push("node (Debian package nodejs)".to_string());
    }
    if !modules.exists() {
        missing.push(format!("{}", modules.display()));
    }
    assert!(
        missing.is_empty(),
        "the dashboard's browser test needs {}: run scripts/setup.sh",
        missing.join(", ")
    );
}

/// `tideway dev` on a free port with its data in a test directory; killed on drop.
struct Dev {
    child: Child,
    addr: String,
}

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Midday in the dev schedule's zone, far from the runner's real date: the page's
/// "updated" time must follow this clock, not the browser's.
const DEV_START: &str = "2026-01-05T12:00:00+01:00";

fn start_dev(dir: &Path) -> Dev {
    let addr = free_addr().expect("free port");
    let log = std::fs::File::create(dir.join("dev.log")).expect("log file");
    let child = Command::new(BIN)
        // Midday in the dev schedule's zone: the same tidal window on every run.
        .args(["dev", "--listen", &addr, "--start-at", DEV_START, "--data"])
        .arg(dir.join("data"))
        // Its CLI context goes to the test's directory, never the runner's ~/.config.
        .env("TIDEWAY_CONFIG", dir.join("cli-config"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("start tideway dev");
    Dev { child, addr }
}

async fn wait_until<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A gang larger than any dev cluster: stays pending with a capacity reason.
const TOO_BIG: &str = "apiVersion: tideway.dev/v1alpha1\nkind: Workload\nmetadata: {name: too-big-1}\nspec:\n  queue: default\n  class: training\n  podSets:\n  - {name: worker, count: 40, gpusPerPod: 8, flavor: H100}\n  gang: {minCount: 40}\n  topology: {required: rack}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_shows_clusters_assignments_and_pending_reasons() {
    require_browser_tools();
    // The harness lock: not beside another test's processes on a 2-core machine.
    let _serial = exclusive().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = start_dev(dir.path());
    let c = Client::new(&dev.addr).expect("client");

    // The three simulated members register and report capacity.
    wait_until(
        "the dev members' capacity",
        Duration::from_secs(60),
        || async {
            let v = c.capacity(false).await.ok()?;
            (v.clusters.len() == 3 && v.clusters.iter().all(|c| c.capacity.total > 0)).then_some(())
        },
    )
    .await;

    let banner = std::fs::read_to_string(dir.path().join("dev.log")).unwrap();
    let url = format!("http://{}/ui/", dev.addr);
    assert!(
        banner.contains(&format!("dashboard: {url}")),
        "the dev banner does not print the dashboard URL:\n{banner}"
    );

    // Submitted the way a user does: the CLI.
    let example = repo().join("api/testdata/workload-llama-ft.yaml");
    let (ok, out, err) = tideway_with_config(
        &dir.path().join("cli-config"),
        &dev.addr,
        &["submit", "-f", example.to_str().unwrap()],
    );
    assert!(ok, "submit: {out}{err}");
    let too_big = dir.path().join("too-big.yaml");
    std::fs::write(&too_big, TOO_BIG).unwrap();
    let (ok, out, err) = tideway_with_config(
        &dir.path().join("cli-config"),
        &dev.addr,
        &["submit", "-f", too_big.to_str().unwrap()],
    );
    assert!(ok, "submit: {out}{err}");

    let cluster = wait_until("llama-ft-1 assigned", Duration::from_secs(30), || async {
        c.get("llama-ft-1", false).await.ok()?.status?.cluster
    })
    .await;
    assert!(DEV_CLUSTERS.contains(&cluster.as_str()), "{cluster}");
    let reason = wait_until(
        "too-big-1's pending reason",
        Duration::from_secs(30),
        || async {
            let st = c.get("too-big-1", false).await.ok()?.status?;
            st.pending_reason
                .map(|r| r.code().to_string())
                .filter(|r| r != "Queued")
        },
    )
    .await;

    let shot = std::env::var_os("TIDEWAY_DASHBOARD_SCREENSHOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| dir.path().join("dashboard.png"));
    let spec = serde_json::json!({
        "url": url,
        "clusters": DEV_CLUSTERS,
        "assigned": {"name": "llama-ft-1", "cluster": cluster},
        "pending": {"name": "too-big-1", "reason": reason},
        "fleetStart": DEV_START,
        "screenshot": shot,
    });
    let out = Command::new("node")
        .arg(repo().join("tests/browser/dashboard.mjs"))
        .arg(spec.to_string())
        .output()
        .expect("run node");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "browser checks failed: {stdout}{stderr}\n(dev log: {})",
        std::fs::read_to_string(dir.path().join("dev.log")).unwrap_or_default()
    );
    let result: serde_json::Value = serde_json::from_str(stdout.trim()).expect("result json");
    assert_eq!(result["ok"], true, "{stdout}");
    let png = std::fs::read(&shot).expect("screenshot written");
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_is_served_from_the_binary() {
    let tc = cluster(1, &[]).await;
    let addr = tc.c.addrs()[0].clone();
    let http = tideway_api::http::client_builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let root = http.get(format!("http://{addr}/")).send().await.unwrap();
    assert!(root.status().is_redirection(), "{}", root.status());
    assert_eq!(root.headers()["location"], "/ui/");
    for (path, ty) in [
        ("/ui/", "text/html"),
        ("/ui/app.js", "text/javascript"),
        ("/ui/style.css", "text/css"),
    ] {
        let r = http
            .get(format!("http://{addr}{path}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{path}");
        let ct = r.headers()["content-type"].to_str().unwrap().to_string();
        assert!(ct.starts_with(ty), "{path}: {ct}");
        let body = r.text().await.unwrap();
        assert!(
            !body.contains("http://") && !body.contains("https://"),
            "{path} loads something from elsewhere"
        );
    }
    let missing = http
        .get(format!("http://{addr}/ui/nope.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
}
