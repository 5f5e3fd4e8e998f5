//! The two pure translations of the scheduling loop: replicated state → `SchedulerInput`, and
//! a cycle's `SchedulerOutput` → the `ApplyCycle` log entry.

use std::sync::Arc;

use chrono::{DateTime, Duration, TimeZone, Utc};
use tideway_api::agent::{LocalPhase, LocalStatus};
use tideway_api::digest::CapacityDigest;
use tideway_api::{
    MemberCluster, MemberClusterSpec, PendingReason, PodSet, TopologyLevel, Workload,
    WorkloadClass, WorkloadSpec,
};
use tideway_scheduler::{
    Decision, DomainRef, Explanation, PodCount, PoolPlacement, PreemptionCost, SchedulerOutput,
    Unblock,
};

use super::cycle::{MIN_RUNTIME_BEFORE_PREEMPTION_SECS, build_input, decisions_of};
use crate::state::FederationState;
use crate::state::command::Command;
use crate::state::scheduling::{AssignDecision, CycleDecisions, Reservation};

fn t(s: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_800_000_000 + s, 0)
        .single()
        .expect("time")
}

fn placement() -> PoolPlacement {
    PoolPlacement {
        flavor: "H100".into(),
        pool: "p0".into(),
        domain: Some(DomainRef {
            level: TopologyLevel::Rack,
            name: "r1".into(),
        }),
        pods: vec![PodCount {
            gpus_per_pod: 8,
            count: 1,
        }],
    }
}

fn submit(s: &mut FederationState, index: u64, name: &str, uid: &str, at: DateTime<Utc>) {
    let spec = WorkloadSpec::new(
        "default",
        WorkloadClass::Training,
        vec![PodSet::new("w", 1, 8, "H100")],
    );
    let mut w = Workload::new(name, spec);
    w.metadata.uid = Some(uid.into());
    s.apply(
        index,
        Command::SubmitWorkload {
            workload: Box::new(w),
            idempotency_key: name.into(),
            at,
            digest: None,
        },
    );
}

/// Member `a`; `run` assigned there by a cycle (with its placement) and running since t(5);
/// `wait` pending since t(3).
fn state() -> FederationState {
    let mut s = FederationState::default();
    s.apply(
        1,
        Command::RegisterMember {
            member: Box::new(MemberCluster::new(
                "a",
                MemberClusterSpec::new("eu", vec![]),
            )),
            agent_version: None,
            at: t(0),
            flaps: None,
        },
    );
    submit(&mut s, 2, "run", "u-run", t(1));
    s.apply(
        3,
        Command::ApplyCycle {
            decisions: Box::new(CycleDecisions {
                assign: vec![AssignDecision {
                    workload: "run".into(),
                    cluster: "a".into(),
                    pool: "p0".into(),
                    placements: vec![(&placement()).into()],
                }],
                ..Default::default()
            }),
            at: t(2),
        },
    );
    submit(&mut s, 4, "wait", "u-wait", t(3));
    s.apply(
        5,
        Command::ReportStatus {
            cluster: "a".into(),
            statuses: vec![LocalStatus {
                uid: "u-run".into(),
                attempt: 1,
                phase: LocalPhase::Running,
                since: t(5),
                nodes: Vec::new(),
            }],
        },
    );
    s
}

fn digest(at: DateTime<Utc>) -> CapacityDigest {
    CapacityDigest {
        cluster: "a".into(),
        generated_at: at,
        pools: vec![],
    }
}

