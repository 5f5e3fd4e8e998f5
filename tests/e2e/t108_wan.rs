//! Three nodes whose peer planes are 50 ms apart (a `WanProxy` in front of each, so every
//! Raft round trip costs 50 ms): submissions from a few clients under load, the leader killed
//! with SIGKILL midway. Nothing acknowledged is lost, the survivors agree, the leader changes
//! at most once besides the kill, and the leader's status shows the round trips it measured.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tideway_api::client::Client;
use tideway_testkit::ProcCluster;
use tideway_testkit::wan::Link;
use tokio::sync::Mutex;

use crate::common::*;

const CLIENTS: usize = 6;
const RTT: Duration = Duration::from_millis(50);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_ms_apart_a_leader_kill_loses_nothing_acknowledged() {
    let _guard = serial().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut c = ProcCluster::start_wan(cluster_bin(), dir.path(), 3, &[], Link::with_rtt(RTT))
        .await
        .expect("start three nodes behind 50 ms proxies");
    let leader = c
        .wait_for_leader(Duration::from_secs(20))
        .await
        .expect("leader");
    let start_term = c.status(leader).await.expect("status").term;

    let addrs = Arc::new(c.addrs());
    let acked = Arc::new(Mutex::new(BTreeSet::new()));
    let count = Arc::new(AtomicUsize::new(0));
    let stop = Instant::now() + Duration::from_secs(14);
    let mut tasks = Vec::new();
    for n in 0..CLIENTS {
        let (addrs, acked, count) = (addrs.clone(), acked.clone(), count.clone());
        tasks.push(tokio::spawn(async move {
            let clients: Vec<Client> = addrs
                .iter()
                .map(|a| Client::new(a).expect("client"))
                .collect();
            let mut i = 0;
            while Instant::now() < stop {
                let name = format!("wan-{n}-{i}");
                // Each submission may retry for a while across the nodes (through the kill).
                if submit_with(&clients, n, &name, Instant::now() + Duration::from_secs(20)).await {
                    acked.lock().await.insert(name);
                    count.fetch_add(1, Ordering::Relaxed);
                }
                i += 1;
            }
        }));
    }

    // Load for a while, then check what the leader measured, then kill it.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let status = c.status(leader).await.expect("leader status");
    let followers: Vec<u64> = c.nodes.keys().copied().filter(|id| *id != leader).collect();
    for f in &followers {
        let rtt = status
            .peer_rtt
            .get(f)
            .unwrap_or_else(|| panic!("no round trip to node {f} in {:?}", status.peer_rtt));
        assert!(
            rtt.rtt_ms >= 0.9 * RTT.as_millis() as f64 && rtt.rtt_ms < 1000.0,
            "the round trip to node {f} through a 50 ms proxy measured {rtt:?}"
        );
    }
    let before_kill = count.load(Ordering::Relaxed);
    assert!(before_kill > 0, "nothing was acknowledged before the kill");
    c.kill9(leader).expect("kill -9 the leader");

    for t in tasks {
        t.await.expect("client task");
    }
    let acked = acked.lock().await.clone();
    assert!(
        acked.len() > before_kill,
        "nothing was acknowledged after the kill ({before_kill} before)"
    );

    // The survivors agree, and hold every acknowledged submission exactly once.
    let statuses = c
        .wait_converged(Duration::from_secs(30))
        .await
        .expect("the survivors converge");
    assert_eq!(statuses.len(), 2);
    for id in &followers {
        let n = assert_holds_exactly_once(&c.nodes[id].addr, &acked).await;
        assert_eq!(n, acked.len(), "node {id} holds workloads nobody submitted");
    }
    // One election for the kill; at most one more for anything else (a term is one
    // election: pre-votes do not raise it).
    let end_term = statuses.iter().map(|s| s.term).max().unwrap_or(0);
    assert!(
        end_term <= start_term + 2,
        "term went from {start_term} to {end_term}: leaders changed more than once besides the kill"
    );
    eprintln!(
        "50 ms apart: {} acknowledged ({before_kill} before the kill), term {start_term} -> {end_term}",
        acked.len()
    );
}
