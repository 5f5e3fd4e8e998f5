//! Request fuzzing against a real node over HTTP: generated submissions, policy documents,
//! agent reports and raw bodies. Whatever arrives, the node answers 2xx or a 4xx
//! problem+json (never a 5xx, never a hang), a refused submission is not stored, and an
//! accepted one is: nothing half-applied. Bounded (a few hundred cases) so it runs in CI.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Value, json};
use tideway_federation::node::{Node, NodeConfig};

const WORKLOAD: &str = include_str!("../../api/testdata/workload-bench.json");

/// A replacement for one value of a document: the kinds of wrong a client sends.
fn wrong_value() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        Just(None), // the key removed
        Just(Some(Value::Null)),
        Just(Some(json!(-1))),
        Just(Some(json!(0))),
        Just(Some(json!(u64::MAX))),
        Just(Some(json!(1.5e300))),
        Just(Some(json!(true))),
        Just(Some(json!(""))),
        Just(Some(json!([]))),
        Just(Some(json!({}))),
        Just(Some(json!({"unexpected": 1}))),
        Just(Some(Value::String("x".repeat(5000)))),
        "\\PC{0,24}".prop_map(|s| Some(Value::String(s))),
        any::<i64>().prop_map(|n| Some(json!(n))),
    ]
}

/// Every path to a value in `v`, as JSON pointers.
fn pointers(v: &Value, at: String, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let p = format!("{at}/{k}");
                out.push(p.clone());
                pointers(x, p, out);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                let p = format!("{at}/{i}");
                out.push(p.clone());
                pointers(x, p, out);
            }
        }
        _ => {}
    }
}

/// `doc` with the value at `pointer` replaced (or removed), or an unknown key added.
fn mutate(doc: &Value, pointer: &str, with: Option<Value>, add_unknown: bool) -> Value {
    let mut d = doc.clone();
    let (parent, last) = pointer.rsplit_once('/').unwrap_or(("", pointer));
    if let Some(p) = d.pointer_mut(parent) {
        match (p, with) {
            (Value::Object(m), Some(v)) => {
                m.insert(last.to_owned(), v);
            }
            (Value::Object(m), None) => {
                m.remove(last);
            }
            (Value::Array(a), v) => {
                if let Ok(i) = last.parse::<usize>()
                    && i < a.len()
                {
                    match v {
                        Some(v) => a[i] = v,
                        None => {
                            a.remove(i);
                        }
                    }
                }
            }
            _ => {}
        }
    }
    if add_unknown && let Some(Value::Object(m)) = d.pointer_mut(parent) {
        m.insert("notAField".into(), json!(1));
    }
    d
}

struct Answer {
    status: u16,
    content_type: String,
    body: String,
}

async fn post(http: &reqwest::Client, url: &str, ct: &str, body: Vec<u8>) -> Answer {
    let resp = http
        .post(url)
        .header("content-type", ct)
        .body(body)
        .timeout(Duration::from_secs(20))
        .send()
        .await
        .expect("the node answers");
    let status = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let body = resp.text().await.unwrap_or_default();
    Answer {
        status,
        content_type,
        body,
    }
}

/// A refusal must be a 4xx problem+json whose status matches, with a title.
fn check_refusal(what: &str, a: &Answer) -> Result<(), TestCaseError> {
    prop_assert!(a.status < 500, "{what}: {} {}", a.status, a.body);
    if a.status >= 400 {
        prop_assert!(
            a.content_type.starts_with("application/problem+json"),
            "{what}: {} with {} {}",
            a.status,
            a.content_type,
            a.body
        );
        let p: tideway_api::problem::Problem =
            serde_json::from_str(&a.body).map_err(|e| TestCaseError::fail(format!("{e}")))?;
        prop_assert_eq!(p.status, a.status);
        prop_assert!(!p.title.is_empty());
    }
    Ok(())
}

