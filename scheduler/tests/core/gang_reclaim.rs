//! The tuning of guarantee reclaim and of the gangs' reservations, one test per key:
//! `reclaimMinGpus` (only gangs of at least that size reclaim their queue's lent guarantee
//! from equal-priority borrowers), `reclaimMaxWorkLostSeconds` and `reclaimLossPerWait`
//! (how much work a reclaim victim may lose), `nodesByWorkLost` (which nodes reclaim
//! empties) and `reservationWithinGuarantee`. docs/simulator.md's contended section shows
//! what the reclaim keys did on two months of Philly.

use chrono::Duration;
use tideway_api::Preemptibility;

use crate::testkit::*;
use tideway_scheduler::SchedulerOutput;
use tideway_scheduler::decision::Decision;
use tideway_scheduler::input::{PreemptionBudget, SchedulerTuning};

/// Queue `a` (32 GPUs guaranteed) lent all of it to `b`, whose 1-GPU jobs fill the eight
/// nodes; `a` then submits a 1-GPU job and a 4-node gang, in that order.
fn lent_fleet(reclaim_min_gpus: Option<u64>) -> Fleet {
    let mut f = Fleet::new(
        vec![cluster("c1", "eu", "H100", 1, 8, 8)],
        vec![
            queue("a", Some("c"), &[("H100", 32)]),
            queue("b", Some("c"), &[("H100", 32)]),
        ],
        vec![class("normal", 100, Preemptibility::Allowed, None)],
    );
    f.settings.preemption = true;
    f.budget = PreemptionBudget::per_minute(10);
    f.tuning.reclaim_min_gpus = reclaim_min_gpus;
    for i in 0..64i64 {
        let started = f.now - Duration::seconds(((i % 8) * 8 + i / 8 + 1) * 600);
        f.start_on(
            workload(&format!("b{i}"), "b", "normal", "H100", 1, 1),
            "c1",
            Some(started),
        );
    }
    f.submit(workload("small", "a", "normal", "H100", 1, 1));
    f.submit(workload("gang", "a", "normal", "H100", 4, 8));
    f
}

fn preempted_for(out: &SchedulerOutput, uid: &str) -> Option<usize> {
    out.decisions.iter().find_map(|d| match d {
        Decision::Preempt {
            preemptor, victims, ..
        } if preemptor.as_str() == uid => Some(victims.len()),
        _ => None,
    })
}

#[test]
fn only_gangs_of_at_least_the_minimum_reclaim_lent_guarantee() {
    // Unset (every workload reclaims): the 1-GPU job evicts a borrower, and the gang's plan
    // of 32 victims no longer fits what is left of the window's budget.
    let mut f = lent_fleet(None);
    let out = f.cycle();
    assert_eq!(preempted_for(&out, "small"), Some(1), "{:?}", out.decisions);
    assert_eq!(preempted_for(&out, "gang"), None, "{:?}", out.decisions);

    // One node's GPUs: the 1-GPU job waits its turn, the gang reclaims four whole nodes
    // (a whole window's budget, nothing else evicted in it) and starts within a few cycles.
    let mut f = lent_fleet(Some(8));
    let mut started = None;
    for c in 0..6 {
        let out = f.cycle();
        assert_eq!(
            preempted_for(&out, "small"),
            None,
            "cycle {c}: {:?}",
            out.decisions
        );
        if c == 0 {
            assert_eq!(preempted_for(&out, "gang"), Some(32), "{:?}", out.decisions);
        }
        if matches!(Fleet::decision(&out, "gang"), Decision::Assign { .. }) {
            started = Some(c);
            break;
        }
        f.advance(60);
    }
    let started = started.expect("the gang started");
    assert!(started <= 2, "the gang started at cycle {started}");
}

/// `reclaimMaxWorkLostSeconds`: reclaim evicts only borrowers that would lose at most that
/// much work. Every node here holds a borrower older than 3,000 s, so the gang finds no
/// whole node to empty within that bound and waits; with a bound above the oldest
/// borrower's age it reclaims as without one.
#[test]
fn reclaim_spares_borrowers_that_would_lose_more_than_the_bound() {
    let mut f = lent_fleet(Some(8));
    f.tuning.reclaim_max_work_lost_seconds = Some(3_000);
    let out = f.cycle();
    assert_eq!(preempted_for(&out, "gang"), None, "{:?}", out.decisions);
    assert!(
        !out.decisions
            .iter()
            .any(|d| matches!(d, Decision::Preempt { .. })),
        "{:?}",
        out.decisions
    );

    let mut f = lent_fleet(Some(8));
    f.tuning.reclaim_max_work_lost_seconds = Some(64 * 600);
    let out = f.cycle();
    assert_eq!(preempted_for(&out, "gang"), Some(32), "{:?}", out.decisions);
}

