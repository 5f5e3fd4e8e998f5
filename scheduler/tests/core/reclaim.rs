//! Quota reclaim: a tidal hand-over between fleet sides, and priority preemption inside a
//! queue at its quota.

use tideway_api::{FlavorQuota, PendingReason, PoolKind, ReclaimOrder, WorkloadClass};
use tideway_scheduler::PendingWorkload;
use tideway_scheduler::decision::{Decision, VictimTier};
use tideway_scheduler::input::QuotaOverride;
use tideway_scheduler::tidal::{FleetSide, Handover};

use crate::testkit::*;

fn classes() -> Vec<tideway_api::PriorityClass> {
    vec![
        class("low", 10, tideway_api::Preemptibility::Allowed, None),
        class("normal", 100, tideway_api::Preemptibility::Allowed, None),
        class("high", 1000, tideway_api::Preemptibility::Allowed, None),
    ]
}

/// One cluster with a shared pool of 4 nodes x 8 H100, queues for each side.
fn fleet() -> Fleet {
    let mut c = cluster("c1", "eu", "H100", 1, 4, 8);
    c.pools = vec![pool("shared", PoolKind::Shared, "H100", 1, 4, 8)];
    Fleet::new(
        vec![c],
        vec![
            queue("train", None, &[("H100", 1000)]),
            queue("serve", None, &[("H100", 1000)]),
        ],
        classes(),
    )
}

fn side(side: FleetSide, gpus: u32, window: &str, grace: u64) -> QuotaOverride {
    QuotaOverride {
        queue: String::new(),
        side: Some(side),
        regions: Vec::new(),
        quota: FlavorQuota::guaranteed("H100", gpus),
        window: Some(window.into()),
        until: None,
        handover: Some(Handover {
            schedule: "tide".into(),
            boundary: t0() + chrono::Duration::hours(12),
            next_guaranteed: None,
            lead_seconds: 0,
            grace_seconds: grace,
            reclaim_order: ReclaimOrder::LeastWorkLost,
            handover_seconds: 0,
        }),
    }
}

fn inference(uid: &str, pods: u32) -> tideway_api::Workload {
    let mut w = workload(uid, "serve", "normal", "H100", pods, 8);
    w.spec.class = WorkloadClass::Inference;
    w
}

#[test]
fn at_the_boundary_borrowed_training_is_reclaimed_after_its_grace() {
    let mut f = fleet();
    // Night: training fills the whole fleet, 8 GPUs of it borrowed from inference.
    f.overrides = vec![
        side(FleetSide::Training, 24, "night", 120),
        side(FleetSide::Inference, 8, "night", 120),
    ];
    for (i, age) in [(0, 3600), (1, 600), (2, 1800), (3, 60)] {
        let w = with_checkpoint(workload(&format!("t{i}"), "train", "normal", "H100", 1, 8));
        f.start_on(w, "c1", Some(f.now - chrono::Duration::seconds(age)));
    }
    // Morning: inference gets 24, training keeps 8; two replicas arrive.
    f.overrides = vec![
        side(FleetSide::Training, 8, "day", 120),
        side(FleetSide::Inference, 24, "day", 120),
    ];
    f.submit(inference("serve-a", 2));
    let out = f.cycle();
    let Decision::Preempt {
        victims,
        grace_seconds,
        cost,
        ..
    } = Fleet::decision(&out, "serve-a")
    else {
        panic!("expected a reclaim: {:?}", out.decisions);
    };
    assert_eq!(*grace_seconds, 120, "the schedule's checkpoint grace");
    assert_eq!(cost.worst_tier, VictimTier::Checkpointable);
    // Least work lost: the two that started last.
    let mut v = victims.clone();
    v.sort();
    assert_eq!(v, ["t1", "t3"]);
    // Within the grace it waits, and nothing else is evicted for it.
    f.advance(60);
    let out = f.cycle();
    assert!(matches!(
        Fleet::decision(&out, "serve-a"),
        Decision::Pending {
            reason: PendingReason::WaitingForPreemption { .. },
            ..
        }
    ));
    // Grace over: the victims leave, inference starts in the next cycle.
    f.advance(60);
    let out = f.cycle();
    assert!(
        matches!(Fleet::decision(&out, "serve-a"), Decision::Assign { .. }),
        "{:?}",
        out.decisions
    );
}

