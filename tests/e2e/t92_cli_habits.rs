//! CLI habits a script relies on: exit codes that tell not-found (3), forbidden (4) and
//! unavailable (5) apart, and `--queue` of an unknown queue as an error rather than an empty
//! list.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::BIN;

struct Dev(Child);

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs the CLI without any configuration or token; (exit code, stdout + stderr).
fn run(addr: &str, args: &[&str], dir: &Path) -> (i32, String) {
    let out = Command::new(BIN)
        .args(args)
        .env("TIDEWAY_ADDR", addr)
        .env("TIDEWAY_CONFIG", dir.join("no-config"))
        .env_remove("TIDEWAY_TOKEN")
        .output()
        .expect("run tideway");
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_tell_not_found_forbidden_and_unavailable_apart() {
    let _serial = crate::common::serial().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let addr = tideway_testkit::free_addr().expect("a free port");
    let log = std::fs::File::create(dir.path().join("dev.log")).expect("log");
    let _dev = Dev(Command::new(BIN)
        .args([
            "dev",
            "--listen",
            &addr,
            "--start-at",
            "2026-01-05T12:00:00+01:00",
        ])
        .env("TIDEWAY_CONFIG", dir.path().join("dev-config"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("tideway dev starts"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while run(&addr, &["queues"], dir.path()).0 != 0 {
        assert!(Instant::now() < deadline, "tideway dev never answered");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    let (code, out) = run(&addr, &["get", "no-such-workload"], dir.path());
    assert_eq!(code, 3, "get of a missing workload: {out}");
    let (code, out) = run(&addr, &["list", "--queue", "no-such-queue"], dir.path());
    assert_eq!(code, 3, "list --queue of an unknown queue: {out}");
    assert!(
        out.contains("no-such-queue") && out.contains("default"),
        "{out}"
    );
    let (code, out) = run(&addr, &["list", "--queue", "default"], dir.path());
    assert_eq!(code, 0, "list --queue default: {out}");

    // Reads are open on the dev loopback; a change without the token is refused.
    let (code, out) = run(&addr, &["cancel", "anything"], dir.path());
    assert_eq!(code, 4, "cancel without a token: {out}");

    let nobody = tideway_testkit::free_addr().expect("a free port");
    let (code, out) = run(&nobody, &["list"], dir.path());
    assert_eq!(code, 5, "list against nothing: {out}");
}
