//! 2,400 submissions from concurrent clients over all three nodes; the leader is killed with
//! SIGKILL midway and restarted. Every acknowledged workload must be on every node exactly
//! once, and the three state machines must be identical.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tideway_api::client::Client;
use tokio::sync::Mutex;

use crate::common::*;

const CLIENTS: usize = 24;
const PER_CLIENT: usize = 100;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_submissions_survive_leader_kill() {
    let mut tc = cluster(3, &[]).await;
    let addrs = Arc::new(tc.c.addrs());
    let acked = Arc::new(Mutex::new(BTreeSet::new()));
    let count = Arc::new(AtomicUsize::new(0));
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let (addrs, acked, count) = (addrs.clone(), acked.clone(), count.clone());
        tasks.push(tokio::spawn(async move {
            let clients: Vec<Client> = addrs
                .iter()
                .map(|a| Client::new(a).expect("client"))
                .collect();
            for i in 0..PER_CLIENT {
                let name = format!("w-{c}-{i}");
                if submit_with(&clients, c, &name, deadline).await {
                    acked.lock().await.insert(name);
                    count.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    // Midway: kill the leader with SIGKILL, then bring it back.
    while count.load(Ordering::Relaxed) < CLIENTS * PER_CLIENT / 2 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let leader =
        tc.c.wait_for_leader(Duration::from_secs(10))
            .await
            .expect("leader");
    tc.c.kill9(leader).expect("kill -9");
    let at_kill = count.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // The survivors saw the dead leader's watch break and campaigned at the end of its
    // lease (see `raft::leader_watch`), without waiting for Raft's election timer.
    let mut campaigns = 0.0;
    for id in tc.c.nodes.keys().copied().filter(|id| *id != leader) {
        campaigns += leader_gone_campaigns(&tc.c.url(id)).await;
    }
    assert!(
        campaigns >= 1.0,
        "no survivor campaigned on the dead leader's broken watch"
    );
    tc.c.restart(leader).await.expect("restart");
    for t in tasks {
        t.await.expect("client task");
    }
    let acked = acked.lock().await.clone();
    assert_eq!(
        acked.len(),
        CLIENTS * PER_CLIENT,
        "every submission was acknowledged in the end"
    );
    assert!(
        at_kill < acked.len(),
        "the kill happened while clients were submitting"
    );

    let statuses =
        tc.c.wait_converged(Duration::from_secs(60))
            .await
            .expect("converge");
    assert_eq!(statuses.len(), 3);
    let digests: BTreeSet<_> = statuses.iter().map(|s| s.state_digest.clone()).collect();
    assert_eq!(digests.len(), 1, "state machines differ: {statuses:#?}");
    for addr in addrs.iter() {
        let n = assert_holds_exactly_once(addr, &acked).await;
        assert_eq!(n, acked.len(), "{addr} holds workloads nobody submitted");
    }
    // Batching: a burst of concurrent submissions to one node shares log entries (and so
    // fsyncs): far fewer entries than submissions.
    let before = statuses[0].last_log_index.unwrap_or(0);
    let burst = 64;
    let one = Arc::new(Client::new(&addrs[0]).expect("client"));
    let mut bt = Vec::new();
    for i in 0..burst {
        let one = one.clone();
        bt.push(tokio::spawn(async move {
            let name = format!("burst-{i}");
            one.submit_raw(workload_json(&name).into_bytes(), false, Some(&name))
                .await
                .expect("burst submission");
        }));
    }
    for t in bt {
        t.await.expect("burst task");
    }
    let after =
        tc.c.wait_converged(Duration::from_secs(30))
            .await
            .expect("converge");
    let entries = after[0].last_log_index.unwrap_or(0) - before;
    eprintln!("a burst of {burst} submissions took {entries} log entries");
    assert!(
        entries <= burst / 2,
        "{entries} log entries for a burst of {burst} submissions: proposals are not batched"
    );
}

/// `tideway_raft_leader_gone_campaigns_total` of the node at `url`.
async fn leader_gone_campaigns(url: &str) -> f64 {
    let text = reqwest::get(format!("{url}/metrics"))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics text");
    text.lines()
        .find_map(|l| l.strip_prefix("tideway_raft_leader_gone_campaigns_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no leader-gone campaign counter in:\n{text}"))
}
