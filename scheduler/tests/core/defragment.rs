//! Defragmentation (`defragmentMinGpus`): a gang that fits nowhere while its cluster has
//! enough GPUs free in scattered holes moves smaller checkpointing work off a node, when
//! that work fits again in the holes at once; and in no other case.

use chrono::Duration;
use tideway_api::Preemptibility;

use crate::testkit::*;
use tideway_scheduler::SchedulerOutput;
use tideway_scheduler::decision::Decision;
use tideway_scheduler::input::PreemptionBudget;

/// `nodes` nodes of 8 GPUs, each filled with 1-GPU jobs of queue `q` started 300 s ago;
/// `holes[n]` of node `n`'s jobs then finish, and an 8-GPU job of the same queue and
/// priority arrives. With `checkpoint`, the 1-GPU jobs checkpoint.
fn holed_fleet(nodes: usize, holes: &[usize], checkpoint: bool) -> Fleet {
    let mut f = Fleet::new(
        vec![cluster("c1", "eu", "H100", 1, nodes, 8)],
        vec![queue("q", None, &[("H100", 1_000)])],
        vec![class("normal", 100, Preemptibility::Allowed, None)],
    );
    f.settings.preemption = true;
    f.budget = PreemptionBudget::per_minute(100);
    let started = f.now - Duration::seconds(300);
    for n in 0..nodes {
        for j in 0..8 {
            let uid = format!("n{n}j{j}");
            let mut w = workload(&uid, "q", "normal", "H100", 1, 1);
            if checkpoint {
                w = with_checkpoint(w);
            }
            if j < holes.get(n).copied().unwrap_or(0) {
                f.true_runtime.insert(uid.clone(), 330);
            }
            f.start_on(w, "c1", Some(started));
        }
    }
    f.advance(60);
    f.submit(workload("gang", "q", "normal", "H100", 1, 8));
    f
}

fn victims_of(out: &SchedulerOutput, uid: &str) -> Option<Vec<String>> {
    out.decisions.iter().find_map(|d| match d {
        Decision::Preempt {
            preemptor, victims, ..
        } if preemptor.as_str() == uid => {
            let mut v: Vec<String> = victims.iter().map(|v| v.as_str().to_owned()).collect();
            v.sort();
            Some(v)
        }
        _ => None,
    })
}

fn running(f: &Fleet) -> Vec<String> {
    let mut r: Vec<String> = f
        .running
        .iter()
        .map(|r| r.rw.workload.metadata.name.clone())
        .collect();
    r.sort();
    r
}

#[test]
fn a_gang_moves_small_checkpointing_work_into_the_holes_and_starts() {
    // Three nodes: 4, 2 and 2 GPUs free. The gang of 8 fits on none.
    let mut f = holed_fleet(3, &[4, 2, 2], true);
    let out = f.cycle();
    assert!(
        matches!(Fleet::decision(&out, "gang"), Decision::Pending { .. }),
        "off by default: {:?}",
        Fleet::decision(&out, "gang")
    );
    assert_eq!(out.stats.defragmentations, 0);

    f.tuning.defragment_min_gpus = Some(8);
    let out = f.cycle();
    // The node with 4 free is the cheapest to empty: its 4 remaining jobs move.
    assert_eq!(
        victims_of(&out, "gang"),
        Some(vec![
            "n0j4".to_owned(),
            "n0j5".to_owned(),
            "n0j6".to_owned(),
            "n0j7".to_owned()
        ]),
        "{:?}",
        out.decisions
    );
    assert_eq!(out.stats.defragmentations, 1);
    let before = running(&f).len();
    // After the notice the victims are back in the queue; one cycle places the gang on the
    // emptied node and the victims in the four holes.
    f.advance(300);
    let out = f.cycle();
    assert!(
        matches!(Fleet::decision(&out, "gang"), Decision::Assign { .. }),
        "{:?}",
        out.decisions
    );
    for v in ["n0j4", "n0j5", "n0j6", "n0j7"] {
        assert!(
            matches!(Fleet::decision(&out, v), Decision::Assign { .. }),
            "{v}: {:?}",
            Fleet::decision(&out, v)
        );
    }
    assert!(f.pending.is_empty(), "{:?}", f.pending);
    // Nothing stopped for good: every job that ran still runs, and the gang with them.
    assert_eq!(running(&f).len(), before + 1);
}

#[test]
fn work_that_cannot_checkpoint_is_not_moved() {
    let mut f = holed_fleet(3, &[4, 2, 2], false);
    f.tuning.defragment_min_gpus = Some(8);
    let out = f.cycle();
    assert_eq!(victims_of(&out, "gang"), None, "{:?}", out.decisions);
    assert_eq!(out.stats.defragmentations, 0);
}

#[test]
fn no_move_when_the_holes_would_not_take_the_victims_back() {
    // 7 GPUs free in all: moving any node's jobs would leave one of them without a place.
    let mut f = holed_fleet(3, &[3, 2, 2], true);
    f.tuning.defragment_min_gpus = Some(8);
    let out = f.cycle();
    assert_eq!(victims_of(&out, "gang"), None, "{:?}", out.decisions);
}

#[test]
fn no_move_for_gangs_below_the_minimum_or_work_that_would_lose_too_much() {
    let mut f = holed_fleet(3, &[4, 2, 2], true);
    f.tuning.defragment_min_gpus = Some(16);
    let out = f.cycle();
    assert_eq!(victims_of(&out, "gang"), None, "{:?}", out.decisions);

    // The jobs last checkpointed (started) 360 s ago.
    let mut f = holed_fleet(3, &[4, 2, 2], true);
    f.tuning.defragment_min_gpus = Some(8);
    f.tuning.defragment_max_work_lost_seconds = 300;
    let out = f.cycle();
    assert_eq!(victims_of(&out, "gang"), None, "{:?}", out.decisions);
}

#[test]
fn a_single_larger_victim_is_not_moved_into_smaller_holes() {
    // Node 0: one 4-GPU job and 4 free; nodes 1-4: one hole each. 8 GPUs are free, but the
    // 4-GPU job would find no node with 4 free once the gang has node 0.
    let mut f = Fleet::new(
        vec![cluster("c1", "eu", "H100", 1, 5, 8)],
        vec![queue("q", None, &[("H100", 1_000)])],
        vec![class("normal", 100, Preemptibility::Allowed, None)],
    );
    f.settings.preemption = true;
    f.budget = PreemptionBudget::per_minute(100);
    f.tuning.defragment_min_gpus = Some(8);
    let started = f.now - Duration::seconds(300);
    f.start_on(
        with_checkpoint(workload("big", "q", "normal", "H100", 1, 4)),
        "c1",
        Some(started),
    );
    f.start_on(
        with_checkpoint(workload("fill0", "q", "normal", "H100", 1, 4)),
        "c1",
        Some(started),
    );
    f.true_runtime.insert("fill0".into(), 330);
    for n in 1..5 {
        for j in 0..8 {
            let uid = format!("n{n}j{j}");
            if j == 0 {
                f.true_runtime.insert(uid.clone(), 330);
            }
            f.start_on(
                with_checkpoint(workload(&uid, "q", "normal", "H100", 1, 1)),
                "c1",
                Some(started),
            );
        }
    }
    f.advance(60);
    f.submit(workload("gang", "q", "normal", "H100", 1, 8));
    let out = f.cycle();
    assert_eq!(victims_of(&out, "gang"), None, "{:?}", out.decisions);
}
