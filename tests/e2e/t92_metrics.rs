//! `GET /metrics` of a running node names every operations signal: scheduling latency, queue
//! depth, fragmentation per cluster and flavor, preemptions per queue, node evictions,
//! rescheduling success, member health and capacity, workloads by phase, Raft term, commit
//! index and apply lag, HTTP latency by route template and status, rejected submissions by
//! reason.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::common::{cluster, submit_until_acked};

/// Families whose `# TYPE` line must be served (a labelled family may have no series yet,
/// e.g. preemptions before any preemption).
const FAMILIES: [&str; 21] = [
    "tideway_scheduler_cycle_seconds",
    "tideway_queue_pending_workloads",
    "tideway_queue_quota_gpus",
    "tideway_queue_used_gpus",
    "tideway_fragmentation_ratio",
    "tideway_preemptions",
    "tideway_node_evictions",
    "tideway_rescheduling_success_ratio",
    "tideway_member_phase",
    "tideway_member_capacity_gpus",
    "tideway_workloads",
    "tideway_raft_term",
    "tideway_raft_commit_index",
    "tideway_raft_apply_lag",
    "tideway_raft_is_leader",
    "tideway_http_request_duration_seconds",
    "tideway_workload_submissions_rejected",
    "tideway_workload_submit_to_assign_seconds",
    "tideway_raft_leader_gone_campaigns",
    "tideway_state_apply_lock_held_seconds",
    "tideway_state_apply_lock_wait_seconds",
];

/// Series that this test's traffic must have produced, with their labels.
const SERIES: [&str; 10] = [
    r#"tideway_queue_quota_gpus{queue="metrics-q",flavor="H100",window="-"} 8"#,
    r#"tideway_preemptions_total{queue="default"} 0"#,
    r#"tideway_node_evictions_total{cluster="sim-eu"} 0"#,
    r#"tideway_fragmentation_ratio{cluster="sim-eu",pool="training",flavor="H100"}"#,
    r#"tideway_member_capacity_gpus{cluster="sim-eu",pool="training",flavor="H100",state="total"}"#,
    r#"tideway_member_phase{cluster="sim-eu",phase="Ready"} 1"#,
    r#"tideway_workloads{phase="Assigned"}"#,
    r#"tideway_http_request_duration_seconds_count{method="POST",route="/v1/workloads",status="201"}"#,
    r#"tideway_http_request_duration_seconds_count{method="GET",route="/v1/workloads/{id}",status="404"}"#,
    r#"tideway_workload_submissions_rejected_total{reason="invalid"} 1"#,
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_name_every_operations_signal() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut tc = cluster(1, &[]).await;
    tc.c.add_agent(
        "sim-eu",
        "eu-west",
        &repo.join("deploy/dev/sim-eu.yaml"),
        &["--heartbeat-ms", "500"],
    )
    .await
    .expect("agent");
    let addr = tc.c.addrs()[0].clone();
    let deadline = Instant::now() + Duration::from_secs(30);
    assert!(
        submit_until_acked(std::slice::from_ref(&addr), 0, "metrics-1", deadline).await,
        "submission not acknowledged"
    );
    let http = reqwest::Client::new();
    // A refused submission (no podSets) and a lookup of a workload that does not exist.
    let bad = http
        .post(format!("http://{addr}/v1/workloads"))
        .header("content-type", "application/json")
        .body(r#"{"apiVersion":"tideway.dev/v1alpha1","kind":"Workload","metadata":{"name":"bad-1"},"spec":{"queue":"default","class":"training","podSets":[]}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    // A queue with a quota of its own: `tideway_queue_quota_gpus` has a series for it.
    let queue = http
        .post(format!("http://{addr}/v1/apply"))
        .header("content-type", "application/yaml")
        .body("apiVersion: tideway.dev/v1alpha1\nkind: Queue\nmetadata: {name: metrics-q}\nspec:\n  tenant: metrics\n  quotas:\n  - {flavor: H100, guaranteed: 8}\n")
        .send()
        .await
        .unwrap();
    assert!(
        queue.status().is_success(),
        "queue not applied: {}",
        queue.status()
    );
    let missing = http
        .get(format!("http://{addr}/v1/workloads/no-such-workload"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);

    let mut text = String::new();
    while Instant::now() < deadline {
        text = http
            .get(format!("http://{addr}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let families_ok = FAMILIES
            .iter()
            .all(|f| text.contains(&format!("# TYPE {f} ")));
        if families_ok && SERIES.iter().all(|s| text.contains(s)) {
            assert!(
                !text.contains("no-such-workload"),
                "a raw path became a label"
            );
            let count = |family: &str| -> f64 {
                text.lines()
                    .find_map(|l| l.strip_prefix(&format!("{family}_count ")))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0.0)
            };
            // Apply held the state for the entries of this test's traffic.
            let applies = count("tideway_state_apply_lock_held_seconds");
            assert!(applies >= 1.0, "no apply recorded:\n{text}");
            // And its wait for the lock, once per entry as well.
            let waits = count("tideway_state_apply_lock_wait_seconds");
            assert!(waits >= 1.0, "no wait for the lock recorded:\n{text}");
            return;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let absent: Vec<&str> = FAMILIES
        .iter()
        .filter(|f| !text.contains(&format!("# TYPE {f} ")))
        .chain(SERIES.iter().filter(|s| !text.contains(*s)))
        .copied()
        .collect();
    panic!("/metrics lacks {absent:?}:\n{text}");
}
