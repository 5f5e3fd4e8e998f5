//! Scenario tests: every pending reason, every preemption tier, routing and the big-gang
//! reservation story, each on a small fleet with real nodes (see `testkit`).

use chrono::Duration;
use tideway_api::{
    FlavorQuota, PendingReason, Placement, PoolKind, Preemptibility, TopologyLevel, WorkloadClass,
};

use crate::testkit::*;
use tideway_scheduler::decision::{Decision, VictimTier};
use tideway_scheduler::explain::{Unblock, Verdict};
use tideway_scheduler::input::{QuotaOverride, uid_of};
use tideway_scheduler::schedule;

fn classes() -> Vec<tideway_api::PriorityClass> {
    vec![
        class("low", 10, Preemptibility::Allowed, None),
        class("normal", 100, Preemptibility::Allowed, None),
        class("high", 1000, Preemptibility::Allowed, None),
        class("forbidden", 10, Preemptibility::Forbidden, None),
        class("cautious", 10, Preemptibility::Cautious, None),
    ]
}

fn big_queue() -> tideway_api::Queue {
    queue("q", None, &[("H100", 100_000), ("A100", 100_000)])
}

/// One cluster "c1": one rack of `nodes` 8-GPU nodes.
fn one(nodes: usize) -> Fleet {
    Fleet::new(
        vec![cluster("c1", "eu", "H100", 1, nodes, 8)],
        vec![big_queue()],
        classes(),
    )
}

fn reason(out: &tideway_scheduler::SchedulerOutput, uid: &str) -> PendingReason {
    Fleet::decision(out, uid)
        .pending_reason()
        .unwrap_or_else(|| panic!("{uid} was assigned"))
}

fn preempt(
    out: &tideway_scheduler::SchedulerOutput,
) -> Option<(Vec<String>, String, u64, VictimTier)> {
    out.decisions.iter().find_map(|d| match d {
        Decision::Preempt {
            victims,
            cluster,
            grace_seconds,
            cost,
            ..
        } => Some((
            victims.iter().map(|v| v.to_string()).collect(),
            cluster.to_string(),
            *grace_seconds,
            cost.worst_tier,
        )),
        _ => None,
    })
}

// ---- pending reasons -------------------------------------------------------------------

#[test]
fn reason_quota_exhausted() {
    let mut f = one(4);
    f.queues = vec![queue("q", None, &[("H100", 8)])];
    f.submit(workload("w", "q", "normal", "H100", 2, 8));
    let out = f.cycle();
    assert_eq!(
        reason(&out, "w"),
        PendingReason::QuotaExhausted {
            queue: "q".into(),
            flavor: "H100".into(),
            used: 0,
            limit: 8
        }
    );
    let Decision::Pending { explanation, .. } = Fleet::decision(&out, "w") else {
        panic!()
    };
    assert!(matches!(
        explanation.unblock,
        Unblock::QuotaFreed { gpus: 8, .. }
    ));
}

#[test]
fn reason_insufficient_capacity_with_per_cluster_breakdown() {
    let mut f = one(2);
    f.submit(workload("w", "q", "normal", "H100", 4, 8));
    let out = f.cycle();
    assert_eq!(
        reason(&out, "w"),
        PendingReason::InsufficientCapacity {
            flavor: "H100".into(),
            needed: 32,
            largest_fit_per_cluster: [("c1".to_owned(), 16)].into(),
        }
    );
    let Decision::Pending { explanation, .. } = Fleet::decision(&out, "w") else {
        panic!()
    };
    assert_eq!(explanation.clusters.len(), 1);
    assert!(matches!(
        explanation.clusters[0].verdict,
        Verdict::TooSmall {
            needed_gpus: 32,
            largest_fit_gpus: 16,
            free_gpus: 16,
            ..
        }
    ));
    assert!(
        explanation.hint.contains("32 H100 GPUs"),
        "{}",
        explanation.hint
    );
}

#[test]
fn reason_fragmentation() {
    // Two racks of one free 8-GPU node each: 16 free, but a rack gang of 2x8 fits in none.
    let mut f = Fleet::new(
        vec![cluster("c1", "eu", "H100", 2, 1, 8)],
        vec![big_queue()],
        classes(),
    );
    f.submit(with_topology(
        workload("w", "q", "normal", "H100", 2, 8),
        TopologyLevel::Rack,
    ));
    let out = f.cycle();
    assert_eq!(
        reason(&out, "w"),
        PendingReason::Fragmentation {
            free_total: 16,
            largest_domain: 8
        }
    );
}

#[test]
fn reason_no_matching_cluster() {
    let mut f = one(2);
    let mut w = workload("w", "q", "normal", "H100", 1, 8);
    w.spec.placement = Some(Box::new(Placement {
        regions: vec!["mars".into()],
        ..Placement::default()
    }));
    f.submit(w);
    f.submit(workload("a", "q", "normal", "A100", 1, 8));
    let out = f.cycle();
    let PendingReason::NoMatchingCluster {
        constraint,
        clusters_filtered,
    } = reason(&out, "w")
    else {
        panic!()
    };
    assert!(constraint.contains("region in [mars]"), "{constraint}");
    assert_eq!(clusters_filtered, vec!["c1".to_owned()]);
    let PendingReason::NoMatchingCluster { constraint, .. } = reason(&out, "a") else {
        panic!()
    };
    assert!(constraint.contains("flavor A100"), "{constraint}");
}