#[test]
fn training_within_its_guarantee_is_not_reclaimed() {
    let mut f = fleet();
    f.overrides = vec![
        side(FleetSide::Training, 24, "day", 120),
        side(FleetSide::Inference, 8, "day", 120),
    ];
    for i in 0..3 {
        let w = with_checkpoint(workload(&format!("t{i}"), "train", "normal", "H100", 1, 8));
        f.start_on(w, "c1", Some(f.now));
    }
    // Inference asks for 16 with a guarantee of 8: only 8 free, and training is within
    // its own 24.
    f.submit(inference("serve-a", 2));
    let out = f.cycle();
    assert!(
        matches!(Fleet::decision(&out, "serve-a"), Decision::Pending { .. }),
        "{:?}",
        out.decisions
    );
}

#[test]
fn inside_a_queue_at_its_quota_higher_priority_preempts_lower() {
    let mut f = fleet();
    f.queues = vec![queue("q", None, &[("H100", 16)])];
    for i in 0..2 {
        let w = workload(&format!("low{i}"), "q", "low", "H100", 1, 8);
        f.start_on(w, "c1", Some(f.now));
    }
    f.submit(workload("urgent", "q", "high", "H100", 1, 8));
    // Capacity is free (16 of 32 GPUs); the queue's quota is what blocks.
    let out = f.cycle();
    let Decision::Preempt { victims, .. } = Fleet::decision(&out, "urgent") else {
        panic!("expected a preemption: {:?}", out.decisions);
    };
    assert_eq!(victims.len(), 1);
    // The next cycle waits for that victim instead of taking another.
    f.advance(1);
    let out = f.cycle();
    assert!(matches!(
        Fleet::decision(&out, "urgent"),
        Decision::Pending {
            reason: PendingReason::WaitingForPreemption { .. },
            ..
        }
    ));
    f.advance(600);
    let out = f.cycle();
    assert!(matches!(
        Fleet::decision(&out, "urgent"),
        Decision::Assign { .. }
    ));
    // Equal priority does not preempt within the queue.
    let mut f = fleet();
    f.queues = vec![queue("q", None, &[("H100", 8)])];
    f.start_on(
        workload("a", "q", "normal", "H100", 1, 8),
        "c1",
        Some(f.now),
    );
    f.submit(workload("b", "q", "normal", "H100", 1, 8));
    let out = f.cycle();
    assert!(matches!(
        Fleet::decision(&out, "b"),
        Decision::Pending {
            reason: PendingReason::QuotaExhausted { .. },
            ..
        }
    ));
}

#[test]
fn within_the_lead_time_the_losing_side_starts_only_what_fits_before_the_boundary() {
    let mut f = fleet();
    let boundary = f.now + chrono::Duration::minutes(10);
    let mut training = side(FleetSide::Training, 24, "night", 120);
    if let Some(h) = training.handover.as_mut() {
        h.boundary = boundary;
        h.next_guaranteed = Some(8);
        h.lead_seconds = 900;
    }
    f.overrides = vec![training, side(FleetSide::Inference, 8, "night", 120)];
    f.start_on(
        workload("running", "train", "normal", "H100", 1, 8),
        "c1",
        Some(f.now),
    );
    f.submit(with_runtime(
        workload("long", "train", "normal", "H100", 1, 8),
        7200,
    ));
    f.submit(with_runtime(
        workload("short", "train", "normal", "H100", 1, 8),
        300,
    ));
    f.submit(with_checkpoint(with_runtime(
        workload("ckpt", "train", "normal", "H100", 1, 8),
        7200,
    )));
    let out = f.cycle();
    match Fleet::decision(&out, "long") {
        Decision::Pending {
            reason:
                PendingReason::WindowClosing {
                    boundary: b,
                    estimate_seconds: 7200,
                },
            explanation,
            ..
        } if *b == boundary => assert_eq!(
            explanation.unblock,
            tideway_scheduler::explain::Unblock::WindowClosing {
                boundary,
                estimate_seconds: 7200
            }
        ),
        other => panic!("long: {other:?}"),
    }
    for uid in ["short", "ckpt"] {
        assert!(
            matches!(Fleet::decision(&out, uid), Decision::Assign { .. }),
            "{uid}: {:?}",
            out.decisions
        );
    }
}

