//! Policy versions on real processes: a bundle applied with the CLI, a bad one refused by
//! field, a dry-run that writes nothing, a scoped candidate that starves the protected
//! serving queue rolled back by its trigger (the audit names trigger and value), the rolled
//! back rules deciding exactly as before, and the history surviving a leader kill and a
//! restart.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tideway_api::audit::AuditKind;
use tideway_api::client::Client;
use tideway_api::{PolicyHistory, WorkloadPhase};

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
    metadata: {name: serving}
    spec:
      tenant: platform
      classes: [inference]
      quotas:
      - {flavor: L40S, guaranteed: 8, max: 8}
  - apiVersion: tideway.dev/v1alpha1
    kind: Queue
    metadata: {name: batch}
    spec:
      tenant: research
      classes: [training]
      quotas:
      - {flavor: H100, guaranteed: 48}
"#;

/// The base with the serving queue's quota taken away, scoped to the inference pool, and a
/// trigger on unserved inference demand.
fn candidate() -> String {
    BASE.replace(
        "{flavor: L40S, guaranteed: 8, max: 8}",
        "{flavor: L40S, guaranteed: 0, max: 0}",
    ) + "  rollout:\n    scope: {pools: [inference]}\n    triggers:\n    - unservedInference: {seconds: 5}\n"
}

fn infer(name: &str) -> Vec<u8> {
    format!(
        r#"{{"apiVersion":"tideway.dev/v1alpha1","kind":"Workload","metadata":{{"name":"{name}","annotations":{{"tideway.dev/sim-runtime-seconds":"3600"}}}},"spec":{{"queue":"serving","class":"inference","podSets":[{{"name":"s","count":1,"gpusPerPod":1,"flavor":"L40S"}}]}}}}"#
    )
    .into_bytes()
}

fn train(name: &str) -> Vec<u8> {
    format!(
        r#"{{"apiVersion":"tideway.dev/v1alpha1","kind":"Workload","metadata":{{"name":"{name}","annotations":{{"tideway.dev/sim-runtime-seconds":"3600"}}}},"spec":{{"queue":"batch","class":"training","podSets":[{{"name":"w","count":1,"gpusPerPod":8,"flavor":"H100"}}]}}}}"#
    )
    .into_bytes()
}

fn write(tc: &TestCluster, name: &str, text: &str) -> String {
    let p = tc.c.dir().join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_owned()
}

async fn history(c: &Client) -> PolicyHistory {
    c.policy_history().await.expect("history")
}

