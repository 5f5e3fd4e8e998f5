//! A reader that goes away is the normal end of output: `tideway list -w | head -1` and every
//! other verb exit 0 without a panic or a backtrace when stdout is a closed pipe.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;

/// Runs `args` with stdout a pipe whose reader is gone before the first line is written;
/// answers the exit code and what went to stderr.
fn with_closed_stdout(addr: &str, args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(BIN)
        .args(args)
        .env("TIDEWAY_ADDR", addr)
        .env("TIDEWAY_CONFIG", "/nonexistent/tideway-config")
        .env_remove("TIDEWAY_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tideway");
    drop(child.stdout.take());
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("tideway {args:?} did not end after its reader went away");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut err)
        .expect("read stderr");
    (status.code(), err)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_pipe_ends_every_verb_quietly() {
    let tc = cluster(1, &[]).await;
    tc.c.wait_for_leader(Duration::from_secs(15))
        .await
        .expect("leader");
    let addr = tc.c.nodes[&1].addr.clone();
    for i in 0..3 {
        assert!(
            submit_until_acked(
                std::slice::from_ref(&addr),
                0,
                &format!("pipe-{i}"),
                Instant::now() + Duration::from_secs(10)
            )
            .await
        );
    }
    for args in [
        &["list", "-w"][..],
        &["list", "-o", "wide"],
        &["list", "-o", "yaml"],
        &["get", "pipe-0", "-o", "yaml"],
        &["events"],
        &["queues", "-o", "yaml"],
        &["cluster", "status"],
        &["capacity"],
        &["openapi"],
    ] {
        let (code, err) = with_closed_stdout(&addr, args);
        assert_eq!(code, Some(0), "tideway {args:?}: {err}");
        assert!(
            !err.contains("panicked") && !err.contains("Broken pipe"),
            "tideway {args:?}: {err}"
        );
    }
}
