//! The default reclaim rule: a queue's guarantee is a promise that its work waits no longer
//! than it would on its static partition (the guarantee's share of the fleet, alone), so
//! reclaim is decided by that quantity, not by a gang size fitted to one trace.
//!
//! A queue below its guarantee (with the workload admitted) reclaims lent quota for a
//! pending workload when, without reclaim, that workload would wait longer than in the
//! partition by more than the notice reclaim itself costs:
//!
//! - **the partition's wait**, a fluid estimate: the work the queue has in the system ahead
//!   of the workload (its running work's remaining GPU-seconds, what it admitted earlier in
//!   this cycle, and its waiting work decided before this one), divided by its guarantee.
//!   A partition of `G` GPUs clears work at `G` GPU-seconds per second, so a job that
//!   arrives behind that much of its own queue's work waits that long there on average.
//!   The estimate uses the same run times as everything else in the cycle (the workload's
//!   own estimate, which the leader and the simulator fill from the online estimator).
//! - **the shared wait**: when enough GPUs are expected to free up for it in one of its
//!   clusters with no reclaim, from running work's expected ends (the same walk a
//!   reservation prices its start with). It leaves out other queues' waiting work: a queue
//!   below its guarantee is ordered first by fair share, so freed GPUs go to it.
//! - **the margin**: the notice a victim that cannot checkpoint gets
//!   (`preemptionGraceSeconds`), a physical constant: a reclaiming workload starts only
//!   when it ends, so reclaim that saves less than it buys nothing.
//!
//! Why it needs no per-trace constant: both waits are in seconds of the same workload's
//! life, measured from the cycle's state. A small job of a queue with long-running work of
//! its own has a partition wait of hours and a shared wait of minutes, so it waits for
//! freed GPUs; a gang of whole nodes of an idle queue has a partition wait of zero and a
//! shared wait of hours on a fleet full of borrowers, so it reclaims. `reclaimMinGpus`
//! still overrides the rule when set (the gang-size threshold it replaced, kept as history).

use super::cycle::{Cycle, secs_between};

impl Cycle<'_> {
    /// Whether pending `idx` of queue `q` (shape `s`) would wait longer for freed capacity
    /// than on its queue's static partition, by more than a reclaim's notice.
    pub(super) fn waits_past_partition(&self, idx: u32, q: usize, s: usize) -> bool {
        let partition = self.partition_wait(idx, q, s);
        let notice = self.tuning.preemption_grace_seconds;
        let Some(shared) = self.shared_wait(s) else {
            return false;
        };
        shared > partition.saturating_add(notice)
    }

    /// The fluid estimate of how long `idx` would wait on `q`'s static partition: the
    /// queue's work ahead of it, in GPU-seconds, over its guarantee, for the flavor where
    /// that is longest.
    pub(super) fn partition_wait(&self, idx: u32, q: usize, s: usize) -> u64 {
        let mut worst = 0u64;
        for &(f, _) in &self.shapes[s].request {
            let g = self.book.limit(q, f).map_or(0, |l| l.guaranteed);
            if g == 0 {
                return u64::MAX;
            }
            let mut work: u128 = 0;
            for r in &self.running {
                if r.queue != Some(q) || r.terminating {
                    continue;
                }
                let gpus = r
                    .gpus
                    .iter()
                    .filter(|(rf, _)| *rf == f)
                    .fold(0u64, |a, (_, n)| a.saturating_add(*n));
                if gpus > 0 {
                    let left = secs_between(self.now, r.expected_end);
                    work += u128::from(gpus) * u128::from(left);
                }
            }
            if let Some(decided) = self.decided.get(q) {
                for &other in decided {
                    if other == idx {
                        continue;
                    }
                    let os = self.shape_of[other as usize] as usize;
                    let gpus = self.shapes[os]
                        .request
                        .iter()
                        .filter(|(rf, _)| *rf == f)
                        .fold(0u64, |a, (_, n)| a.saturating_add(*n));
                    if gpus > 0 {
                        work += u128::from(gpus) * u128::from(self.pending_estimate(other));
                    }
                }
            }
            let wait = u64::try_from(work / u128::from(g)).unwrap_or(u64::MAX);
            worst = worst.max(wait);
        }
        worst
    }

    /// How long until a workload of shape `s` is expected to fit in one of its clusters with no
    /// reclaim, from running work's expected ends; `None` with no cluster to go to.
    pub(super) fn shared_wait(&self, s: usize) -> Option<u64> {
        self.shapes[s]
            .candidates
            .iter()
            .map(|&ci| secs_between(self.now, self.expected_start(ci, s)))
            .min()
    }
}
