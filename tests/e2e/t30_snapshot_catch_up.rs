//! A forced snapshot and log purge, then a fresh fourth node that can only catch up through
//! the snapshot.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fresh_node_catches_up_through_snapshot() {
    let mut tc = cluster(3, &[]).await;
    let addrs = tc.c.addrs();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut acked = BTreeSet::new();
    for i in 0..150 {
        let name = format!("s-{i}");
        assert!(submit_until_acked(&addrs, i, &name, deadline).await);
        acked.insert(name);
    }
    tc.c.wait_converged(Duration::from_secs(30))
        .await
        .expect("converge");
    // Snapshot and purge on every node, so no node can replay the log from the start.
    for id in 1..=3 {
        let v =
            tc.c.client(id)
                .unwrap()
                .cluster_snapshot()
                .await
                .expect("snapshot");
        assert!(v.purged.unwrap_or(0) > 0, "node {id} purged nothing: {v:?}");
    }
    let leader = tc.c.wait_for_leader(Duration::from_secs(10)).await.unwrap();
    let ls = tc.c.status(leader).await.unwrap();
    assert!(ls.purged.unwrap_or(0) > 0, "the leader's log was purged");

    let via = tc.c.nodes[&leader].addr.clone();
    tc.c.add_node(4, Some(&via)).await.expect("start node 4");
    tc.c.wait_for_voters(4, Duration::from_secs(60))
        .await
        .expect("node 4 is a voter");
    let all =
        tc.c.wait_converged(Duration::from_secs(60))
            .await
            .expect("converge");
    assert_eq!(all.len(), 4);
    let n4 = all.iter().find(|s| s.id == 4).expect("node 4 status");
    assert!(
        n4.snapshot.unwrap_or(0) >= ls.purged.unwrap_or(0),
        "node 4 installed a snapshot that covers the purged log: {n4:#?}"
    );
    let n = assert_holds_exactly_once(&tc.c.nodes[&4].addr, &acked).await;
    assert_eq!(n, acked.len());
}