/// A side's guarantee now and at a boundary `in_secs` from the fleet's clock, handing over
/// `handover` seconds before it.
fn side_until(
    f: &Fleet,
    side: FleetSide,
    gpus: u32,
    next: u32,
    in_secs: i64,
    handover: u64,
) -> QuotaOverride {
    let boundary = f.now + chrono::Duration::seconds(in_secs);
    QuotaOverride {
        queue: String::new(),
        side: Some(side),
        regions: Vec::new(),
        quota: FlavorQuota::guaranteed("H100", gpus),
        window: Some("night".into()),
        until: Some(boundary),
        handover: Some(Handover {
            schedule: "tide".into(),
            boundary,
            next_guaranteed: Some(next),
            lead_seconds: 0,
            grace_seconds: 120,
            reclaim_order: ReclaimOrder::LeastWorkLost,
            handover_seconds: handover,
        }),
    }
}

/// Night, training fills the fleet (32 GPUs, guarantee 24, 8 at the boundary); inference
/// (guarantee 8, 24 at the boundary) asks for 16 twenty minutes before the boundary.
fn before_the_morning(handover: u64) -> Fleet {
    let mut f = fleet();
    f.overrides = vec![
        side_until(&f, FleetSide::Training, 24, 8, 1200, handover),
        side_until(&f, FleetSide::Inference, 8, 24, 1200, handover),
    ];
    for (i, age) in [(0, 3600), (1, 600), (2, 1800), (3, 60)] {
        let w = with_checkpoint(workload(&format!("t{i}"), "train", "normal", "H100", 1, 8));
        f.start_on(w, "c1", Some(f.now - chrono::Duration::seconds(age)));
    }
    f.submit(inference("serve-a", 2));
    f
}

#[test]
fn a_handover_lead_makes_the_winning_guarantee_usable_at_the_boundary() {
    let mut f = before_the_morning(600);
    // Before the hand-over: inference is beyond its night guarantee, nothing is reclaimed
    // and nobody is asked to checkpoint yet.
    let out = f.cycle();
    assert!(
        matches!(Fleet::decision(&out, "serve-a"), Decision::Pending { .. }),
        "{:?}",
        out.decisions
    );
    assert!(out.checkpoints.is_empty(), "{:?}", out.checkpoints);
    // Nine minutes before the boundary the hand-over runs: the day guarantee governs, so
    // the victims' grace (120 s) ends well before the boundary.
    f.advance(660);
    let out = f.cycle();
    let Decision::Preempt {
        victims,
        grace_seconds,
        ..
    } = Fleet::decision(&out, "serve-a")
    else {
        panic!("expected a reclaim in the hand-over: {:?}", out.decisions);
    };
    assert_eq!(*grace_seconds, 120);
    assert_eq!(victims.len(), 2);
    // Training holds 32 and keeps 8: besides the two being reclaimed (t1 and t3, which
    // have their grace), the next in reclaim order (t2, least work lost) is asked to
    // checkpoint by the boundary and keep running; t0 stays within the coming quota.
    let noticed: Vec<&str> = out.checkpoints.iter().map(|n| n.uid.as_str()).collect();
    assert_eq!(noticed, ["t2"], "{:?}", out.checkpoints);
    assert!(out.checkpoints.iter().all(
        |n| n.deadline == f.now + chrono::Duration::seconds(540) && n.cluster.as_str() == "c1"
    ));
}

