//! The scheduler core on the live leader, driven the way a user drives it: queues applied
//! with the CLI, quotas enforced across real agents, and `explain` saying why work waits.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tideway_api::PendingReason;
use tideway_api::client::Client;

use crate::common::*;

fn h100(name: &str, queue: &str, pods: u32) -> String {
    format!(
        r#"{{"apiVersion":"tideway.dev/v1alpha1","kind":"Workload","metadata":{{"name":"{name}","annotations":{{"tideway.dev/sim-runtime-seconds":"3600"}}}},"spec":{{"queue":"{queue}","class":"training","podSets":[{{"name":"w","count":{pods},"gpusPerPod":8,"flavor":"H100"}}],"topology":{{"required":"rack"}}}}}}"#
    )
}

async fn phase_and_reason(c: &Client, name: &str) -> (String, Option<String>) {
    let w = c.get(name, false).await.expect("get");
    let st = w.status.unwrap_or_default();
    (
        format!("{:?}", st.phase),
        st.pending_reason.map(|r| r.code().to_string()),
    )
}

async fn wait_for(c: &Client, name: &str, phase: &str, reason: Option<&str>) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (p, r) = phase_and_reason(c, name).await;
        if p == phase && (reason.is_none() || r.as_deref() == reason) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name}: {p} {r:?}, wanted {phase} {reason:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quotas_capacity_and_explain_through_the_cli() {
    let mut tc = cluster(3, &[]).await;
    let layout = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/dev/sim-ap.yaml"
    ));
    tc.c.add_agent("sim-ap", "ap-south", &layout, &["--heartbeat-ms", "500"])
        .await
        .expect("agent");
    let addr = tc.c.addrs()[1].clone();
    let c = Client::new(&addr).unwrap();

    // A queue with 16 guaranteed H100 GPUs and nothing to borrow.
    let queue = tc.c.dir().join("team-a.yaml");
    std::fs::write(
        &queue,
        "apiVersion: tideway.dev/v1alpha1\nkind: Queue\nmetadata: {name: team-a}\nspec:\n  tenant: team-a\n  quotas:\n  - {flavor: H100, guaranteed: 16, max: 16}\n",
    )
    .unwrap();
    let (ok, out, err) = tideway(&addr, &["apply", "-f", queue.to_str().unwrap()]);
    assert!(ok && out.contains("queue/team-a created"), "{out}{err}");
    let (ok, out, _) = tideway(&addr, &["queues"]);
    assert!(
        ok && out.contains("team-a") && out.contains("H100 16"),
        "{out}"
    );

    // Wait until the member's capacity is known.
    let deadline = Instant::now() + Duration::from_secs(20);
    while c.capacity(false).await.map(|v| v.fleet.total).unwrap_or(0) == 0 {
        assert!(Instant::now() < deadline, "no capacity reported");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    for i in 0..3 {
        let n = format!("a-{i}");
        c.submit_raw(h100(&n, "team-a", 1).into_bytes(), false, Some(&n))
            .await
            .expect("submit");
    }
    wait_for(&c, "a-0", "Running", None).await;
    wait_for(&c, "a-1", "Running", None).await;
    wait_for(&c, "a-2", "Pending", Some("QuotaExhausted")).await;
    let (ok, out, err) = tideway(&addr, &["explain", "a-2"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("QuotaExhausted") && out.contains("team-a"),
        "{out}"
    );
    let v = c.explain("a-2").await.unwrap();
    assert!(
        matches!(
            v.pending_reason,
            Some(PendingReason::QuotaExhausted {
                used: 16,
                limit: 16,
                ..
            })
        ),
        "{v:?}"
    );

    // The default queue is not quota-limited, but a 7-node rack gang does not fit the
    // member's largest rack (4 nodes): insufficient capacity, with the largest fit per cluster.
    c.submit_raw(h100("big", "default", 7).into_bytes(), false, Some("big"))
        .await
        .expect("submit");
    wait_for(&c, "big", "Pending", Some("InsufficientCapacity")).await;
    let v = c.explain("big").await.unwrap();
    assert!(
        matches!(
            &v.pending_reason,
            Some(PendingReason::InsufficientCapacity { largest_fit_per_cluster, .. })
                if largest_fit_per_cluster.contains_key("sim-ap")
        ),
        "{v:?}"
    );
    assert!(
        v.explanation
            .as_ref()
            .is_some_and(|e| !e.clusters.is_empty()),
        "{v:?}"
    );

    // apply refuses what it does not manage, naming the field.
    let bad = tc.c.dir().join("bad.yaml");
    std::fs::write(
        &bad,
        std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/api/testdata/workload-llama-ft.yaml"
        ))
        .unwrap(),
    )
    .unwrap();
    let (ok, _, err) = tideway(&addr, &["apply", "-f", bad.to_str().unwrap()]);
    assert!(!ok && err.contains("kind"), "{err}");

    // Metrics of the scheduling loop are exported.
    let m = tideway_api::http::client_builder()
        .build()
        .unwrap()
        .get(format!(
            "http://{}/metrics",
            tc.c.nodes[&tc.c.wait_for_leader(Duration::from_secs(5)).await.unwrap()].addr
        ))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for name in [
        "tideway_scheduler_cycle_seconds",
        "tideway_workload_submit_to_assign_seconds",
        "tideway_queue_pending_workloads",
    ] {
        assert!(m.contains(name), "{name} missing from /metrics");
    }
}
