//! Run-time estimates as the cycle uses them: how long pending work would hold what it
//! takes (backfill) and when running work is expected to end (reservation starts).

use chrono::{DateTime, Utc};

use super::cycle::{Cycle, plus_secs, secs_between};
use super::input::RunningWorkload;

impl Cycle<'_> {
    /// Pending workload `idx`'s expected run time: its own estimate, else the conservative
    /// default.
    pub fn pending_estimate(&self, idx: u32) -> u64 {
        self.input.pending[idx as usize]
            .workload
            .spec
            .runtime_estimate_seconds
            .unwrap_or(self.tuning.default_runtime_estimate_seconds)
    }
}

impl Cycle<'_> {
    /// When running (or admitted) work is expected to end: its start plus its estimate (the
    /// conservative default without one). Work that already ran past its estimate is expected
    /// to run as long again as it has so far: the estimate was wrong, and a reservation that
    /// took "any moment now" for an answer would hold capacity idle until it really ends.
    pub fn expected_end(&self, r: &RunningWorkload) -> DateTime<Utc> {
        let runtime = r
            .workload
            .spec
            .runtime_estimate_seconds
            .unwrap_or(self.tuning.default_runtime_estimate_seconds);
        let Some(started) = r.started_at else {
            return plus_secs(self.now, runtime);
        };
        let ran = secs_between(started, self.now);
        if ran < runtime {
            plus_secs(started, runtime)
        } else {
            plus_secs(self.now, ran.max(1))
        }
    }
}