#[test]
fn reason_window_closed() {
    let mut f = one(2);
    let until = f.now + Duration::hours(8);
    f.overrides = vec![QuotaOverride {
        queue: "q".into(),
        quota: FlavorQuota {
            max: Some(0),
            ..FlavorQuota::guaranteed("H100", 0)
        },
        window: Some("day".into()),
        until: Some(until),
        side: None,
        regions: Vec::new(),
        handover: None,
    }];
    f.submit(workload("w", "q", "normal", "H100", 1, 8));
    let out = f.cycle();
    assert_eq!(reason(&out, "w"), PendingReason::WindowClosed { until });
}

#[test]
fn reason_rate_limited() {
    let mut f = one(1);
    f.start_on(workload("v", "q", "low", "H100", 1, 8), "c1", Some(f.now));
    f.budget.max = 3;
    f.budget.used_in_window = 3;
    f.submit(workload("w", "q", "high", "H100", 1, 8));
    let out = f.cycle();
    assert_eq!(reason(&out, "w"), PendingReason::RateLimited);
    assert!(preempt(&out).is_none());
}

#[test]
fn reason_member_unavailable() {
    let mut f = one(2);
    f.clusters[0].ready = false;
    f.submit(workload("w", "q", "normal", "H100", 1, 8));
    let out = f.cycle();
    assert_eq!(
        reason(&out, "w"),
        PendingReason::MemberUnavailable {
            cluster: "c1".into()
        }
    );
}

#[test]
fn reason_waiting_for_preemption_then_assigned() {
    let mut f = one(1);
    f.start_on(workload("v", "q", "low", "H100", 1, 8), "c1", Some(f.now));
    f.submit(workload("w", "q", "high", "H100", 1, 8));
    let out = f.cycle();
    let (victims, _, grace, _) = preempt(&out).expect("preempts");
    assert_eq!(victims, vec!["v".to_owned()]);
    assert_eq!(
        Fleet::decision(&out, "w").pending_reason(),
        Some(PendingReason::WaitingForPreemption {
            victims: vec!["v".into()]
        })
    );
    // Next cycle, the victim is still in its grace period.
    f.advance(1);
    let out = f.cycle();
    assert_eq!(
        reason(&out, "w"),
        PendingReason::WaitingForPreemption {
            victims: vec!["v".into()]
        }
    );
    // After the grace the victim is gone and requeued; the preemptor gets its place.
    f.advance(grace as i64);
    let out = f.cycle();
    assert!(matches!(
        Fleet::decision(&out, "w"),
        Decision::Assign { .. }
    ));
    assert!(matches!(
        reason(&out, "v"),
        PendingReason::InsufficientCapacity { .. }
    ));
}

#[test]
fn reason_queued_by_admission_cap_and_user_limit() {
    let mut f = one(4);
    f.tuning.max_assignments_per_cycle = Some(1);
    f.submit(workload("a", "q", "normal", "H100", 1, 8));
    f.submit(workload("b", "q", "normal", "H100", 1, 8));
    let out = f.cycle();
    assert!(matches!(
        Fleet::decision(&out, "a"),
        Decision::Assign { .. }
    ));
    assert_eq!(reason(&out, "b"), PendingReason::Queued);

    let mut f = one(4);
    f.queues[0].spec.per_user_active_limit = Some(1);
    for uid in ["a", "b"] {
        let mut w = workload(uid, "q", "normal", "H100", 1, 8);
        w.spec.user = Some("alice".into());
        f.submit(w);
    }
    let out = f.cycle();
    assert!(matches!(
        Fleet::decision(&out, "a"),
        Decision::Assign { .. }
    ));
    let Decision::Pending {
        reason,
        explanation,
        ..
    } = Fleet::decision(&out, "b")
    else {
        panic!()
    };
    assert_eq!(*reason, PendingReason::Queued);
    assert!(matches!(
        explanation.unblock,
        Unblock::UserWorkloadFinishes { limit: 1, .. }
    ));
}

#[test]
fn unknown_queue_and_class_do_not_panic() {
    let mut f = one(2);
    f.submit(workload("w", "nope", "normal", "H100", 1, 8));
    f.submit(workload("x", "q", "no-such-class", "H100", 1, 8));
    let out = f.cycle();
    assert!(matches!(
        reason(&out, "w"),
        PendingReason::QuotaExhausted { limit: 0, .. }
    ));
    assert!(matches!(
        Fleet::decision(&out, "x"),
        Decision::Assign { .. }
    ));
}