#[test]
fn without_a_handover_lead_reclaim_waits_for_the_boundary() {
    let mut f = before_the_morning(0);
    f.advance(660);
    let out = f.cycle();
    assert!(
        matches!(Fleet::decision(&out, "serve-a"), Decision::Pending { .. }),
        "{:?}",
        out.decisions
    );
    // The notice comes a grace period (120 s) before the boundary, not nine minutes.
    assert!(out.checkpoints.is_empty(), "{:?}", out.checkpoints);
    f.advance(480);
    let out = f.cycle();
    assert_eq!(out.checkpoints.len(), 3, "{:?}", out.checkpoints);
}

#[test]
fn work_that_checkpointed_since_the_handover_began_is_not_asked_again() {
    let mut f = fleet();
    f.overrides = vec![
        side_until(&f, FleetSide::Training, 24, 8, 300, 600),
        side_until(&f, FleetSide::Inference, 8, 24, 300, 600),
    ];
    // Started an hour ago; t0 and t1 checkpointed a minute ago (inside the hand-over).
    for i in 0..4 {
        let mut w = with_checkpoint(workload(&format!("t{i}"), "train", "normal", "H100", 1, 8));
        if i < 2 {
            w.spec.checkpoint.as_mut().unwrap().last_checkpoint_at =
                Some(f.now - chrono::Duration::seconds(60));
        }
        f.start_on(w, "c1", Some(f.now - chrono::Duration::seconds(3600)));
    }
    let out = f.cycle();
    // 24 GPUs must go: the two fresh checkpoints count without a notice, one more is asked.
    assert_eq!(out.checkpoints.len(), 1, "{:?}", out.checkpoints);
    assert!(["t2", "t3"].contains(&out.checkpoints[0].uid.as_str()));
}

/// Day: training (guarantee 8) fills the fleet's 32 GPUs with four 8-GPU jobs; inference
/// (guarantee 24) has nothing running.
fn morning_with_training_everywhere() -> Fleet {
    let mut f = fleet();
    f.overrides = vec![
        side(FleetSide::Training, 8, "day", 120),
        side(FleetSide::Inference, 24, "day", 120),
    ];
    for (i, age) in [(0, 3600), (1, 600), (2, 1800), (3, 60)] {
        let w = with_checkpoint(workload(&format!("t{i}"), "train", "normal", "H100", 1, 8));
        f.start_on(w, "c1", Some(f.now - chrono::Duration::seconds(age)));
    }
    f
}

fn preempts(out: &tideway_scheduler::SchedulerOutput) -> Vec<(String, Vec<String>)> {
    out.decisions
        .iter()
        .filter_map(|d| match d {
            Decision::Preempt {
                preemptor, victims, ..
            } => Some((
                preemptor.to_string(),
                victims.iter().map(|v| v.to_string()).collect(),
            )),
            _ => None,
        })
        .collect()
}

#[test]
fn several_reclaims_run_side_by_side_in_one_cluster() {
    let mut f = morning_with_training_everywhere();
    for uid in ["serve-a", "serve-b", "serve-c"] {
        f.submit(inference(uid, 1));
    }
    let out = f.cycle();
    let p = preempts(&out);
    // Each replica reclaims its own victim in the same cycle, none waits for another's
    // grace; the three victims are distinct and training keeps its guarantee of 8.
    assert_eq!(p.len(), 3, "{:?}", out.decisions);
    let mut victims: Vec<String> = p.iter().flat_map(|(_, v)| v.clone()).collect();
    victims.sort();
    victims.dedup();
    assert_eq!(
        victims,
        ["t1", "t2", "t3"],
        "least work lost first, t0 kept"
    );
    // Grace over: the three start together, nothing is reclaimed twice.
    f.advance(120);
    let out = f.cycle();
    for uid in ["serve-a", "serve-b", "serve-c"] {
        assert!(
            matches!(Fleet::decision(&out, uid), Decision::Assign { .. }),
            "{uid}: {:?}",
            out.decisions
        );
    }
    assert!(preempts(&out).is_empty(), "{:?}", out.decisions);
}

