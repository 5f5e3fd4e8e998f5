//! The pending view of a static partition: each VC's queue is pinned to its own cluster
//! (`queueClusters`), so free GPUs in another VC's cluster cannot start its backlog. The
//! simulator bounds what it shows the core per queue by the clusters that queue may use,
//! and counts what it leaves out among those waiting when a reservation is priced; the
//! decisions must be those of a cycle over all pending work (`pendingView: all`, the live
//! leader's view).

use crate::common::*;

#[test]
fn pinned_queues_decide_as_with_the_full_view() {
    let dir = tempfile::tempdir().expect("tempdir");
    let base = std::fs::read_to_string(example("contended/policy-partition.yaml"))
        .expect("read the partition policy");
    // A busy day: several VCs build backlogs on their own nodes while others idle.
    let trace = format!("philly:{PHILLY}?from=2017-10-16&to=2017-10-17");
    let run = |view: &str| {
        let text = base.replace(
            "simulator:\n  mode: scheduler",
            &format!("simulator:\n  mode: scheduler\n  pendingView: {view}"),
        );
        assert_ne!(
            text, base,
            "the policy has the simulator section this test edits"
        );
        let p = write(&dir, &format!("policy-{view}.yaml"), &text);
        simulate(
            example("contended/clusters-partition.yaml"),
            p,
            std::slice::from_ref(&trace),
            0,
        )
    };
    let (fit, all) = (run("fit"), run("all"));
    assert_same_starts(&fit, &all);
    assert_eq!(fit.summary.run.reservations, all.summary.run.reservations);
    // The scenario is contended: work waited on its own VC's nodes.
    assert!(
        fit.summary.overall.queueing_delay.mean > 600.0,
        "{:?}",
        fit.summary.overall.queueing_delay
    );
    // Backlogs that could not start were not shown cycle after cycle: the fit view needed
    // no more cycles than the full one.
    assert!(
        fit.summary.run.scheduler_cycles <= all.summary.run.scheduler_cycles,
        "fit {} cycles, all {}",
        fit.summary.run.scheduler_cycles,
        all.summary.run.scheduler_cycles
    );
}
