//! Paths and helpers shared by the simulator tests.

use std::path::PathBuf;

use tideway_simulate::{self as simulate, Options, RunOutput};

pub const PHILLY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/traces/philly/philly.csv"
);
pub const DLRM: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/traces/alibaba-dlrm-2025/disaggregated_DLRM_trace.csv"
);

/// A file under `deploy/simulate/`.
pub fn example(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/simulate")
        .join(rel)
}

/// Loads and runs a simulation the way `tideway simulate` does, without a progress bar.
pub fn simulate(clusters: PathBuf, policy: PathBuf, traces: &[String], seed: u64) -> RunOutput {
    let input = simulate::load(&Options {
        clusters,
        policy,
        traces: traces.to_vec(),
        from: None,
        to: None,
        seed,
    })
    .expect("load the simulation");
    simulate::run(input, &mut |_| {})
}

/// Writes `text` to a fresh file in `dir` and returns its path.
pub fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, text).expect("write a test file");
    p
}

/// Two runs decided alike: every job started and ended at the same instants on the same
/// cluster (the first few differences are named when not).
pub fn assert_same_starts(fit: &RunOutput, all: &RunOutput) {
    let key = |o: &RunOutput| -> Vec<_> {
        o.records
            .iter()
            .map(|r| (r.uid.clone(), r.start, r.end, r.cluster.clone()))
            .collect()
    };
    let (a, b) = (key(fit), key(all));
    assert_eq!(a.len(), b.len());
    let differ: Vec<_> = a.iter().zip(&b).filter(|(x, y)| x != y).take(5).collect();
    assert!(differ.is_empty(), "fit vs all: {differ:?}");
}
