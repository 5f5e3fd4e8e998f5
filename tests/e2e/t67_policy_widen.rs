//! `tideway policy widen` on real processes (and a scope of clusters alone over a candidate
//! that changes nothing, refused by field): a candidate scoped to the inference pool leaves
//! the training queue on the base's rules (its second job waits for quota); widening makes
//! the candidate the whole fleet's next version, the waiting job runs under it, the
//! rollout is over (a second widen is refused) and the history says what happened.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tideway_api::WorkloadPhase;
use tideway_api::audit::AuditKind;
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
      - {flavor: H100, guaranteed: 8, max: 8}
"#;

/// The batch queue doubled and the serving queue halved, scoped to the inference pool: only
/// the serving change applies until the rollout is widened.
fn candidate() -> String {
    BASE.replace(
        "{flavor: H100, guaranteed: 8, max: 8}",
        "{flavor: H100, guaranteed: 16, max: 16}",
    )
    .replace(
        "{flavor: L40S, guaranteed: 8, max: 8}",
        "{flavor: L40S, guaranteed: 4, max: 4}",
    ) + "  rollout:\n    scope: {pools: [inference]}\n"
}

fn train(name: &str) -> Vec<u8> {
    format!(
        r#"{{"apiVersion":"tideway.dev/v1alpha1","kind":"Workload","metadata":{{"name":"{name}","annotations":{{"tideway.dev/sim-runtime-seconds":"3600"}}}},"spec":{{"queue":"batch","class":"training","podSets":[{{"name":"w","count":1,"gpusPerPod":8,"flavor":"H100"}}]}}}}"#
    )
    .into_bytes()
}

async fn queue(c: &Client, name: &str) -> tideway_api::Queue {
    c.queues()
        .await
        .expect("queues")
        .items
        .into_iter()
        .find(|q| q.metadata.name == name)
        .unwrap_or_else(|| panic!("no queue {name}"))
}

async fn phase(c: &Client, name: &str) -> Option<WorkloadPhase> {
    c.get(name, false).await.ok()?.status.map(|s| s.phase)
}

async fn wait_running(c: &Client, name: &str, secs: u64) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while phase(c, name).await != Some(WorkloadPhase::Running) {
        if Instant::now() > deadline {
            panic!(
                "{name} is not running: {:?}\nexplain: {:?}",
                phase(c, name).await,
                c.explain(name).await.ok()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn widening_gives_the_whole_fleet_the_candidate_as_the_next_version() {
    let mut tc = cluster(1, &[]).await;
    let addr = tc.c.addrs()[0].clone();
    let c = Client::new(&addr).unwrap();
    let base = tc.c.dir().join("base.yaml");
    std::fs::write(&base, BASE).unwrap();
    let cand = tc.c.dir().join("candidate.yaml");
    std::fs::write(&cand, candidate()).unwrap();
    let (base, cand) = (base.to_str().unwrap(), cand.to_str().unwrap());

    let (ok, out, err) = tideway(&addr, &["policy", "widen"]);
    assert!(
        !ok && err.contains("no policy version is being rolled out"),
        "nothing to widen yet: {out}{err}"
    );
    let (ok, out, err) = tideway(&addr, &["policy", "apply", "-f", base]);
    assert!(ok && out.contains("as version 1"), "{out}{err}");
    let layout = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/dev/sim-ap.yaml"
    ));
    tc.c.add_agent("sim-ap", "ap-south", &layout, &["--heartbeat-ms", "500"])
        .await
        .expect("agent");
    // A scope of clusters alone over a candidate that changes nothing would roll out
    // nothing: refused, naming the field.
    let clusters_only = tc.c.dir().join("clusters-only.yaml");
    std::fs::write(
        &clusters_only,
        format!("{BASE}  rollout:\n    scope: {{clusters: [sim-ap]}}\n"),
    )
    .unwrap();
    let (ok, out, err) = tideway(
        &addr,
        &["policy", "apply", "-f", clusters_only.to_str().unwrap()],
    );
    assert!(
        !ok && err.contains("spec.rollout.scope.clusters"),
        "{out}{err}"
    );
    let (ok, out, err) = tideway(&addr, &["policy", "apply", "-f", cand]);
    assert!(
        ok && out.contains("as version 2 (scoped rollout over version 1)"),
        "{out}{err}"
    );

    // Scoped: the serving queue has the candidate's quota, the batch queue the base's.
    let q = queue(&c, "serving").await;
    assert_eq!(q.spec.quotas[0].guaranteed, 4, "in scope: {q:?}");
    let q = queue(&c, "batch").await;
    assert_eq!(q.spec.quotas[0].max, Some(8), "out of scope: {q:?}");
    c.submit_raw(train("b-1"), false, Some("b-1"))
        .await
        .expect("submit");
    c.submit_raw(train("b-2"), false, Some("b-2"))
        .await
        .expect("submit");
    wait_running(&c, "b-1", 30).await;
    // The base's 8 GPUs hold the second job back (48 H100 are free).
    for _ in 0..10 {
        assert_eq!(
            phase(&c, "b-2").await,
            Some(WorkloadPhase::Pending),
            "b-2 ran before the widen: {:?}",
            c.explain("b-2").await.ok()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // Widened: version 3, the candidate's rules without a rollout, everywhere.
    let (ok, out, err) = tideway(&addr, &["policy", "widen"]);
    assert!(
        ok && out == "policy/fleet widened to the whole fleet as version 3\n",
        "{out}{err}"
    );
    wait_running(&c, "b-2", 30).await;
    let q = queue(&c, "batch").await;
    assert_eq!(q.spec.quotas[0].max, Some(16), "{q:?}");
    let h = c.policy_history().await.expect("history");
    assert_eq!(h.current, 3, "{h:?}");
    let v3 = c.policy_version("3").await.expect("version 3");
    let st = v3.status.clone().expect("status");
    assert_eq!(st.rollout_base, None, "{v3:?}");
    assert_eq!(v3.spec.rollout, None, "{v3:?}");
    assert_eq!(
        st.message.as_deref(),
        Some("version 2 widened to the whole fleet")
    );
    // The candidate's content, minus its rollout: the only difference from version 2.
    let (ok, out, err) = tideway(&addr, &["policy", "diff", "--from", "2", "--to", "3"]);
    assert!(
        ok && out.contains("spec.rollout") && out.contains(": 1 changes"),
        "{out}{err}"
    );
    let assigned = c
        .events(&[("kind", AuditKind::Assigned.as_str().to_string())])
        .await
        .expect("events")
        .items
        .into_iter()
        .find(|e| e.workload.as_deref() == Some("b-2"))
        .expect("b-2 assigned");
    assert_eq!(assigned.policy_version, 3, "{assigned:?}");

    // Nothing is being rolled out any more.
    let (ok, out, err) = tideway(&addr, &["policy", "widen"]);
    assert!(
        !ok && err.contains("no policy version is being rolled out"),
        "{out}{err}"
    );
    let (ok, out, err) = tideway(&addr, &["events", "--kind", "PolicyChanged"]);
    assert!(ok && out.contains("widened"), "{out}{err}");
}
