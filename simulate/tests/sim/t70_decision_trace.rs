//! The decision trace of a small contended replay is pinned: every job's start, end,
//! cluster, preemptions and pending reasons, for the core's default tuning with guarantee
//! reclaim on (`contended/policy-fair-reclaim-all.yaml`: fair share, reclaim for every
//! workload below its guarantee, no reservations, the online estimator) on a day of Philly
//! on 16 nodes. (The contended default, `policy-fair.yaml`, reclaims only for gangs of 12
//! GPUs or more, which this day on 16 nodes never does.) A change that is
//! meant only to make the simulator or the core faster must leave this file as it is; a
//! change meant to alter decisions regenerates it on purpose with
//! `TIDEWAY_BLESS=1 cargo test -p tideway-simulate --test sim t70` and says so in its commit.

use std::fmt::Write as _;
use std::path::PathBuf;

use crate::common::*;

fn golden() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/sim/golden/decisions-contended-day.txt")
}

#[test]
fn contended_day_decides_as_pinned() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clusters = write(
        &dir,
        "clusters.yaml",
        "clusters:\n  - name: philly\n    region: philly\n    uniform: { nodes: 16, nodesPerRack: 4, gpusPerNode: 8, model: P100 }\n",
    );
    let policy = example("contended/policy-fair-reclaim-all.yaml");
    let trace = format!("philly:{PHILLY}?from=2017-10-09&to=2017-10-10");
    let out = simulate(clusters, policy, std::slice::from_ref(&trace), 0);

    // The scenario exercises what the trace pins: waiting, guarantee reclaim, learned
    // estimates.
    assert!(
        out.summary.overall.queueing_delay.mean > 600.0,
        "{:?}",
        out.summary.overall.queueing_delay
    );
    assert!(
        out.summary.overall.preemptions > 0,
        "no guarantee was reclaimed"
    );
    let est = out.summary.estimates.as_ref().expect("estimate summary");
    assert!(
        est.estimated > 0,
        "no job was dispatched with a learned estimate"
    );

    let mut got = String::new();
    for r in &out.records {
        let opt = |v: Option<i64>| v.map_or_else(|| "-".to_owned(), |x| x.to_string());
        writeln!(
            got,
            "{} {} {} {} {} {} {:?}",
            r.uid,
            opt(r.start),
            opt(r.end),
            r.cluster.as_deref().unwrap_or("-"),
            r.preemptions,
            r.reasons_seen,
            r.outcome
        )
        .expect("write to a string");
    }
    if std::env::var_os("TIDEWAY_BLESS").is_some() {
        std::fs::create_dir_all(golden().parent().expect("parent")).expect("mkdir");
        std::fs::write(golden(), &got).expect("write the golden trace");
        return;
    }
    let want = std::fs::read_to_string(golden()).expect("read the golden trace");
    let differ: Vec<(&str, &str)> = want
        .lines()
        .zip(got.lines())
        .filter(|(a, b)| a != b)
        .take(5)
        .collect();
    assert!(
        differ.is_empty() && want.lines().count() == got.lines().count(),
        "decisions changed ({} jobs pinned, {} now); first differences (pinned, now): {differ:#?}",
        want.lines().count(),
        got.lines().count()
    );
}
