//! A version scoped to a cluster restricts placement, with `tideway dev`: a candidate scoped
//! to `clusters: [sim-ap]` alone (it takes the queue it changes, `batch`) places the batch
//! queue's new work only on sim-ap; what does not fit there waits, and its explanation names
//! the rollout, although sim-eu has room. `tideway policy widen` lifts the restriction and
//! the waiting work goes to sim-eu, while what runs on sim-ap stays. A clusters-only scope
//! over a candidate that changes nothing is refused, naming the field.

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
      - {flavor: H100, guaranteed: 128}
"#;

const ROLLOUT: &str = "  rollout:\n    scope: {clusters: [sim-ap]}\n";

/// sim-ap has six 8-GPU H100 nodes, sim-eu ten: eight one-node jobs overflow sim-ap.
const JOBS: usize = 8;
const ON_AP: usize = 6;

fn job(name: &str) -> Vec<u8> {
    format!(
        r#"{{"apiVersion":"tideway.dev/v1alpha1","kind":"Workload","metadata":{{"name":"{name}","annotations":{{"tideway.dev/sim-runtime-seconds":"86400"}}}},"spec":{{"queue":"batch","class":"training","podSets":[{{"name":"w","count":1,"gpusPerPod":8,"flavor":"H100"}}]}}}}"#
    )
    .into_bytes()
}

/// (name, phase, cluster) of every job.
async fn placements(c: &Client) -> Vec<(String, WorkloadPhase, Option<String>)> {
    let mut out = Vec::new();
    for i in 0..JOBS {
        let name = format!("job-{i}");
        let st = c
            .get(&name, true)
            .await
            .ok()
            .and_then(|w| w.status)
            .unwrap_or_default();
        out.push((name, st.phase, st.cluster.map(|c| c.to_string())));
    }
    out
}

fn placed(p: &[(String, WorkloadPhase, Option<String>)], cluster: &str) -> usize {
    p.iter()
        .filter(|(_, ph, c)| {
            matches!(ph, WorkloadPhase::Assigned | WorkloadPhase::Running)
                && c.as_deref() == Some(cluster)
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_scoped_version_places_its_work_only_there_until_widened() {
    let _serial = serial().await;
    let dir = tempfile::tempdir().unwrap();
    let dev = DevProcess::start(
        dir.path(),
        &["--start-at", "2026-01-05T12:00:00+01:00"],
        &[],
    );
    let token = dev.token().await;
    let c = Client::with_token(&dev.addr, Some(&token)).expect("client");
    let config = dir.path().join("cli-config");
    let cli = |args: &[&str]| tideway_with_config(&config, &dev.addr, args);
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_owned()
    };

    // Both H100 members report before anything is placed.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let h100 = c.capacity(false).await.ok().and_then(|v| {
            v.flavors
                .iter()
                .find(|f| f.flavor == "H100")
                .map(|f| f.capacity.total)
        });
        if h100 == Some(128) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "H100 capacity {h100:?}, wanted 128\n{}",
            dev.log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    let base = write("base.yaml", BASE);
    let (ok, out, err) = cli(&["policy", "apply", "-f", &base]);
    assert!(ok, "{out}{err}");
    let v1 = c.policy_history().await.expect("history").current;

    // Clusters alone over a candidate that changes nothing would roll out nothing.
    let same = write("same.yaml", &format!("{BASE}{ROLLOUT}"));
    let (ok, out, err) = cli(&["policy", "apply", "-f", &same]);
    assert!(
        !ok && err.contains("spec.rollout.scope.clusters"),
        "{out}{err}"
    );

    let cand = write(
        "candidate.yaml",
        &format!(
            "{}{ROLLOUT}",
            BASE.replace("guaranteed: 128", "guaranteed: 120")
        ),
    );
    let (ok, out, err) = cli(&["policy", "apply", "-f", &cand]);
    let v2 = v1 + 1;
    assert!(
        ok && out.contains(&format!(
            "as version {v2} (scoped rollout over version {v1})"
        )),
        "{out}{err}"
    );

    for i in 0..JOBS {
        let name = format!("job-{i}");
        c.submit_raw(job(&name), false, Some(&name))
            .await
            .expect("submit");
    }
    // Six fit on sim-ap; the other two wait, though sim-eu is empty.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let p = placements(&c).await;
        assert_eq!(placed(&p, "sim-eu"), 0, "scoped work left sim-ap: {p:?}");
        if placed(&p, "sim-ap") == ON_AP {
            break;
        }
        assert!(Instant::now() < deadline, "not {ON_AP} on sim-ap: {p:?}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // A few more cycles (500 ms each): still nothing on sim-eu.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let p = placements(&c).await;
    assert_eq!(placed(&p, "sim-eu"), 0, "{p:?}");
    let waiting: Vec<&String> = p
        .iter()
        .filter(|(_, ph, _)| *ph == WorkloadPhase::Pending)
        .map(|(n, _, _)| n)
        .collect();
    assert_eq!(waiting.len(), JOBS - ON_AP, "{p:?}");
    let ex = c.explain(waiting[0]).await.expect("explain");
    let text = format!("{ex:?}");
    assert!(
        text.contains(&format!(
            "cluster in [sim-ap] while policy version {v2} is rolled out"
        )),
        "the explanation does not name the rollout: {text}"
    );

    // Widened: the restriction is gone, the waiting work goes to sim-eu, sim-ap's stays.
    let (ok, out, err) = cli(&["policy", "widen"]);
    assert!(ok, "{out}{err}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let p = placements(&c).await;
        if placed(&p, "sim-eu") == JOBS - ON_AP {
            assert_eq!(placed(&p, "sim-ap"), ON_AP, "{p:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "widened, yet not placed on sim-eu: {p:?}\nexplain: {:?}",
            c.explain(waiting[0]).await.ok()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}
