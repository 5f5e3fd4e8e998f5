//! The guarantee as a promise (issue 55): on random small contended scenarios, the default
//! policy (`preemption: true`, nothing under `tuning`) leaves no queue waiting longer on
//! average than on its static partition (each queue alone on its guarantee's nodes) by
//! more than one notice period. The simulator runs the same core the leader does.

use std::collections::BTreeMap;

use proptest::prelude::*;

use crate::common::*;

/// The notice a victim that cannot checkpoint gets (`preemptionGraceSeconds`' default).
const NOTICE: i64 = 30;

#[derive(Debug, Clone)]
struct Job {
    queue: usize,
    gpus: u32,
    at: i64,
    runtime: u64,
}

/// Jobs of one GPU up to a queue's whole guarantee (`nodes[q]` nodes of 8 GPUs), never
/// checkpointing, like Philly's.
fn scenario() -> impl Strategy<Value = (Vec<u32>, Vec<Job>)> {
    prop::collection::vec(1u32..=2, 2..=3).prop_flat_map(|nodes| {
        let n = nodes.len();
        let caps: Vec<u32> = nodes.iter().map(|k| k * 8).collect();
        let job = (0..n, 0u32..5, 0i64..20_000, 60u64..15_000).prop_map(
            move |(queue, size, at, runtime)| Job {
                queue,
                gpus: [1u32, 2, 4, 8, 16][size as usize].min(caps[queue]),
                at,
                runtime,
            },
        );
        (Just(nodes), prop::collection::vec(job, 10..40))
    })
}

fn trace(jobs: &[Job]) -> String {
    jobs.iter()
        .enumerate()
        .map(|(i, j)| {
            let (pods, per) = if j.gpus > 8 { (j.gpus / 8, 8) } else { (1, j.gpus) };
            format!(
                r#"{{"apiVersion":"tideway.dev/v1alpha1","kind":"Workload","metadata":{{"name":"j{i:03}"}},"spec":{{"queue":"q{}","class":"training","podSets":[{{"name":"w","count":{pods},"gpusPerPod":{per},"flavor":"P100"}}]}},"submitAt":{},"runtimeSeconds":{}}}"#,
                j.queue, j.at, j.runtime
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The policy: one queue per entry of `nodes`, guaranteed its nodes' GPUs, one cohort;
/// `partition` pins each queue to its own cluster and turns preemption off.
fn policy(nodes: &[u32], partition: bool) -> String {
    let mut p = String::from(
        "apiVersion: tideway.dev/v1alpha1\nkind: Policy\nmetadata: { name: t }\nspec:\n  queues:\n",
    );
    for (q, k) in nodes.iter().enumerate() {
        p += &format!(
            "    - apiVersion: tideway.dev/v1alpha1\n      kind: Queue\n      metadata: {{ name: q{q} }}\n      spec: {{ tenant: q{q}, cohort: all, fairShareWeight: {k}, quotas: [{{ flavor: P100, guaranteed: {} }}] }}\n",
            k * 8
        );
    }
    p += &format!(
        "  scheduler: {{ fairSharing: true, preemption: {} }}\nsimulator:\n  mode: scheduler\n",
        !partition
    );
    if partition {
        p += "  tuning: { maxReservations: 16 }\n  queueClusters:\n";
        for q in 0..nodes.len() {
            p += &format!("    q{q}: [c{q}]\n");
        }
    }
    p
}

fn clusters(nodes: &[u32], partition: bool) -> String {
    let one = |name: &str, n: u32| {
        format!(
            "  - name: {name}\n    region: r\n    uniform: {{ nodes: {n}, nodesPerRack: 1, gpusPerNode: 8, model: P100 }}\n"
        )
    };
    let mut c = String::from("clusters:\n");
    if partition {
        for (q, k) in nodes.iter().enumerate() {
            c += &one(&format!("c{q}"), *k);
        }
    } else {
        c += &one("shared", nodes.iter().sum());
    }
    c
}

/// Mean queueing (first start minus submission) per queue; every job must have started.
fn mean_queueing(nodes: &[u32], jobs: &[Job], partition: bool) -> BTreeMap<String, i64> {
    let dir = tempfile::tempdir().expect("tempdir");
    let t = write(&dir, "t.jsonl", &trace(jobs));
    let c = write(&dir, "c.yaml", &clusters(nodes, partition));
    let p = write(&dir, "p.yaml", &policy(nodes, partition));
    let out = simulate(c, p, &[format!("jsonl:{}", t.display())], 0);
    let mut sums: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for r in &out.records {
        let q = r.queueing().expect("every job starts in the end");
        let e = sums.entry(r.queue.clone()).or_default();
        e.0 += q;
        e.1 += 1;
    }
    sums.into_iter().map(|(q, (s, n))| (q, s / n)).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    // Fails today on both rules. The experimental `reclaimByPartitionWait` rule reclaims
    // too little (two queues of 2 nodes, ten jobs: q1 881 s shared against 850 s alone;
    // docs/benchmarks/sim-robust.md); the guarantee-first default (reclaim for every
    // workload within its guarantee) also misses on small scenarios (q1 324 s shared
    // against 0 s alone), not yet diagnosed: issue 55 stays open on it.
    #[test]
    #[ignore = "the promise is not kept yet on small scenarios; see the comment above"]
    fn no_queue_waits_longer_than_on_its_static_partition((nodes, jobs) in scenario()) {
        let shared = mean_queueing(&nodes, &jobs, false);
        let alone = mean_queueing(&nodes, &jobs, true);
        prop_assert_eq!(shared.len(), alone.len());
        for (q, s) in &shared {
            let a = alone[q];
            prop_assert!(
                *s <= a + NOTICE,
                "queue {} waits {} s on average shared, {} s on its partition ({:?})",
                q, s, a, shared
            );
        }
    }
}
