//! Scheduler mode: what the scheduler core adds over FIFO (backfill, borrowing,
//! preemption), measured the way `summary.json` reports it, and determinism.

use crate::common::*;

const TWO_NODES: &str = "clusters:\n  - name: c\n    region: r\n    uniform: { nodes: 2, nodesPerRack: 2, gpusPerNode: 8, model: P100 }\n";

fn workload(
    name: &str,
    queue: &str,
    class: &str,
    pods: u32,
    gpus: u32,
    at: i64,
    runtime: u64,
) -> String {
    format!(
        r#"{{"apiVersion":"tideway.dev/v1alpha1","kind":"Workload","metadata":{{"name":"{name}"}},"spec":{{"queue":"{queue}","class":"training","priorityClass":"{class}","podSets":[{{"name":"w","count":{pods},"gpusPerPod":{gpus},"flavor":"P100"}}],"checkpoint":{{"intervalSeconds":60}}}},"submitAt":{at},"runtimeSeconds":{runtime}}}"#
    )
}

fn policy(mode: &str, cohort: bool, guaranteed: u32, preemption: bool) -> String {
    let cohort = if cohort { "cohort: all, " } else { "" };
    format!(
        "apiVersion: tideway.dev/v1alpha1
kind: Policy
metadata: {{ name: t }}
spec:
  queues:
    - apiVersion: tideway.dev/v1alpha1
      kind: Queue
      metadata: {{ name: a }}
      spec: {{ tenant: a, {cohort}quotas: [{{ flavor: P100, guaranteed: {guaranteed} }}] }}
    - apiVersion: tideway.dev/v1alpha1
      kind: Queue
      metadata: {{ name: b }}
      spec: {{ tenant: b, {cohort}quotas: [{{ flavor: P100, guaranteed: {guaranteed} }}] }}
  priorityClasses:
    - apiVersion: tideway.dev/v1alpha1
      kind: PriorityClass
      metadata: {{ name: normal }}
      spec: {{ value: 100 }}
    - apiVersion: tideway.dev/v1alpha1
      kind: PriorityClass
      metadata: {{ name: urgent }}
      spec: {{ value: 1000 }}
  scheduler: {{ fairSharing: true, preemption: {preemption} }}
simulator:
  mode: {mode}
  checkpointIntervalSeconds: 60
  tuning: {{ preemptionGraceSeconds: 30, checkpointGraceSeconds: 60 }}
"
    )
}

fn start_of(out: &tideway_simulate::RunOutput, uid: &str) -> Option<i64> {
    out.records
        .iter()
        .find(|r| r.uid == uid)
        .and_then(|r| r.start)
}

/// A gang that does not fit blocks everything behind it in FIFO; the scheduler core starts
/// the small job behind it at once (no head-of-line blocking).
#[test]
fn backfill_around_a_waiting_gang() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = write(
        &dir,
        "t.jsonl",
        &[
            workload("long", "a", "normal", 1, 8, 0, 1000),
            workload("gang", "a", "normal", 2, 8, 10, 100),
            workload("small", "a", "normal", 1, 1, 20, 10),
        ]
        .join("\n"),
    );
    let spec = format!("jsonl:{}", trace.display());
    let clusters = write(&dir, "clusters.yaml", TWO_NODES);
    let mut starts = Vec::new();
    for mode in ["fifo", "scheduler"] {
        // One queue may use the whole cluster here: guarantee 16 via a cohort of two.
        let p = write(&dir, &format!("{mode}.yaml"), &policy(mode, true, 8, false));
        let out = simulate(clusters.clone(), p, std::slice::from_ref(&spec), 0);
        starts.push((
            start_of(&out, "gang"),
            start_of(&out, "small"),
            out.summary.queues["a"].over_quota_hours,
        ));
    }
    let (fifo, sched) = (starts[0], starts[1]);
    assert_eq!(fifo.0, Some(1000), "the gang waits for the long job");
    assert_eq!(
        fifo.1,
        Some(1100),
        "FIFO: the small job waits behind the gang"
    );
    assert_eq!(sched.0, Some(1000));
    assert_eq!(sched.1, Some(20), "backfilled at once");
    // Queue a borrowed from b's idle guarantee: 8 GPUs while the gang ran (100 s) and 1
    // while the small job ran next to the long one (10 s).
    assert!((sched.2 - 110.0 / 3600.0).abs() < 1e-9, "{sched:?}");
}

