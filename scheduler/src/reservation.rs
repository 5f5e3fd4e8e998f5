//! Reservations: how a big gang stops starving behind a stream of small jobs without
//! stalling everyone else.
//!
//! A gang that does not fit never blocks the workloads behind it. A reservation is a hold
//! on ONE cluster that makes freed capacity accumulate for the gang, and it is given only
//! where it helps and cannot do much harm:
//! - only to gangs that need at least `tuning.reservation_min_gpus` GPUs of one flavor (by
//!   default one node's worth): smaller work fits into any freed GPUs and only waits its
//!   turn, whereas whole-node gangs are starved by small jobs refilling every freed GPU;
//! - only after the gang waited `tuning.reservation_after_seconds`, at most
//!   `tuning.max_reservations` fleet-wide and `tuning.max_reservations_per_cluster` per
//!   cluster (never two on one cluster's flavor);
//! - only when the waiting it causes is less than the waiting it saves, the gang's further
//!   starvation taken to be as long again as it already waited: its expected start is no
//!   further ahead than that (a gang facing long or unknown running work gets its
//!   reservation late instead of idling a cluster for hours), and the capacity it is
//!   expected to keep idle until then, as the fraction of the cluster it stops times the
//!   others waiting, is no more than that either (`tuning.reservation_idle_factor`). A
//!   carried reservation keeps its price while its start is ahead (the queue it makes is
//!   not held against it); one whose start passed (the work it waited for overran) is
//!   priced anew and dropped when it no longer pays.
//!
//! The cluster chosen is the one where the gang is expected to fit soonest, judged by
//! returning running workloads' GPUs in order of their expected end. Others of lower
//! priority still go there when they are backfill (EASY style): work whose estimate (its own,
//! or the conservative default) ends before the reservation's start, or work that, placed
//! where it would go, leaves the gang room to fit at its start with the work expected to have
//! ended by then. Work without an estimate is therefore not refused, only kept off the
//! capacity the gang counts on. Reservations are carried between cycles by the caller (the
//! `Reserve` decisions of one cycle are the `reservations` of the next) and keep their
//! cluster and start so the promise does not drift while it is kept.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use tideway_api::PendingReason;

