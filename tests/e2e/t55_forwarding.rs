//! Requests a follower passes to the leader travel as typed messages: nothing a client wrote
//! in a path becomes part of a URL the leader is sent.

use std::time::Duration;

use serde_json::Value;

use crate::common::*;

fn heartbeat_for(cluster: &str) -> Value {
    serde_json::json!({
        "digest": {
            "cluster": cluster,
            "generatedAt": "2026-01-01T00:00:00Z",
            "pools": [],
        }
    })
}

async fn post_json(addr: &str, path: &str, body: &Value) -> (u16, Value) {
    let resp = tideway_api::http::client_builder()
        .build()
        .expect("http client")
        .post(format!("http://{addr}{path}"))
        .json(body)
        .send()
        .await
        .expect("the node answers");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_name_in_a_path_cannot_reach_another_route_on_the_leader() {
    let tc = cluster(3, &[]).await;
    let leader =
        tc.c.wait_for_leader(Duration::from_secs(10))
            .await
            .expect("a leader");
    let follower =
        tc.c.nodes
            .keys()
            .copied()
            .find(|id| *id != leader)
            .expect("a follower");
    let addr = tc.c.nodes[&follower].addr.clone();
    let before = tc.c.status(leader).await.expect("leader status");

    // Decoded, the name is `../cluster/snapshot#`; the digest names the same cluster, so only
    // the name's own validation stands between it and the leader.
    let (status, v) = post_json(
        &addr,
        "/v1/members/..%2Fcluster%2Fsnapshot%23/heartbeat",
        &heartbeat_for("../cluster/snapshot#"),
    )
    .await;
    assert_eq!(status, 400, "{v}");
    let named = v["errors"]
        .as_array()
        .is_some_and(|a| a.iter().any(|e| e["field"] == "name"));
    assert!(named, "the problem names the field: {v}");

    // A valid name that is not registered goes through the follower to the leader, and the
    // leader's 404 comes back as a 404 (an agent must hear that it has to register again).
    let (status, v) = post_json(
        &addr,
        "/v1/members/nobody/heartbeat",
        &heartbeat_for("nobody"),
    )
    .await;
    assert_eq!(status, 404, "{v}");

    let after = tc.c.status(leader).await.expect("leader status");
    assert_eq!(
        after.snapshot, before.snapshot,
        "the leader took a snapshot"
    );
    assert_eq!(after.purged, before.purged, "the leader purged its log");
    assert_eq!(after.leader, Some(leader), "leadership moved");
}