/// A high-priority job preempts a running low-priority one; the victim checkpointed every
/// 60 s, so it loses only the work since its last checkpoint and resumes from there.
#[test]
fn preemption_loses_only_work_since_the_checkpoint() {
    let dir = tempfile::tempdir().expect("tempdir");
    let one_node = write(
        &dir,
        "clusters.yaml",
        "clusters:\n  - name: c\n    region: r\n    uniform: { nodes: 1, nodesPerRack: 1, gpusPerNode: 8, model: P100 }\n",
    );
    let trace = write(
        &dir,
        "t.jsonl",
        &[
            workload("low", "a", "normal", 1, 8, 0, 1000),
            workload("high", "a", "urgent", 1, 8, 100, 100),
        ]
        .join("\n"),
    );
    // The queue's quota exceeds the node, so capacity, not quota, is what blocks "high":
    // the scheduler core preempts for capacity (a queue at its own quota waits instead).
    let p = write(&dir, "p.yaml", &policy("scheduler", false, 16, true));
    let out = simulate(one_node, p, &[format!("jsonl:{}", trace.display())], 0);
    let rec = |n: &str| out.records.iter().find(|r| r.uid == n).expect(n);
    // Preempted at 100 with a 60 s checkpoint grace: stops at 160, having checkpointed at
    // 120 (40 s x 8 GPUs lost), resumes when "high" ends and runs its remaining 880 s.
    assert_eq!(rec("high").start, Some(160));
    assert_eq!(rec("high").end, Some(260));
    let low = rec("low");
    assert_eq!(low.preemptions, 1);
    assert_eq!(low.lost_gpu_seconds, 40 * 8);
    assert_eq!(low.start, Some(0), "first start");
    assert_eq!(low.end, Some(260 + 880));
    let s = &out.summary;
    assert_eq!(s.overall.preemptions, 1);
    assert!((s.overall.work_lost_gpu_hours - 320.0 / 3600.0).abs() < 1e-9);
    assert_eq!(s.run.preemption_decisions, 1);
    assert!(
        s.overall
            .pending_reasons
            .contains_key("WaitingForPreemption")
    );
}

/// A queue's gang of a whole node reclaims its lent guarantee from another queue's 1-GPU
/// borrowers: the members report which nodes their workloads occupy (as live members do),
/// so the core evicts the borrowers of ONE node and the gang starts after their grace.
/// Without the nodes, eight 1-GPU victims look like eight 1-GPU nodes and it never fits.
#[test]
fn a_gang_reclaims_a_whole_node_from_small_borrowers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut jobs: Vec<String> = (0..16)
        .map(|i| workload(&format!("small-{i:02}"), "b", "normal", 1, 1, i, 10_000))
        .collect();
    jobs.push(workload("gang", "a", "normal", 1, 8, 100, 100));
    let trace = write(&dir, "t.jsonl", &jobs.join("\n"));
    let clusters = write(&dir, "clusters.yaml", TWO_NODES);
    let p = write(&dir, "p.yaml", &policy("scheduler", true, 8, true));
    let out = simulate(clusters, p, &[format!("jsonl:{}", trace.display())], 0);
    let gang = start_of(&out, "gang").expect("the gang started");
    assert!(
        gang < 1000,
        "the gang waited for the borrowers to end: {gang}"
    );
    let evicted: Vec<_> = out.records.iter().filter(|r| r.preemptions > 0).collect();
    assert_eq!(evicted.len(), 8, "one node's borrowers, no more");
    assert!(evicted.iter().all(|r| r.queue == "b"));
}

/// Same inputs and seed, same results; the wall-clock fields aside.
#[test]
fn deterministic_for_a_seed() {
    let trace = format!("philly:{PHILLY}?from=2017-10-09&to=2017-10-10");
    let run = |seed| {
        let mut o = simulate(
            example("philly-shared/clusters.yaml"),
            example("philly-shared/policy-fair.yaml"),
            std::slice::from_ref(&trace),
            seed,
        );
        o.summary.run.wall_seconds = 0.0;
        o.summary.run.events_per_second = 0.0;
        o.summary.run.scheduler_wall_seconds = 0.0;
        o
    };
    let (a, b) = (run(3), run(3));
    assert_eq!(a.summary, b.summary);
    assert_eq!(a.records, b.records);
    assert_eq!(a.samples, b.samples);
    assert!(a.summary.overall.jobs.succeeded > 1000);
}
