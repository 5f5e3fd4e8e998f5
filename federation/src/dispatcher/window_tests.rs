//! The heads of the backlog give the decisions of the whole backlog: on mixed input (shapes,
//! classes, users, estimates learned or given, quotas, preemption, reservations, small and
//! busy clusters), every workload the window showed gets the decision the whole backlog
//! gives it, and every one it left out is kept pending there with its group's reason.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use chrono::{DateTime, TimeZone, Utc};
use proptest::prelude::*;
use tideway_api::digest::{CapacityDigest, DomainDigest, GpuCounts, PoolDigest};
use tideway_api::{
    FlavorQuota, Gang, PodSet, PoolKind, Queue, QueueSpec, SchedulerSettings, TopologyLevel,
    TopologyRequirement, Workload, WorkloadClass, WorkloadPhase, WorkloadSpec, WorkloadStatus,
};
use tideway_scheduler::{
    ClusterView, Decision, PendingWorkload, PreemptionBudget, RunningWorkload, SchedulerInput,
    schedule,
};

use super::window::{PendingIndex, run};

fn t(s: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_900_000_000 + s, 0)
        .single()
        .expect("time")
}

/// A pool of 8-GPU nodes in two racks, `free` of them idle.
fn pool(name: &str, kind: PoolKind, flavor: &str, nodes: u32, free: u32) -> PoolDigest {
    let counts = |n: u32, f: u32| {
        let mut free_histogram = vec![0; 9];
        free_histogram[8] = f;
        free_histogram[0] = n - f;
        GpuCounts {
            total: n * 8,
            allocated: (n - f) * 8,
            unhealthy: 0,
            cordoned: 0,
            free_histogram,
        }
    };
    let half = nodes / 2;
    let free_a = free.min(half);
    PoolDigest {
        pool: name.into(),
        kind,
        flavor: flavor.into(),
        counts: counts(nodes, free),
        domains: vec![
            DomainDigest {
                level: TopologyLevel::Rack,
                name: format!("{name}-r1"),
                zone: None,
                counts: counts(half, free_a),
            },
            DomainDigest {
                level: TopologyLevel::Rack,
                name: format!("{name}-r2"),
                zone: None,
                counts: counts(nodes - half, free - free_a),
            },
        ],
    }
}

fn cluster(name: &str, free: [u32; 3]) -> ClusterView {
    ClusterView {
        name: name.into(),
        region: "eu".into(),
        ready: true,
        digest: CapacityDigest {
            cluster: name.into(),
            generated_at: t(0),
            pools: vec![
                pool("train", PoolKind::Training, "H100", 8, free[0]),
                pool("train-a", PoolKind::Training, "A100", 6, free[1]),
                pool("infer", PoolKind::Inference, "L40S", 6, free[2]),
            ],
        },
        declared_levels: Some(vec![TopologyLevel::Rack]),
    }
}

/// One kind of workload: (queue, class, priority, pods, GPUs per pod, flavor, rack
/// required, estimate).
type Kind = (
    &'static str,
    WorkloadClass,
    &'static str,
    u32,
    u32,
    &'static str,
    bool,
    Option<u64>,
);

/// The palette the backlog is drawn from.
const KINDS: [Kind; 8] = [
    (
        "default",
        WorkloadClass::Training,
        "normal",
        1,
        8,
        "H100",
        true,
        Some(7200),
    ),
    (
        "default",
        WorkloadClass::Training,
        "high",
        2,
        8,
        "A100",
        true,
        Some(3600),
    ),
    (
        "default",
        WorkloadClass::Inference,
        "normal",
        1,
        4,
        "L40S",
        false,
        Some(600),
    ),
    (
        "default",
        WorkloadClass::Experiment,
        "low",
        1,
        1,
        "H100",
        false,
        None,
    ),
    (
        "team",
        WorkloadClass::Training,
        "normal",
        4,
        8,
        "H100",
        true,
        Some(7200),
    ),
    (
        "team",
        WorkloadClass::Training,
        "high",
        1,
        8,
        "H100",
        false,
        None,
    ),
    (
        "team",
        WorkloadClass::Eval,
        "low",
        1,
        2,
        "A100",
        false,
        Some(300),
    ),
    (
        "default",
        WorkloadClass::Training,
        "critical",
        3,
        8,
        "H100",
        true,
        Some(7200),
    ),
];

