//! The simulator and the live leader make the same decisions on the same input: one cycle
//! over many pending workloads of mixed shapes in two queues on two clusters, the input
//! built the simulator's way (`Engine::first_cycle`) and the live leader's way
//! (`build_input` over a replicated state holding the same policy, members and workloads).

use tideway_api::{MemberCluster, MemberClusterSpec};
use tideway_federation::dispatcher::cycle::build_input;
use tideway_federation::state::FederationState;
use tideway_federation::state::command::Command;
use tideway_scheduler::{Decision, SchedulerOutput, schedule};
use tideway_simulate::{self as simulate, Engine, Options};

use crate::common::write;

/// (pods, GPUs per pod) of the workloads, cycled: singles, node-sized pods, multi-node
/// gangs that no cluster can hold once the first ones are placed.
const SHAPES: [(u32, u32); 8] = [
    (1, 1),
    (1, 4),
    (2, 8),
    (1, 2),
    (4, 8),
    (3, 2),
    (1, 8),
    (2, 4),
];

fn trace() -> String {
    (0..60)
        .map(|i| {
            let (pods, gpus) = SHAPES[i % SHAPES.len()];
            let queue = if i % 3 == 0 { "b" } else { "a" };
            format!(
                r#"{{"apiVersion":"tideway.dev/v1alpha1","kind":"Workload","metadata":{{"name":"w{i}"}},"spec":{{"queue":"{queue}","class":"training","podSets":[{{"name":"w","count":{pods},"gpusPerPod":{gpus},"flavor":"H100"}}]}},"submitAt":0,"runtimeSeconds":3600}}"#
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

const CLUSTERS: &str = "clusters:
  - name: east
    region: us-east
    uniform: { nodes: 4, nodesPerRack: 2, gpusPerNode: 8, model: H100 }
  - name: west
    region: us-west
    uniform: { nodes: 2, nodesPerRack: 2, gpusPerNode: 8, model: H100 }
";

const POLICY: &str = "apiVersion: tideway.dev/v1alpha1
kind: Policy
metadata: { name: same }
spec:
  queues:
    - apiVersion: tideway.dev/v1alpha1
      kind: Queue
      metadata: { name: a }
      spec: { tenant: a, cohort: all, fairShareWeight: 2, quotas: [{ flavor: H100, guaranteed: 32 }] }
    - apiVersion: tideway.dev/v1alpha1
      kind: Queue
      metadata: { name: b }
      spec: { tenant: b, cohort: all, quotas: [{ flavor: H100, guaranteed: 16 }] }
  scheduler: { fairSharing: true, preemption: false }
simulator:
  mode: scheduler
  pendingView: all
";

/// Each decision as (uid, what, where): assignments with their cluster and pool, the
/// rest with their reason's code.
fn summary(out: &SchedulerOutput) -> Vec<(String, String, String)> {
    let mut v: Vec<_> = out
        .decisions
        .iter()
        .map(|d| match d {
            Decision::Assign {
                uid, cluster, pool, ..
            } => (
                uid.to_string(),
                "assign".into(),
                format!("{cluster}/{pool}"),
            ),
            Decision::Reserve { uid, cluster, .. } => {
                (uid.to_string(), "reserve".into(), cluster.to_string())
            }
            Decision::Pending { uid, reason, .. } => {
                (uid.to_string(), "pending".into(), reason.code().to_owned())
            }
            Decision::Preempt { preemptor, .. } => {
                (preemptor.to_string(), "preempt".into(), String::new())
            }
        })
        .collect();
    v.sort();
    v
}

#[test]
fn simulator_and_live_leader_decide_alike() {
    let dir = tempfile::tempdir().unwrap();
    let input = simulate::load(&Options {
        clusters: write(&dir, "clusters.yaml", CLUSTERS),
        policy: write(&dir, "policy.yaml", POLICY),
        traces: vec![format!(
            "jsonl:{}",
            write(&dir, "t.jsonl", &trace()).display()
        )],
        from: None,
        to: None,
        seed: 7,
    })
    .unwrap();
    let policy = input.policy.policy.clone();
    let (sim_input, sim_out) = Engine::new(input).first_cycle().expect("a first cycle");
    let uids: Vec<_> = sim_input
        .pending
        .iter()
        .map(|p| p.workload.metadata.name.clone())
        .collect();
    assert_eq!(
        sim_input.pending.len(),
        60,
        "every workload is pending: {uids:?}"
    );

    // The same state, the live leader's way: the policy, the members (their digests are
    // what the agents report), the workloads in submission order.
    let mut state = FederationState::default();
    let at = sim_input.now;
    let mut index = 0;
    let mut apply = |state: &mut FederationState, cmd: Command| {
        index += 1;
        state.apply(index, cmd);
    };
    apply(
        &mut state,
        Command::PutPolicy {
            policy: Box::new(policy),
            at,
        },
    );
    for c in &sim_input.clusters {
        apply(
            &mut state,
            Command::RegisterMember {
                member: Box::new(MemberCluster::new(
                    &c.name,
                    MemberClusterSpec::new(&c.region, vec![]),
                )),
                agent_version: None,
                at,
                flaps: None,
            },
        );
    }
    let mut pending = sim_input.pending.clone();
    pending.sort_by_key(|p| p.seq);
    for p in &pending {
        apply(
            &mut state,
            Command::SubmitWorkload {
                workload: Box::new(p.workload.clone()),
                idempotency_key: p.workload.metadata.name.clone(),
                at: p.submitted_at,
                digest: None,
            },
        );
    }
    let digests = sim_input.clusters.clone();
    let mut live_input = build_input(
        &state,
        |name| {
            digests
                .iter()
                .find(|c| c.name == name)
                .map(|c| c.digest.clone())
        },
        at,
        1,
    );
    // The per-cycle seed is derived differently on each side (log index vs run seed); the
    // decisions must agree for the same seed.
    live_input.seed = sim_input.seed;

    assert_eq!(live_input.pending.len(), sim_input.pending.len());
    assert_eq!(live_input.settings, sim_input.settings);
    assert!(
        live_input.clusters.iter().all(|c| c.ready),
        "members are ready"
    );
    let live_out = schedule(&live_input);
    let (sim, live) = (summary(&sim_out), summary(&live_out));
    assert!(
        sim.iter().filter(|d| d.1 == "assign").count() >= 5,
        "a cycle that decides something: {sim:?}"
    );
    assert!(
        sim.iter().any(|d| d.1 == "pending"),
        "and leaves work waiting"
    );
    assert_eq!(sim, live);
}