#[test]
fn absurd_input_neither_panics_nor_hangs() {
    let mut f = one(2);
    f.clusters[0].pools[0].racks[0].nodes[0].cap = 8;
    let mut input = f.input();
    // Counts and sizes far beyond validation limits, a digest that does not add up.
    input.clusters[0].digest.pools[0].counts.total = u32::MAX;
    input.clusters[0].digest.pools[0].domains[0]
        .counts
        .free_histogram = vec![0, 0, 0, 0, 0, 0, 0, 0, 9];
    let huge = workload("huge", "q", "high", "H100", u32::MAX, u32::MAX);
    input
        .pending
        .push(tideway_scheduler::input::PendingWorkload {
            workload: huge.clone(),
            submitted_at: f.now - Duration::days(400),
            seq: 1,
        });
    let mut zero = workload("zero", "q", "normal", "H100", 0, 0);
    zero.spec
        .pod_sets
        .push(tideway_api::PodSet::new("x", 3, 0, "H100"));
    input
        .pending
        .push(tideway_scheduler::input::PendingWorkload {
            workload: zero,
            submitted_at: f.now,
            seq: 2,
        });
    let mut running = tideway_scheduler::input::RunningWorkload {
        workload: workload("r", "q", "low", "H100", u32::MAX, u32::MAX),
        cluster: "c1".into(),
        pool: "train".into(),
        placements: Vec::new(),
        started_at: None,
        admitted_at: f.now,
        last_checkpoint_at: None,
        preemptible_after: None,
        accounted_in_digest: false,
        preempting_for: None,
    };
    input.running.push(running.clone());
    running.workload.metadata.uid = Some("r2".into());
    running.accounted_in_digest = true;
    running.cluster = "gone".into();
    input.running.push(running);
    input.settings.tuning.weights.binpack = f64::NAN;
    let out = schedule(&input);
    assert_eq!(out.decisions.len(), 2);
    assert_eq!(out, schedule(&input));
}

// ---- preemption tiers ------------------------------------------------------------------

#[test]
fn tier_not_started_first_even_over_lower_priority_running() {
    let mut f = one(2);
    // "ns" has a higher priority than "r" but has not started: nothing is lost evicting it.
    f.start_on(workload("ns", "q", "normal", "H100", 1, 8), "c1", None);
    f.start_on(workload("r", "q", "low", "H100", 1, 8), "c1", Some(f.now));
    f.advance(3600);
    f.submit(workload("w", "q", "high", "H100", 1, 8));
    let (victims, _, grace, tier) = preempt(&f.cycle()).expect("preempts");
    assert_eq!(victims, vec!["ns".to_owned()]);
    assert_eq!(tier, VictimTier::NotStarted);
    assert_eq!(grace, f.tuning.preemption_grace_seconds);
}

#[test]
fn tier_checkpointable_by_least_work_lost() {
    let mut f = one(3);
    let start = f.now;
    f.start_on(
        with_checkpoint(workload("old-ckpt", "q", "low", "H100", 1, 8)),
        "c1",
        Some(start),
    );
    f.start_on(
        with_checkpoint(workload("new-ckpt", "q", "low", "H100", 1, 8)),
        "c1",
        Some(start),
    );
    f.start_on(
        workload("plain", "q", "low", "H100", 1, 8),
        "c1",
        Some(start),
    );
    f.advance(7200);
    let now = f.now;
    for r in &mut f.running {
        match uid_of(&r.rw.workload) {
            "old-ckpt" => r.rw.last_checkpoint_at = Some(now - Duration::minutes(50)),
            "new-ckpt" => r.rw.last_checkpoint_at = Some(now - Duration::minutes(5)),
            _ => {}
        }
    }
    f.submit(workload("w", "q", "high", "H100", 1, 8));
    let (victims, _, grace, tier) = preempt(&f.cycle()).expect("preempts");
    assert_eq!(victims, vec!["new-ckpt".to_owned()]);
    assert_eq!(tier, VictimTier::Checkpointable);
    assert_eq!(grace, f.tuning.checkpoint_grace_seconds);
}

#[test]
fn tier_rest_by_lowest_priority_then_least_work_lost() {
    let mut f = one(3);
    f.start_on(
        workload("long", "q", "low", "H100", 1, 8),
        "c1",
        Some(f.now),
    );
    f.advance(3600);
    f.start_on(
        workload("short", "q", "low", "H100", 1, 8),
        "c1",
        Some(f.now),
    );
    f.start_on(
        workload("mid", "q", "normal", "H100", 1, 8),
        "c1",
        Some(f.now),
    );
    f.advance(600);
    f.submit(workload("w", "q", "high", "H100", 1, 8));
    let (victims, _, _, tier) = preempt(&f.cycle()).expect("preempts");
    assert_eq!(victims, vec!["short".to_owned()]);
    assert_eq!(tier, VictimTier::Running);
}

#[test]
fn forbidden_never_preempted() {
    let mut f = one(1);
    f.start_on(workload("f", "q", "forbidden", "H100", 1, 8), "c1", None);
    f.submit(workload("w", "q", "high", "H100", 1, 8));
    let out = f.cycle();
    assert!(preempt(&out).is_none());
    assert!(matches!(
        reason(&out, "w"),
        PendingReason::InsufficientCapacity { .. }
    ));
}

