//! The simulator shows the core only the pending work whose decision could change
//! (`pendingView: fit`); the live leader shows it all. Same decisions either way: every job
//! starts at the same instant on the same cluster, on a contended fleet with fair share,
//! borrowing and reservations.

use crate::common::*;

/// Philly's jobs of a day on a seventh of its fleet, so a backlog builds and gangs wait
/// long enough for reservations.
#[test]
fn fit_view_decides_as_the_full_view() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clusters = write(
        &dir,
        "clusters.yaml",
        "clusters:\n  - name: philly\n    region: philly\n    uniform: { nodes: 16, nodesPerRack: 8, gpusPerNode: 8, model: P100 }\n",
    );
    let base = std::fs::read_to_string(example("philly-shared/policy-fair.yaml"))
        .expect("read the example policy");
    let trace = format!("philly:{PHILLY}?from=2017-10-09&to=2017-10-10");
    let run = |view: &str| {
        let text = base.replace(
            "simulator:\n  mode: scheduler\n  tuning: { maxReservations: 16 }",
            &format!(
                "simulator:\n  mode: scheduler\n  pendingView: {view}\n  tuning: {{ maxReservations: 16, reservationAfterSeconds: 600 }}"
            ),
        );
        assert_ne!(
            text, base,
            "the policy has the simulator section this test edits"
        );
        let p = write(&dir, &format!("policy-{view}.yaml"), &text);
        simulate(clusters.clone(), p, std::slice::from_ref(&trace), 1)
    };
    let (fit, all) = (run("fit"), run("all"));
    assert_same_starts(&fit, &all);
    // The scenario is contended (work waited) and exercised reservations.
    assert!(
        fit.summary.overall.queueing_delay.mean > 600.0,
        "{:?}",
        fit.summary.overall.queueing_delay
    );
    assert!(fit.summary.run.reservations > 0, "no reservation was made");
    assert_eq!(fit.summary.run.reservations, all.summary.run.reservations);
    // The guarantees (Philly's 2,816 GPUs) exceed this fleet: said, not silently accepted.
    assert!(
        fit.summary
            .warnings
            .iter()
            .any(|w| w.contains("over-committed") && w.contains("128")),
        "{:?}",
        fit.summary.warnings
    );
}
