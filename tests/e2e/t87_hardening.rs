//! Hardening found by fuzzing, on real processes and through a follower: a Content-Type with
//! non-ASCII bytes gets 415, and `spec.template` is capped (here at a configured 4 KiB) with
//! a 400 naming the field. Refusals write nothing.

use std::time::Duration;

use reqwest::header::HeaderValue;
use serde_json::Value;

use crate::common::*;

async fn post(addr: &str, body: String, content_type: HeaderValue) -> (u16, Value) {
    let resp = tideway_api::http::client_builder()
        .build()
        .expect("http client")
        .post(format!("http://{addr}/v1/workloads"))
        .header("content-type", content_type)
        .body(body)
        .send()
        .await
        .expect("post");
    let code = resp.status().as_u16();
    (code, resp.json().await.unwrap_or(Value::Null))
}

fn with_template(name: &str, bytes: usize) -> String {
    let mut w: Value = serde_json::from_str(&workload_json(name)).expect("json");
    w["spec"]["template"] = serde_json::json!({ "blob": "x".repeat(bytes) });
    w.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_ascii_content_type_and_oversized_templates_are_refused() {
    let tc = cluster(3, &["--max-template-bytes", "4096"]).await;
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
    let addr = tc.c.nodes[&follower].addr.clone();
    let json = HeaderValue::from_static("application/json");
    let before = tc.c.status(leader).await.expect("status").last_log_index;

    let odd = HeaderValue::from_bytes(b"application/json\xff\xfe").expect("obs-text value");
    let (code, v) = post(&addr, workload_json("ct-1"), odd).await;
    assert_eq!(code, 415, "{v}");
    assert!(
        v["type"]
            .as_str()
            .unwrap_or("")
            .contains("unsupported-media-type"),
        "{v}"
    );

    let (code, v) = post(&addr, with_template("big-1", 8 * 1024), json.clone()).await;
    assert_eq!(code, 400, "{v}");
    assert_eq!(v["errors"][0]["field"], "spec.template", "{v}");
    assert!(v["detail"].as_str().unwrap_or("").contains("4096"), "{v}");

    assert_eq!(
        tc.c.status(leader).await.expect("status").last_log_index,
        before,
        "a refused request moved the log"
    );

    let (code, v) = post(&addr, with_template("small-1", 1024), json).await;
    assert_eq!(code, 201, "{v}");
    assert_eq!(
        v["spec"]["template"]["blob"].as_str().map(str::len),
        Some(1024)
    );
}