#[test]
fn cautious_only_when_nothing_else_frees_enough() {
    let mut f = one(2);
    f.start_on(workload("c", "q", "cautious", "H100", 1, 8), "c1", None);
    f.start_on(workload("r", "q", "low", "H100", 1, 8), "c1", Some(f.now));
    f.advance(600);
    f.submit(workload("w", "q", "high", "H100", 1, 8));
    let (victims, ..) = preempt(&f.cycle()).expect("preempts");
    assert_eq!(victims, vec!["r".to_owned()], "allowed victim preferred");

    let mut f = one(2);
    f.start_on(workload("c", "q", "cautious", "H100", 1, 8), "c1", None);
    f.start_on(workload("r", "q", "low", "H100", 1, 8), "c1", Some(f.now));
    f.submit(workload("w", "q", "high", "H100", 2, 8));
    let out = f.cycle();
    let Some(Decision::Preempt {
        victims,
        grace_seconds,
        cost,
        ..
    }) = out
        .decisions
        .iter()
        .find(|d| matches!(d, Decision::Preempt { .. }))
    else {
        panic!("expected preemption");
    };
    assert_eq!(victims.len(), 2);
    assert_eq!(cost.cautious, 1);
    assert!(*grace_seconds >= f.tuning.cautious_grace_seconds);
}

#[test]
fn minimum_runtime_protects_recently_started_work() {
    let mut f = one(1);
    f.start_on(workload("v", "q", "low", "H100", 1, 8), "c1", Some(f.now));
    f.running[0].rw.preemptible_after = Some(f.now + Duration::minutes(10));
    f.submit(workload("w", "q", "high", "H100", 1, 8));
    assert!(preempt(&f.cycle()).is_none());
    f.advance(601);
    assert!(preempt(&f.cycle()).is_some());
}

#[test]
fn never_preempts_across_two_clusters() {
    let mut f = Fleet::new(
        vec![
            cluster("c1", "eu", "H100", 1, 1, 8),
            cluster("c2", "eu", "H100", 1, 1, 8),
        ],
        vec![big_queue()],
        classes(),
    );
    f.start_on(workload("v1", "q", "low", "H100", 1, 8), "c1", None);
    f.start_on(workload("v2", "q", "low", "H100", 1, 8), "c2", None);
    // 2x8 would need both victims, one per cluster.
    f.submit(workload("w", "q", "high", "H100", 2, 8));
    let out = f.cycle();
    assert!(preempt(&out).is_none());
    assert!(matches!(
        reason(&out, "w"),
        PendingReason::InsufficientCapacity { .. }
    ));
    assert!(out.stats.preemption_attempts >= 1);
}

#[test]
fn never_preempts_for_nothing() {
    let mut f = one(3);
    f.start_on(workload("v", "q", "low", "H100", 1, 8), "c1", None);
    f.start_on(workload("keep", "q", "forbidden", "H100", 2, 8), "c1", None);
    // Evicting v frees 8 GPUs; w needs 16.
    f.submit(workload("w", "q", "high", "H100", 2, 8));
    assert!(preempt(&f.cycle()).is_none());
}

#[test]
fn reclaims_lent_guarantee_from_a_borrowing_peer() {
    let mut f = one(2);
    f.queues = vec![
        queue("a", Some("c"), &[("H100", 8)]),
        queue("b", Some("c"), &[("H100", 8)]),
    ];
    // b borrowed a's guarantee: 16 GPUs in use, same priority as a's newcomer.
    f.start_on(
        workload("b1", "b", "normal", "H100", 1, 8),
        "c1",
        Some(f.now),
    );
    f.start_on(
        workload("b2", "b", "normal", "H100", 1, 8),
        "c1",
        Some(f.now),
    );
    f.submit(workload("a1", "a", "normal", "H100", 1, 8));
    let (victims, ..) = preempt(&f.cycle()).expect("reclaims");
    assert_eq!(victims.len(), 1);
    // Without a guarantee to reclaim, equal priority may not preempt.
    let mut f = one(2);
    f.queues = vec![
        queue("a", Some("c"), &[("H100", 0)]),
        queue("b", Some("c"), &[("H100", 16)]),
    ];
    f.queues[0].spec.quotas[0].borrowing_limit = Some(8);
    f.start_on(
        workload("b1", "b", "normal", "H100", 2, 8),
        "c1",
        Some(f.now),
    );
    f.submit(workload("a1", "a", "normal", "H100", 1, 8));
    assert!(preempt(&f.cycle()).is_none());
}

#[test]
fn budget_caps_victims_per_window() {
    let mut f = one(2);
    f.start_on(workload("v1", "q", "low", "H100", 1, 8), "c1", None);
    f.start_on(workload("v2", "q", "low", "H100", 1, 8), "c1", None);
    f.budget.max = 2;
    f.budget.used_in_window = 1;
    f.submit(workload("w", "q", "high", "H100", 2, 8));
    let out = f.cycle();
    assert_eq!(reason(&out, "w"), PendingReason::RateLimited);
    // A plan larger than a whole window's budget runs once a window has nothing else in it
    // (else a big gang could never preempt), and spends it all.
    f.budget.max = 1;
    f.budget.used_in_window = 0;
    let out = f.cycle();
    assert!(matches!(
        reason(&out, "w"),
        PendingReason::WaitingForPreemption { .. }
    ));
}

