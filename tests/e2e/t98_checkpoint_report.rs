//! A hand-over notice reaches the member and its checkpoint comes back: `tideway dev` on a
//! pinned clock before 08:00 Berlin time, its day/night schedule re-applied with a lead time,
//! training running beyond the day's share. The leader sends checkpoint notices to the work
//! beyond the coming quota; the simulated members checkpoint it; their agents report the
//! checkpoint; the workload's `status.lastCheckpointAt` and a `Checkpointed` audit record by
//! the member's agent show it, so a reclaim is priced by the work since then.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tideway_api::client::{Client, ListQuery};

use crate::common::BIN;

/// 07:30 in Berlin on a Tuesday; at 60x the boundary is 30 s of real time away.
const START_AT: &str = "2026-01-06T07:30:00+01:00";

/// dev's schedule with a 20-minute hand-over lead: notices from 07:40 (10 s real).
const SCHEDULE: &str = "apiVersion: tideway.dev/v1alpha1
kind: QuotaSchedule
metadata: {name: day-night}
spec:
  timeZone: Europe/Berlin
  windows:
  - name: day
    start: \"08:00\"
    end: \"22:00\"
    quotas:
    - {pool: inference, share: 0.7}
    - {pool: training, share: 0.3}
  - name: night
    start: \"22:00\"
    end: \"08:00\"
    quotas:
    - {pool: inference, share: 0.3}
    - {pool: training, share: 0.7}
  transition:
    leadTimeSeconds: 1200
    checkpointGraceSeconds: 300
    reclaimOrder: leastWorkLost
";

fn job(name: &str) -> String {
    format!(
        r#"{{"apiVersion":"tideway.dev/v1alpha1","kind":"Workload","metadata":{{"name":"{name}","annotations":{{"tideway.dev/sim-runtime-seconds":"86400"}}}},"spec":{{"queue":"default","class":"training","podSets":[{{"name":"w","count":1,"gpusPerPod":8,"flavor":"H100"}}],"gang":{{"minCount":1}},"checkpoint":{{"intervalSeconds":3600}}}}}}"#
    )
}

fn events(addr: &str, token: &str, kind: &str) -> Vec<serde_json::Value> {
    crate::common::cli_events(addr, token, kind).unwrap_or_else(|err| panic!("{err}"))
}

/// Workload name -> (cluster, reported checkpoint) of every workload with one.
async fn checkpointed(c: &Client) -> BTreeMap<String, (String, DateTime<Utc>)> {
    let list = c.list(&ListQuery::default()).await.expect("list");
    list.items
        .into_iter()
        .filter_map(|w| {
            let st = w.status?;
            Some((w.metadata.name, (st.cluster?, st.last_checkpoint_at?)))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_over_notice_is_checkpointed_by_the_member_and_reported_back() {
    let _guard = crate::common::serial().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = crate::common::DevProcess::start(
        dir.path(),
        &["--time-scale", "60", "--start-at", START_AT],
        &[],
    );
    let addr = dev.addr.clone();
    let token = dev.token().await;
    let c = Client::with_token(&addr, Some(&token)).expect("client");

    let file = dir.path().join("day-night.yaml");
    std::fs::write(&file, SCHEDULE).expect("write");
    let cfg = dir.path().join("cli-config");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = std::process::Command::new(BIN)
            .args(["apply", "-f"])
            .arg(&file)
            .args(["--addr", &addr, "--token", &token])
            .env("TIDEWAY_CONFIG", &cfg)
            .output()
            .expect("tideway apply runs");
        if out.status.success() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "apply failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            dev.log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // 80 of the fleet's 128 H100 GPUs: beyond the day's 30% training share.
    for i in 0..10 {
        let name = format!("train-{i}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while c
            .submit_raw(job(&name).into_bytes(), false, Some(&name))
            .await
            .is_err()
        {
            assert!(Instant::now() < deadline, "dev never accepted {name}");
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    // The hand-over starts at 07:40 (about 10 s in); notices, checkpoints and reports follow.
    let deadline = Instant::now() + Duration::from_secs(60);
    let (noticed, reported) = loop {
        let noticed = events(&addr, &token, "CheckpointRequested");
        let reported = checkpointed(&c).await;
        let all_back = !noticed.is_empty()
            && noticed
                .iter()
                .all(|e| reported.contains_key(e["workload"].as_str().unwrap_or_default()));
        if all_back {
            break (noticed, reported);
        }
        assert!(
            Instant::now() < deadline,
            "notices {noticed:#?}\ncheckpoints reported {reported:#?}\ndev log:\n{}",
            dev.log_tail(40)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    eprintln!(
        "{} notices, {} checkpoints reported",
        noticed.len(),
        reported.len()
    );

    // Each checkpoint is on record once per workload, by the agent of the member it runs on,
    // no earlier than the notice that asked for it.
    let records = events(&addr, &token, "Checkpointed");
    for (name, (cluster, at)) in &reported {
        let notice = noticed
            .iter()
            .find(|e| e["workload"] == name.as_str())
            .unwrap_or_else(|| panic!("{name} checkpointed without a notice: {noticed:#?}"));
        let asked: DateTime<Utc> = serde_json::from_value(notice["at"].clone()).expect("at");
        assert!(
            *at >= asked,
            "{name}: checkpoint {at} before the notice {asked}"
        );
        let mine: Vec<_> = records
            .iter()
            .filter(|e| e["workload"] == name.as_str())
            .collect();
        assert_eq!(mine.len(), 1, "{name}: {records:#?}");
        assert_eq!(
            mine[0]["actor"],
            format!("agent:{cluster}"),
            "{:#}",
            mine[0]
        );
        assert_eq!(mine[0]["cluster"], cluster.as_str(), "{:#}", mine[0]);
    }
    // Only the work beyond the coming share was asked: the rest never checkpointed.
    assert!(
        reported.len() < 10,
        "every workload checkpointed: {reported:#?}"
    );
}
