//! `reclaimMinGpus`: only gangs of at least that size reclaim their queue's lent guarantee
//! from equal-priority borrowers. On the contended Philly replay (docs/simulator.md),
//! reclaim for every workload evicted thousands of non-checkpointing 1-GPU borrowers for
//! 1-GPU work that would have fitted into the next freed GPUs anyway; reclaim for gangs of
//! whole nodes is what gives a guarantee back.

use chrono::Duration;
use tideway_api::Preemptibility;

use crate::testkit::*;
use tideway_scheduler::SchedulerOutput;
use tideway_scheduler::decision::Decision;
use tideway_scheduler::input::PreemptionBudget;

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
