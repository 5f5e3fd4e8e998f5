//! `tideway policy dry-run --replay`: the submissions a running federation recorded,
//! replayed in the simulator under the current policy and a candidate that shrinks the
//! batch queue's quota; the candidate's batch waits grow, and nothing is applied.

use std::time::{Duration, Instant};

use tideway_api::WorkloadPhase;
use tideway_api::client::Client;

use crate::common::*;

const BASE: &str = r#"apiVersion: tideway.dev/v1alpha1
kind: Policy
metadata: {name: fleet}
spec:
  queues:
  - apiVersion: tideway.dev/v1alpha1
    kind: Queue
    metadata: {name: default}
    spec: {tenant: default}
  - apiVersion: tideway.dev/v1alpha1
    kind: Queue
    metadata: {name: batch}
    spec:
      tenant: research
      classes: [training]
      quotas:
      - {flavor: H100, guaranteed: 32, max: 32}
"#;

fn train(name: &str) -> Vec<u8> {
    format!(
        r#"{{"apiVersion":"tideway.dev/v1alpha1","kind":"Workload","metadata":{{"name":"{name}","annotations":{{"tideway.dev/sim-runtime-seconds":"600"}}}},"spec":{{"queue":"batch","class":"training","podSets":[{{"name":"w","count":1,"gpusPerPod":8,"flavor":"H100"}}]}}}}"#
    )
    .into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_compares_the_recorded_submissions_under_both_policies() {
    let mut tc = cluster(1, &[]).await;
    let addr = tc.c.addrs()[0].clone();
    let c = Client::new(&addr).unwrap();
    let base = tc.c.dir().join("base.yaml");
    std::fs::write(&base, BASE).unwrap();
    let cand = tc.c.dir().join("candidate.yaml");
    std::fs::write(
        &cand,
        BASE.replace(
            "{flavor: H100, guaranteed: 32, max: 32}",
            "{flavor: H100, guaranteed: 8, max: 8}",
        ),
    )
    .unwrap();
    let layout = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/dev/sim-ap.yaml");
    let fleet = tc.c.dir().join("fleet.yaml");
    std::fs::write(
        &fleet,
        format!("clusters:\n- name: sim-ap\n  region: ap-south\n  layout: {layout}\n"),
    )
    .unwrap();
    let (ok, out, err) = tideway(&addr, &["policy", "apply", "-f", base.to_str().unwrap()]);
    assert!(ok, "{out}{err}");
    tc.c.add_agent(
        "sim-ap",
        "ap-south",
        std::path::Path::new(layout),
        &["--heartbeat-ms", "500"],
    )
    .await
    .expect("agent");
    for i in 0..4 {
        let n = format!("t-{i}");
        c.submit_raw(train(&n), false, Some(&n))
            .await
            .expect("submit");
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    for i in 0..4 {
        loop {
            let w = c.get(&format!("t-{i}"), false).await.unwrap();
            if w.status
                .as_ref()
                .is_some_and(|s| s.phase == WorkloadPhase::Running)
            {
                break;
            }
            assert!(Instant::now() < deadline, "t-{i} not running: {w:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let before = c.policy_history().await.unwrap();
    let (ok, out, err) = tideway(
        &addr,
        &[
            "policy",
            "dry-run",
            "-f",
            cand.to_str().unwrap(),
            "--replay",
            "24h",
            "--clusters",
            fleet.to_str().unwrap(),
            "-o",
            "json",
        ],
    );
    assert!(ok, "{out}{err}");
    let r: serde_json::Value = serde_json::from_str(&out).expect(&out);
    assert_eq!(r["replayed"], 4, "{r}");
    assert_eq!(r["currentVersion"], 1, "{r}");
    let batch = r["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["queue"] == "batch")
        .unwrap_or_else(|| panic!("{r}"))
        .clone();
    assert_eq!(batch["jobs"], 4, "{r}");
    // 32 GPUs of quota run all four at once; 8 run them one after the other.
    assert!(batch["waitP95Now"].as_f64().unwrap() < 120.0, "{r}");
    assert!(batch["waitP95Candidate"].as_f64().unwrap() >= 1200.0, "{r}");
    assert_eq!(c.policy_history().await.unwrap(), before, "nothing applied");
}