async fn wait_phase(c: &Client, name: &str, phase: WorkloadPhase, secs: u64) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let w = c.get(name, false).await.expect("get");
        let st = w.status.clone().unwrap_or_default();
        if st.phase == phase {
            return;
        }
        if Instant::now() > deadline {
            let ex = c.explain(name).await.ok();
            let events = c.events(&[]).await.ok();
            panic!(
                "{name} is {:?} ({:?}), wanted {phase:?}\nexplain: {ex:?}\nevents: {events:#?}",
                st.phase, st.pending_reason
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_starving_candidate_is_rolled_back_by_its_trigger_and_versions_survive_failover() {
    let mut tc = cluster(3, &[]).await;
    let addr = tc.c.addrs()[0].clone();
    let c = Client::new(&addr).unwrap();

    // Version 1, the whole bundle, with the CLI.
    let base = write(&tc, "base.yaml", BASE);
    let (ok, out, err) = tideway(&addr, &["policy", "apply", "-f", &base]);
    assert!(
        ok && out.contains("policy/fleet applied as version 1"),
        "{out}{err}"
    );

    // A bundle whose schedule names an unknown queue is refused whole, naming the field.
    let bad = write(
        &tc,
        "bad.yaml",
        &(BASE.to_owned()
            + "  quotaSchedules:\n  - apiVersion: tideway.dev/v1alpha1\n    kind: QuotaSchedule\n    metadata: {name: tide}\n    spec:\n      timeZone: UTC\n      windows:\n      - {name: all, start: \"00:00\", end: \"00:00\", quotas: [{queue: ghost, flavor: L40S, gpus: 4}]}\n"),
    );
    let (ok, _, err) = tideway(&addr, &["policy", "apply", "-f", &bad]);
    assert!(
        !ok && err.contains("spec.quotaSchedules[0].spec.windows[0].quotas[0].queue"),
        "{err}"
    );
    assert_eq!(history(&c).await.current, 1, "nothing applied");

    // Dry-run of the candidate: the serving quota moves 8 -> 0, and nothing is written
    // (no member yet, so nothing else commits meanwhile).
    let cand = write(&tc, "candidate.yaml", &candidate());
    let before = tc.c.status(1).await.unwrap().last_applied;
    let (ok, out, err) = tideway(&addr, &["policy", "dry-run", "-f", &cand, "-o", "json"]);
    assert!(ok, "{err}");
    let report: tideway_api::DryRunReport = serde_json::from_str(&out).expect(&out);
    assert_eq!(report.current_version, 1);
    let serving = report
        .quota_moves
        .iter()
        .find(|m| m.queue == "serving")
        .unwrap_or_else(|| panic!("{report:?}"));
    assert_eq!(
        (serving.guaranteed_now, serving.guaranteed_candidate),
        (8, 0)
    );
    assert_eq!(
        tc.c.status(1).await.unwrap().last_applied,
        before,
        "dry-run wrote"
    );
    assert_eq!(history(&c).await.current, 1);

    // The field-level diff of the candidate against the current version.
    let (ok, out, err) = tideway(&addr, &["policy", "diff", "-f", &cand]);
    assert!(ok, "{err}");
    assert!(
        out.contains("spec.queues[serving].spec.quotas[0].guaranteed")
            && out.contains("spec.rollout"),
        "{out}"
    );

    // A member, then the candidate, scoped to the inference pool.
    let layout = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/dev/sim-ap.yaml"
    ));
    tc.c.add_agent("sim-ap", "ap-south", &layout, &["--heartbeat-ms", "500"])
        .await
        .expect("agent");
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.capacity(false).await.map(|v| v.fleet.total).unwrap_or(0) == 0 {
        assert!(Instant::now() < deadline, "no capacity reported");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (ok, out, err) = tideway(&addr, &["policy", "apply", "-f", &cand]);
    assert!(
        ok && out.contains("as version 2 (scoped rollout over version 1)"),
        "{out}{err}"
    );
    c.submit_raw(train("train-1"), false, Some("train-1"))
        .await
        .expect("submit");
    c.submit_raw(infer("infer-1"), false, Some("infer-1"))
        .await
        .expect("submit");

    // The serving work starves under the candidate; after 5 s the leader rolls back.
    let deadline = Instant::now() + Duration::from_secs(45);
    loop {
        let h = history(&c).await;
        if h.current == 3 {
            let v3 = h.items.iter().find(|v| v.version == 3).unwrap();
            assert_eq!(v3.rolled_back_to, Some(1), "{h:?}");
            assert_eq!(v3.applied_by.as_deref(), Some("system:leader"));
            break;
        }
        assert!(Instant::now() < deadline, "no automatic rollback: {h:?}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    wait_phase(&c, "infer-1", WorkloadPhase::Running, 30).await;
    wait_phase(&c, "train-1", WorkloadPhase::Running, 30).await;

    // The audit names the trigger and its measured value, through `tideway events`.
    let (ok, out, err) = tideway(&addr, &["events", "--kind", "PolicyRolledBack"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("unservedInference")
            && out.contains("measured")
            && out.contains("restores version 1"),
        "{out}"
    );
    // Every decision carries the version that made it: the serving work was placed by the
    // restored rules; the batch work by the base (out of scope) or, if it was placed after
    // the rollback, by version 3.
    let events = c.events(&[]).await.unwrap().items;
    let rollback_index = events
        .iter()
        .find(|e| e.kind == AuditKind::PolicyRolledBack)
        .map(|e| e.index)
        .unwrap();
    let assigned = |w: &str| {
        events
            .iter()
            .find(|e| e.kind == AuditKind::Assigned && e.workload.as_deref() == Some(w))
            .cloned()
            .unwrap_or_else(|| panic!("no Assigned record of {w}: {events:#?}"))
    };
    assert_eq!(assigned("infer-1").policy_version, 3);
    let t = assigned("train-1");
    let expected = if t.index < rollback_index { 1 } else { 3 };
    assert_eq!(t.policy_version, expected, "{t:?}");

    // Rolled back means the old decisions exactly: the dry-run of version 1's document
    // against the state after the rollback changes nothing.
    let (ok, out, err) = tideway(&addr, &["policy", "dry-run", "-f", &base]);
    assert!(ok && out.contains("no change"), "{out}{err}");
    let (ok, out, err) = tideway(&addr, &["policy", "diff", "--from", "1", "--to", "3"]);
    assert!(ok && out.contains("0 changes"), "{out}{err}");

    // A rollback by hand is one command too.
    let (ok, out, err) = tideway(&addr, &["policy", "rollback", "--to", "1", "-m", "by hand"]);
    assert!(
        ok && out.contains("as version 4") && out.contains("rolled back to version 1"),
        "{out}{err}"
    );

    // The versions survive a leader kill and a restart.
    let leader = tc.c.wait_for_leader(Duration::from_secs(10)).await.unwrap();
    let want = history(&c).await;
    assert_eq!(want.current, 4);
    tc.c.kill9(leader).unwrap();
    let new_leader = tc.c.wait_for_leader(Duration::from_secs(30)).await.unwrap();
    assert_ne!(new_leader, leader);
    let c2 = tc.c.client(new_leader).unwrap();
    assert_eq!(history(&c2).await, want);
    let (ok, out, err) = tideway(&tc.c.nodes[&new_leader].addr, &["policy", "history"]);
    assert!(
        ok && out.contains("by hand") && out.contains("unservedInference"),
        "{out}{err}"
    );
    tc.c.restart(leader).await.unwrap();
    tc.c.wait_converged(Duration::from_secs(30)).await.unwrap();
    let c3 = tc.c.client(leader).unwrap();
    assert_eq!(history(&c3).await, want);
    assert_eq!(
        c3.policy_version("1").await.unwrap().spec,
        c3.policy_version("4").await.unwrap().spec
    );
}
