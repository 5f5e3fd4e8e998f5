//! Finished work leaves its member, with real processes: once the federation records a
//! success it tells the agent to remove the work, so a member does not keep every workload it
//! ever ran; and an agent that was away while the federation compacted a finished workload
//! (so it never saw that `cancel`) removes its copy when it replays its assignments.

use std::time::{Duration, Instant};

use tideway_api::WorkloadPhase;
use tideway_api::agent::LocalPhase;

use crate::common::*;

fn job(name: &str, seconds: u64) -> String {
    format!(
        r#"{{"apiVersion":"tideway.dev/v1alpha1","kind":"Workload","metadata":{{"name":"{name}","annotations":{{"tideway.dev/sim-runtime-seconds":"{seconds}"}}}},"spec":{{"queue":"default","class":"training","podSets":[{{"name":"w","count":1,"gpusPerPod":8,"flavor":"H100"}}]}}}}"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_success_is_removed_from_the_member_and_so_is_work_compacted_while_the_agent_was_away() {
    let (mut tc, c, idle) = one_node_with_sim_eu().await;

    // 1. A success: recorded, then the member forgets the work (not only stops it).
    let (w, _) = c
        .submit_raw(job("quick", 2).into_bytes(), false, Some("k-quick"))
        .await
        .unwrap();
    let uid = w.metadata.uid.clone().unwrap();
    wait_for("quick to succeed", Duration::from_secs(40), async || {
        let w = c.get("quick", false).await.ok()?;
        (w.status?.phase == WorkloadPhase::Succeeded).then_some(())
    })
    .await;
    let local = wait_for(
        "the member to forget the finished work",
        Duration::from_secs(20),
        async || {
            let local = tc.c.agent_local("sim-eu").await.ok()?;
            local
                .workloads
                .iter()
                .all(|l| l.uid != uid)
                .then_some(local)
        },
    )
    .await;
    assert_eq!(local.creations, 1, "created once: {local:?}");
    let freed = wait_for("the GPUs to be free", Duration::from_secs(20), async || {
        let f = c.capacity(false).await.ok()?.fleet;
        (f.free == idle.free).then_some(f)
    })
    .await;
    assert_eq!(freed.allocated, 0);
    // The federation still reads it as Succeeded until its retention ends.
    let w = c.get("quick", false).await;
    assert!(
        w.as_ref().is_err_and(|e| e.is_not_found())
            || w.as_ref()
                .is_ok_and(|w| w.status.as_ref().unwrap().phase == WorkloadPhase::Succeeded),
        "{w:?}"
    );

    // 2. Away during the whole retention: the agent is down while the workload ends, is
    // cancelled and compacted, so it never sees a `cancel` for it.
    let (w, _) = c
        .submit_raw(job("away", 3).into_bytes(), false, Some("k-away"))
        .await
        .unwrap();
    let away = w.metadata.uid.clone().unwrap();
    wait_for("away running", Duration::from_secs(30), async || {
        let w = c.get("away", false).await.ok()?;
        (w.status?.phase == WorkloadPhase::Running).then_some(())
    })
    .await;
    tc.c.kill9_agent("sim-eu").expect("kill agent");
    let killed = Instant::now();
    let cancelled = c.cancel("away").await.expect("cancel");
    assert_eq!(cancelled.status.unwrap().phase, WorkloadPhase::Cancelled);
    wait_for(
        "away to be compacted",
        Duration::from_secs(30),
        async || {
            c.get("away", false)
                .await
                .err()
                .filter(|e| e.is_not_found())
                .map(|_| ())
        },
    )
    .await;
    // Its 3 s run is over in the member's state by the time the agent comes back.
    tokio::time::sleep(Duration::from_secs(5).saturating_sub(killed.elapsed())).await;
    tc.c.restart_agent("sim-eu").await.expect("restart agent");
    let local = wait_for(
        "the returning agent to remove work the federation no longer lists",
        Duration::from_secs(30),
        async || {
            let local = tc.c.agent_local("sim-eu").await.ok()?;
            local
                .workloads
                .iter()
                .all(|l| l.uid != away)
                .then_some(local)
        },
    )
    .await;
    assert!(
        local
            .workloads
            .iter()
            .all(|l| !matches!(l.phase, LocalPhase::Running | LocalPhase::Pending)),
        "{local:?}"
    );
    let log = log_with(
        &tc.c.dir().join("agent-sim-eu.log"),
        &["compacted while away"],
    )
    .await;
    assert!(
        log.contains("compacted while away"),
        "the sweep, not a cancel, removed it; agent log tail:\n{}",
        log.lines().rev().take(30).collect::<Vec<_>>().join("\n")
    );
}