#[test]
fn the_input_carries_pending_and_running_work_with_their_times() {
    let mut s = state();
    s.scheduling.evictions = vec![t(-100), t(50)];
    let now = t(60);
    let input = build_input(&s, |_| Some(digest(t(4))), now, 7);

    assert_eq!(input.now, now);
    assert_eq!(input.clusters.len(), 1);
    assert_eq!(input.clusters[0].name, "a");
    assert_eq!(input.clusters[0].region, "eu");

    assert_eq!(input.pending.len(), 1);
    let p = &input.pending[0];
    assert_eq!(p.workload.metadata.name, "wait");
    assert_eq!(p.submitted_at, t(3));

    assert_eq!(input.running.len(), 1);
    let r = &input.running[0];
    assert_eq!(r.workload.metadata.name, "run");
    assert_eq!(r.cluster, "a");
    assert_eq!(r.pool, "p0");
    assert_eq!(r.placements, vec![placement()]);
    assert_eq!(r.started_at, Some(t(5)));
    assert_eq!(
        r.preemptible_after,
        Some(t(5) + Duration::seconds(MIN_RUNTIME_BEFORE_PREEMPTION_SECS))
    );
    // The digest was taken at t(4), before the pods started at t(5): not in it yet.
    assert!(!r.accounted_in_digest);
    assert!(r.preempting_for.is_none());

    // Only the eviction inside the 60 s window counts, and the budget refills when it leaves.
    assert_eq!(input.preemption_budget.used_in_window, 1);
    assert_eq!(input.preemption_budget.refills_at, Some(t(110)));

    // A digest taken after the start accounts for the running pods.
    let later = build_input(&s, |_| Some(digest(t(6))), now, 7);
    assert!(later.running[0].accounted_in_digest);
    // No digest at all: the member is not offered to the scheduler.
    let none = build_input(&s, |_| None, now, 7);
    assert!(none.clusters.is_empty());
}

#[test]
fn a_cycles_decisions_become_the_entry_that_changes_state() {
    let mut s = state();
    s.scheduling.reservations = vec![Reservation {
        uid: "u-wait".into(),
        cluster: "a".into(),
        expected_start: t(100),
        created_at: t(10),
    }];
    let reason = PendingReason::QuotaExhausted {
        queue: "default".into(),
        flavor: "H100".into(),
        used: 8,
        limit: 8,
    };
    let explanation = Arc::new(Explanation::new(Unblock::QuotaFreed {
        queue: "default".into(),
        flavor: "H100".into(),
        gpus: 8,
    }));
    let out = SchedulerOutput {
        decisions: vec![
            Decision::Assign {
                uid: "u-wait".into(),
                cluster: "a".into(),
                pool: "p0".into(),
                placements: vec![placement()],
            },
            // An assignment for a UID the state does not know is dropped.
            Decision::Assign {
                uid: "u-gone".into(),
                cluster: "a".into(),
                pool: "p0".into(),
                placements: vec![],
            },
            Decision::Preempt {
                preemptor: "u-wait".into(),
                victims: vec!["u-run".into()],
                cluster: "a".into(),
                grace_seconds: 30,
                cost: PreemptionCost::default(),
            },
            Decision::Reserve {
                uid: "u-wait".into(),
                cluster: "a".into(),
                expected_start: t(200),
                reason: reason.clone(),
                explanation: explanation.clone(),
            },
        ],
        stats: Default::default(),
        checkpoints: Vec::new(),
    };
    let now = t(60);
    let d = decisions_of(&s, &out, now);

    assert_eq!(d.assign.len(), 1);
    assert_eq!(d.assign[0].workload, "wait");
    assert_eq!(d.assign[0].placements, vec![(&placement()).into()]);
    assert_eq!(d.preempt.len(), 1);
    assert_eq!(d.preempt[0].victims, vec![tideway_api::Uid::from("u-run")]);
    assert_eq!(d.preempt[0].grace_seconds, 30);
    // A reservation that already existed keeps its creation time.
    assert_eq!(
        d.reservations,
        vec![Reservation {
            uid: "u-wait".into(),
            cluster: "a".into(),
            expected_start: t(200),
            created_at: t(10),
        }]
    );
    // Reasons are written only when they change: the preemption's and the reservation's
    // reason both differ from the stored one (none yet).
    assert!(d.reasons.iter().all(|(name, _)| name == "wait"));
    assert!(d.reasons.iter().any(|(_, r)| *r == reason));

    // Once the reason is stored, the same decision writes no reason again.
    s.apply(
        6,
        Command::ApplyCycle {
            decisions: Box::new(CycleDecisions {
                reasons: vec![("wait".into(), reason.clone())],
                ..Default::default()
            }),
            at: t(61),
        },
    );
    let pending_only = SchedulerOutput {
        decisions: vec![Decision::Pending {
            uid: "u-wait".into(),
            reason,
            explanation,
        }],
        stats: Default::default(),
        checkpoints: Vec::new(),
    };
    let d = decisions_of(&s, &pending_only, t(62));
    assert!(d.is_empty(), "{d:?}");
    assert!(d.reservations.is_empty());
}

