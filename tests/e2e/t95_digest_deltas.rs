//! Digest deltas on real processes: once the federation names the version of the digest it
//! holds, an agent's heartbeats carry only what changed (nothing when nothing did); after the
//! leader is killed the agent sends one full digest and goes back to deltas, and the
//! federation's view of the member's capacity follows the cluster throughout.

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
        r#"{{"apiVersion":"tideway.dev/v1alpha1","kind":"Workload","metadata":{{"name":"{name}","annotations":{{"tideway.dev/sim-runtime-seconds":"360000"}}}},"spec":{{"queue":"default","class":"training","podSets":[{{"name":"w","count":1,"gpusPerPod":8,"flavor":"H100"}}]}}}}"#
    )
}

/// `tideway_member_heartbeats_total{cluster="sim-eu",digest=...}` (and the bytes) of the
/// running nodes, summed: the heartbeats they received by what they carried.
async fn heartbeats(addrs: &[String]) -> BTreeMap<String, (u64, u64)> {
    let http = reqwest::Client::new();
    let mut out: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for addr in addrs {
        let Ok(resp) = http.get(format!("http://{addr}/metrics")).send().await else {
            continue;
        };
        let Ok(text) = resp.text().await else {
            continue;
        };
        for line in text.lines() {
            let bytes = line.starts_with("tideway_member_heartbeat_bytes_total{");
            if !(bytes || line.starts_with("tideway_member_heartbeats_total{"))
                || !line.contains("cluster=\"sim-eu\"")
            {
                continue;
            }
            let Some(kind) = line
                .split("digest=\"")
                .nth(1)
                .and_then(|r| r.split('"').next())
            else {
                continue;
            };
            let n: u64 = line
                .rsplit(' ')
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let e = out.entry(kind.to_string()).or_default();
            if bytes { e.1 += n } else { e.0 += n }
        }
    }
    out
}

fn count(m: &BTreeMap<String, (u64, u64)>, kind: &str) -> u64 {
    m.get(kind).map_or(0, |e| e.0)
}

/// GPUs the agent's cluster runs, and what the federation's capacity view says sim-eu has
/// allocated.
async fn allocated(tc: &TestCluster, c: &Client) -> (u64, Option<u64>) {
    let local: u64 =
        tc.c.agent_local("sim-eu")
            .await
            .map(|v| {
                v.workloads
                    .iter()
                    .filter(|w| matches!(w.phase, LocalPhase::Running))
                    .flat_map(|w| &w.nodes)
                    .map(|n| u64::from(n.gpus))
                    .sum()
            })
            .unwrap_or(0);
    let fed = c.capacity(false).await.ok().and_then(|v| {
        v.clusters
            .iter()
            .find(|m| m.cluster == "sim-eu")
            .map(|m| m.capacity.allocated)
    });
    (local, fed)
}

async fn until_allocated(tc: &TestCluster, c: &Client, want: u64, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(45);
    loop {
        let (local, fed) = allocated(tc, c).await;
        if local == want && fed == Some(want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: the cluster runs {local} GPUs, the federation's view says {fed:?}, want {want}; heartbeats {:?}",
            heartbeats(&tc.c.addrs()).await
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_carry_deltas_and_resync_in_full_after_a_leader_kill() {
    let mut tc = cluster(3, &["--member-heartbeat-ms", "500"]).await;
    let leader =
        tc.c.wait_for_leader(Duration::from_secs(30))
            .await
            .expect("leader");
    let addrs = tc.c.addrs();
    // The agent talks to the leader first, so that killing it makes the agent move on.
    let lead_addr = tc.c.url(leader).trim_start_matches("http://").to_string();
    let mut order = vec![lead_addr.clone()];
    order.extend(addrs.iter().filter(|a| **a != lead_addr).cloned());
    tc.c.add_agent_via(
        "sim-eu",
        "eu-west",
        &layout("sim-eu"),
        &["--heartbeat-ms", "500"],
        &order.join(","),
    )
    .await
    .expect("agent");
    let c = Client::new(&order[1]).expect("client");

    // Deltas flow: one full digest at the start, then deltas and unchanged heartbeats.
    c.submit_raw(h100("d-1").into_bytes(), false, Some("d-1"))
        .await
        .expect("submit d-1");
    until_allocated(&tc, &c, 8, "first workload").await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let before = loop {
        let m = heartbeats(&addrs).await;
        if count(&m, "delta") >= 1 && count(&m, "unchanged") >= 3 {
            break m;
        }
        assert!(Instant::now() < deadline, "no deltas: {m:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert!(
        count(&before, "full") <= 2,
        "full digests keep being sent: {before:?}"
    );
    let per =
        |m: &BTreeMap<String, (u64, u64)>, k: &str| m.get(k).map_or(0, |(n, b)| b / (*n).max(1));
    assert!(
        per(&before, "unchanged") * 4 < per(&before, "full"),
        "an unchanged heartbeat is not much smaller than a full one: {before:?}"
    );
    eprintln!("heartbeats before the leader kill (count, bytes): {before:?}");

    // The leader dies: the agent gets an error, moves on and sends one full digest, which the
    // new leader takes; then deltas again.
    let survivors: Vec<String> = addrs.iter().filter(|a| **a != lead_addr).cloned().collect();
    let at_kill = heartbeats(&survivors).await;
    tc.c.kill9(leader).expect("kill -9");
    tc.c.wait_for_leader(Duration::from_secs(30))
        .await
        .expect("a new leader");
    let deadline = Instant::now() + Duration::from_secs(45);
    let after = loop {
        let m = heartbeats(&survivors).await;
        let deltas = |m: &BTreeMap<String, (u64, u64)>| count(m, "delta") + count(m, "unchanged");
        if count(&m, "full") > count(&at_kill, "full") && deltas(&m) >= deltas(&at_kill) + 3 {
            break m;
        }
        assert!(
            Instant::now() < deadline,
            "no full resync then deltas after the leader kill: {m:?} (at the kill {at_kill:?})"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    eprintln!("heartbeats after the leader kill (count, bytes): {after:?}");

    // The new leader's view follows the cluster through deltas.
    c.submit_raw(h100("d-2").into_bytes(), false, Some("d-2"))
        .await
        .expect("submit d-2");
    until_allocated(&tc, &c, 16, "second workload, after the failover").await;
    let end = heartbeats(&survivors).await;
    assert!(
        count(&end, "delta") > count(&after, "delta"),
        "the new capacity did not travel as a delta: {end:?} (after the kill {after:?})"
    );
}