use super::cycle::{ClusterFit, Cycle, HoldKind, secs_between};
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
        let waited = secs_between(p.submitted_at, self.now);
        if waited < self.tuning.reservation_after_seconds {
            return false;
        }
        let s = self.shape_of[idx as usize] as usize;
        let live = self
            .holds
            .iter()
            .filter(|h| h.active && h.kind == HoldKind::Reservation)
            .count();
        if self.shapes[s].reserve_failed
            || live >= self.tuning.max_reservations as usize
            || !self.big_enough(s)
            || (self.tuning.reservation_within_guarantee && !self.within_guarantee(idx, s))
        {
            return false;
        }
        let mut best: Option<(DateTime<Utc>, u64, usize)> = None;
        for pos in 0..self.shapes[s].candidates.len() {
            let ci = self.shapes[s].candidates[pos];
            let on_cluster = self.holds_on[ci]
                .iter()
                .filter(|&&h| self.holds[h].active && self.holds[h].kind == HoldKind::Reservation)
                .count();
            let taken = self.holds_on[ci].iter().any(|&h| {
                let hold = &self.holds[h];
                hold.active && self.shapes[s].flavors().any(|f| hold.flavors.contains(&f))
            });
            if taken
                || on_cluster >= self.tuning.max_reservations_per_cluster as usize
                || !self.fits_when_empty(ci, s)
            {
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
        if !self.worth_holding(s, ci, start, waited, 1.0) {
            return false;
        }
        self.add_hold(HoldKind::Reservation, idx, ci, start);
        self.push_reserve(idx, ci, start, reason, explanation);
        true
    }

    /// A reservation carried from the previous cycle, re-priced against this cycle's queue:
    /// the start to keep (its own while that is still ahead, else a fresh one), or `None` to
    /// drop it.
    pub fn keep_reservation(
        &mut self,
        idx: u32,
        ci: usize,
        start: DateTime<Utc>,
    ) -> Option<DateTime<Utc>> {
        let s = self.shape_of[idx as usize] as usize;
        let waited = secs_between(self.input.pending[idx as usize].submitted_at, self.now);
        // A promise still ahead keeps its price: the hold itself makes others queue up, so
        // pricing it again on that queue would drop it once it started to cost, wasting what
        // it accumulated. A start that passed (work overran) is a new promise, priced anew.
        let (start, slack) = if start > self.now {
            (start, f64::INFINITY)
        } else {
            (self.expected_start(ci, s), 1.0)
        };
        self.worth_holding(s, ci, start, waited, slack)
            .then_some(start)
    }

    /// Whether the shape is big enough for a reservation: some flavor's gang needs at least
    /// `reservation_min_gpus`, by default the largest node of that flavor among its clusters.
    fn big_enough(&self, s: usize) -> bool {
        self.needs_at_least(s, self.tuning.reservation_min_gpus)
    }

    /// Whether `idx`'s queue stays within its guarantee with shape `s` admitted.
    fn within_guarantee(&self, idx: u32, s: usize) -> bool {
        self.queue_of[idx as usize]
            .is_some_and(|q| self.book.within_guarantee(q, &self.shapes[s].request))
    }

    /// Whether some flavor's gang of shape `s` needs at least `min` GPUs, by default the
    /// largest node of that flavor among its clusters (work that needs whole nodes).
    pub(super) fn needs_at_least(&self, s: usize, min: Option<u64>) -> bool {
        let shape = &self.shapes[s];
        shape.needs.iter().any(|(f, need)| {
            let min = min.unwrap_or_else(|| {
                shape
                    .candidates
                    .iter()
                    .flat_map(|&ci| &self.clusters[ci].pools)
                    .filter(|p| {
                        p.flavor == self.book.flavors[*f]
                            && super::cycle::kind_bit(p.kind) & shape.kinds != 0
                    })
                    .map(|p| u64::from(p.node_gpus))
                    .max()
                    .unwrap_or(0)
            });
            need.gpus >= min.max(1)
        })
    }

    /// The hold's price against its benefit, in waiting time (see the module doc). With
    /// nobody else waiting for the gang's flavors it costs nothing. Otherwise two bounds
    /// must hold: the hold lasts no longer than the gang already waited (the starvation it
    /// saves, taken to be as long again), and the capacity it is expected to keep idle
    /// until `start` (`idle_until`) costs the others no more waiting than it saves the gang
    /// (times `reservation_idle_factor`). Idle GPU-seconds stop that fraction of the
    /// cluster's capacity for a while, and every other pending workload of those flavors
    /// waits that while longer: a hold that drains a busy cluster for one gang is priced at
    /// the whole queue's delay, one on a quiet cluster at little.
    fn worth_holding(
        &mut self,
        s: usize,
        ci: usize,
        start: DateTime<Utc>,
        waited: u64,
        slack: f64,
    ) -> bool {
        if self.pending_on_flavor.is_empty() {
            let mut counts = vec![0u32; self.book.flavors.len()];
            for &shape in &self.shape_of {
                for f in self.shapes[shape as usize].flavors() {
                    counts[f] = counts[f].saturating_add(1);
                }
            }
            for (f, name) in self.book.flavors.iter().enumerate() {
                if let Some(&n) = self.input.unshown_pending.get(name) {
                    counts[f] = counts[f].saturating_add(n);
                }
            }
            self.pending_on_flavor = counts;
        }
        let others = self.shapes[s]
            .flavors()
            .any(|f| self.pending_on_flavor[f] > 1);
        if !others {
            return true;
        }
        if secs_between(self.now, start) > waited {
            return false;
        }
        // Idle GPU-seconds as the fraction of the cluster's capacity stopped, times the
        // others kept waiting by it (each waits that long again).
        let others: u64 = self.shapes[s]
            .flavors()
            .map(|f| u64::from(self.pending_on_flavor[f].saturating_sub(1)))
            .sum();
        let shape = &self.shapes[s];
        let capacity: u64 = self.clusters[ci]
            .pools
            .iter()
            .filter(|p| {
                super::cycle::kind_bit(p.kind) & shape.kinds != 0
                    && shape.flavors().any(|f| self.book.flavors[f] == p.flavor)
            })
            .map(|p| p.total)
            .sum();
        let idle = self.idle_until(ci, s, start) as f64;
        idle * others as f64 / capacity.max(1) as f64
            <= slack * self.tuning.reservation_idle_factor * waited as f64
    }

    /// GPU-seconds of the shape's flavors a hold on `ci` is expected to keep idle until
    /// `start` if nothing backfills: what is free now and what running work returns as it
    /// ends, each up to the gang's size, until the gang starts.
    fn idle_until(&self, ci: usize, s: usize, start: DateTime<Utc>) -> u64 {
        let shape = &self.shapes[s];
        let gang: u64 = shape.request.iter().map(|(_, n)| n).sum();
        let mut held: u64 = self.clusters[ci]
            .pools
            .iter()
            .filter(|p| {
                super::cycle::kind_bit(p.kind) & shape.kinds != 0
                    && shape.flavors().any(|f| self.book.flavors[f] == p.flavor)
            })
            .map(|p| p.free())
            .sum();
        let mut ends: Vec<(DateTime<Utc>, u64)> = self
            .returning_by(ci, s, start)
            .into_iter()
            .map(|ri| {
                let r = &self.running[ri as usize];
                let g = r
                    .gpus
                    .iter()
                    .filter(|(f, _)| shape.flavors().any(|sf| sf == *f))
                    .map(|(_, n)| n)
                    .sum();
                (r.expected_end.max(self.now), g)
            })
            .collect();
        ends.sort_unstable();
        let mut idle = 0u64;
        let mut at = self.now;
        for (end, g) in ends {
            idle = idle.saturating_add(held.min(gang).saturating_mul(secs_between(at, end)));
            held = held.saturating_add(g);
            at = end;
        }
        idle.saturating_add(held.min(gang).saturating_mul(secs_between(at, start)))
    }

    /// Running work on `ci` of the shape's flavors expected to end by `start`: what a
    /// reservation there counts on.
    pub fn returning_by(&self, ci: usize, s: usize, start: DateTime<Utc>) -> Vec<u32> {
        let shape = &self.shapes[s];
        self.on_cluster[ci]
            .iter()
            .copied()
            .filter(|&ri| {
                let r = &self.running[ri as usize];
                r.expected_end <= start
                    && r.gpus
                        .iter()
                        .any(|(f, _)| shape.flavors().any(|sf| sf == *f))
            })
            .collect()
    }

    /// Whether shape `s`, placed on `ci` as `fit` says, still leaves the holder of reservation
    /// `h` room to fit once the work it counts on has ended.
    pub fn leaves_room(&mut self, h: usize, ci: usize, s: usize, fit: &ClusterFit) -> bool {
        if self.holds[h].no_room.contains(&(s as u32)) {
            return false;
        }
        let mut pools = self.clusters[ci].pools.clone();
        let mut room = true;
        for (n, (pi, choice)) in fit.choices.iter().enumerate() {
            let need = &self.shapes[s].needs[n].1;
            if pools
                .get_mut(*pi)
                .and_then(|p| p.take(need, *choice))
                .is_none()
            {
                room = false;
                break;
            }
        }
        if room {
            self.return_into(&mut pools, &self.holds[h].returning);
            let holder = self.shape_of[self.holds[h].holder as usize] as usize;
            room = fit_in_pools(&pools, &self.shapes[holder], &self.book.flavors).is_some();
        }
        if !room {
            self.holds[h].no_room.push(s as u32);
        }
        room
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
            uid: uid_of(&self.input.pending[idx as usize].workload).into(),
            cluster: cluster.into(),
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
    pub(super) fn expected_start(&self, ci: usize, s: usize) -> DateTime<Utc> {
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
