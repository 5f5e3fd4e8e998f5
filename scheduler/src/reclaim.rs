//! Quota reclaim: preemption that frees quota, not only capacity.
//!
//! Two cases the capacity planner (`preemption`) does not cover:
//! - **Fleet sides** (a tidal schedule's pool quotas): each side, inference or training-like
//!   work, has a guarantee per flavor within the schedule's regions. A side may run beyond
//!   it on idle capacity (no GPU idles at night because inference is quiet), but that work
//!   is only borrowed: when the other side, within its own guarantee, needs the GPUs, the
//!   excess is reclaimed. Training that merely borrows never blocks inference scale-up.
//!   Victims get the schedule's checkpoint grace as their notice.
//! - **A queue at its quota**: higher-priority work of the same queue may preempt its
//!   lower-priority work (as the queue's `withinQueue` scope allows), freeing quota the
//!   capacity planner would never look at because the queue's limit, not the cluster, is
//!   what blocks it.
//!
//! In both, victims are whole workloads in ONE member cluster, in the cheapest order of
//! [`Cycle::reclaim_order`]: the one place victim ordering for reclaim is decided, kept
//! apart so that it can learn which nodes workloads occupy without touching the rest.

use chrono::{DateTime, Utc};
use tideway_api::{Preemptibility, PreemptionScope, ReclaimOrder};

use super::cycle::{Cycle, may_preempt};
use super::decision::VictimTier;
use super::hash::DetMap;
use super::input::QuotaOverride;
use super::preemption::{Plan, keep_cheaper};
use super::quota::QuotaBook;
use super::tidal::FleetSide;

/// One side's guarantee for one flavor within some regions, and its usage this cycle.
#[derive(Debug, Clone)]
pub struct SideEntry {
    pub side: FleetSide,
    pub flavor: usize,
    pub regions: Vec<String>,
    pub guaranteed: u64,
    pub used: u64,
    pub grace_seconds: Option<u64>,
    pub order: ReclaimOrder,
    pub boundary: Option<DateTime<Utc>>,
    pub next_guaranteed: Option<u64>,
    pub lead_seconds: u64,
    /// How long before `boundary` the next guarantee governs reclaim (the hand-over).
    pub handover_seconds: u64,
}

impl SideEntry {
    pub fn covers(&self, region: &str) -> bool {
        self.regions.is_empty() || self.regions.iter().any(|r| r == region)
    }

    /// When the hand-over to the next window starts, if a next window names this side.
    pub fn handover_at(&self) -> Option<DateTime<Utc>> {
        let lead = chrono::Duration::seconds(i64::try_from(self.handover_seconds).unwrap_or(0));
        self.next_guaranteed?;
        self.boundary.map(|b| b - lead)
    }

    /// The guarantee reclaim works with at `now`: the next window's from the start of the
    /// hand-over (for the side that gains, so its guarantee is usable at the boundary; for
    /// the side that loses, so what it holds beyond its coming quota is what may go).
    pub fn guarantee_at(&self, now: DateTime<Utc>) -> u64 {
        match (self.handover_at(), self.next_guaranteed) {
            (Some(h), Some(next)) if now >= h => next,
            _ => self.guaranteed,
        }
    }
}

/// The fleet sides' guarantees and usage.
#[derive(Debug, Clone, Default)]
pub struct SideBook {
    pub entries: Vec<SideEntry>,
    /// Per running workload (same index as `Cycle::running`): its side and cluster.
    pub runs: Vec<(FleetSide, Option<usize>)>,
}

impl SideBook {
    pub fn new(overrides: &[QuotaOverride], book: &QuotaBook) -> Self {
        let entries = overrides
            .iter()
            .filter_map(|o| {
                let side = o.side?;
                let flavor = book.flavor_id(&o.quota.flavor)?;
                let h = o.handover.as_ref();
                Some(SideEntry {
                    side,
                    flavor,
                    regions: o.regions.clone(),
                    guaranteed: u64::from(o.quota.guaranteed),
                    used: 0,
                    grace_seconds: h.map(|h| h.grace_seconds),
                    order: h.map(|h| h.reclaim_order).unwrap_or_default(),
                    boundary: h.map(|h| h.boundary),
                    next_guaranteed: h.and_then(|h| h.next_guaranteed).map(u64::from),
                    lead_seconds: h.map_or(0, |h| h.lead_seconds),
                    handover_seconds: h.map_or(0, |h| h.handover_seconds),
                })
            })
            .collect();
        Self {
            entries,
            runs: Vec::new(),
        }
    }

