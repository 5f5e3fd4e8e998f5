//! Member agents as real processes: three federation nodes and three sim-backed agents in
//! three regions. The capacity view adds up, failover of the federation leader loses and
//! duplicates nothing, an agent restarted with kill -9 creates nothing twice, and a silent
//! member turns NotReady within the configured bound.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use tideway_agent::sim::Inventory;
use tideway_api::agent::LocalPhase;
use tideway_api::client::Client;

use crate::common::*;

const MEMBERS: [(&str, &str); 3] = [
    ("sim-eu", "eu-west"),
    ("sim-us", "us-east"),
    ("sim-ap", "ap-south"),
];

fn layout(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/dev")).join(format!("{name}.yaml"))
}

/// Training work on A100/H100 (training pools), inference on L40S (inference or shared pools).
fn workload(name: &str, pods: u32, gpus: u32, flavor: &str) -> String {
    let class = if flavor == "L40S" {
        "inference"
    } else {
        "training"
    };
    format!(
        r#"{{"apiVersion":"tideway.dev/v1alpha1","kind":"Workload","metadata":{{"name":"{name}","annotations":{{"tideway.dev/sim-runtime-seconds":"3600"}}}},"spec":{{"queue":"default","class":"{class}","podSets":[{{"name":"w","count":{pods},"gpusPerPod":{gpus},"flavor":"{flavor}"}}],"topology":{{"required":"rack"}}}}}}"#
    )
}

