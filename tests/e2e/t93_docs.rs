//! Every command in the docs is run: the quick start's ```` ```sh server ```` block starts
//! `tideway dev` (on a free port), then every ```` ```sh runnable ```` block of the docs runs
//! in order with `bash -e` from the repository root, against it, with the built `tideway` first
//! on PATH and `127.0.0.1:7400` replaced by the dev's address. A block may be retried for a
//! while (the fleet registers and schedules asynchronously) but must succeed.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::BIN;

/// The docs whose runnable blocks run, in this order (later ones use what earlier made).
const DOCS: [&str; 5] = [
    "docs/quickstart.md",
    "docs/concepts.md",
    "docs/policy-cookbook.md",
    "docs/troubleshooting.md",
    "docs/runbook.md",
];

struct Dev(Child);

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The fenced blocks of `text` whose info string is `sh <tag>`, with their first line number.
fn blocks(text: &str, tag: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        match &mut current {
            None if line.trim() == format!("```sh {tag}") => current = Some((i + 1, String::new())),
            None => {}
            Some(_) if line.trim() == "```" => out.extend(current.take()),
            Some((_, body)) => {
                body.push_str(line);
                body.push('\n');
            }
        }
    }
    out
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn run_block(body: &str, addr: &str, config: &Path) -> (bool, String) {
    let bin_dir = Path::new(BIN).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("bash")
        .args(["-e", "-o", "pipefail", "-c"])
        .arg(body.replace("127.0.0.1:7400", addr))
        .current_dir(repo())
        .env("PATH", path)
        .env("TIDEWAY_CONFIG", config)
        .env_remove("TIDEWAY_ADDR")
        .env_remove("TIDEWAY_TOKEN")
        .output()
        .expect("bash runs");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_runnable_block_in_the_docs_runs_against_tideway_dev() {
    let _serial = crate::common::serial().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("cli-config");
    let quick = std::fs::read_to_string(repo().join(DOCS[0])).unwrap();
    let server = blocks(&quick, "server");
    assert_eq!(server.len(), 1, "the quick start has one server block");
    let words: Vec<&str> = server[0].1.split_whitespace().collect();
    assert_eq!(words[..2], ["tideway", "dev"], "{words:?}");

    let addr = tideway_testkit::free_addr().expect("a free port");
    let log = std::fs::File::create(dir.path().join("dev.log")).expect("log");
    let _dev = Dev(Command::new(BIN)
        .args(&words[1..])
        .args(["--listen", &addr, "--start-at", "2026-01-05T12:00:00+01:00"])
        .env("TIDEWAY_CONFIG", &config)
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("tideway dev starts"));
    let _ = crate::common::dev_admin_token(&dir.path().join("dev.log")).await;

    let mut ran = 0;
    for doc in DOCS {
        let text = std::fs::read_to_string(repo().join(doc)).unwrap();
        let runnable = blocks(&text, "runnable");
        assert!(!runnable.is_empty(), "{doc} has no runnable block");
        for (line, body) in runnable {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let (ok, out) = run_block(&body, &addr, &config);
                if ok {
                    break;
                }
                if Instant::now() > deadline {
                    let tail =
                        std::fs::read_to_string(dir.path().join("dev.log")).unwrap_or_default();
                    let tail: Vec<&str> = tail.lines().rev().take(30).collect();
                    panic!(
                        "{doc}:{line} fails:\n{body}\n--- output ---\n{out}\n--- dev log (last lines, newest first) ---\n{}",
                        tail.join("\n")
                    );
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            ran += 1;
        }
    }
    assert!(ran >= 10, "only {ran} runnable blocks");
}
