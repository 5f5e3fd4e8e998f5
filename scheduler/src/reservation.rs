//! Reservations: how a big gang stops starving behind a stream of small jobs without
//! head-of-line blocking everyone else.
//!
//! A gang that does not fit never blocks the workloads behind it. But once it has waited
//! `tuning.reservation_after_seconds` and could fit in some cluster if that cluster's
//! current work ended, it gets a reservation in ONE cluster: the one where it is expected to
//! fit soonest, judged by returning running workloads' GPUs in order of their expected end
//! (start plus runtime estimate). From then on, other work of lower priority is placed on
//! that cluster's flavors only if its own runtime estimate ends before the reservation's
//! expected start (backfill); work without an estimate is not backfilled. Capacity therefore
//! only accumulates there, and the gang starts at the latest when the work that was running
//! at reservation time has ended, a bounded wait. Reservations are carried between cycles by
//! the caller (the `Reserve` decisions of one cycle are the `reservations` of the next), and
//! keep their cluster and start so the promise does not drift.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use tideway_api::PendingReason;

use super::cycle::{Cycle, HoldKind, secs_between};
use super::decision::Decision;
use super::explain::{Explanation, Unblock};
use super::input::uid_of;
use super::routing::fit_in_pools;

impl Cycle<'_> {
    /// Reserves (or keeps reserving) a cluster for `idx`. Returns true when a `Reserve`
    /// decision was pushed.
    pub fn try_reserve(
        &mut self,
        idx: u32,
        reason: &PendingReason,
        explanation: &Explanation,
    ) -> bool {
        if let Some(&h) = self.own_hold.get(&idx)
            && self.holds[h].kind == HoldKind::Reservation
        {
            let (ci, start) = (self.holds[h].cluster, self.holds[h].expected_start);
            self.push_reserve(idx, ci, start, reason, explanation);
            return true;
        }
        let p = &self.input.pending[idx as usize];
        if secs_between(p.submitted_at, self.now) < self.tuning.reservation_after_seconds {
            return false;
        }
        let s = self.shape_of[idx as usize] as usize;
        let live = self
            .holds
            .iter()
            .filter(|h| h.active && h.kind == HoldKind::Reservation)
            .count();
        if self.shapes[s].reserve_failed || live >= self.tuning.max_reservations as usize {
            return false;
        }
        let mut best: Option<(DateTime<Utc>, u64, usize)> = None;
        for pos in 0..self.shapes[s].candidates.len() {
            let ci = self.shapes[s].candidates[pos];
            let taken = self.holds_on[ci].iter().any(|&h| {
                let hold = &self.holds[h];
                hold.active && self.shapes[s].flavors().any(|f| hold.flavors.contains(&f))
            });
            if taken || !self.fits_when_empty(ci, s) {
                continue;
            }
            let start = self.expected_start(ci, s);
            let tie = self.clusters[ci].tie;
            if best.is_none_or(|(bs, bt, _)| (start, tie) < (bs, bt)) {
                best = Some((start, tie, ci));
            }
        }
        let Some((start, _, ci)) = best else {
            self.shapes[s].reserve_failed = true;
            return false;
        };
        self.add_hold(HoldKind::Reservation, idx, ci, start);
        self.push_reserve(idx, ci, start, reason, explanation);
        true
    }

    fn push_reserve(
        &mut self,
        idx: u32,
        ci: usize,
        expected_start: DateTime<Utc>,
        reason: &PendingReason,
        explanation: &Explanation,
    ) {
        let cluster = self.clusters[ci].name.clone();
        let explanation = Explanation::with_clusters(
            Unblock::ReservationStarts {
                cluster: cluster.clone(),
                expected_start,
            },
            explanation.clusters.clone(),
        );
        self.decisions.push(Decision::Reserve {
            uid: uid_of(&self.input.pending[idx as usize].workload).to_owned(),
            cluster,
            expected_start,
            reason: reason.clone(),
            explanation: Arc::new(explanation),
        });
    }

    /// Whether every gang of the shape fits some allowed pool of `ci` once it is empty.
    fn fits_when_empty(&self, ci: usize, s: usize) -> bool {
        let shape = &self.shapes[s];
        shape.needs.iter().all(|(f, need)| {
            self.clusters[ci].pools.iter().any(|p| {
                p.flavor == self.book.flavors[*f]
                    && super::cycle::kind_bit(p.kind) & shape.kinds != 0
                    && p.fits_when_empty(need)
            })
        })
    }

    /// When the shape is expected to fit on `ci`: the end of the running workload after
    /// whose end (with all that end earlier) it fits; the last end when the conservative
    /// model never shows a fit (the cluster then is as empty as it will get).
    fn expected_start(&self, ci: usize, s: usize) -> DateTime<Utc> {
        let shape = &self.shapes[s];
        let mut ending: Vec<(DateTime<Utc>, u32)> = self.on_cluster[ci]
            .iter()
            .filter(|&&ri| {
                self.running[ri as usize]
                    .gpus
                    .iter()
                    .any(|(f, _)| shape.flavors().any(|sf| sf == *f))
            })
            .map(|&ri| (self.running[ri as usize].expected_end, ri))
            .collect();
        ending.sort_unstable();
        let Some(last) = ending.last().map(|e| e.0) else {
            return self.now;
        };
        let order: Vec<u32> = ending.iter().map(|e| e.1).collect();
        let fits = |k: usize| {
            let pools = self.pools_returning(ci, &order[..k]);
            fit_in_pools(&pools, shape, &self.book.flavors).is_some()
        };
        if !fits(order.len()) {
            return last;
        }
        let (mut lo, mut hi) = (0usize, order.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if fits(mid) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        if lo == 0 { self.now } else { ending[lo - 1].0 }
    }
}
