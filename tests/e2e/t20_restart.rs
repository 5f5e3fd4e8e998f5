//! Restarting all three nodes, cleanly and with SIGKILL, finds the same state.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_restart_clean_and_kill9_keeps_state() {
    let mut tc = cluster(3, &[]).await;
    let addrs = tc.c.addrs();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut acked = BTreeSet::new();
    for i in 0..60 {
        let name = format!("r-{i}");
        assert!(submit_until_acked(&addrs, i, &name, deadline).await);
        acked.insert(name);
    }
    let before =
        tc.c.wait_converged(Duration::from_secs(30))
            .await
            .expect("converge");
    let digest = before[0].state_digest.clone();

    for (how, kill) in [("clean stop", false), ("kill -9", true)] {
        for id in 1..=3 {
            if kill {
                tc.c.kill9(id).expect("kill");
            } else {
                tc.c.stop(id).expect("stop");
            }
        }
        for id in 1..=3 {
            tc.c.restart(id).await.expect("restart");
        }
        tc.c.wait_for_leader(Duration::from_secs(30))
            .await
            .expect("leader after restart");
        let after =
            tc.c.wait_converged(Duration::from_secs(30))
                .await
                .expect("converge");
        // A new leader commits a blank entry, so the index moves on, but the state does not.
        for s in &after {
            assert_eq!(
                s.state_digest, digest,
                "after {how}: node {} state differs",
                s.id
            );
            assert_eq!(s.workloads, acked.len(), "after {how}: node {}", s.id);
        }
        for a in &addrs {
            assert_holds_exactly_once(a, &acked).await;
        }
    }
    // And the cluster still takes writes.
    assert!(
        submit_until_acked(
            &addrs,
            0,
            "after-restarts",
            Instant::now() + Duration::from_secs(30)
        )
        .await
    );
}