#[test]
fn never_preempts_where_a_reservation_holds_the_capacity() {
    let mut f = one(4);
    f.tuning.reservation_after_seconds = 0;
    // Both are expected to end within the hour (they will not, in truth).
    for (uid, class) in [("v", "forbidden"), ("u", "low")] {
        f.true_runtime.insert(uid.into(), 100_000);
        let w = with_runtime(workload(uid, "q", class, "H100", 1, 8), 3600);
        f.start_on(w, "c1", Some(f.now));
    }
    // The gang needs all four nodes; evicting u is not enough (v is forbidden): with nobody
    // else waiting a reservation costs nothing, so it reserves.
    f.submit(workload("gang", "q", "normal", "H100", 4, 8));
    let out = f.cycle();
    assert!(matches!(
        Fleet::decision(&out, "gang"),
        Decision::Reserve { .. }
    ));
    // An hour later u and v overran their estimates; they are now expected to run as long
    // again, and the gang has waited that long: the reservation still pays and is kept.
    f.advance(3600);
    // A same-priority job that would fit on a free node is held off it (no runtime
    // estimate, so no backfill) and must not evict u instead: it would preempt for nothing.
    f.submit(workload("w", "q", "normal", "H100", 1, 8));
    let out = f.cycle();
    assert!(preempt(&out).is_none());
    let Decision::Pending { explanation, .. } = Fleet::decision(&out, "w") else {
        panic!()
    };
    assert!(matches!(
        explanation.clusters[0].verdict,
        Verdict::Reserved { .. }
    ));
    // Work that ends before the reservation's expected start is backfilled.
    f.submit(with_runtime(
        workload("short", "q", "normal", "H100", 1, 8),
        60,
    ));
    let out = f.cycle();
    assert!(matches!(
        Fleet::decision(&out, "short"),
        Decision::Assign { .. }
    ));
    // So is work with only a limit that ends before it: it cannot run longer.
    let mut limited = workload("limited", "q", "normal", "H100", 1, 8);
    limited.spec.runtime_limit_seconds = Some(60);
    f.submit(limited);
    let out = f.cycle();
    assert!(matches!(
        Fleet::decision(&out, "limited"),
        Decision::Assign { .. }
    ));
}

// ---- routing ---------------------------------------------------------------------------

#[test]
fn rack_gang_lands_in_one_rack_and_nothing_is_booked_twice() {
    let mut f = Fleet::new(
        vec![cluster("c1", "eu", "H100", 2, 2, 8)],
        vec![big_queue()],
        classes(),
    );
    for uid in ["a", "b", "c"] {
        f.submit(with_topology(
            workload(uid, "q", "normal", "H100", 2, 8),
            TopologyLevel::Rack,
        ));
    }
    let out = f.cycle();
    let assigned: Vec<_> = out
        .decisions
        .iter()
        .filter_map(|d| match d {
            Decision::Assign { placements, .. } => Some(placements[0].domain.clone().unwrap()),
            _ => None,
        })
        .collect();
    assert_eq!(assigned.len(), 2);
    assert_ne!(assigned[0], assigned[1]);
    assert!(assigned.iter().all(|d| d.level == TopologyLevel::Rack));
    assert!(matches!(
        reason(&out, "c"),
        PendingReason::InsufficientCapacity { .. }
    ));
}

#[test]
fn binpacks_onto_the_fuller_cluster() {
    let mut f = Fleet::new(
        vec![
            cluster("empty", "eu", "H100", 1, 4, 8),
            cluster("busy", "eu", "H100", 1, 4, 8),
        ],
        vec![big_queue()],
        classes(),
    );
    f.start_on(workload("x", "q", "normal", "H100", 2, 8), "busy", None);
    f.submit(workload("w", "q", "normal", "H100", 1, 1));
    let out = f.cycle();
    let Decision::Assign { cluster, .. } = Fleet::decision(&out, "w") else {
        panic!()
    };
    assert_eq!(cluster, "busy");
}

#[test]
fn spread_replicas_over_clusters_and_regions() {
    let mut f = Fleet::new(
        vec![
            cluster("eu-1", "eu", "L4", 1, 8, 8),
            cluster("eu-2", "eu", "L4", 1, 8, 8),
            cluster("us-1", "us", "L4", 1, 8, 8),
        ],
        vec![queue("serve", None, &[("L4", 1000)])],
        classes(),
    );
    for c in &mut f.clusters {
        c.pools[0].kind = PoolKind::Inference;
    }
    for i in 0..3 {
        let mut w = workload(&format!("r{i}"), "serve", "normal", "L4", 1, 1);
        w.spec.class = WorkloadClass::Inference;
        w.spec.gang = None;
        w.spec.placement = Some(Box::new(Placement {
            spread: true,
            ..Placement::default()
        }));
        f.submit(w);
    }
    let out = f.cycle();
    let mut clusters: Vec<String> = out
        .decisions
        .iter()
        .filter_map(|d| match d {
            Decision::Assign { cluster, .. } => Some(cluster.to_string()),
            _ => None,
        })
        .collect();
    clusters.sort();
    assert_eq!(clusters, vec!["eu-1", "eu-2", "us-1"]);
}

