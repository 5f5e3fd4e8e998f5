//! A bounded chaos run on real processes: during a stream of submissions, random kill -9 and
//! restart of federation nodes and of agents, and partitions of a federation node. At every
//! step no workload is active on two members (sampled on the members themselves) and no queue
//! uses more than its quota allows (in the committed state); at the end no acknowledged
//! workload is lost, every workload is finished or pending with a reason, and the nodes'
//! state digests are equal.
//!
//! The quick profile (CI) runs 60 s of chaos; `TIDEWAY_CHAOS_SECS=600` (or more) is a long one.
//! `TIDEWAY_CHAOS_SEED` replays a run (the seed is printed).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use tideway_api::WorkloadPhase;
use tideway_api::agent::LocalPhase;
use tideway_api::client::Client;

use crate::common::*;

const AGENTS: [(&str, &str); 2] = [("sim-eu", "eu-west"), ("sim-ap", "ap-south")];

fn layout(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/dev")).join(format!("{name}.yaml"))
}

fn job(name: &str, queue: &str, secs: u64) -> String {
    format!(
        r#"{{"apiVersion":"tideway.dev/v1alpha1","kind":"Workload","metadata":{{"name":"{name}","annotations":{{"tideway.dev/sim-runtime-seconds":"{secs}"}}}},"spec":{{"queue":"{queue}","class":"training","podSets":[{{"name":"w","count":1,"gpusPerPod":8,"flavor":"H100"}}],"checkpoint":{{"intervalSeconds":60}}}}}}"#
    )
}

/// Two queues of one cohort with H100 quotas: `lab-a` may borrow up to 8 GPUs beyond its
/// guarantee of 8 (from `lab-b`'s idle share), `lab-b` borrows nothing.
const LAB_QUEUES: [&str; 2] = [
    "apiVersion: tideway.dev/v1alpha1\nkind: Queue\nmetadata: {name: lab-a}\nspec:\n  tenant: lab\n  cohort: lab\n  quotas:\n  - {flavor: H100, guaranteed: 8, borrowingLimit: 8}\n",
    "apiVersion: tideway.dev/v1alpha1\nkind: Queue\nmetadata: {name: lab-b}\nspec:\n  tenant: lab\n  cohort: lab\n  quotas:\n  - {flavor: H100, guaranteed: 16, borrowingLimit: 0}\n",
];

/// What the core promises each lab queue at most, in H100 GPUs, at any instant (running and
/// assigned work): its guarantee plus what it may borrow, which is bounded by its borrowing
/// limit and by what its peers lend (`lab-a`: 8 + min(8, 16); `lab-b`: 16 + 0).
const LAB_CEILINGS: [(&str, u64); 2] = [("lab-a", 16), ("lab-b", 16)];

/// The GPUs each lab queue holds in the committed state (what the scheduler charges:
/// assigned and running work) must stay within its ceiling. Returns the samples' usage.
/// `None` when the node did not answer (it may have been killed meanwhile).
async fn assert_quotas_held(addr: &str) -> Option<BTreeMap<String, u64>> {
    let client = Client::new(addr).ok()?;
    let mut q = tideway_api::client::ListQuery {
        limit: Some(1000),
        stale: true,
        ..Default::default()
    };
    let mut all = Vec::new();
    loop {
        let page = client.list(&q).await.ok()?;
        all.extend(page.items);
        match page.continue_ {
            Some(c) => q.after = Some(c),
            None => break,
        }
    }
    let mut used: BTreeMap<String, u64> = BTreeMap::new();
    // What each queue's charged work is, for the message of a failed check: which workloads,
    // in which phase, where, since when (a failure under chaos cannot be replayed).
    let mut charged: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for w in all {
        let phase = w.status.as_ref().map(|s| s.phase).unwrap_or_default();
        if matches!(
            phase,
            WorkloadPhase::Admitted | WorkloadPhase::Assigned | WorkloadPhase::Running
        ) {
            *used.entry(w.spec.queue.to_string()).or_default() += w.spec.total_gpus();
            let st = w.status.as_ref();
            charged
                .entry(w.spec.queue.to_string())
                .or_default()
                .push(format!(
                    "{} {:?} on {:?}, attempt {:?}, admitted {:?}, started {:?}, message {:?}",
                    w.metadata.name,
                    phase,
                    st.and_then(|s| s.cluster.as_deref()),
                    st.map(|s| s.attempts),
                    st.and_then(|s| s.admitted_at),
                    st.and_then(|s| s.started_at),
                    st.and_then(|s| s.message.as_deref()),
                ));
        }
    }
    for (q, ceiling) in LAB_CEILINGS {
        let u = used.get(q).copied().unwrap_or(0);
        assert!(
            u <= ceiling,
            "queue {q} holds {u} H100 GPUs, over its quota of {ceiling}, in the state of {addr}:\n{}",
            charged.get(q).map(|c| c.join("\n")).unwrap_or_default()
        );
    }
    Some(used)
}