#[test]
fn generated_requests_get_an_answer_and_nothing_half_applied() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let node = rt
        .block_on(Node::start(NodeConfig::new(
            1,
            "127.0.0.1:0",
            dir.path().join("n1"),
        )))
        .expect("node starts");
    let base = format!("http://{}", node.addr);
    let http = reqwest::Client::new();
    rt.block_on(async {
        for _ in 0..100 {
            let ok = http
                .get(format!("{base}/v1/workloads"))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if ok {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!("the node never served");
    });

    let workload: Value = serde_json::from_str(WORKLOAD).expect("example");
    let mut paths = Vec::new();
    pointers(&workload, String::new(), &mut paths);
    // The runner takes a `Fn`: the bookkeeping lives in cells.
    let accepted = std::cell::RefCell::new(std::collections::BTreeSet::new());
    let refused = std::cell::RefCell::new(std::collections::BTreeSet::new());
    let n = std::cell::Cell::new(0u32);
    let statuses = std::cell::RefCell::new(std::collections::BTreeMap::<u16, u32>::new());
    // The unmutated document is accepted: the control for everything below.
    let mut control = workload.clone();
    control["metadata"]["name"] = json!("fuzz-control");
    let a = rt.block_on(post(
        &http,
        &format!("{base}/v1/workloads"),
        "application/json",
        serde_json::to_vec(&control).expect("json"),
    ));
    assert_eq!(a.status, 201, "{}", a.body);
    accepted.borrow_mut().insert("fuzz-control".to_owned());
    let mut runner = TestRunner::new(Config {
        cases: 160,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (
        0..paths.len(),
        wrong_value(),
        any::<bool>(),
        prop_oneof![Just("application/json"), Just("application/yaml")],
    );
    runner
        .run(&strategy, |(i, with, unknown, ct)| {
            n.set(n.get() + 1);
            let name = format!("fuzz-{}", n.get());
            let mut doc = workload.clone();
            doc["metadata"]["name"] = json!(name);
            let doc = mutate(&doc, &paths[i], with, unknown);
            // YAML is a superset of JSON: the same document through the YAML decoder.
            let body = serde_json::to_vec(&doc).expect("json");
            let a = rt.block_on(post(&http, &format!("{base}/v1/workloads"), ct, body));
            check_refusal(&format!("{} {}", paths[i], doc), &a)?;
            *statuses.borrow_mut().entry(a.status).or_default() += 1;
            // The name the document carries (a mutation may have replaced it).
            let sent = doc["metadata"]["name"].as_str().map(str::to_owned);
            match sent {
                Some(sent) if a.status == 201 => {
                    accepted.borrow_mut().insert(sent);
                }
                Some(sent) if sent == name => {
                    refused.borrow_mut().insert(sent);
                }
                _ => {}
            }
            Ok(())
        })
        .expect("submissions");

    // Policy documents and agent reports: any shape, never a 5xx.
    let queue: Value = json!({"apiVersion": "tideway.dev/v1alpha1", "kind": "Queue",
        "metadata": {"name": "q"}, "spec": {"quotas": [{"flavor": "H100", "nominalGpus": 8}]}});
    let report: Value = json!({"statuses": [{"uid": "no-such-uid", "attempt": 1,
        "phase": "running", "since": "2026-01-01T00:00:00Z"}]});
    for (url, doc) in [
        (format!("{base}/v1/apply"), queue),
        (format!("{base}/v1/members/nobody/status"), report.clone()),
        (format!("{base}/v1/members/nobody/heartbeat"), report),
    ] {
        let mut paths = Vec::new();
        pointers(&doc, String::new(), &mut paths);
        let mut runner = TestRunner::new(Config {
            cases: 40,
            failure_persistence: None,
            ..Config::default()
        });
        runner
            .run(
                &(0..paths.len(), wrong_value(), any::<bool>()),
                |(i, with, unknown)| {
                    let body =
                        serde_json::to_vec(&mutate(&doc, &paths[i], with, unknown)).expect("json");
                    let a = rt.block_on(post(&http, &url, "application/json", body));
                    check_refusal(&url, &a)
                },
            )
            .expect("policy and agent documents");
    }

    // Bodies that are not objects at the top (what once removed a voter: `[2]` read as
    // `{"id": 2}`): arrays of anything, scalars and null, on every route whose body is an
    // object. Each is a 400 naming the body, and nothing is written (checked at the end).
    let leaf = prop_oneof![
        Just(json!(null)),
        any::<bool>().prop_map(|b| json!(b)),
        any::<i64>().prop_map(|n| json!(n)),
        "[a-z]{0,8}".prop_map(|s| json!(s)),
        Just(json!({"id": 2})),
    ];
    let shape = leaf.clone().prop_recursive(3, 16, 4, |inner| {
        prop::collection::vec(inner, 0..4).prop_map(Value::Array)
    });
    let top = prop_oneof![
        prop::collection::vec(shape, 0..4).prop_map(Value::Array),
        leaf.prop_filter("not an object", |v| !v.is_object()),
    ];
    let object_routes = [
        "/v1/workloads",
        "/v1/apply",
        "/v1/policy/apply",
        "/v1/policy/dry-run",
        "/v1/policy/diff",
        "/v1/policy/rollback",
        "/v1/members/register",
        "/v1/members/nobody/heartbeat",
        "/v1/members/nobody/status",
        "/v1/cluster/join",
        "/v1/cluster/promote",
        "/v1/cluster/remove",
    ];
    let mut runner = TestRunner::new(Config {
        cases: 120,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(
            &(
                0..object_routes.len(),
                top,
                prop_oneof![Just("application/json"), Just("application/yaml")],
            ),
            |(i, doc, ct)| {
                let url = format!("{base}{}", object_routes[i]);
                let body = serde_json::to_vec(&doc).expect("json");
                let a = rt.block_on(post(&http, &url, ct, body));
                check_refusal(&url, &a)?;
                prop_assert_eq!(a.status, 400, "{} {} {}", url, doc, a.body);
                let p: Value = serde_json::from_str(&a.body).expect("problem");
                prop_assert_eq!(
                    &p["errors"][0]["field"],
                    "body",
                    "{} {} {}",
                    url,
                    doc,
                    a.body
                );
                Ok(())
            },
        )
        .expect("bodies that are not objects");

    // Raw bytes under any content type.
    let mut runner = TestRunner::new(Config {
        cases: 60,
        failure_persistence: None,
        ..Config::default()
    });
    let raw = (
        prop::collection::vec(any::<u8>(), 0..512),
        prop_oneof![
            Just("application/json"),
            Just("application/yaml"),
            Just("text/plain"),
            Just("application/json; charset=latin1"),
        ],
    );
    runner
        .run(&raw, |(bytes, ct)| {
            let a = rt.block_on(post(&http, &format!("{base}/v1/workloads"), ct, bytes));
            check_refusal("raw body", &a)
        })
        .expect("raw bodies");

    let (accepted, refused) = (accepted.into_inner(), refused.into_inner());
    eprintln!("submission answers by status: {:?}", statuses.into_inner());
    // Nothing half-applied: every accepted name is stored, no refused one is.
    let stored: Vec<String> = rt.block_on(async {
        let mut names = Vec::new();
        let mut after: Option<u64> = None;
        loop {
            let url = match after {
                Some(a) => format!("{base}/v1/workloads?after={a}"),
                None => format!("{base}/v1/workloads"),
            };
            let page: Value = http
                .get(url)
                .send()
                .await
                .expect("list")
                .json()
                .await
                .expect("list json");
            for w in page["items"].as_array().into_iter().flatten() {
                if let Some(n) = w["metadata"]["name"].as_str() {
                    names.push(n.to_owned());
                }
            }
            match page["continue"].as_u64() {
                Some(next) => after = Some(next),
                None => return names,
            }
        }
    });
    for name in &accepted {
        assert!(
            stored.contains(name),
            "{name} was acknowledged but is not stored ({} stored, {} accepted, last {:?})",
            stored.len(),
            accepted.len(),
            stored.last()
        );
    }
    for name in &refused {
        assert!(!stored.contains(name), "{name} was refused but is stored");
    }
    assert!(
        refused.len() > 100,
        "most generated documents are wrong: {} refused",
        refused.len()
    );
    rt.block_on(node.shutdown());
}
