//! A rollout scoped to clusters restricts placement: the scoped queues' new work goes only
//! to those clusters (assignment and preemption alike), the other queues' work anywhere.

use tideway_api::{PendingReason, Preemptibility};

use crate::testkit::*;
use tideway_scheduler::decision::Decision;
use tideway_scheduler::explain::Verdict;
use tideway_scheduler::rollout::RolloutPlacement;
use tideway_scheduler::{SchedulerOutput, schedule};

fn fleet() -> Fleet {
    Fleet::new(
        vec![
            cluster("a", "eu", "H100", 1, 2, 8),
            cluster("b", "eu", "H100", 1, 2, 8),
        ],
        vec![
            queue("serving", None, &[("H100", 1000)]),
            queue("batch", None, &[("H100", 1000)]),
        ],
        vec![
            class("low", 10, Preemptibility::Allowed, None),
            class("high", 1000, Preemptibility::Allowed, None),
        ],
    )
}

fn canary_on_b() -> Option<RolloutPlacement> {
    Some(RolloutPlacement {
        version: 2,
        queues: vec!["serving".into()],
        clusters: vec!["b".into()],
    })
}

/// One cycle with `rollout` in the input, applied to the fleet.
fn cycle(f: &mut Fleet, rollout: Option<RolloutPlacement>) -> SchedulerOutput {
    let mut input = f.input();
    input.rollout = rollout;
    let out = schedule(&input);
    f.apply(&out);
    out
}

fn assigned_to(out: &SchedulerOutput, uid: &str) -> Option<String> {
    match Fleet::decision(out, uid) {
        Decision::Assign { cluster, .. } => Some(cluster.to_string()),
        _ => None,
    }
}

#[test]
fn scoped_work_lands_only_on_the_scoped_clusters_and_other_work_anywhere() {
    let mut f = fleet();
    for i in 0..3 {
        f.submit(workload(&format!("s{i}"), "serving", "low", "H100", 1, 8));
    }
    let out = cycle(&mut f, canary_on_b());
    // b has two nodes: two serving jobs there, the third waits although a is empty.
    assert_eq!(
        assigned_to(&out, "s0").as_deref(),
        Some("b"),
        "{:?}",
        out.decisions
    );
    assert_eq!(
        assigned_to(&out, "s1").as_deref(),
        Some("b"),
        "{:?}",
        out.decisions
    );
    assert_eq!(assigned_to(&out, "s2"), None, "{:?}", out.decisions);
    // Work of a queue out of scope goes anywhere: four batch jobs need both clusters.
    let mut g = fleet();
    for i in 0..4 {
        g.submit(workload(&format!("b{i}"), "batch", "low", "H100", 1, 8));
    }
    let out_b = cycle(&mut g, canary_on_b());
    let mut where_: Vec<String> = (0..4)
        .filter_map(|i| assigned_to(&out_b, &format!("b{i}")))
        .collect();
    where_.sort();
    assert_eq!(where_, ["a", "a", "b", "b"], "{:?}", out_b.decisions);
    // The waiting one says why a was not a candidate.
    let Decision::Pending {
        reason,
        explanation,
        ..
    } = Fleet::decision(&out, "s2")
    else {
        panic!("s2 not pending: {:?}", Fleet::decision(&out, "s2"));
    };
    assert!(
        !matches!(reason, PendingReason::NoMatchingCluster { .. }),
        "b matches, it is only full: {reason:?}"
    );
    let a = explanation
        .clusters
        .iter()
        .find(|c| c.cluster == "a")
        .unwrap_or_else(|| panic!("no verdict for a: {explanation:?}"));
    assert_eq!(
        a.verdict,
        Verdict::PlacementExcluded {
            constraint: "cluster in [b] while policy version 2 is rolled out".into()
        }
    );
}

#[test]
fn a_scope_on_full_clusters_reports_the_rollout_and_widening_lifts_it() {
    let mut f = fleet();
    f.clusters.retain(|c| c.name == "a");
    f.submit(workload("s0", "serving", "low", "H100", 1, 8));
    let out = cycle(&mut f, canary_on_b());
    let reason = Fleet::decision(&out, "s0").pending_reason();
    let Some(PendingReason::NoMatchingCluster { constraint, .. }) = reason else {
        panic!("{reason:?}");
    };
    assert!(
        constraint.contains("cluster in [b] while policy version 2 is rolled out"),
        "{constraint}"
    );
    // Widened (no rollout in the input): the same work goes where it fits.
    let out = cycle(&mut f, None);
    assert_eq!(assigned_to(&out, "s0").as_deref(), Some("a"));
}

#[test]
fn scoped_work_preempts_only_on_the_scoped_clusters() {
    let mut f = fleet();
    // Both clusters full of the same low work of the queue (a queue preempts its own lower
    // priorities): only the scope decides where the victims are.
    for (uid, c) in [("va0", "a"), ("va1", "a"), ("vb0", "b"), ("vb1", "b")] {
        f.start_on(
            workload(uid, "serving", "low", "H100", 1, 8),
            c,
            Some(f.now),
        );
    }
    f.submit(workload("s0", "serving", "high", "H100", 1, 8));
    let out = cycle(&mut f, canary_on_b());
    let victims: Vec<(String, Vec<String>)> = out
        .decisions
        .iter()
        .filter_map(|d| match d {
            Decision::Preempt {
                cluster, victims, ..
            } => Some((
                cluster.to_string(),
                victims.iter().map(ToString::to_string).collect(),
            )),
            _ => None,
        })
        .collect();
    assert_eq!(victims.len(), 1, "{:?}", out.decisions);
    assert_eq!(victims[0].0, "b", "{victims:?}");
    assert!(
        victims[0].1.iter().all(|v| v.starts_with("vb")),
        "{victims:?}"
    );
}