fn workload(kind: usize, user: u8, i: u64) -> Workload {
    let (queue, class, prio, pods, gpus, flavor, rack, est) = KINDS[kind];
    let mut spec = WorkloadSpec::new(queue, class, vec![PodSet::new("w", pods, gpus, flavor)]);
    spec.priority_class = prio.into();
    spec.gang = Some(Gang { min_count: pods });
    spec.topology = rack.then_some(TopologyRequirement::Required(TopologyLevel::Rack));
    spec.runtime_estimate_seconds = est;
    spec.user = (user > 0).then(|| format!("user{user}").into());
    let mut w = Workload::new(format!("job{kind}-{i}"), spec);
    w.metadata.uid = Some(format!("uid-{i}"));
    w
}

fn queues(team_h100: u32) -> Vec<Queue> {
    let mut team = QueueSpec::new("team");
    let mut q = FlavorQuota::guaranteed("H100", team_h100);
    q.max = Some(team_h100);
    team.quotas = vec![q];
    team.per_user_active_limit = Some(3);
    vec![
        Queue::new("default", QueueSpec::new("default")),
        Queue::new("team", team),
    ]
}

#[derive(Debug)]
struct Case {
    input: SchedulerInput,
}

fn case() -> impl Strategy<Value = Case> {
    (
        proptest::collection::vec((0usize..KINDS.len(), 0u8..3, 1u64..40), 1..60),
        proptest::collection::vec([0u32..4, 0u32..3, 0u32..4], 1..4),
        proptest::collection::vec((0usize..3, 0u8..3), 0..6),
        0u32..48,
        any::<u64>(),
        any::<bool>(),
    )
        .prop_map(|(runs, free, running, team_h100, seed, preemption)| {
            // Runs of alike submissions, as a backlog has: each a kind, a user, a length.
            let mut pending = Vec::new();
            let mut seq = 100;
            for (kind, user, len) in runs {
                for _ in 0..len {
                    seq += 1;
                    let mut w = workload(kind, user, seq);
                    let at = t(seq as i64 * 7);
                    w.status = Some(WorkloadStatus {
                        phase: WorkloadPhase::Pending,
                        submitted_at: Some(at),
                        ..Default::default()
                    });
                    pending.push(PendingWorkload {
                        workload: w,
                        submitted_at: at,
                        seq,
                    });
                }
            }
            let clusters: Vec<ClusterView> = free
                .iter()
                .enumerate()
                .map(|(i, f)| cluster(&format!("c{i}"), *f))
                .collect();
            let running = running
                .into_iter()
                .enumerate()
                .map(|(i, (kind, c))| {
                    let w = workload([3, 6, 0][kind], 0, 10 + i as u64);
                    let cluster = format!("c{}", usize::from(c) % clusters.len());
                    RunningWorkload {
                        pool: if kind == 1 { "train-a" } else { "train" }.into(),
                        workload: w,
                        cluster,
                        placements: Vec::new(),
                        started_at: Some(t(0)),
                        admitted_at: t(0),
                        last_checkpoint_at: None,
                        preemptible_after: None,
                        accounted_in_digest: true,
                        preempting_for: None,
                    }
                })
                .collect();
            let settings = SchedulerSettings {
                preemption,
                ..SchedulerSettings::default()
            };
            let input = SchedulerInput {
                now: t(seq as i64 * 7 + 4000),
                seed,
                settings,
                queues: queues(team_h100),
                priority_classes: crate::state::bootstrap::default_priority_classes(),
                clusters,
                pending,
                running,
                reservations: Vec::new(),
                preemption_budget: PreemptionBudget::per_minute(10),
                quota_overrides: Vec::new(),
                rollout: None,
                preemptors: Vec::new(),
                unshown_pending: Default::default(),
            };
            Case { input }
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn the_heads_decide_as_the_whole_backlog(c in case()) {
        let full = schedule(&c.input);
        let mut index = PendingIndex::default();
        for p in &c.input.pending {
            index.insert(p.seq, Arc::new(p.workload.clone()));
        }
        let mut base = c.input.clone();
        base.pending.clear();
        let mut wide = HashMap::new();
        let (input, out, window, _runs) =
            run(&base, &index, &HashSet::new(), &mut wide, |_| {});
        prop_assert!(input.pending.len() <= c.input.pending.len());
        let shown: HashMap<&str, &Decision> =
            out.decisions.iter().map(|d| (d.uid(), d)).collect();
        let reps = window.representatives(&out);
        let mut left_out = 0;
        for d in &full.decisions {
            match shown.get(d.uid()) {
                Some(w) => prop_assert_eq!(*w, d, "a shown workload decided otherwise"),
                None => {
                    left_out += 1;
                    let Decision::Pending { reason, .. } = d else {
                        return Err(TestCaseError::fail(format!(
                            "{} was left out, yet the whole backlog acts on it: {d:?}",
                            d.uid()
                        )));
                    };
                    let w = c.input.pending.iter().find(|p| p.workload.metadata.uid.as_deref() == Some(d.uid()))
                        .map(|p| &p.workload);
                    let rep = w
                        .and_then(|w| reps.get(&super::window::group_key(w)))
                        .and_then(|(i, _)| out.decisions.get(*i));
                    let rep_reason = rep.and_then(Decision::pending_reason);
                    prop_assert_eq!(
                        rep_reason.as_ref(),
                        Some(reason),
                        "{} left out: its group's reason differs", d.uid()
                    );
                }
            }
        }
        prop_assert_eq!(left_out + out.decisions.len(), full.decisions.len());
    }
}

/// The window is the heads: a long run of one kind is shown as a few, and the rest counted.
#[test]
fn a_long_run_of_alike_work_is_shown_as_its_head() {
    let mut index = PendingIndex::default();
    for i in 0..1000u64 {
        let mut w = workload(0, 0, i);
        w.status = Some(WorkloadStatus {
            phase: WorkloadPhase::Pending,
            submitted_at: Some(t(i as i64)),
            ..Default::default()
        });
        index.insert(i, Arc::new(w));
    }
    let mut base = SchedulerInput {
        now: t(5000),
        seed: 1,
        settings: SchedulerSettings::default(),
        queues: queues(0),
        priority_classes: crate::state::bootstrap::default_priority_classes(),
        clusters: vec![cluster("c0", [2, 0, 0])],
        pending: Vec::new(),
        running: Vec::new(),
        reservations: Vec::new(),
        preemption_budget: PreemptionBudget::per_minute(10),
        quota_overrides: Vec::new(),
        rollout: None,
        preemptors: Vec::new(),
        unshown_pending: Default::default(),
    };
    base.settings.preemption = false;
    let (input, out, _window, runs) =
        run(&base, &index, &HashSet::new(), &mut HashMap::new(), |_| {});
    let assigned = out
        .decisions
        .iter()
        .filter(|d| matches!(d, Decision::Assign { .. }))
        .count();
    assert_eq!(
        assigned, 2,
        "two free nodes, two 8-GPU jobs: {:?}",
        out.decisions
    );
    assert!(
        input.pending.len() < 50,
        "{} shown of 1000",
        input.pending.len()
    );
    assert_eq!(
        input.unshown_pending.get("H100").copied().unwrap_or(0) as usize + input.pending.len(),
        1000
    );
    assert!(runs >= 1);
    // Later submissions keep the head where it was; removing the head moves it on.
    index.remove(0);
    assert_eq!(index.len(), 999);
}