/// `reclaimLossPerWait`: a borrower may lose at most that many times as long as the
/// reclaiming gang has waited. Just submitted, the gang may cost nobody any work and waits;
/// having waited longer than the oldest borrower has run, it reclaims four whole nodes.
#[test]
fn reclaim_costs_borrowers_no_more_work_than_the_gang_waited() {
    let mut f = lent_fleet(Some(8));
    f.tuning.reclaim_loss_per_wait = Some(1.0);
    let out = f.cycle();
    assert_eq!(preempted_for(&out, "gang"), None, "{:?}", out.decisions);

    let mut f = lent_fleet(Some(8));
    f.tuning.reclaim_loss_per_wait = Some(1.0);
    let waited = f.now - Duration::seconds(64 * 600 + 60);
    for p in f
        .pending
        .iter_mut()
        .filter(|p| p.workload.metadata.uid.as_deref() == Some("gang"))
    {
        p.submitted_at = waited;
    }
    let out = f.cycle();
    assert_eq!(preempted_for(&out, "gang"), Some(32), "{:?}", out.decisions);
}

/// `nodesByWorkLost` (on by default): to free a node, reclaim empties the node whose
/// victims lose the least work, not the one with the fewest victims. Queue `b` borrows
/// `a`'s 8 GPUs with a 10-hour job on one node and three jobs started 10 minutes ago on the
/// other; `a`'s 8-GPU job evicts the three (80 GPU-hours would be lost with the one).
#[test]
fn reclaim_empties_the_node_that_loses_least_work() {
    let run = |by_loss: bool| {
        let mut f = Fleet::new(
            vec![cluster("c1", "eu", "H100", 1, 2, 8)],
            vec![
                queue("a", Some("c"), &[("H100", 8)]),
                queue("b", Some("c"), &[("H100", 8)]),
            ],
            vec![class("normal", 100, Preemptibility::Allowed, None)],
        );
        f.settings.preemption = true;
        f.tuning.nodes_by_work_lost = by_loss;
        let long_ago = f.now - Duration::seconds(36_000);
        let lately = f.now - Duration::seconds(600);
        f.start_on(
            workload("long", "b", "normal", "H100", 1, 8),
            "c1",
            Some(long_ago),
        );
        for (uid, gpus) in [("s4", 4), ("s2a", 2), ("s2b", 2)] {
            f.start_on(
                workload(uid, "b", "normal", "H100", 1, gpus),
                "c1",
                Some(lately),
            );
        }
        f.submit(workload("node", "a", "normal", "H100", 1, 8));
        let out = f.cycle();
        let mut victims = out
            .decisions
            .iter()
            .find_map(|d| match d {
                Decision::Preempt {
                    preemptor, victims, ..
                } if preemptor.as_str() == "node" => Some(
                    victims
                        .iter()
                        .map(|v| v.as_str().to_owned())
                        .collect::<Vec<_>>(),
                ),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no reclaim: {:?}", out.decisions));
        victims.sort();
        victims
    };
    assert_eq!(run(true), ["s2a", "s2b", "s4"]);
    assert!(SchedulerTuning::default().nodes_by_work_lost);
    // Fewest victims first: the one long job.
    assert_eq!(run(false), ["long"]);
}

/// `reservationWithinGuarantee`: only a gang whose queue stays within its guarantee with it
/// gets a reservation. Queue `a` (8 GPUs guaranteed) waits with a 16-GPU gang that would
/// borrow from the idle queue's guarantee, on a cluster `b` fills but for one node; off, it
/// reserves (nobody else waits, so the hold costs nothing); on, it does not.
#[test]
fn reservations_only_within_the_guarantee_when_asked() {
    let run = |within: bool| {
        let mut f = Fleet::new(
            vec![cluster("c1", "eu", "H100", 1, 4, 8)],
            vec![
                queue("a", Some("c"), &[("H100", 8)]),
                queue("b", Some("c"), &[("H100", 24)]),
                queue("idle", Some("c"), &[("H100", 16)]),
            ],
            vec![class("normal", 100, Preemptibility::Allowed, None)],
        );
        f.tuning.reservation_after_seconds = 0;
        f.tuning.reservation_within_guarantee = within;
        for i in 0..3 {
            let w = with_runtime(
                workload(&format!("b{i}"), "b", "normal", "H100", 1, 8),
                3600,
            );
            f.start_on(w, "c1", Some(f.now));
        }
        f.submit(workload("gang", "a", "normal", "H100", 2, 8));
        let out = f.cycle();
        let d = Fleet::decision(&out, "gang");
        (matches!(d, Decision::Reserve { .. }), format!("{d:?}"))
    };
    let (reserved, d) = run(false);
    assert!(
        reserved,
        "reserves when not asked to stay within the guarantee: {d}"
    );
    let (reserved, d) = run(true);
    assert!(
        !reserved,
        "a gang that would borrow gets no reservation: {d}"
    );
}
