//! Member lifecycle through the CLI, on real processes: a cordoned member takes no new work
//! (its pending reason names it), a drained member's work is checkpointed and moved to
//! another member, and a member is removed once it holds nothing.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tideway_api::WorkloadStatus;
use tideway_api::agent::LocalPhase;
use tideway_api::client::Client;

use crate::common::*;

fn layout(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/dev")).join(format!("{name}.yaml"))
}

fn h100(name: &str) -> String {
    format!(
        r#"{{"apiVersion":"tideway.dev/v1alpha1","kind":"Workload","metadata":{{"name":"{name}","annotations":{{"tideway.dev/sim-runtime-seconds":"36000"}}}},"spec":{{"queue":"default","class":"training","podSets":[{{"name":"w","count":1,"gpusPerPod":8,"flavor":"H100"}}]}}}}"#
    )
}

async fn status(c: &Client, name: &str) -> WorkloadStatus {
    c.get(name, false)
        .await
        .expect("get")
        .status
        .unwrap_or_default()
}

/// Waits until `check` holds for the status of every workload in `names`.
async fn wait_all(c: &Client, names: &[&str], what: &str, check: impl Fn(&WorkloadStatus) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut all = Vec::new();
        for n in names {
            all.push(status(c, n).await);
        }
        if all.iter().all(&check) {
            return;
        }
        assert!(Instant::now() < deadline, "not {what}: {all:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cordon_drain_uncordon_and_remove_through_the_cli() {
    let mut tc = cluster(3, &["--member-heartbeat-ms", "500"]).await;
    // 30x sim time: the drain's 60 s checkpoint notice takes 2 s.
    let agent_args = ["--heartbeat-ms", "500", "--time-scale", "30"];
    for (name, region) in [("sim-eu", "eu-west"), ("sim-ap", "ap-south")] {
        tc.c.add_agent(name, region, &layout(name), &agent_args)
            .await
            .expect("agent");
    }
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
    let c = Client::new(&addr).expect("client");
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.members().await.map(|l| l.items.len()).unwrap_or(0) < 2 {
        assert!(Instant::now() < deadline, "agents never registered");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Cordon sim-ap: new work goes to sim-eu only.
    let (ok, out, err) = tideway(&addr, &["member", "cordon", "sim-ap"]);
    assert!(
        ok && out.contains("member/sim-ap cordoned (phase Cordoned)"),
        "{out}{err}"
    );
    let (ok, out, _) = tideway(&addr, &["member", "cordon", "sim-ap"]);
    assert!(
        ok && out.contains("Cordoned"),
        "cordoning twice is fine: {out}"
    );
    let names = ["d-1", "d-2"];
    for n in names {
        c.submit_raw(h100(n).into_bytes(), false, Some(n))
            .await
            .expect("submit");
    }
    wait_all(&c, &names, "running on sim-eu", |s| {
        format!("{:?}", s.phase) == "Running" && s.cluster.as_deref() == Some("sim-eu")
    })
    .await;

    // A workload that can only go to the cordoned member waits, and says why.
    let mut pinned: serde_json::Value = serde_json::from_str(&h100("pin-ap")).expect("json");
    pinned["spec"]["placement"] = serde_json::json!({"clusters": ["sim-ap"]});
    c.submit_raw(pinned.to_string().into_bytes(), false, Some("pin-ap"))
        .await
        .expect("submit");
    wait_all(&c, &["pin-ap"], "pending on the cordon", |s| {
        s.pending_reason
            .as_ref()
            .is_some_and(|r| r.code() == "MemberUnavailable" && r.to_string().contains("sim-ap"))
    })
    .await;

    // Uncordon sim-ap, drain sim-eu: its work is checkpointed, stopped and moved to sim-ap.
    let (ok, out, err) = tideway(&addr, &["member", "uncordon", "sim-ap"]);
    assert!(ok && out.contains("(phase Ready)"), "{out}{err}");
    let (ok, out, err) = tideway(&addr, &["member", "drain", "sim-eu"]);
    assert!(ok && out.contains("(phase Draining)"), "{out}{err}");
    wait_all(&c, &names, "moved to sim-ap", |s| {
        format!("{:?}", s.phase) == "Running" && s.cluster.as_deref() == Some("sim-ap")
    })
    .await;
    for n in names {
        let st = status(&c, n).await;
        assert_eq!(st.attempts, 2, "{n}: one move, one more attempt: {st:?}");
    }
    let eu = tc.c.agent_local("sim-eu").await.expect("local view");
    assert!(
        eu.workloads
            .iter()
            .all(|w| !matches!(w.phase, LocalPhase::Running | LocalPhase::Pending)),
        "sim-eu still runs drained work: {eu:?}"
    );

    // sim-ap still holds work: it cannot be removed. sim-eu, stopped, can.
    let (ok, _, err) = tideway(&addr, &["member", "remove", "sim-ap"]);
    assert!(!ok && err.contains("drain it first"), "{err}");
    tc.c.kill9_agent("sim-eu").expect("stop agent");
    let (ok, out, err) = tideway(&addr, &["member", "remove", "sim-eu"]);
    assert!(ok && out.contains("member/sim-eu removed"), "{out}{err}");
    let left: Vec<String> = c
        .members()
        .await
        .expect("members")
        .items
        .into_iter()
        .map(|m| m.metadata.name)
        .collect();
    assert_eq!(left, vec!["sim-ap".to_string()]);

    // Its agent starts again: the removal holds (a 409 naming the member)...
    tc.c.restart_agent("sim-eu").await.expect("restart agent");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let names_now = |l: tideway_api::list::MemberClusterList| -> Vec<String> {
        l.items.into_iter().map(|m| m.metadata.name).collect()
    };
    assert_eq!(
        names_now(c.members().await.expect("members")),
        vec!["sim-ap".to_string()],
        "the removed member registered again"
    );
    let log = log_with(
        &tc.c.dir().join("agent-sim-eu.log"),
        &[
            "registration refused",
            "member cluster 'sim-eu' was removed",
        ],
    )
    .await;
    assert!(
        log.contains("registration refused") && log.contains("member cluster 'sim-eu' was removed"),
        "{log}"
    );
    // ...until an operator re-admits it: then its agent registers it again.
    let (ok, out, err) = tideway(&addr, &["member", "readmit", "sim-eu"]);
    assert!(
        ok && out.contains("member/sim-eu re-admitted"),
        "{out}{err}"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while !names_now(c.members().await.expect("members")).contains(&"sim-eu".to_string()) {
        assert!(Instant::now() < deadline, "never registered again");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    tc.c.kill9_agent("sim-eu").expect("stop agent");
    let (ok, _, err) = tideway(&addr, &["member", "cordon", "../cluster/snapshot"]);
    assert!(!ok && err.contains("member name"), "{err}");
}
