//! Logs as operators read them: `--log-format json` writes one JSON object per line, text
//! logs carry no colour codes into a file, and joins, registrations, submissions, assignments
//! and health changes each leave an INFO line.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{BIN, tideway_with_config};

/// `tideway dev`, killed when the test ends however it ends.
struct Dev(Child);

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(dir: &Path, addr: &str, format: &str) -> Dev {
    let out = std::fs::File::create(dir.join("stdout.log")).expect("log file");
    let err = std::fs::File::create(dir.join("stderr.log")).expect("log file");
    Dev(Command::new(BIN)
        .args(["dev", "--log-format", format, "--listen", addr])
        .args(["--start-at", "2026-01-05T12:00:00+01:00", "--data"])
        .arg(dir.join("data"))
        .env("TIDEWAY_CONFIG", dir.join("cli-config"))
        .env_remove("TIDEWAY_LOG")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .expect("tideway dev starts"))
}

/// Waits until the log at `path` has a line with every one of `needles`; returns the log.
async fn wait_for_lines(path: &Path, needles: &[&str]) -> String {
    let text = crate::common::log_within(path, needles, Duration::from_secs(60)).await;
    assert!(
        needles.iter().all(|n| text.contains(n)),
        "the log lacks some of {needles:?}:\n{text}"
    );
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_and_text_logs_carry_an_info_line_per_event() {
    let _serial = crate::common::serial().await;
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));

    let dir = tempfile::tempdir().expect("tempdir");
    let addr = tideway_testkit::free_addr().expect("a free port");
    let _dev = start(dir.path(), &addr, "json");
    let log = dir.path().join("stderr.log");
    wait_for_lines(&log, &["member cluster registered"]).await;
    // The banner's suggestion works from any directory: an absolute path to a file that
    // exists, with the same workload as the repository's example.
    let banner = wait_for_lines(&dir.path().join("stdout.log"), &["Try: tideway submit -f "]).await;
    let example = banner
        .lines()
        .find_map(|l| l.strip_prefix("Try: tideway submit -f "))
        .and_then(|rest| rest.split(" --addr").next())
        .map(std::path::PathBuf::from)
        .expect("a Try line");
    assert!(example.is_absolute(), "{}", example.display());
    assert_eq!(
        std::fs::read_to_string(&example).expect("the banner's example exists"),
        std::fs::read_to_string(repo.join("api/testdata/workload-llama-ft.yaml")).unwrap()
    );
    let config = dir.path().join("cli-config");
    let mut submitted = false;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !submitted {
        let (ok, out, err) =
            tideway_with_config(&config, &addr, &["submit", "-f", example.to_str().unwrap()]);
        submitted = ok;
        assert!(ok || Instant::now() < deadline, "submit: {out}{err}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let text = wait_for_lines(&log, &["workload submitted", "workload assigned"]).await;
    let mut registered = std::collections::BTreeSet::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not a JSON log line ({e}): {line}"));
        assert!(
            v["level"].is_string() && v["timestamp"].is_string(),
            "{line}"
        );
        if v["fields"]["message"] == "member cluster registered" {
            assert_eq!(v["level"], "INFO", "{line}");
            registered.insert(v["fields"]["member"].as_str().unwrap().to_string());
        }
        if v["fields"]["message"] == "workload assigned" {
            assert_eq!(v["fields"]["workload"], "llama-ft-1", "{line}");
            assert!(v["fields"]["cluster"].is_string(), "{line}");
        }
    }
    assert_eq!(registered.len(), 3, "registrations: {registered:?}\n{text}");
    drop(_dev);

    // Text into a file: no ANSI colour codes.
    let dir = tempfile::tempdir().expect("tempdir");
    let addr = tideway_testkit::free_addr().expect("a free port");
    let _dev = start(dir.path(), &addr, "text");
    let text = wait_for_lines(
        &dir.path().join("stderr.log"),
        &["member cluster registered"],
    )
    .await;
    assert!(
        !text.contains('\u{1b}'),
        "colour codes in a log file:\n{text}"
    );
    assert!(text.contains(" INFO "), "{text}");
}