/// xorshift64*: enough randomness for choosing faults, and replayable from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

enum Fault {
    NodeDown(u64),
    NodeIsolated,
    AgentDown(&'static str),
}

/// Active copies per UID on the members whose agents answer now.
async fn assert_active_at_most_once(tc: &TestCluster) -> usize {
    let mut active: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for (name, _) in AGENTS {
        let Ok(v) = tc.c.agent_local(name).await else {
            continue;
        };
        for w in v.workloads {
            if matches!(w.phase, LocalPhase::Running | LocalPhase::Pending) {
                active.entry(w.uid).or_default().push(name);
            }
        }
    }
    for (uid, on) in &active {
        assert!(on.len() <= 1, "{uid} is active on {on:?} at once");
    }
    active.len()
}

/// What a failed settle check needs to be diagnosed: per unsettled workload its status,
/// assignment and `explain`; the members as the federation sees them; and each agent's local
/// view of those workloads.
async fn unsettled_report(tc: &TestCluster, addr: &str, unsettled: &[String]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let Ok(client) = Client::new(addr) else {
        return "no client".into();
    };
    for name in unsettled {
        match client.get(name, true).await {
            Ok(w) => {
                let _ = writeln!(
                    out,
                    "--- {name} uid={:?} status={}",
                    w.metadata.uid,
                    serde_json::to_string(&w.status).unwrap_or_default()
                );
            }
            Err(e) => {
                let _ = writeln!(out, "--- {name}: get failed: {e}");
            }
        }
        match client.explain(name).await {
            Ok(x) => {
                let _ = writeln!(
                    out,
                    "    explain: {}",
                    serde_json::to_string(&x).unwrap_or_default()
                );
            }
            Err(e) => {
                let _ = writeln!(out, "    explain failed: {e}");
            }
        }
    }
    match client.members().await {
        Ok(m) => {
            let _ = writeln!(
                out,
                "--- members: {}",
                serde_json::to_string(&m).unwrap_or_default()
            );
        }
        Err(e) => {
            let _ = writeln!(out, "--- members failed: {e}");
        }
    }
    let uids: BTreeSet<String> = all_workloads(addr)
        .await
        .into_iter()
        .filter(|w| unsettled.contains(&w.metadata.name))
        .filter_map(|w| w.metadata.uid)
        .collect();
    for (agent, _) in AGENTS {
        match tc.c.agent_local(agent).await {
            Ok(v) => {
                let mine: Vec<String> = v
                    .workloads
                    .iter()
                    .filter(|w| uids.contains(&w.uid))
                    .map(|w| format!("{}:{:?}", w.uid, w.phase))
                    .collect();
                let _ = writeln!(
                    out,
                    "--- agent {agent}: {} local, unsettled here: {mine:?}",
                    v.workloads.len()
                );
            }
            Err(e) => {
                let _ = writeln!(out, "--- agent {agent}: no answer: {e}");
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_loses_nothing_and_runs_nothing_twice() {
    let secs: u64 = std::env::var("TIDEWAY_CHAOS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let seed: u64 = std::env::var("TIDEWAY_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
                | 1
        });
    eprintln!("chaos: {secs} s, TIDEWAY_CHAOS_SEED={seed}");
    let mut rng = Rng(seed);
    let mut tc = cluster(
        3,
        &[
            "--fault-injection",
            "--member-heartbeat-ms",
            "500",
            "--member-lost-after-ms",
            "4000",
            // Agents killed about once a minute each: short quarantines for flapping now
            // and then, so the chaos covers them without starving the stream of members.
            "--flap-limit",
            "2",
            "--flap-window-secs",
            "60",
            "--quarantine-secs",
            "5",
            "--quarantine-max-secs",
            "20",
        ],
    )
    .await;
    for (name, region) in AGENTS {
        tc.c.add_agent(name, region, &layout(name), &["--heartbeat-ms", "500"])
            .await
            .expect("agent");
    }
    let ids: Vec<u64> = tc.c.nodes.keys().copied().collect();
    let clients: Vec<Client> =
        tc.c.addrs()
            .iter()
            .map(|a| Client::new(a).unwrap())
            .collect();

    for q in LAB_QUEUES {
        clients[0]
            .apply_raw(q.as_bytes().to_vec(), true)
            .await
            .expect("lab queue");
    }
    let addr = tc.c.addrs()[0].clone();
    let mut quota_checks = 0u64;
    let mut peak: BTreeMap<String, u64> = BTreeMap::new();

    let mut acked: BTreeSet<String> = BTreeSet::new();
    let mut fault: Option<(Fault, Instant)> = None;
    let (mut kills, mut partitions, mut agent_kills, mut samples) = (0, 0, 0, 0);
    let end = Instant::now() + Duration::from_secs(secs);
    let mut n = 0u64;
    while Instant::now() < end {
        // One submission a step, retried over the nodes with the same key until acknowledged
        // or the step's budget is spent (an unacknowledged one may still be committed).
        let name = format!("c-{n}");
        n += 1;
        // Every fifth submission goes to a lab queue (without drawing on the seed's stream).
        let queue = match n % 10 {
            3 => "lab-a",
            8 => "lab-b",
            _ => "default",
        };
        let body = job(&name, queue, 5 + rng.below(10));
        let give_up = Instant::now() + Duration::from_secs(3);
        let mut at = rng.below(clients.len() as u64) as usize;
        while Instant::now() < give_up {
            match clients[at % clients.len()]
                .submit_raw(body.clone().into_bytes(), false, Some(&name))
                .await
            {
                Ok(_) => {
                    acked.insert(name.clone());
                    break;
                }
                Err(_) => {
                    at += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }

        // End a fault whose time is up; maybe start another (one at a time).
        if let Some((f, until)) = &fault
            && Instant::now() >= *until
        {
            match f {
                Fault::NodeDown(id) => tc.c.restart(*id).await.expect("restart node"),
                Fault::NodeIsolated => tc.c.heal().await.expect("heal"),
                Fault::AgentDown(a) => tc.c.restart_agent(a).await.expect("restart agent"),
            }
            fault = None;
        } else if fault.is_none() && rng.below(3) == 0 {
            let lasts = Duration::from_millis(1000 + rng.below(6000));
            let f = match rng.below(3) {
                0 => {
                    let id = ids[rng.below(ids.len() as u64) as usize];
                    tc.c.kill9(id).expect("kill -9 node");
                    kills += 1;
                    Fault::NodeDown(id)
                }
                1 => {
                    let id = ids[rng.below(ids.len() as u64) as usize];
                    tc.c.isolate(id).await.expect("isolate");
                    partitions += 1;
                    Fault::NodeIsolated
                }
                _ => {
                    let a = AGENTS[rng.below(AGENTS.len() as u64) as usize].0;
                    tc.c.kill9_agent(a).expect("kill -9 agent");
                    agent_kills += 1;
                    Fault::AgentDown(a)
                }
            };
            fault = Some((f, Instant::now() + lasts));
        }
        assert_active_at_most_once(&tc).await;
        samples += 1;
        // The committed state, read from a node that answers (any may be down).
        for a in tc.c.addrs() {
            if let Some(used) = assert_quotas_held(&a).await {
                for (q, u) in used {
                    let p = peak.entry(q).or_default();
                    *p = (*p).max(u);
                }
                quota_checks += 1;
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    match fault.take() {
        Some((Fault::NodeDown(id), _)) => tc.c.restart(id).await.expect("restart node"),
        Some((Fault::NodeIsolated, _)) => tc.c.heal().await.expect("heal"),
        Some((Fault::AgentDown(a), _)) => tc.c.restart_agent(a).await.expect("restart agent"),
        None => {}
    }
    eprintln!(
        "chaos: {n} submitted, {} acknowledged, {kills} node kills, {partitions} partitions, \
         {agent_kills} agent kills, {samples} samples",
        acked.len()
    );

    eprintln!(
        "chaos: {quota_checks} quota checks; peak H100 use: lab-a {}, lab-b {}",
        peak.get("lab-a").copied().unwrap_or(0),
        peak.get("lab-b").copied().unwrap_or(0)
    );

    // Everything settles: finished, or pending with a reason; nothing active twice meanwhile.
    // The stream outruns the fleet (16 H100 nodes, 5-15 s jobs) and faults take capacity
    // away, so a backlog is left when the chaos ends; it drains at the fleet's pace. The wait
    // therefore ends when nothing has moved for 120 s (a stuck workload never moves) or after
    // 10 minutes in all, whichever comes first.
    let settle_start = Instant::now();
    let hard_deadline = settle_start + Duration::from_secs(600);
    let mut last: Vec<(String, String)> = Vec::new();
    let mut moved_at = Instant::now();
    loop {
        assert_active_at_most_once(&tc).await;
        assert_quotas_held(&addr).await;
        let all = all_workloads(&addr).await;
        let unsettled: Vec<(String, String)> = all
            .iter()
            .filter_map(|w| {
                let st = w.status.clone().unwrap_or_default();
                let settled = st.phase.is_terminal()
                    || (format!("{:?}", st.phase) == "Pending" && st.pending_reason.is_some());
                (!settled).then(|| (w.metadata.name.clone(), format!("{:?}", st.phase)))
            })
            .collect();
        if unsettled.is_empty() {
            break;
        }
        if unsettled != last {
            last = unsettled.clone();
            moved_at = Instant::now();
        }
        let now = Instant::now();
        if now.duration_since(moved_at) >= Duration::from_secs(120) || now >= hard_deadline {
            let names: Vec<String> = unsettled.into_iter().map(|(n, _)| n).collect();
            let report = unsettled_report(&tc, &addr, &names).await;
            panic!("not finished nor pending with a reason: {names:?}\n{report}");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    eprintln!(
        "chaos: settled {:.0} s after the chaos ended",
        settle_start.elapsed().as_secs_f64()
    );
    tc.c.wait_converged(Duration::from_secs(30))
        .await
        .expect("equal state digests");
    for a in tc.c.addrs() {
        assert_holds_exactly_once(&a, &acked).await;
    }
    // Reaching here: every acknowledged workload is stored once on every node, and no
    // sample found a workload active on two members.
    eprintln!("chaos: lost 0, run twice 0");
    let failed: Vec<String> = all_workloads(&addr)
        .await
        .into_iter()
        .filter_map(|w| {
            let st = w.status.unwrap_or_default();
            (format!("{:?}", st.phase) == "Failed")
                .then(|| format!("{}: {}", w.metadata.name, st.message.unwrap_or_default()))
        })
        .collect();
    eprintln!("chaos: settled; {} failed {failed:?}", failed.len());
}
