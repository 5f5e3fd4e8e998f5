//! Held-out findings, on real processes: a body of the wrong shape (an array, a scalar, null)
//! is refused on every POST route, on the leader and on a follower, with a 400 naming the
//! body and nothing written (`[2]` once removed voter 2); a node that was removed knows it and
//! stops serving, also after a restart; `/metrics` is not for a scoped submitter.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::*;

/// Every POST route of the public API, with a member name where the path takes one.
const BODY_ROUTES: &[&str] = &[
    "/v1/workloads",
    "/v1/apply",
    "/v1/policy/apply",
    "/v1/policy/rollback",
    "/v1/policy/diff",
    "/v1/policy/dry-run",
    "/v1/members/register",
    "/v1/members/sim-x/heartbeat",
    "/v1/members/sim-x/status",
    "/v1/cluster/join",
    "/v1/cluster/remove",
    "/v1/cluster/promote",
];

/// POST routes that take no parameters in their body: an empty body, `{}` or `null` is
/// accepted, any other shape refused.
const BODYLESS_ROUTES: &[&str] = &[
    "/v1/policy/widen",
    "/v1/cluster/snapshot",
    "/v1/members/sim-x/cordon",
    "/v1/members/sim-x/uncordon",
    "/v1/members/sim-x/drain",
    "/v1/members/sim-x/readmit",
];

/// The shapes that found the defect, and a few more.
const SHAPES: &[&str] = &[
    "[2]",
    "[{\"id\": 2}]",
    "[]",
    "2",
    "-1",
    "\"x\"",
    "true",
    "[[1, 2], 3]",
];

async fn post(
    http: &reqwest::Client,
    addr: &str,
    path: &str,
    body: &str,
    ct: &str,
) -> (u16, Value) {
    let resp = http
        .post(format!("http://{addr}{path}"))
        .header("content-type", ct)
        .body(body.to_owned())
        .send()
        .await
        .expect("post");
    let code = resp.status().as_u16();
    (code, resp.json().await.unwrap_or(Value::Null))
}

