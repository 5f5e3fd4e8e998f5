//! Paths and helpers shared by the simulator tests.

use std::path::PathBuf;

pub const PHILLY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../shared/traces/philly/philly.csv"
);

/// A file under `deploy/simulate/`.
pub fn example(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("deploy/simulate")
        .join(rel)
}

/// Writes `text` to a fresh file in `dir` and returns its path.
pub fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, text).expect("write a test file");
    p
}
