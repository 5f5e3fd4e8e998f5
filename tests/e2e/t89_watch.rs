//! Watch with real processes and the CLI: `tideway list -w -o json` streams the workloads
//! present and then each change as it is committed; killed (a lost connection) and started
//! again with `--resource-version` of the last event it printed, it resumes with the change
//! made while it was away and repeats nothing. `tideway get ID -w` follows one workload.
//! The typed client's watch answers at once when a change is there and waits otherwise.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tideway_api::client::Client;
use tideway_api::watch::{WatchEvent, WatchEventType};

use crate::common::*;

/// A CLI process whose stdout lines arrive on a channel; killed on drop.
struct Streaming {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Drop for Streaming {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn stream(addr: &str, args: &[&str]) -> Streaming {
    let mut child = Command::new(BIN)
        .args(args)
        .env("TIDEWAY_ADDR", addr)
        .env("TIDEWAY_CONFIG", "/nonexistent/tideway-config")
        .env_remove("TIDEWAY_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    Streaming { child, lines }
}

async fn submit(client: &Client, name: &str) {
    client
        .submit_raw(workload_json(name).into_bytes(), false, None)
        .await
        .unwrap();
}

/// The next event the process prints within a generous deadline.
fn next_event(s: &Streaming, what: &str) -> WatchEvent {
    let line = s
        .lines
        .recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("no watch event ({what}): {e}"));
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_and_get_watch_stream_changes_and_resume_after_a_disconnect() {
    let tc = cluster(1, &[]).await;
    let addr = tc.c.addrs()[0].clone();
    let client = Client::new(&addr).unwrap();
    submit(&client, "first").await;

    let w = stream(&addr, &["list", "-w", "-o", "json"]);
    let ev = next_event(&w, "the present workload");
    assert_eq!(
        (ev.kind, ev.name.as_str()),
        (WatchEventType::Added, "first")
    );
    submit(&client, "second").await;
    let ev = next_event(&w, "a submission");
    assert_eq!(
        (ev.kind, ev.name.as_str()),
        (WatchEventType::Added, "second")
    );
    let last = ev.resource_version;
    drop(w); // the connection is lost

    client.cancel("first").await.unwrap();
    let w = stream(
        &addr,
        &[
            "list",
            "-w",
            "-o",
            "json",
            "--resource-version",
            &last.to_string(),
        ],
    );
    let ev = next_event(&w, "the change made while away");
    assert_eq!(
        (ev.kind, ev.name.as_str()),
        (WatchEventType::Modified, "first"),
        "resumed after {last}: {ev:?}"
    );
    let phase = ev.object.unwrap().status.unwrap().phase;
    assert_eq!(phase.as_str(), "Cancelled");
    assert!(ev.resource_version > last);

    // `get -w` follows one workload only.
    let g = stream(&addr, &["get", "second", "-w", "-o", "json"]);
    let ev = next_event(&g, "the watched workload");
    assert_eq!(ev.name, "second");
    let from = ev.resource_version;
    submit(&client, "third").await;
    client.cancel("second").await.unwrap();
    let ev = next_event(&g, "its cancel");
    assert_eq!(
        (ev.kind, ev.name.as_str()),
        (WatchEventType::Modified, "second")
    );
    assert!(ev.resource_version > from);
    let ev = next_event(&w, "the list watch sees the new one too");
    assert_eq!(ev.name, "third");

    // The typed client: an empty answer only after the wait, with a version to resume from.
    let page = client.watch(None, None, 0, 5).await.unwrap();
    assert_eq!(page.items.len(), 3, "{:?}", page.items);
    let started = Instant::now();
    let idle = client
        .watch(None, None, page.resource_version, 1)
        .await
        .unwrap();
    assert!(idle.items.is_empty(), "{:?}", idle.items);
    assert!(started.elapsed() >= Duration::from_millis(900));
    assert!(idle.resource_version >= page.resource_version);
    drop(tc);
}

/// A watch resumed from a version whose deletions the audit retention has cut away gets 410
/// Gone naming the version and the oldest one it could resume from; `tideway list -w` then
/// lists again from 0 and goes on, as a Kubernetes reflector does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_from_a_compacted_version_is_gone_and_the_cli_lists_again() {
    let tc = cluster(1, &["--audit-retain", "3"]).await;
    let addr = tc.c.addrs()[0].clone();
    let client = Client::new(&addr).unwrap();
    submit(&client, "old-0").await;
    let early = client
        .watch(None, None, 0, 1)
        .await
        .unwrap()
        .resource_version;
    assert!(early > 0);
    for i in 1..6 {
        submit(&client, &format!("old-{i}")).await;
    }
    // The retention pass runs every few seconds: wait for it to cut past `early`.
    let deadline = Instant::now() + Duration::from_secs(60);
    let problem = loop {
        match client.watch(None, None, early, 1).await {
            Err(tideway_api::client::ClientError::Problem(p)) => break p,
            Ok(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            other => panic!("no 410 for version {early} within 60 s: {other:?}"),
        }
    };
    assert_eq!(problem.status, 410, "{problem:?}");
    assert!(problem.type_.ends_with("/expired"), "{problem:?}");
    let field = problem
        .errors
        .iter()
        .find(|e| e.field == "query:resourceVersion")
        .unwrap_or_else(|| panic!("no resourceVersion field: {problem:?}"));
    assert!(
        field.reason.contains(&format!("version {early} ")) && field.reason.contains("oldest"),
        "{field:?}"
    );
    // From 0 is a list, never gone.
    let listed = client.watch(None, None, 0, 1).await.unwrap();
    assert_eq!(listed.items.len(), 6, "{:?}", listed.items);

    // The CLI resumed from there lists again: every workload as ADDED, then goes on.
    let w = stream(
        &addr,
        &[
            "list",
            "-w",
            "-o",
            "json",
            "--resource-version",
            &early.to_string(),
        ],
    );
    let mut seen: Vec<String> = (0..6)
        .map(|_| {
            let ev = next_event(&w, "the list again");
            assert_eq!(ev.kind, WatchEventType::Added, "{ev:?}");
            ev.name
        })
        .collect();
    seen.sort();
    assert_eq!(seen, (0..6).map(|i| format!("old-{i}")).collect::<Vec<_>>());
    submit(&client, "new").await;
    let ev = next_event(&w, "a change after the list");
    assert_eq!((ev.kind, ev.name.as_str()), (WatchEventType::Added, "new"));
    drop(tc);
}