/// The no-thrash property: when the victims leave, borrowing training decided before the
/// preemptor (submitted earlier, same class) does not get the freed GPUs; the preemptor
/// starts, and nothing is reclaimed again. `carry` says whether the caller carries the
/// preemptor after its victims are gone (`SchedulerInput::preemptors`).
fn freed_slot_after_grace(carry: bool) -> (Decision, Decision, usize) {
    let mut f = morning_with_training_everywhere();
    // Plain priority order: training submitted first is decided first.
    f.settings.fair_sharing = false;
    f.submit(with_checkpoint(workload(
        "t-new", "train", "normal", "H100", 1, 8,
    )));
    f.submit(inference("serve-a", 1));
    let out = f.cycle();
    assert_eq!(preempts(&out).len(), 1, "{:?}", out.decisions);
    f.advance(60);
    f.cycle();
    f.advance(60);
    if !carry {
        f.preemptors.clear();
    }
    let out = f.cycle();
    (
        Fleet::decision(&out, "serve-a").clone(),
        Fleet::decision(&out, "t-new").clone(),
        preempts(&out).len(),
    )
}

#[test]
fn a_freed_slot_waits_for_its_preemptor_not_for_borrowing_training() {
    let (serve, train, again) = freed_slot_after_grace(true);
    assert!(matches!(serve, Decision::Assign { .. }), "{serve:?}");
    assert!(matches!(train, Decision::Pending { .. }), "{train:?}");
    assert_eq!(again, 0, "nothing reclaimed again");
    // Without the carried hold the side order alone keeps it: training beyond its side's
    // guarantee goes after the replica its side is owed, so the replica takes the freed
    // GPUs and nothing is reclaimed again (before the side order, training submitted first
    // took them and the preemptor had to reclaim a second time).
    let (serve, train, again) = freed_slot_after_grace(false);
    assert!(matches!(serve, Decision::Assign { .. }), "{serve:?}");
    assert!(matches!(train, Decision::Pending { .. }), "{train:?}");
    assert_eq!(again, 0, "{serve:?}");
}

/// Three nodes of borrowing-or-not training running, one node free, and two 8-GPU
/// workloads of the same class waiting: training submitted first, then a replica. Plain
/// FIFO (no fair share) would give the free node to the training job.
fn one_free_node_two_waiting(training_guarantee: u32) -> tideway_scheduler::SchedulerOutput {
    let mut f = fleet();
    f.settings.fair_sharing = false;
    f.overrides = vec![
        side(FleetSide::Training, training_guarantee, "day", 120),
        side(FleetSide::Inference, 24, "day", 120),
    ];
    for i in 0..3 {
        let w = with_checkpoint(workload(&format!("t{i}"), "train", "normal", "H100", 1, 8));
        f.start_on(w, "c1", Some(f.now));
    }
    f.submit(with_checkpoint(workload(
        "t-new", "train", "normal", "H100", 1, 8,
    )));
    f.submit(inference("serve-a", 1));
    f.cycle()
}

/// Issue 9's "training that is merely borrowing never blocks inference scale-up", for a
/// GPU that frees by itself: borrowing training submitted first, same class, does not take
/// the free node ahead of a replica within the inference side's guarantee; the replica
/// starts at once, without evicting anyone. Training within its own side's guarantee keeps
/// plain FIFO.
#[test]
fn borrowing_training_does_not_take_free_capacity_inference_is_owed() {
    let assigned = |out: &tideway_scheduler::SchedulerOutput, uid: &str| {
        matches!(Fleet::decision(out, uid), Decision::Assign { .. })
    };
    // Training guaranteed 8 runs 24: it borrows.
    let out = one_free_node_two_waiting(8);
    assert!(assigned(&out, "serve-a"), "{:?}", out.decisions);
    assert!(!assigned(&out, "t-new"), "{:?}", out.decisions);
    assert!(preempts(&out).is_empty(), "{:?}", out.decisions);
    // Training guaranteed 32 stays within it with t-new: FIFO, t-new first.
    let out = one_free_node_two_waiting(32);
    assert!(assigned(&out, "t-new"), "{:?}", out.decisions);
}

