//! `tideway dev` as a user runs it: its default fleet of simulated members on scaled time. A
//! high-priority gang that fits nowhere preempts low-priority work, once the victims have run
//! their minimum runtime. The federation and its simulated members read one clock, so the
//! leader's minimum-runtime check compares times on the same scale as the members' stamps.

use std::path::Path;
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use tideway_api::WorkloadPhase;
use tideway_api::client::Client;

/// A one-pod H100 job of `class`; it runs a simulated day unless preempted.
fn job(name: &str, class: &str, pods: u32) -> String {
    format!(
        r#"{{"apiVersion":"tideway.dev/v1alpha1","kind":"Workload","metadata":{{"name":"{name}","annotations":{{"tideway.dev/sim-runtime-seconds":"86400"}}}},"spec":{{"queue":"default","class":"training","priorityClass":"{class}","podSets":[{{"name":"w","count":{pods},"gpusPerPod":8,"flavor":"H100"}}],"gang":{{"minCount":{pods}}},"topology":{{"required":"rack"}}}}}}"#
    )
}

async fn status(c: &Client, name: &str) -> tideway_api::WorkloadStatus {
    c.get(name, true)
        .await
        .ok()
        .and_then(|w| w.status)
        .unwrap_or_default()
}

async fn wait_phase(c: &Client, name: &str, want: &[WorkloadPhase], timeout: Duration, log: &Path) {
    let deadline = Instant::now() + timeout;
    loop {
        let phase = status(c, name).await.phase;
        if want.contains(&phase) {
            return;
        }
        if Instant::now() >= deadline {
            let explain = c.explain(name).await;
            let log = std::fs::read_to_string(log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(60).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            panic!(
                "{name} is {phase:?}, wanted {want:?}\nexplain: {explain:#?}\ndev log tail:\n{}",
                tail.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Midday in the dev schedule's zone (Europe/Berlin): the training side's day share holds
/// for the whole test, whatever the wall clock says when it runs.
const START_AT: &str = "2026-01-05T12:00:00+01:00";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_high_priority_gang_preempts_low_work_after_its_minimum_runtime() {
    let _guard = crate::common::serial().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = crate::common::DevProcess::start(
        dir.path(),
        &["--time-scale", "60", "--start-at", START_AT],
        &[],
    );
    let (addr, log_path) = (dev.addr.clone(), dev.log.clone());
    let token = dev.token().await;
    let c = Client::with_token(&addr, Some(&token)).expect("client");

    // The default fleet has 128 H100 GPUs (sim-eu 80, sim-ap 48): fill them with 16
    // one-node low-priority jobs.
    let t0 = Instant::now();
    let lows: Vec<String> = (0..16).map(|i| format!("low-{i}")).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    for name in &lows {
        while c
            .submit_raw(job(name, "low", 1).into_bytes(), false, Some(name))
            .await
            .is_err()
        {
            assert!(Instant::now() < deadline, "dev never accepted {name}");
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
    let mut started: Vec<DateTime<Utc>> = Vec::new();
    for name in &lows {
        wait_phase(
            &c,
            name,
            &[WorkloadPhase::Running],
            Duration::from_secs(60),
            &log_path,
        )
        .await;
        started.push(status(&c, name).await.started_at.expect("started_at"));
    }

    eprintln!("t90: {} lows running after {:?}", lows.len(), t0.elapsed());
    // Four nodes' worth in one rack: only evicting low work makes room.
    c.submit_raw(job("urgent", "high", 4).into_bytes(), false, Some("urgent"))
        .await
        .expect("urgent accepted");
    wait_phase(
        &c,
        "urgent",
        &[WorkloadPhase::Assigned, WorkloadPhase::Running],
        Duration::from_secs(120),
        &log_path,
    )
    .await;

    eprintln!("t90: urgent placed after {:?}", t0.elapsed());
    // It took the place of low work, and only after that work had run its minimum runtime
    // (on the fleet's one clock).
    let mut evicted = 0;
    for name in &lows {
        let st = status(&c, name).await;
        if st.phase != WorkloadPhase::Running || st.message.is_some_and(|m| m.contains("preempted"))
        {
            evicted += 1;
        }
    }
    // Exactly one rack's worth: the leader plans on the racks the members report the low
    // work in, not on the racks it planned for them, so it never evicts in the wrong rack.
    assert_eq!(evicted, 4, "{evicted} low jobs made room for four nodes");
    let admitted = status(&c, "urgent").await.admitted_at.expect("admitted_at");
    let first_start = started.iter().min().copied().expect("starts");
    assert!(
        admitted - first_start
            >= TimeDelta::seconds(
                tideway_federation::dispatcher::cycle::MIN_RUNTIME_BEFORE_PREEMPTION_SECS
            ),
        "urgent was admitted at {admitted}, only {} after the victims started",
        admitted - first_start
    );
}
