//! Workload lifecycle with real processes: `tideway cancel` of a running workload makes its
//! member stop it, the capacity view shows the GPUs free again, and once the retention time
//! passes the cancelled workload is compacted out and its name can be used again.

use std::time::Duration;

use tideway_api::WorkloadPhase;
use tideway_api::agent::LocalPhase;
use tideway_api::audit::{AuditEvent, AuditKind};

use crate::common::*;

fn job(name: &str) -> String {
    format!(
        r#"{{"apiVersion":"tideway.dev/v1alpha1","kind":"Workload","metadata":{{"name":"{name}","annotations":{{"tideway.dev/sim-runtime-seconds":"36000"}}}},"spec":{{"queue":"default","class":"training","podSets":[{{"name":"w","count":2,"gpusPerPod":8,"flavor":"H100"}}]}}}}"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_the_work_frees_capacity_and_the_name_is_reused_after_retention() {
    let (tc, c, idle) = one_node_with_sim_eu().await;
    let addr = tc.c.addrs()[0].clone();
    assert_eq!(idle.allocated, 0, "nothing runs yet: {idle:?}");

    let (w, created) = c
        .submit_raw(job("train").into_bytes(), false, Some("k1"))
        .await
        .unwrap();
    assert!(created);
    let uid = w.metadata.uid.clone().unwrap();
    wait_for("train running", Duration::from_secs(30), async || {
        let w = c.get("train", false).await.ok()?;
        (w.status?.phase == WorkloadPhase::Running).then_some(())
    })
    .await;
    let busy = wait_for(
        "capacity to show the 16 GPUs in use",
        Duration::from_secs(20),
        async || {
            let f = c.capacity(false).await.ok()?.fleet;
            (f.allocated >= 16).then_some(f)
        },
    )
    .await;
    assert_eq!(busy.free + 16, idle.free);

    // Cancel the way a user does.
    let (ok, out, err) = tideway(&addr, &["cancel", "train"]);
    assert!(ok, "cancel failed: {err}");
    assert_eq!(out.trim(), "workload/train cancelled");
    let w = c.get("train", false).await.unwrap();
    let st = w.status.unwrap();
    assert_eq!(st.phase, WorkloadPhase::Cancelled);
    assert!(st.finished_at.is_some());
    assert_eq!(st.cluster, None);

    // The member stops it, and the capacity view has the GPUs free again.
    wait_for(
        "the member to stop it",
        Duration::from_secs(20),
        async || {
            let local = tc.c.agent_local("sim-eu").await.ok()?;
            local
                .workloads
                .iter()
                .all(|l| {
                    l.uid != uid || !matches!(l.phase, LocalPhase::Running | LocalPhase::Pending)
                })
                .then_some(())
        },
    )
    .await;
    let freed = wait_for(
        "the GPUs to be free again",
        Duration::from_secs(20),
        async || {
            let f = c.capacity(false).await.ok()?.fleet;
            (f.free == idle.free).then_some(f)
        },
    )
    .await;
    assert_eq!(freed.allocated, 0);

    // The audit trail has every change, in order, with its actor; the CLI exports it as JSON
    // lines.
    let ev = c.events(&[("workload", "train".into())]).await.unwrap();
    let trail: Vec<(AuditKind, &str)> = ev
        .items
        .iter()
        .map(|e| (e.kind, e.actor.as_str()))
        .collect();
    assert_eq!(
        trail,
        vec![
            (AuditKind::Submitted, "anonymous"),
            (AuditKind::Assigned, "system:leader"),
            (AuditKind::Running, "agent:sim-eu"),
            (AuditKind::Cancelled, "anonymous"),
        ]
    );
    let (ok, out, err) = tideway(
        &addr,
        &[
            "events",
            "--workload",
            "train",
            "--kind",
            "cancelled",
            "-o",
            "json",
        ],
    );
    assert!(ok, "{err}");
    let lines: Vec<AuditEvent> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{out}");
    assert_eq!(lines[0].kind, AuditKind::Cancelled);

    // Cancelling again answers the same cancelled workload; an unknown one is a 404.
    let again = c.cancel(&uid).await.expect("idempotent cancel");
    assert_eq!(again.status.unwrap().phase, WorkloadPhase::Cancelled);
    let (ok, _, err) = tideway(&addr, &["cancel", "nope"]);
    assert!(!ok);
    assert!(err.contains("404") || err.contains("not found"), "{err}");
    let e = c.cancel("nope").await.expect_err("unknown workload");
    assert!(e.is_not_found(), "{e}");

    // The name is taken while the cancelled workload is retained...
    let e = c
        .submit_raw(job("train").into_bytes(), false, Some("k2"))
        .await
        .expect_err("name still taken");
    assert!(e.to_string().contains("409"), "{e}");
    // ...and free once retention (3 s) passed and the leader compacted it.
    wait_for(
        "compaction of the cancelled workload",
        Duration::from_secs(30),
        async || {
            c.get("train", false)
                .await
                .err()
                .filter(|e| e.is_not_found())
        },
    )
    .await;
    let (w2, created) = c
        .submit_raw(job("train").into_bytes(), false, Some("k3"))
        .await
        .unwrap();
    assert!(created, "the name is free again");
    assert_ne!(w2.metadata.uid.as_deref(), Some(uid.as_str()));
    // The first key does not answer with the newcomer.
    // The first key does not answer with the newcomer: it is forgotten with its workload,
    // and the name is taken by the new one.
    let e = c
        .submit_raw(job("train").into_bytes(), false, Some("k1"))
        .await
        .expect_err("k1 must not replay the newcomer");
    assert!(e.to_string().contains("409"), "{e}");
}
