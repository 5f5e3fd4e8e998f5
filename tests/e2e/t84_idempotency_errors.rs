//! Idempotency done right, and errors that are always problem+json: the same key with the
//! same content (even as YAML) replays the original answer, the same key with other content
//! is a 422 naming the header and writes nothing; unknown routes and methods answer
//! problem+json too.

use serde_json::Value;
use tideway_api::client::Client;

use crate::common::*;

async fn applied_index(addr: &str) -> u64 {
    let s = Client::new(addr).unwrap().cluster_status().await.unwrap();
    s.last_applied.unwrap_or_default()
}

fn problem(status: reqwest::StatusCode, ct: &str, body: &str, want: u16) -> Value {
    assert_eq!(status.as_u16(), want, "{body}");
    assert_eq!(ct, "application/problem+json", "{body}");
    let v: Value = serde_json::from_str(body).expect("problem+json body");
    assert_eq!(v["status"], want);
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reused_keys_and_unknown_routes_answer_precisely() {
    let tc = cluster(1, &[]).await;
    let addr = tc.c.addrs()[0].clone();
    let c = Client::new(&addr).unwrap();
    let http = reqwest::Client::new();

    let json = workload_json("idem");
    let (first, created) = c
        .submit_raw(json.clone().into_bytes(), false, Some("key-1"))
        .await
        .unwrap();
    assert!(created);
    // The same content as YAML under the same key: the original answer, 200.
    let v: Value = serde_json::from_str(&json).unwrap();
    let yaml = serde_saphyr::to_string(&v).unwrap();
    let (again, created) = c
        .submit_raw(yaml.into_bytes(), true, Some("key-1"))
        .await
        .unwrap();
    assert!(!created);
    assert_eq!(again.metadata.uid, first.metadata.uid);

    // Other content under the same key: 422 naming the header, nothing written.
    let before = crate::common::settled_applied(&Client::new(&addr).unwrap())
        .await
        .unwrap_or_default();
    let other = json
        .replace(r#""count":2"#, r#""count":4"#)
        .replace(r#""minCount":2"#, r#""minCount":4"#);
    assert_ne!(other, json);
    let resp = http
        .post(format!("http://{addr}/v1/workloads"))
        .header("content-type", "application/json")
        .header("idempotency-key", "key-1")
        .body(other)
        .send()
        .await
        .unwrap();
    let (st, ct) = (
        resp.status(),
        resp.headers()["content-type"].to_str().unwrap().to_string(),
    );
    let p = problem(st, &ct, &resp.text().await.unwrap(), 422);
    assert_eq!(p["errors"][0]["field"], "header:Idempotency-Key", "{p}");
    assert!(
        p["errors"][0]["reason"].as_str().unwrap().contains("idem"),
        "{p}"
    );
    assert_eq!(
        applied_index(&addr).await,
        before,
        "a refused key wrote something"
    );
    let w = c.get("idem", false).await.unwrap();
    assert_eq!(w.spec.pod_sets[0].count, 2, "the first submission stands");

    // Unknown route: 404; a route that exists with a method it does not answer: 405. Both
    // problem+json.
    let resp = http
        .get(format!("http://{addr}/v1/nothing-here"))
        .send()
        .await
        .unwrap();
    let (st, ct) = (
        resp.status(),
        resp.headers()["content-type"].to_str().unwrap().to_string(),
    );
    problem(st, &ct, &resp.text().await.unwrap(), 404);
    let resp = http
        .put(format!("http://{addr}/v1/workloads"))
        .send()
        .await
        .unwrap();
    let (st, ct) = (
        resp.status(),
        resp.headers()["content-type"].to_str().unwrap().to_string(),
    );
    let allow = resp
        .headers()
        .get("allow")
        .map(|v| v.to_str().unwrap().to_string());
    problem(st, &ct, &resp.text().await.unwrap(), 405);
    let allow = allow.expect("405 names the allowed methods");
    assert!(allow.contains("POST") && allow.contains("GET"), "{allow}");
}