    /// Counts GPUs of `side` placed in `region`.
    pub fn charge(&mut self, side: FleetSide, region: &str, gpus: &[(usize, u64)]) {
        for e in &mut self.entries {
            if e.side == side && e.covers(region) {
                for (f, n) in gpus {
                    if *f == e.flavor {
                        e.used = e.used.saturating_add(*n);
                    }
                }
            }
        }
    }
}

impl Cycle<'_> {
    /// Counts pending workload `idx`, placed on `ci`, against its side.
    pub fn charge_side(&mut self, idx: u32, ci: usize) {
        if self.sides.entries.is_empty() {
            return;
        }
        let w = &self.input.pending[idx as usize].workload;
        let s = self.shape_of[idx as usize] as usize;
        let request = self.shapes[s].request.clone();
        let region = self.clusters[ci].region.clone();
        self.sides
            .charge(FleetSide::of_class(w.spec.class), &region, &request);
    }

    /// Victims on `ci` for shape `s`, cheapest first in `order`. Only whole workloads that
    /// pass `eligible`; `NotStarted` work always comes first because nothing is lost.
    pub fn reclaim_order(
        &self,
        ci: usize,
        s: usize,
        order: ReclaimOrder,
        eligible: impl Fn(u32) -> bool,
    ) -> Vec<u32> {
        let shape = &self.shapes[s];
        let mut cands: Vec<(VictimTier, i64, i64, u32)> = Vec::new();
        for &ri in &self.on_cluster[ci] {
            let r = &self.running[ri as usize];
            if r.terminating
                || r.preemptibility == Preemptibility::Forbidden
                || !r
                    .gpus
                    .iter()
                    .any(|(f, _)| shape.flavors().any(|sf| sf == *f))
                || !eligible(ri)
            {
                continue;
            }
            let lost = r.work_lost_seconds.min(i64::MAX as u64) as i64;
            let newest_first = -r.admitted_at.timestamp();
            let key = match order {
                ReclaimOrder::LeastWorkLost => (r.tier, lost, i64::from(r.base)),
                ReclaimOrder::LowestPriority => (
                    r.tier.min(VictimTier::Checkpointable),
                    i64::from(r.base),
                    lost,
                ),
                ReclaimOrder::NewestFirst => {
                    (r.tier.min(VictimTier::Checkpointable), newest_first, lost)
                }
            };
            // Cautious victims only after every other one.
            let tier = if r.preemptibility == Preemptibility::Cautious {
                VictimTier::Running
            } else {
                key.0
            };
            cands.push((tier, key.1, key.2, ri));
        }
        cands.sort_unstable();
        cands.into_iter().map(|c| c.3).collect()
    }

    /// Reclaims borrowed capacity for pending workload `idx` of queue `q` whose side is
    /// within its guarantee. Returns true when a decision was pushed.
    pub fn try_reclaim(&mut self, idx: u32, q: usize) -> bool {
        if !self.input.settings.preemption || self.sides.entries.is_empty() {
            return false;
        }
        let w = &self.input.pending[idx as usize].workload;
        let side = FleetSide::of_class(w.spec.class);
        let s = self.shape_of[idx as usize] as usize;
        let effective = self.ranks[idx as usize].effective;
        let runtime = self.pending_estimate(idx);
        let mut best: Option<(Plan, u64)> = None;
        for pos in 0..self.shapes[s].candidates.len() {
            let ci = self.shapes[s].candidates[pos];
            if self
                .blocking_hold(ci, idx, s, effective, runtime, None)
                .is_some()
            {
                continue;
            }
            let region = self.clusters[ci].region.as_str();
            let mine: Vec<&SideEntry> = self
                .sides
                .entries
                .iter()
                .filter(|e| {
                    e.side == side
                        && e.covers(region)
                        && self.shapes[s].flavors().any(|f| f == e.flavor)
                })
                .collect();
            let within = !mine.is_empty()
                && mine.iter().all(|e| {
                    let ask = self.shapes[s]
                        .request
                        .iter()
                        .filter(|(f, _)| *f == e.flavor)
                        .map(|(_, n)| *n)
                        .sum::<u64>();
                    e.used.saturating_add(ask) <= e.guarantee_at(self.now)
                });
            if !within {
                continue;
            }
            let order = mine.first().map(|e| e.order).unwrap_or_default();
            let grace = mine.iter().filter_map(|e| e.grace_seconds).max();
            // The other side's excess over its guarantee, per entry, is what may go.
            let mut excess: DetMap<usize, u64> = DetMap::default();
            for (i, e) in self.sides.entries.iter().enumerate() {
                if e.side != side && e.covers(region) {
                    excess.insert(i, e.used.saturating_sub(e.guarantee_at(self.now)));
                }
            }
            let candidates = self.reclaim_order(ci, s, order, |ri| {
                self.sides
                    .runs
                    .get(ri as usize)
                    .is_some_and(|(rs, _)| *rs != side)
            });
            let mut victims = Vec::new();
            for ri in candidates {
                let r = &self.running[ri as usize];
                let takes: Vec<(usize, u64)> = self
                    .sides
                    .entries
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| excess.contains_key(i))
                    .filter_map(|(i, e)| {
                        r.gpus
                            .iter()
                            .find(|(f, _)| *f == e.flavor)
                            .map(|(_, n)| (i, *n))
                    })
                    .collect();
                // Only work beyond the other side's guarantee is borrowed.
                if takes.is_empty() || takes.iter().any(|(i, n)| excess[i] < *n) {
                    continue;
                }
                for (i, n) in takes {
                    if let Some(x) = excess.get_mut(&i) {
                        *x -= n;
                    }
                }
                victims.push(ri);
            }
            let Some(mut plan) = self.plan_from(ci, s, &victims) else {
                continue;
            };
            if let Some(g) = grace {
                plan.grace_seconds = g;
            }
            keep_cheaper(&mut best, plan, self.clusters[ci].tie);
        }
        let Some((plan, _)) = best else {
            return false;
        };
        self.commit_reclaim(idx, q, plan)
    }

    /// Higher-priority work of queue `q`, blocked by `q`'s own quota, preempts
    /// lower-priority work of `q` in one cluster. Returns true when a decision was pushed.
    pub fn try_quota_preempt(&mut self, idx: u32, q: usize) -> bool {
        if !self.input.settings.preemption {
            return false;
        }
        let w = &self.input.pending[idx as usize].workload;
        let class = self.prio.class(&w.spec.priority_class);
        let scope = self.book.queues[q].preemption.within_queue;
        if !may_preempt(class.preemption_policy) || scope == PreemptionScope::Never {
            return false;
        }
        let base = class.value;
        let s = self.shape_of[idx as usize] as usize;
        let effective = self.ranks[idx as usize].effective;
        let runtime = self.pending_estimate(idx);
        let mut best: Option<(Plan, u64)> = None;
        for pos in 0..self.shapes[s].candidates.len() {
            let ci = self.shapes[s].candidates[pos];
            if self
                .blocking_hold(ci, idx, s, effective, runtime, None)
                .is_some()
            {
                continue;
            }
            let order = self.reclaim_order(ci, s, ReclaimOrder::LeastWorkLost, |ri| {
                let r = &self.running[ri as usize];
                r.queue == Some(q)
                    && r.preemptible_now
                    && match scope {
                        PreemptionScope::Never => false,
                        PreemptionScope::LowerPriority => r.base < base,
                        PreemptionScope::Any => r.base <= base,
                    }
            });
            // Enough leaves when the queue's quota admits the request without the victims
            // (every rule: ceiling, guarantee, the cohort's lent pool) and the gang fits.
            let request = &self.shapes[s].request;
            let frees = |victims: &[u32]| {
                let mut book = self.book.clone();
                for ri in victims {
                    for (f, n) in &self.running[*ri as usize].gpus {
                        book.release(q, *f, *n);
                    }
                }
                book.check(q, request).is_ok() && self.fits_without(ci, s, victims)
            };
            if order.is_empty() || !frees(&order) {
                continue;
            }
            // Shortest prefix that frees both the quota and the capacity.
            let (mut lo, mut hi) = (1usize, order.len());
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if frees(&order[..mid]) {
                    hi = mid;
                } else {
                    lo = mid + 1;
                }
            }
            let plan = self.plan_of(ci, order[..lo].to_vec());
            keep_cheaper(&mut best, plan, self.clusters[ci].tie);
        }
        let Some((plan, _)) = best else {
            return false;
        };
        self.commit_reclaim(idx, q, plan)
    }

    fn commit_reclaim(&mut self, idx: u32, q: usize, plan: Plan) -> bool {
        if plan.victims.len() > self.budget_left as usize {
            let at = self.input.preemption_budget.refills_at;
            self.pending(
                idx,
                tideway_api::PendingReason::RateLimited,
                super::explain::Explanation::new(
                    super::explain::Unblock::PreemptionBudgetRefills { at },
                ),
            );
            return true;
        }
        self.commit(idx, q, plan);
        true
    }
}