#[test]
fn a_preemptor_sits_out_until_the_digest_shows_its_victims_gone() {
    let mut s = state();
    s.scheduling.settling.insert(
        "u-wait".into(),
        crate::state::scheduling::Settling {
            cluster: "a".into(),
            left_at: t(10),
        },
    );
    let pending = |digest_at, now| build_input(&s, |_| Some(digest(digest_at)), now, 1).pending;
    // The digest predates the victims' exit: the capacity looks used, so no second plan.
    assert!(pending(t(4), t(20)).is_empty());
    // A digest taken after they left shows the room.
    assert_eq!(pending(t(10), t(20)).len(), 1);
    // A member that stops reporting does not hold the preemptor forever.
    let late = t(10 + crate::state::scheduling::SETTLING_LIMIT_SECS);
    assert_eq!(pending(t(4), late).len(), 1);
}

#[test]
fn the_input_carries_a_preemptor_until_it_starts_or_gives_up() {
    let mut s = state();
    s.apply(
        6,
        Command::ApplyCycle {
            decisions: Box::new(CycleDecisions {
                preempt: vec![crate::state::scheduling::PreemptDecision {
                    preemptor: "u-wait".into(),
                    cluster: "a".into(),
                    victims: vec!["u-run".into()],
                    grace_seconds: 30,
                }],
                ..Default::default()
            }),
            at: t(700),
        },
    );
    let carried =
        |s: &FederationState, now| build_input(s, |_| Some(digest(t(4))), now, 1).preemptors;
    let held = vec![tideway_scheduler::Reservation {
        uid: "u-wait".into(),
        cluster: "a".into(),
        expected_start: t(730),
        created_at: t(700),
    }];
    assert_eq!(carried(&s, t(710)), held, "while the victim leaves");
    // The victim is gone: the hold stays, so its GPUs are not taken by the next workload.
    s.apply(
        7,
        Command::ReportStatus {
            cluster: "a".into(),
            statuses: vec![LocalStatus {
                uid: "u-run".into(),
                attempt: 1,
                phase: LocalPhase::Evicted {
                    reason: "preempted".into(),
                },
                since: t(735),
                nodes: Vec::new(),
            }],
        },
    );
    assert_eq!(carried(&s, t(740)), held, "after the victim left");
    // A member not in the input (no digest) carries no hold on it.
    assert!(build_input(&s, |_| None, t(740), 1).preemptors.is_empty());
    // Given up by the cycle's clock even before a cycle entry prunes the state.
    let give_up = t(730 + tideway_scheduler::input::PREEMPTOR_HOLD_GIVE_UP_SECONDS);
    assert_eq!(s.scheduling.preemptors.len(), 1);
    assert!(carried(&s, give_up).is_empty(), "given up");
    // Assigned: it holds nothing any more.
    s.apply(
        8,
        Command::Assign {
            workload: "wait".into(),
            cluster: "a".into(),
            pool: None,
            at: t(750),
        },
    );
    assert!(carried(&s, t(750)).is_empty(), "started");
}