#[test]
fn class_pool_affinity_keeps_training_out_of_inference_pools() {
    let mut f = one(2);
    f.clusters[0].pools[0].kind = PoolKind::Inference;
    f.submit(workload("w", "q", "normal", "H100", 1, 8));
    let out = f.cycle();
    assert!(matches!(
        reason(&out, "w"),
        PendingReason::NoMatchingCluster { .. }
    ));
}

#[test]
fn seeded_tie_break_is_stable_and_seed_dependent() {
    let mut chosen = std::collections::BTreeSet::new();
    for seed in 0..16 {
        let mut f = Fleet::new(
            vec![
                cluster("a", "eu", "H100", 1, 2, 8),
                cluster("b", "eu", "H100", 1, 2, 8),
            ],
            vec![big_queue()],
            classes(),
        );
        f.seed = seed;
        f.submit(workload("w", "q", "normal", "H100", 1, 8));
        let input = f.input();
        let first = schedule(&input);
        assert_eq!(first, schedule(&input));
        let Decision::Assign { cluster, .. } = Fleet::decision(&first, "w") else {
            panic!()
        };
        chosen.insert(cluster.clone());
    }
    assert_eq!(chosen.len(), 2, "ties must not always favour one cluster");
}

#[test]
fn in_flight_assignment_is_not_booked_again() {
    let mut f = one(1);
    f.start_on(workload("x", "q", "normal", "H100", 1, 8), "c1", None);
    // The member has not reported it yet: the digest shows the node free again.
    let r = f.running.remove(0);
    for (pi, ri, ni, g) in &r.slots {
        f.clusters[0].pools[*pi].racks[*ri].nodes[*ni].used -= g;
    }
    let mut rw = r.rw;
    rw.accounted_in_digest = false;
    f.submit(workload("w", "q", "normal", "H100", 1, 8));
    let mut input = f.input();
    input.running.push(rw);
    let out = schedule(&input);
    assert!(matches!(
        reason(&out, "w"),
        PendingReason::InsufficientCapacity { .. }
    ));
}

// ---- ordering --------------------------------------------------------------------------

#[test]
fn fair_share_prefers_the_queue_using_less() {
    let mut f = one(2);
    f.queues = vec![
        queue("a", Some("c"), &[("H100", 8)]),
        queue("b", Some("c"), &[("H100", 8)]),
    ];
    f.start_on(
        workload("a0", "a", "normal", "H100", 1, 8),
        "c1",
        Some(f.now),
    );
    f.submit(workload("a1", "a", "normal", "H100", 1, 8));
    f.submit(workload("b1", "b", "normal", "H100", 1, 8));
    let out = f.cycle();
    assert!(matches!(
        Fleet::decision(&out, "b1"),
        Decision::Assign { .. }
    ));
    assert_eq!(out.decisions[0].uid(), "b1", "considered first");
}

#[test]
fn aging_lifts_long_waiting_low_priority_work() {
    let mut f = one(1);
    f.classes
        .push(class("aging", 0, Preemptibility::Allowed, Some((10, 1000))));
    f.submit(workload("old", "q", "aging", "H100", 1, 8));
    f.advance(5 * 3600);
    f.submit(workload("new", "q", "low", "H100", 1, 8));
    let out = f.cycle();
    // 0 + 5h * 10 = 50 > 10.
    assert!(matches!(
        Fleet::decision(&out, "old"),
        Decision::Assign { .. }
    ));
    assert_eq!(out.decisions[0].uid(), "old");
}

#[test]
fn small_jobs_pass_a_big_gang_that_does_not_fit() {
    let mut f = one(4);
    f.submit(workload("big", "q", "normal", "H100", 8, 8));
    f.submit(workload("small", "q", "normal", "H100", 1, 8));
    let out = f.cycle();
    assert!(matches!(
        Fleet::decision(&out, "small"),
        Decision::Assign { .. }
    ));
}

// ---- the big gang behind a stream of small jobs ----------------------------------------