async fn submit_all(clients: &[Client], items: &[(String, String)]) {
    let deadline = Instant::now() + Duration::from_secs(60);
    for (i, (name, body)) in items.iter().enumerate() {
        let mut at = i;
        loop {
            let c = &clients[at % clients.len()];
            if c.submit_raw(body.clone().into_bytes(), false, Some(name))
                .await
                .is_ok()
            {
                break;
            }
            assert!(Instant::now() < deadline, "could not submit {name}");
            at += 1;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Phase of every workload, read from `addr`.
async fn phases(addr: &str) -> BTreeMap<String, (String, Option<String>)> {
    all_workloads(addr)
        .await
        .into_iter()
        .map(|w| {
            let st = w.status.unwrap_or_default();
            (w.metadata.name, (format!("{:?}", st.phase), st.cluster))
        })
        .collect()
}

async fn wait_running(addr: &str, names: &BTreeSet<String>, within: Duration) -> Duration {
    let start = Instant::now();
    loop {
        let p = phases(addr).await;
        if names
            .iter()
            .all(|n| p.get(n).is_some_and(|(ph, _)| ph == "Running"))
        {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < within,
            "not all running within {within:?}: {p:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn member_phases(addr: &str) -> BTreeMap<String, String> {
    let Ok(list) = Client::new(addr).unwrap().members().await else {
        return BTreeMap::new();
    };
    list.items
        .into_iter()
        .map(|m| {
            let phase = m
                .status
                .map(|s| format!("{:?}", s.phase))
                .unwrap_or_default();
            (m.metadata.name, phase)
        })
        .collect()
}

/// Every assigned workload lives in exactly one member cluster, once; the clusters created
/// exactly as many objects as there were assignments.
async fn assert_no_loss_no_duplicates(tc: &TestCluster, addr: &str) {
    let p = phases(addr).await;
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut creations = 0;
    for (name, _) in MEMBERS {
        let local = tc.c.agent_local(name).await.expect("agent local view");
        assert_eq!(local.cluster, *name);
        creations += local.creations;
        for w in local.workloads {
            if !matches!(w.phase, LocalPhase::Aborted { .. }) {
                *seen.entry(w.uid).or_default() += 1;
            }
        }
    }
    let assigned: Vec<_> = p.values().filter(|(_, c)| c.is_some()).collect();
    assert_eq!(
        seen.len(),
        assigned.len(),
        "assignments lost: {p:?} vs {seen:?}"
    );
    assert!(
        seen.values().all(|n| *n == 1),
        "a workload runs twice: {seen:?}"
    );
    assert_eq!(
        creations as usize,
        assigned.len(),
        "objects created more than once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_register_route_survive_failover_and_restarts() {
    let mut tc = cluster(
        3,
        &[
            "--member-heartbeat-ms",
            "500",
            "--member-missed-heartbeats",
            "3",
        ],
    )
    .await;
    for (name, region) in MEMBERS {
        tc.c.add_agent(name, region, &layout(name), &["--heartbeat-ms", "500"])
            .await
            .expect("agent");
    }
    let addrs = tc.c.addrs();
    let clients: Vec<Client> = addrs.iter().map(|a| Client::new(a).unwrap()).collect();

    // The capacity view adds up to the sims' inventories.
    let want: BTreeMap<String, u64> = MEMBERS
        .iter()
        .map(|(n, _)| {
            (
                n.to_string(),
                Inventory::from_yaml_file(&layout(n)).unwrap().total_gpus(),
            )
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let v = clients[0].capacity(false).await.expect("capacity");
        let got: BTreeMap<String, u64> = v
            .clusters
            .iter()
            .map(|c| (c.cluster.clone(), c.capacity.total))
            .collect();
        if got == want {
            assert_eq!(v.fleet.total, want.values().sum::<u64>());
            assert!(
                v.clusters
                    .iter()
                    .all(|c| format!("{:?}", c.phase) == "Ready")
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "capacity {got:?} != inventories {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Work for every member.
    let mut items = Vec::new();
    for i in 0..8 {
        items.push((
            format!("h100-{i}"),
            workload(&format!("h100-{i}"), 1, 8, "H100"),
        ));
    }
    for i in 0..4 {
        items.push((
            format!("a100-{i}"),
            workload(&format!("a100-{i}"), 2, 8, "A100"),
        ));
    }
    for i in 0..6 {
        items.push((
            format!("l40s-{i}"),
            workload(&format!("l40s-{i}"), 1, 4, "L40S"),
        ));
    }
    submit_all(&clients, &items).await;
    let names: BTreeSet<String> = items.iter().map(|(n, _)| n.clone()).collect();
    wait_running(&addrs[0], &names, Duration::from_secs(30)).await;
    assert_no_loss_no_duplicates(&tc, &addrs[0]).await;

    // kill -9 of the federation leader: agents move to the survivors in time for the new
    // leader never to mark any of them NotReady, and new work reaches them.
    let leader = tc.c.wait_for_leader(Duration::from_secs(10)).await.unwrap();
    tc.c.kill9(leader).unwrap();
    let killed = Instant::now();
    let survivors: Vec<String> =
        tc.c.nodes
            .iter()
            .filter(|(id, _)| **id != leader)
            .map(|(_, n)| n.addr.clone())
            .collect();
    let sclients: Vec<Client> = survivors.iter().map(|a| Client::new(a).unwrap()).collect();
    let more: Vec<(String, String)> = (0..4)
        .map(|i| {
            (
                format!("after-{i}"),
                workload(&format!("after-{i}"), 1, 8, "H100"),
            )
        })
        .collect();
    submit_all(&sclients, &more).await;
    let more_names: BTreeSet<String> = more.iter().map(|(n, _)| n.clone()).collect();
    wait_running(&survivors[0], &more_names, Duration::from_secs(20)).await;
    let recovered = killed.elapsed();
    eprintln!("after kill -9 of leader {leader}: new work running on members in {recovered:?}");
    let watch_until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < watch_until {
        let m = member_phases(&survivors[0]).await;
        assert!(
            m.values().all(|p| p == "Ready"),
            "a member went NotReady in failover: {m:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(
        recovered < Duration::from_secs(10),
        "agents took {recovered:?}"
    );
    tc.c.restart(leader).await.unwrap();
    assert_no_loss_no_duplicates(&tc, &survivors[0]).await;

    // kill -9 of an agent and a restart: it resyncs every assignment and creates nothing.
    let before = tc.c.agent_local("sim-eu").await.unwrap().creations;
    tc.c.kill9_agent("sim-eu").unwrap();
    tc.c.restart_agent("sim-eu").await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = tc.c.agent_local("sim-eu").await.unwrap().creations;
    assert_eq!(before, after, "the restarted agent created workloads again");
    let all: BTreeSet<String> = names.union(&more_names).cloned().collect();
    wait_running(&survivors[0], &all, Duration::from_secs(10)).await;
    assert_no_loss_no_duplicates(&tc, &survivors[0]).await;

    // A member that stops heartbeating is NotReady within 3 intervals (plus a monitor tick),
    // and the capacity view says so; it is Ready again when it comes back.
    tc.c.kill9_agent("sim-us").unwrap();
    let stopped = Instant::now();
    loop {
        if member_phases(&survivors[0])
            .await
            .get("sim-us")
            .map(String::as_str)
            == Some("NotReady")
        {
            break;
        }
        assert!(
            stopped.elapsed() < Duration::from_secs(5),
            "sim-us still Ready after {:?}",
            stopped.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "sim-us NotReady {:?} after its agent died (bound: 1.5 s + a 250 ms tick)",
        stopped.elapsed()
    );
    let cap = sclients[0].capacity(false).await.unwrap();
    let us = cap.clusters.iter().find(|c| c.cluster == "sim-us").unwrap();
    assert_eq!(format!("{:?}", us.phase), "NotReady");
    tc.c.restart_agent("sim-us").await.unwrap();
    let back = Instant::now();
    while member_phases(&survivors[0])
        .await
        .get("sim-us")
        .map(String::as_str)
        != Some("Ready")
    {
        assert!(
            back.elapsed() < Duration::from_secs(10),
            "sim-us did not come back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
