//! Run-time estimates as the cycle uses them: how long pending work would hold what it
//! takes (backfill) and when running work is expected to end (reservation starts).

use chrono::{DateTime, Utc};

use super::cycle::{Cycle, plus_secs, secs_between};
use super::input::{QueueOrder, RunningWorkload};

impl Cycle<'_> {
    /// Pending workload `idx`'s expected run time: see [`Cycle::runtime_of`].
    pub fn pending_estimate(&self, idx: u32) -> u64 {
        self.runtime_of(&self.input.pending[idx as usize].workload)
    }

    /// A workload's expected run time: its own estimate, else its limit (it cannot run
    /// longer; Slurm plans with the time limit the same way), else the conservative default.
    pub fn runtime_of(&self, w: &tideway_api::Workload) -> u64 {
        w.spec
            .runtime_estimate_seconds
            .or(w.spec.runtime_limit_seconds)
            .unwrap_or(self.tuning.default_runtime_estimate_seconds)
    }

    /// The order key of shortest-expected-first: expected run time times GPUs; 0 (no
    /// effect) under FIFO order.
    pub fn expected_gpu_seconds(&self, w: &tideway_api::Workload) -> u64 {
        if self.tuning.order != QueueOrder::ShortestExpectedFirst {
            return 0;
        }
        let gpus = w
            .spec
            .pod_sets
            .iter()
            .fold(0u64, |a, p| a.saturating_add(p.total_gpus()));
        self.runtime_of(w).saturating_mul(gpus)
    }

    /// When running (or admitted) work is expected to end: its start plus its expected run
    /// time. Work that already ran past its estimate is expected to run as long again as it
    /// has so far (but not past its limit): the estimate was wrong, and a reservation that
    /// took "any moment now" for an answer would hold capacity idle until it really ends.
    pub fn expected_end(&self, r: &RunningWorkload) -> DateTime<Utc> {
        let runtime = self.runtime_of(&r.workload);
        let Some(started) = r.started_at else {
            return plus_secs(self.now, runtime);
        };
        let ran = secs_between(started, self.now);
        if ran < runtime {
            return plus_secs(started, runtime);
        }
        let again = plus_secs(self.now, ran.max(1));
        match r.workload.spec.runtime_limit_seconds {
            Some(limit) => again.min(plus_secs(started, limit)).max(self.now),
            None => again,
        }
    }
}