#[test]
fn big_gang_gets_a_reservation_and_starts_while_small_jobs_keep_flowing() {
    let mut f = Fleet::new(
        vec![
            cluster("c1", "eu", "H100", 1, 8, 8),
            cluster("c2", "eu", "H100", 1, 8, 8),
        ],
        vec![big_queue()],
        classes(),
    );
    f.tuning.reservation_after_seconds = 600;
    let cycle_secs = 60;
    let small_runtime = 1800;
    // Fill both clusters with small jobs first.
    let mut n = 0;
    let small = |f: &mut Fleet, n: &mut usize, k: usize| {
        for _ in 0..k {
            *n += 1;
            f.submit(with_runtime(
                workload(&format!("s{n}"), "q", "normal", "H100", 1, 1),
                small_runtime,
            ));
        }
    };
    // Both clusters nearly full of small jobs that end at staggered times.
    let t = f.now;
    for c in ["c1", "c2"] {
        for i in 0..60 {
            n += 1;
            let w = with_runtime(
                workload(&format!("s{n}"), "q", "normal", "H100", 1, 1),
                small_runtime,
            );
            f.start_on(w, c, Some(t - Duration::seconds(i * 30)));
        }
    }
    f.submit(with_topology(
        workload("gang", "q", "normal", "H100", 8, 8),
        TopologyLevel::Rack,
    ));
    let mut reserved_at = None;
    let mut started_at = None;
    let mut small_admitted_while_waiting = 0;
    for c in 0..120 {
        f.advance(cycle_secs);
        small(&mut f, &mut n, 4);
        let out = f.cycle();
        match Fleet::decision(&out, "gang") {
            Decision::Reserve { cluster, .. } => {
                if reserved_at.is_none() {
                    reserved_at = Some((c, cluster.clone()));
                }
                assert_eq!(
                    &reserved_at.as_ref().unwrap().1,
                    cluster,
                    "reservation moved"
                );
            }
            Decision::Assign { cluster, .. } => {
                started_at = Some(c);
                assert_eq!(&reserved_at.as_ref().expect("reserved first").1, cluster);
                break;
            }
            _ => {}
        }
        small_admitted_while_waiting += out
            .decisions
            .iter()
            .filter(|d| matches!(d, Decision::Assign { .. }))
            .count();
    }
    let (reserved, _) = reserved_at.expect("gang got a reservation");
    let started = started_at.expect("gang started");
    // Reserved once it had waited as long as draining the cluster delays the small jobs
    // waiting (half a cluster idle for up to the 30 minutes of a small job, times the few
    // waiting, over the cluster: about an hour here), not at once; started once that work
    // drained, with the reservation kept on one cluster throughout.
    assert!(
        (30..=75).contains(&reserved),
        "reserved at cycle {reserved}"
    );
    assert!(started - reserved <= small_runtime as usize / cycle_secs as usize + 2);
    assert!(
        small_admitted_while_waiting > 20,
        "{small_admitted_while_waiting}"
    );
}

#[test]
fn required_topology_needs_a_member_that_declares_the_level() {
    // c1 is bigger and its digest shows racks, but it declares only node labels: a rack gang
    // must not land there.
    let mut node_only = cluster("c1", "eu", "H100", 4, 4, 8);
    node_only.declared_levels = Some(vec![TopologyLevel::Node]);
    let mut racked = cluster("c2", "eu", "H100", 2, 2, 8);
    racked.declared_levels = Some(vec![TopologyLevel::Node, TopologyLevel::Rack]);
    let rack_gang = || {
        with_topology(
            workload("w", "q", "normal", "H100", 2, 8),
            TopologyLevel::Rack,
        )
    };

    let mut f = Fleet::new(
        vec![node_only.clone(), racked],
        vec![big_queue()],
        classes(),
    );
    f.submit(rack_gang());
    let out = f.cycle();
    match Fleet::decision(&out, "w") {
        Decision::Assign { cluster, .. } => assert_eq!(cluster, "c2"),
        other => panic!("not assigned: {other:?}"),
    }

    let mut f = Fleet::new(vec![node_only], vec![big_queue()], classes());
    f.submit(rack_gang());
    f.submit(workload("n", "q", "normal", "H100", 2, 8));
    let out = f.cycle();
    let PendingReason::NoMatchingCluster {
        constraint,
        clusters_filtered,
    } = reason(&out, "w")
    else {
        panic!("{:?}", reason(&out, "w"));
    };
    assert!(constraint.contains("rack topology"), "{constraint}");
    assert_eq!(clusters_filtered, vec!["c1".to_string()]);
    assert!(
        matches!(Fleet::decision(&out, "n"), Decision::Assign { .. }),
        "a node-level gang still fits c1"
    );
}

/// GPUs in use on all nodes of the fleet.
fn used_gpus(f: &Fleet) -> u32 {
    f.clusters
        .iter()
        .flat_map(|c| &c.pools)
        .flat_map(|p| &p.racks)
        .flat_map(|r| &r.nodes)
        .map(|n| n.used)
        .sum()
}

