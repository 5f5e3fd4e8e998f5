//! Member loss with the agents in another region: both agents reach the federation through
//! proxies that add a 150 ms round trip. They stay Ready and their workloads' status arrives;
//! one agent frozen (SIGSTOP) past lost-after loses its work to the other, and after SIGCONT
//! its local view never shows as running what the federation moved, at any sampled instant.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use tideway_api::agent::LocalPhase;
use tideway_api::client::Client;
use tideway_testkit::wan::Link;

use crate::common::*;

fn layout(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/dev")).join(format!("{name}.yaml"))
}

fn h100(name: &str) -> String {
    format!(
        r#"{{"apiVersion":"tideway.dev/v1alpha1","kind":"Workload","metadata":{{"name":"{name}","annotations":{{"tideway.dev/sim-runtime-seconds":"360000"}}}},"spec":{{"queue":"default","class":"training","podSets":[{{"name":"w","count":1,"gpusPerPod":8,"flavor":"H100"}}],"checkpoint":{{"intervalSeconds":600}}}}}}"#
    )
}

/// UIDs each reachable agent runs (or is starting) now.
async fn active(tc: &TestCluster) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for name in ["sim-eu", "sim-ap"] {
        let Ok(v) = tc.c.agent_local(name).await else {
            continue;
        };
        for w in v.workloads {
            if matches!(w.phase, LocalPhase::Running | LocalPhase::Pending) {
                out.entry(w.uid).or_default().push(name.to_string());
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_agent_across_a_wan_loses_its_work_once_and_never_runs_it_twice() {
    let mut tc = cluster(
        3,
        &[
            "--member-heartbeat-ms",
            "500",
            "--member-lost-after-ms",
            "4000",
        ],
    )
    .await;
    let far =
        tc.c.api_via_wan(Link::with_rtt(Duration::from_millis(150)))
            .await
            .expect("proxies");
    for (name, region) in [("sim-eu", "eu-west"), ("sim-ap", "ap-south")] {
        tc.c.add_agent_via(
            name,
            region,
            &layout(name),
            &["--heartbeat-ms", "500"],
            &far,
        )
        .await
        .expect("agent");
    }
    let addr = tc.c.addrs()[0].clone();
    let c = Client::new(&addr).expect("client");
    let ready = |c: &Client| {
        let c = c.clone();
        async move {
            c.members()
                .await
                .map(|l| {
                    l.items
                        .iter()
                        .filter(|m| {
                            m.status
                                .as_ref()
                                .is_some_and(|s| format!("{:?}", s.phase) == "Ready")
                        })
                        .count()
                })
                .unwrap_or(0)
        }
    };
    let deadline = Instant::now() + Duration::from_secs(40);
    while ready(&c).await < 2 {
        assert!(
            Instant::now() < deadline,
            "agents behind 150 ms never became Ready"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let (ok, _, err) = tideway(&addr, &["member", "cordon", "sim-ap"]);
    assert!(ok, "{err}");
    let names: Vec<String> = (0..4).map(|i| format!("wan-{i}")).collect();
    for n in &names {
        c.submit_raw(h100(n).into_bytes(), false, Some(n))
            .await
            .expect("submit");
    }
    // Their status arrives across the WAN: Running on sim-eu.
    let on = |want: &'static str, attempts: u32| {
        let c = c.clone();
        let names = names.clone();
        async move {
            let mut all = true;
            let mut uids = BTreeSet::new();
            for n in &names {
                let w = c.get(n, false).await.expect("get");
                let st = w.status.unwrap_or_default();
                all &= format!("{:?}", st.phase) == "Running"
                    && st.cluster.as_deref() == Some(want)
                    && st.attempts == attempts;
                if let Some(uid) = &w.metadata.uid {
                    uids.insert(uid.to_string());
                }
            }
            (all, uids)
        }
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let uids = loop {
        let (all, uids) = on("sim-eu", 1).await;
        if all {
            break uids;
        }
        assert!(Instant::now() < deadline, "never ran on sim-eu");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let (ok, _, err) = tideway(&addr, &["member", "uncordon", "sim-ap"]);
    assert!(ok, "{err}");

    // Freeze sim-eu past lost-after: its work moves to sim-ap, once.
    tc.c.signal_agent("sim-eu", "STOP").expect("SIGSTOP");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        for (uid, at) in active(&tc).await {
            assert!(at.len() <= 1, "{uid} active on {at:?} at once");
        }
        if on("sim-ap", 2).await.0 {
            break;
        }
        assert!(Instant::now() < deadline, "the work never moved");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Thawed, it must not show the moved work running, from its first answer on.
    tc.c.signal_agent("sim-eu", "CONT").expect("SIGCONT");
    let until = Instant::now() + Duration::from_secs(4);
    let mut answers = 0;
    while Instant::now() < until {
        if let Ok(v) = tc.c.agent_local("sim-eu").await {
            answers += 1;
            let twice: Vec<&String> = v
                .workloads
                .iter()
                .filter(|w| matches!(w.phase, LocalPhase::Running | LocalPhase::Pending))
                .map(|w| &w.uid)
                .filter(|u| uids.contains(u.as_str()))
                .collect();
            assert!(
                twice.is_empty(),
                "sim-eu shows moved work active: {twice:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        answers > 0,
        "sim-eu's local view never answered after SIGCONT"
    );
    // sim-ap, across the same WAN, stayed Ready throughout and holds the work.
    assert!(ready(&c).await >= 1);
    assert!(on("sim-ap", 2).await.0);
}