/// Two preemptors of one shape in one cluster, the first one's victims gone, the second
/// one's still leaving, and a replica of the same shape that holds nothing, ordered before
/// them (a requeued replica keeps its place in its queue). That replica may not take the
/// first preemptor's room, and the answer, "this shape leaves the holds no room", is
/// cached for the rest of the cycle. It must not keep the first preemptor off its own
/// room: before, it was cached on every hold checked, the first preemptor found it on the
/// second one's hold and waited another grace period (the week's morning replicas waited
/// 300 s more, some several times).
#[test]
fn a_preemptor_takes_its_room_beside_another_preemptor_still_waiting() {
    let mut f = morning_with_training_everywhere();
    f.submit(inference("serve-a", 1));
    let out = f.cycle();
    assert_eq!(preempts(&out).len(), 1, "{:?}", out.decisions);
    f.advance(60);
    f.submit(inference("serve-b", 1));
    let out = f.cycle();
    let p = preempts(&out);
    assert_eq!(p.len(), 1, "{:?}", out.decisions);
    assert_eq!(p[0].0, "serve-b");
    // serve-a's victim is gone, serve-b's leaves in 60 s.
    f.advance(60);
    f.pending.push(PendingWorkload {
        workload: inference("serve-x", 1),
        submitted_at: f.now - chrono::Duration::seconds(3600),
        seq: 0,
    });
    let out = f.cycle();
    assert!(
        matches!(Fleet::decision(&out, "serve-a"), Decision::Assign { .. }),
        "{:?}",
        out.decisions
    );
    // Nothing is reclaimed for serve-a again; serve-x reclaims its own victim.
    let p = preempts(&out);
    assert!(p.iter().all(|(who, _)| who == "serve-x"), "{p:?}");
    // serve-b's victim leaves: serve-b starts too.
    f.advance(60);
    let out = f.cycle();
    assert!(
        matches!(Fleet::decision(&out, "serve-b"), Decision::Assign { .. }),
        "{:?}",
        out.decisions
    );
}

/// Room held for a borrowing workload never keeps out what the other side is owed: a
/// training gang beyond its side's guarantee holds the one free node (its victims have
/// left), and a replica within the inference side's guarantee takes that node at once,
/// without evicting anyone for it. The gang waits.
#[test]
fn room_held_for_borrowing_training_does_not_keep_out_owed_inference() {
    let mut f = fleet();
    f.settings.preemption = true;
    f.overrides = vec![
        side(FleetSide::Training, 8, "day", 120),
        side(FleetSide::Inference, 24, "day", 120),
    ];
    for i in 0..3 {
        let w = with_checkpoint(workload(&format!("t{i}"), "train", "normal", "H100", 1, 8));
        f.start_on(w, "c1", Some(f.now));
    }
    f.submit(with_checkpoint(workload(
        "t-gang", "train", "normal", "H100", 1, 8,
    )));
    f.preemptors.push(tideway_scheduler::Reservation {
        uid: "t-gang".into(),
        cluster: "c1".into(),
        expected_start: f.now,
        created_at: f.now - chrono::Duration::seconds(120),
    });
    f.submit(inference("serve-a", 1));
    let out = f.cycle();
    assert!(
        matches!(Fleet::decision(&out, "serve-a"), Decision::Assign { .. }),
        "{:?}",
        out.decisions
    );
    assert!(
        !matches!(Fleet::decision(&out, "t-gang"), Decision::Assign { .. }),
        "{:?}",
        out.decisions
    );
    assert!(preempts(&out).is_empty(), "{:?}", out.decisions);
}