/// The Philly collapse in miniature: nobody gives run-time estimates, small jobs arrive
/// faster than they finish and two-node gangs wait among them. Reservations must not turn
/// the backlog into a stall: the fleet stays busy while work is queued.
#[test]
fn reservations_without_estimates_do_not_stall_admission() {
    let mut f = one(4);
    f.tuning.reservation_after_seconds = 600;
    let mut n = 0;
    let mut feed = |f: &mut Fleet, k: usize| {
        for _ in 0..k {
            n += 1;
            let uid = format!("s{n}");
            // A heavy tail, as in real traces: one job in ten runs for eight hours.
            let runtime = if n % 10 == 0 {
                8 * 3600
            } else {
                1200 + 300 * (n % 5) as i64
            };
            f.true_runtime.insert(uid.clone(), runtime);
            f.submit(workload(&uid, "q", "normal", "H100", 1, 1 + (n % 2) as u32));
        }
    };
    feed(&mut f, 40);
    let mut busy = 0u64;
    let mut samples = 0u64;
    for c in 0..360 {
        f.advance(60);
        feed(&mut f, 2);
        if c % 30 == 0 {
            let uid = format!("gang{c}");
            f.true_runtime.insert(uid.clone(), 1800);
            f.submit(workload(&uid, "q", "normal", "H100", 2, 8));
        }
        f.cycle();
        if c >= 60 {
            busy += u64::from(used_gpus(&f));
            samples += 32;
        }
    }
    let utilization = busy as f64 / samples as f64;
    assert!(
        utilization > 0.85,
        "the fleet idled with work queued: utilization {utilization:.2}"
    );
    assert!(f.pending.len() > 10, "the fleet was contended throughout");
}

/// A queue's guarantee lent to small jobs comes back as whole nodes: the borrowed nodes are
/// full of 1-GPU work whose cheapest victims are spread over every node, so evicting the
/// cheapest first never frees a node; grouped by node (members report them), four nodes are
/// emptied and the guaranteed 4-node gang starts within the grace period and a few cycles.
#[test]
fn guarantee_comes_back_as_whole_nodes_for_a_gang() {
    let run = |hide_nodes: bool| {
        let mut f = one(8);
        f.hide_nodes = hide_nodes;
        // The default budget, smaller than the 32 victims: a plan larger than a whole
        // window's budget runs in a window with nothing else evicted.
        f.budget = tideway_scheduler::input::PreemptionBudget::per_minute(10);
        f.queues = vec![
            queue("a", Some("c"), &[("H100", 32)]),
            queue("b", Some("c"), &[("H100", 32)]),
        ];
        // b fills all 64 GPUs (32 borrowed from a), node by node; the most recently started
        // (least work lost, cheapest) job of every node is one of the first eight.
        for i in 0..64i64 {
            let started = f.now - Duration::seconds(((i % 8) * 8 + i / 8 + 1) * 600);
            f.start_on(
                workload(&format!("b{i}"), "b", "normal", "H100", 1, 1),
                "c1",
                Some(started),
            );
        }
        f.submit(workload("gang", "a", "normal", "H100", 4, 8));
        for c in 0..6 {
            let out = f.cycle();
            if matches!(Fleet::decision(&out, "gang"), Decision::Assign { .. }) {
                return Some(c);
            }
            f.advance(60);
        }
        None
    };
    let started = run(false).expect("the gang started");
    assert!(started <= 2, "started at cycle {started}");
    // Without node reports the freed GPUs look like 1-GPU nodes and the gang stays put.
    assert_eq!(run(true), None);
}

/// Shortest-expected-first (QSSF) takes the least expected GPU-time first among equals;
/// FIFO takes the first submitted.
#[test]
fn shortest_expected_first_orders_equals_by_expected_gpu_time() {
    let first = |order: tideway_scheduler::input::QueueOrder| {
        let mut f = one(1);
        f.tuning.order = order;
        f.submit(with_runtime(
            workload("long", "q", "normal", "H100", 1, 8),
            36_000,
        ));
        f.submit(with_runtime(
            workload("short", "q", "normal", "H100", 1, 8),
            600,
        ));
        let mut limited = workload("limited", "q", "normal", "H100", 1, 8);
        limited.spec.runtime_limit_seconds = Some(3_600);
        f.submit(limited);
        let out = f.cycle();
        out.decisions
            .iter()
            .find(|d| matches!(d, Decision::Assign { .. }))
            .map(|d| d.uid().to_owned())
    };
    use tideway_scheduler::input::QueueOrder;
    assert_eq!(first(QueueOrder::Fifo).as_deref(), Some("long"));
    assert_eq!(
        first(QueueOrder::ShortestExpectedFirst).as_deref(),
        Some("short")
    );
}

#[test]
fn a_failed_workload_waits_out_its_backoff_then_is_dispatched() {
    let mut f = one(4);
    let mut w = workload("w", "q", "normal", "H100", 1, 8);
    let until = f.now + Duration::seconds(30);
    w.status = Some(tideway_api::WorkloadStatus {
        attempts: 2,
        retry_not_before: Some(until),
        ..Default::default()
    });
    f.submit(w);
    let out = f.cycle();
    assert_eq!(
        reason(&out, "w"),
        PendingReason::BackingOff { until, attempts: 2 }
    );
    let Decision::Pending { explanation, .. } = Fleet::decision(&out, "w") else {
        panic!()
    };
    assert!(matches!(explanation.unblock, Unblock::RetryBackoffEnds { at } if at == until));
    // Capacity is free the whole time: only the backoff held it.
    f.now = until;
    assert!(matches!(
        Fleet::decision(&f.cycle(), "w"),
        Decision::Assign { .. }
    ));
}
