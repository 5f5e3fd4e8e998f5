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

use chrono::{DateTime, Utc};

use super::cycle::{Cycle, secs_between};
use super::hash::DetMap;

/// What the rule sums over a cycle, kept so that a backlog of thousands is not walked
/// again for each of its workloads. Indexed by queue times flavors plus flavor.
#[derive(Default)]
pub struct PromiseBook {
    /// Each queue's running work (not being evicted): GPUs times seconds to its expected
    /// end, taken at the first use in the cycle.
    running: Option<Vec<u128>>,
    /// Each queue's work decided so far this cycle, admitted or left waiting: GPUs times
    /// expected run time. It is ahead of the queue's next workload.
    decided: Vec<u128>,
    /// Per (shape, cluster): the cluster's version and when the shape is expected to fit.
    starts: DetMap<(usize, usize), (u64, DateTime<Utc>)>,
}

impl Cycle<'_> {
    /// Counts workload `idx`, just decided, as work ahead of the rest of queue `q`.
    pub(super) fn count_decided(&mut self, q: usize, idx: u32) {
        let nf = self.book.flavors.len();
        if self.promise.decided.is_empty() {
            self.promise.decided = vec![0; self.book.queues.len() * nf];
        }
        let secs = u128::from(self.pending_estimate(idx));
        let s = self.shape_of[idx as usize] as usize;
        for &(f, n) in &self.shapes[s].request {
            if let Some(w) = self.promise.decided.get_mut(q * nf + f) {
                *w = w.saturating_add(u128::from(n) * secs);
            }
        }
    }

    /// Running work `ri` is being evicted: it no longer counts for its queue.
    pub(super) fn forget_running(&mut self, ri: u32) {
        let nf = self.book.flavors.len();
        let r = &self.running[ri as usize];
        let (Some(q), Some(sums)) = (r.queue, self.promise.running.as_mut()) else {
            return;
        };
        let left = u128::from(secs_between(self.now, r.expected_end));
        for &(f, n) in &r.gpus {
            if let Some(w) = sums.get_mut(q * nf + f) {
                *w = w.saturating_sub(u128::from(n) * left);
            }
        }
    }

    fn running_work(&mut self, q: usize, f: usize) -> u128 {
        let nf = self.book.flavors.len();
        let sums = self.promise.running.get_or_insert_with(|| {
            let mut sums = vec![0u128; self.book.queues.len() * nf];
            for r in self.running.iter().filter(|r| !r.terminating) {
                let Some(q) = r.queue else { continue };
                let left = u128::from(secs_between(self.now, r.expected_end));
                for &(f, n) in &r.gpus {
                    if let Some(w) = sums.get_mut(q * nf + f) {
                        *w = w.saturating_add(u128::from(n) * left);
                    }
                }
            }
            sums
        });
        sums.get(q * nf + f).copied().unwrap_or(0)
    }
    /// Whether pending `idx` of queue `q` (shape `s`) would wait longer for freed capacity
    /// than on its queue's static partition, by more than a reclaim's notice.
    pub(super) fn waits_past_partition(&mut self, q: usize, s: usize) -> bool {
        let notice = self.tuning.preemption_grace_seconds;
        let Some(shared) = self.shared_wait(s) else {
            return false;
        };
        // No wait worth a notice: nothing to compare.
        if shared <= notice {
            return false;
        }
        shared > self.partition_wait(q, s).saturating_add(notice)
    }

    /// The fluid estimate of how long the next workload of queue `q` (shape `s`) would wait
    /// on `q`'s static partition: the queue's work ahead of it, in GPU-seconds, over its
    /// guarantee, for the flavor where that is longest.
    fn partition_wait(&mut self, q: usize, s: usize) -> u64 {
        let nf = self.book.flavors.len();
        let mut worst = 0u64;
        for i in 0..self.shapes[s].request.len() {
            let f = self.shapes[s].request[i].0;
            let g = self.book.limit(q, f).map_or(0, |l| l.guaranteed);
            if g == 0 {
                return u64::MAX;
            }
            let decided = self.promise.decided.get(q * nf + f).copied().unwrap_or(0);
            let work = self.running_work(q, f).saturating_add(decided);
            worst = worst.max(u64::try_from(work / u128::from(g)).unwrap_or(u64::MAX));
        }
        worst
    }

    /// How long until a workload of shape `s` is expected to fit in one of its clusters
    /// with no reclaim, from running work's expected ends; `None` with no cluster to go to.
    fn shared_wait(&mut self, s: usize) -> Option<u64> {
        let mut best: Option<u64> = None;
        for pos in 0..self.shapes[s].candidates.len() {
            let ci = self.shapes[s].candidates[pos];
            let version = self.clusters[ci].version;
            let start = match self.promise.starts.get(&(s, ci)) {
                Some(&(v, t)) if v == version => t,
                _ => {
                    let t = self.expected_start(ci, s);
                    self.promise.starts.insert((s, ci), (version, t));
                    t
                }
            };
            let wait = secs_between(self.now, start);
            best = Some(best.map_or(wait, |b| b.min(wait)));
        }
        best
    }
}