#[test]
fn the_input_prices_running_work_from_its_reported_checkpoint() {
    let mut s = state();
    let input = build_input(&s, |_| Some(digest(t(6))), t(60), 1);
    assert_eq!(input.running[0].last_checkpoint_at, None);
    s.apply(
        6,
        Command::ReportCheckpoints {
            cluster: "a".into(),
            checkpoints: vec![tideway_api::agent::ReportedCheckpoint {
                uid: "u-run".into(),
                attempt: 1,
                at: t(30),
            }],
        },
    );
    assert_eq!(
        s.workloads["run"].spec.checkpoint, None,
        "the submitter stated nothing: the member's report is the only source"
    );
    let input = build_input(&s, |_| Some(digest(t(6))), t(60), 1);
    assert_eq!(input.running[0].last_checkpoint_at, Some(t(30)));
}

/// The live leader schedules with the tuning of the applied policy version, not the core's
/// defaults: a knob set in `spec.scheduler.tuning` reaches the cycle's input, and a policy
/// without one gets the defaults back.
#[test]
fn the_input_carries_the_applied_policys_tuning() {
    use tideway_api::{Policy, PolicySpec};
    let mut s = state();
    let before = build_input(&s, |_| Some(digest(t(4))), t(60), 7);
    assert_eq!(
        before.settings.tuning,
        tideway_scheduler::SchedulerTuning::default()
    );

    let mut spec = PolicySpec {
        queues: vec![crate::state::bootstrap::default_queue()],
        priority_classes: crate::state::bootstrap::default_priority_classes(),
        ..Default::default()
    };
    spec.scheduler.tuning.max_assignments_per_cycle = Some(1);
    spec.scheduler.tuning.reclaim_min_gpus = Some(16);
    let put = |s: &mut FederationState, index: u64, spec: PolicySpec| {
        s.apply(
            index,
            Command::PutPolicy {
                policy: Box::new(Policy::new("fleet", spec)),
                at: t(10),
            },
        )
    };
    let r = put(&mut s, 6, spec.clone());
    assert!(
        !matches!(r, crate::state::command::CommandResult::Rejected { .. }),
        "{r:?}"
    );
    let input = build_input(&s, |_| Some(digest(t(4))), t(60), 7);
    assert_eq!(input.settings.tuning.max_assignments_per_cycle, Some(1));
    assert_eq!(input.settings.tuning.reclaim_min_gpus, Some(16));

    spec.scheduler.tuning = Default::default();
    put(&mut s, 7, spec);
    let after = build_input(&s, |_| Some(digest(t(4))), t(60), 7);
    assert_eq!(after.settings.tuning.max_assignments_per_cycle, None);
}

/// A leader decides only on a state that holds every entry that can commit before its cycle:
/// not while entries of an earlier term may be unapplied (a previous leader's cycle, which
/// commits with this term's first entry), nor while a cycle whose proposal failed may still
/// commit. Either would let two cycles admit work on states that each lack the other's
/// admissions, over a queue's quota.
#[test]
fn a_cycle_waits_for_its_terms_first_entry_and_for_a_failed_proposal() {
    use super::cycle::may_decide;
    let at = |term: u64, index: u64| {
        openraft::testing::log_id::<crate::raft::types::TypeConfig>(term, 1, index)
    };
    assert!(!may_decide(None, 1, 0), "nothing applied yet");
    assert!(
        !may_decide(Some(&at(2, 40)), 3, 0),
        "elected in term 3, still applying term 2's entries"
    );
    assert!(
        may_decide(Some(&at(3, 41)), 3, 0),
        "term 3's first entry applied"
    );
    assert!(
        !may_decide(Some(&at(3, 41)), 3, 45),
        "a failed cycle's proposal may be at 45"
    );
    assert!(may_decide(Some(&at(3, 45)), 3, 45));
    assert!(may_decide(Some(&at(3, 60)), 3, 45));
}
