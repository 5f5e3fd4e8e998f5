//! Member loss on real processes: an agent killed with -9 for longer than the wait timeout
//! loses its work to another member, moved within the re-dispatch rate limit; when it comes
//! back it is told to stop the old copies; no workload is active on two members at any
//! sampled instant.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use tideway_api::agent::LocalPhase;
use tideway_api::client::Client;

use crate::common::*;

fn layout(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/dev")).join(format!("{name}.yaml"))
}

fn h100(name: &str) -> String {
    format!(
        r#"{{"apiVersion":"tideway.dev/v1alpha1","kind":"Workload","metadata":{{"name":"{name}","annotations":{{"tideway.dev/sim-runtime-seconds":"360000"}}}},"spec":{{"queue":"default","class":"training","podSets":[{{"name":"w","count":1,"gpusPerPod":8,"flavor":"H100"}}],"checkpoint":{{"intervalSeconds":600}}}}}}"#
    )
}

/// Active (pending or running) copies per UID on the members whose agents answer.
async fn sample(tc: &TestCluster) -> BTreeMap<String, Vec<String>> {
    let mut active: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for name in ["sim-eu", "sim-ap"] {
        let Ok(v) = tc.c.agent_local(name).await else {
            continue;
        };
        for w in v.workloads {
            if matches!(w.phase, LocalPhase::Running | LocalPhase::Pending) {
                active.entry(w.uid).or_default().push(name.to_string());
            }
        }
    }
    active
}

fn assert_once(s: &BTreeMap<String, Vec<String>>) {
    for (uid, on) in s {
        assert!(on.len() <= 1, "{uid} active on {on:?} at once");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_member_s_work_moves_within_the_rate_limit_and_its_old_copies_stop() {
    let mut tc = cluster(
        3,
        &[
            "--member-heartbeat-ms",
            "500",
            "--member-lost-after-ms",
            "3000",
            "--redispatch-per-member-per-second",
            "1",
        ],
    )
    .await;
    let agent_args = ["--heartbeat-ms", "500"];
    for (name, region) in [("sim-eu", "eu-west"), ("sim-ap", "ap-south")] {
        tc.c.add_agent(name, region, &layout(name), &agent_args)
            .await
            .expect("agent");
    }
    let addr = tc.c.addrs()[0].clone();
    let c = Client::new(&addr).expect("client");
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.members().await.map(|l| l.items.len()).unwrap_or(0) < 2 {
        assert!(Instant::now() < deadline, "agents never registered");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // All work on sim-eu first.
    let (ok, _, err) = tideway(&addr, &["member", "cordon", "sim-ap"]);
    assert!(ok, "{err}");
    let names: Vec<String> = (0..4).map(|i| format!("m-{i}")).collect();
    for n in &names {
        c.submit_raw(h100(n).into_bytes(), false, Some(n))
            .await
            .expect("submit");
    }
    let running_on = |want: &'static str, attempts: u32| {
        let c = &c;
        let names = &names;
        async move {
            let mut out = Vec::new();
            for n in names {
                let w = c.get(n, false).await.expect("get");
                let st = w.status.unwrap_or_default();
                out.push((
                    format!("{:?}", st.phase) == "Running"
                        && st.cluster.as_deref() == Some(want)
                        && st.attempts == attempts,
                    st.admitted_at,
                ));
            }
            out
        }
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !running_on("sim-eu", 1).await.iter().all(|(ok, _)| *ok) {
        assert!(Instant::now() < deadline, "never ran on sim-eu");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let (ok, _, err) = tideway(&addr, &["member", "uncordon", "sim-ap"]);
    assert!(ok, "{err}");

    // Lose sim-eu: NotReady after 1.5 s, lost after 3 s more; its work moves to sim-ap.
    let killed = Instant::now();
    tc.c.kill9_agent("sim-eu").expect("kill");
    let deadline = Instant::now() + Duration::from_secs(60);
    // While moves wait their turn, `explain` says RateLimited and when the next slot is.
    let mut rate_limited: Option<tideway_api::explain::RedispatchWait> = None;
    let moved = loop {
        assert_once(&sample(&tc).await);
        let r = running_on("sim-ap", 2).await;
        if r.iter().all(|(ok, _)| *ok) {
            break r;
        }
        if rate_limited.is_none() {
            for n in &names {
                if let Ok(x) = c.explain(n).await
                    && let Some(w) = x.redispatch
                {
                    assert!(x.summary.starts_with("RateLimited"), "{}", x.summary);
                    rate_limited = Some(w);
                    break;
                }
            }
        }
        assert!(Instant::now() < deadline, "work never moved: {r:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let took = killed.elapsed();
    let w = rate_limited.expect("explain showed a move waiting on the rate limit");
    assert_eq!(w.reason, tideway_api::PendingReason::RateLimited);
    assert_eq!(w.from.as_str(), "sim-eu");
    assert_eq!(w.limit, tideway_api::explain::RedispatchLimit::Member);
    assert!(
        took >= Duration::from_secs(3),
        "moved before the wait timeout: {took:?}"
    );
    // One a second off sim-eu (a burst of one): four moves span at least two seconds.
    let mut at: Vec<_> = moved.iter().filter_map(|(_, a)| *a).collect();
    at.sort();
    let span = at[at.len() - 1] - at[0];
    assert!(
        span >= chrono::Duration::milliseconds(2000),
        "a burst: {at:?}"
    );
    // The slot explain named lies within the moves (a move is placed within a cycle of it).
    assert!(
        w.next_slot >= at[0] - chrono::Duration::seconds(2)
            && w.next_slot <= at[at.len() - 1] + chrono::Duration::seconds(1),
        "next slot {} outside the moves {at:?}",
        w.next_slot
    );

    // sim-eu comes back: its old copies are stopped, nothing runs twice meanwhile.
    tc.c.restart_agent("sim-eu").await.expect("restart");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = sample(&tc).await;
        assert_once(&s);
        // The local view answers 503 until the agent has fenced.
        let Ok(eu) = tc.c.agent_local("sim-eu").await else {
            assert!(Instant::now() < deadline, "sim-eu's view never answered");
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let still: Vec<_> = eu
            .workloads
            .iter()
            .filter(|w| matches!(w.phase, LocalPhase::Running | LocalPhase::Pending))
            .collect();
        if still.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "old copies still active: {still:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for n in &names {
        let st = c
            .get(n, false)
            .await
            .expect("get")
            .status
            .unwrap_or_default();
        assert_eq!(st.cluster.as_deref(), Some("sim-ap"), "{n}: {st:?}");
        assert_eq!(st.attempts, 2, "{n}: {st:?}");
    }
}