/// A small deterministic generator of JSON values that are not objects at the top: nested
/// arrays of scalars and objects, and bare scalars (xorshift, fixed seed).
fn fuzz_shapes(n: usize) -> Vec<String> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    fn value(next: &mut dyn FnMut() -> u64, depth: u32, top: bool) -> String {
        match next() % if top { 5 } else { 7 } {
            0 => "null".into(),
            1 => format!("{}", next() % 1000),
            2 => format!("\"s{}\"", next() % 100),
            3 => "false".into(),
            4 if depth < 3 => {
                let len = next() % 4;
                let items: Vec<String> = (0..len).map(|_| value(next, depth + 1, false)).collect();
                format!("[{}]", items.join(","))
            }
            5 => format!("{{\"id\":{}}}", next() % 10),
            _ => "[]".into(),
        }
    }
    (0..n).map(|_| value(&mut next, 0, true)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_that_are_not_objects_are_refused_on_every_route_and_write_nothing() {
    let (tc, leader, follower) = three_voters(&[]).await;
    let http = tideway_api::http::client_builder()
        .build()
        .expect("http client");
    let before = tc.c.status(leader).await.expect("status");
    let mut shapes: Vec<String> = SHAPES.iter().map(|s| s.to_string()).collect();
    shapes.extend(fuzz_shapes(24));
    for id in [leader, follower] {
        let addr = tc.c.nodes[&id].addr.clone();
        for route in BODY_ROUTES.iter().chain(BODYLESS_ROUTES) {
            for body in &shapes {
                if BODYLESS_ROUTES.contains(route) && body == "null" {
                    continue;
                }
                for ct in ["application/json", "application/yaml"] {
                    let (code, v) = post(&http, &addr, route, body, ct).await;
                    assert_eq!(code, 400, "node {id} {route} {ct} {body}: {v}");
                    assert_eq!(
                        v["errors"][0]["field"], "body",
                        "node {id} {route} {ct} {body}: {v}"
                    );
                }
            }
        }
    }
    let after = tc.c.status(leader).await.expect("status");
    assert_eq!(
        after.voters, before.voters,
        "a refused body changed the voters"
    );
    assert_eq!(
        after.last_log_index, before.last_log_index,
        "a refused body moved the log"
    );
    // The old clients' `null` and today's `{}` still work on a route without parameters.
    let addr = tc.c.nodes[&follower].addr.clone();
    for body in ["null", "{}", ""] {
        let (code, v) = post(
            &http,
            &addr,
            "/v1/cluster/snapshot",
            body,
            "application/json",
        )
        .await;
        assert_eq!(code, 200, "snapshot with {body:?}: {v}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_node_stops_serving_and_says_where_to_go() {
    let (mut tc, leader, gone) = three_voters(&[]).await;
    assert!(
        submit_until_acked(
            &tc.c.addrs(),
            0,
            "before-removal",
            Instant::now() + Duration::from_secs(20)
        )
        .await
    );
    let http = tideway_api::http::client_builder()
        .build()
        .expect("http client");
    let leader_addr = tc.c.nodes[&leader].addr.clone();
    let (code, v) = post(
        &http,
        &leader_addr,
        "/v1/cluster/remove",
        &format!("{{\"id\": {gone}}}"),
        "application/json",
    )
    .await;
    assert_eq!(code, 200, "{v}");

    let addr = tc.c.nodes[&gone].addr.clone();
    let removed_within = |addr: String| async move {
        let http = tideway_api::http::client_builder().build().expect("http");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let (code, v) = post(
                &http,
                &addr,
                "/v1/workloads",
                &workload_json("after-1"),
                "application/json",
            )
            .await;
            if code == 503 && v["type"].as_str().unwrap_or("").ends_with("node-removed") {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "the removed node still answers writes: {code} {v}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    let v = removed_within(addr.clone()).await;
    let detail = v["detail"].as_str().unwrap_or("");
    assert!(
        detail.contains(&format!("node {gone} is no longer a member")),
        "{v}"
    );
    assert!(
        detail.contains(&leader_addr),
        "names the members to use: {v}"
    );
    // Reads are refused too, at once, not with a hang.
    let started = Instant::now();
    let resp = http
        .get(format!("http://{addr}/v1/workloads?stale=true"))
        .send()
        .await
        .expect("get");
    assert_eq!(resp.status().as_u16(), 503);
    assert!(started.elapsed() < Duration::from_secs(3));
    // Its status says so; liveness still answers.
    let st = tc.c.status(gone).await.expect("status of the removed node");
    assert_eq!(st.state, "Removed");
    let notice = st.removed.expect("removed notice");
    assert!(notice.members.contains_key(&leader), "{notice:?}");
    assert!(!notice.members.contains_key(&gone), "{notice:?}");
    // The others carry on with two voters; nothing was written through the removed node.
    let ls = tc.c.status(leader).await.expect("leader status");
    assert_eq!(ls.voters.len(), 2, "{ls:?}");
    assert!(!ls.voters.contains(&gone));
    let names: Vec<String> = all_workloads(&leader_addr)
        .await
        .into_iter()
        .map(|w| w.metadata.name.as_str().to_owned())
        .collect();
    assert!(names.contains(&"before-removal".to_string()));
    assert!(!names.contains(&"after-1".to_string()), "{names:?}");
    // A restart does not bring it back serving.
    tc.c.stop(gone).expect("stop");
    tc.c.restart(gone).await.expect("restart");
    let v = removed_within(addr).await;
    assert!(
        v["detail"]
            .as_str()
            .unwrap_or("")
            .contains("no longer a member")
    );
}

const VIEWER: &str = "tw_viewer_t103_token";
const SUBMITTER: &str = "tw_submitter_t103_token";
const ADMIN: &str = "tw_admin_t103_token";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_need_a_viewer() {
    let files = tempfile::tempdir().expect("tempdir");
    let tokens = files.path().join("tokens.yaml");
    let hash = tideway_federation::server::auth::hash_token;
    std::fs::write(
        &tokens,
        format!(
            "tokens:\n- {{subject: admin, groups: [system:admins], sha256: {}}}\n- {{subject: prom, groups: [system:viewers], sha256: {}}}\n- {{subject: alice, groups: ['queue:default'], sha256: {}}}\n",
            hash(ADMIN),
            hash(VIEWER),
            hash(SUBMITTER)
        ),
    )
    .expect("tokens");
    let tc = cluster_with_token(1, &["--auth-tokens", tokens.to_str().expect("path")], ADMIN).await;
    tc.c.wait_for_leader(Duration::from_secs(15))
        .await
        .expect("leader");
    let addr = tc.c.nodes[&1].addr.clone();
    let http = tideway_api::http::client_builder()
        .build()
        .expect("http client");
    let get = |token: &'static str| {
        let http = http.clone();
        let addr = addr.clone();
        async move {
            let resp = http
                .get(format!("http://{addr}/metrics"))
                .bearer_auth(token)
                .send()
                .await
                .expect("get");
            let code = resp.status().as_u16();
            (code, resp.text().await.unwrap_or_default())
        }
    };
    let (code, body) = get(SUBMITTER).await;
    assert_eq!(code, 403, "{body}");
    assert!(!body.contains("tideway_queue_"), "{body}");
    let (code, body) = get(VIEWER).await;
    assert_eq!(code, 200, "{body}");
    assert!(
        body.contains("tideway_"),
        "a scrape with a viewer token reads the series"
    );
}
