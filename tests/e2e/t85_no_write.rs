//! A refused request writes nothing to the log: re-submits of a taken name and status reports
//! that change nothing leave every node's log index where it was.

use std::time::Duration;

use serde_json::json;

use crate::common::*;

/// The leader's last log index once it has stopped moving (the scheduler records a pending
/// reason for a new workload once, then has nothing to write).
async fn settled_index(tc: &TestCluster, leader: u64) -> u64 {
    let mut last = None;
    for _ in 0..40 {
        let idx = tc.c.status(leader).await.expect("status").last_log_index;
        if last == Some(idx) {
            return idx.unwrap_or(0);
        }
        last = Some(idx);
        tokio::time::sleep(Duration::from_millis(750)).await;
    }
    panic!("the log never settled: {last:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_requests_do_not_move_the_log() {
    let tc = cluster(3, &[]).await;
    let leader =
        tc.c.wait_for_leader(Duration::from_secs(10))
            .await
            .expect("leader");
    let follower =
        tc.c.nodes
            .keys()
            .copied()
            .find(|id| *id != leader)
            .expect("follower");
    let addr = tc.c.addrs()[0].clone();
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/api/testdata/workload-llama-ft.yaml"
    );
    let (ok, out, err) = tideway(&addr, &["submit", "-f", example]);
    assert!(ok && out.contains("created"), "{out}{err}");
    let before = settled_index(&tc, leader).await;

    for i in 0..10 {
        let (ok, _, err) = tideway(&addr, &["submit", "-f", example]);
        assert!(!ok && err.contains("exists"), "re-submit {i}: {err}");
    }
    // Status reports for an unknown member, and for a workload no member holds, sent to a
    // follower and to the leader.
    let http = tideway_api::http::client_builder().build().expect("http");
    for (id, cluster) in [(follower, "nobody"), (leader, "nobody"), (follower, "c1")] {
        let node_addr = tc.c.nodes[&id].addr.clone();
        let resp = http
            .post(format!("http://{node_addr}/v1/members/{cluster}/status"))
            .json(&json!({"statuses": [{
                "uid": "no-such-uid", "attempt": 1,
                "phase": "running", "since": "2026-01-01T00:00:00Z"
            }]}))
            .send()
            .await
            .expect("status report");
        let code = resp.status().as_u16();
        let body = resp.text().await.unwrap_or_default();
        assert!(code == 200 || code == 400, "{code} {body}");
        if code == 200 {
            assert!(body.contains("\"updated\":0"), "{body}");
        }
    }
    let after = settled_index(&tc, leader).await;
    assert_eq!(before, after, "refused requests moved the log");
}
