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
//!
//! **Preemptor holds.** A preemptor waits out its victims' grace; what they free is its
//! own until it starts, not only while they leave: the caller carries the preemptor
//! (`SchedulerInput::preemptors`) after its victims are gone, or the first workload decided
//! after they leave (a training restart of a queue ordered first) takes the GPUs and the
//! preemptor reclaims again, a thrash of 300 s notices. A hold keeps exactly the room its
//! holder needs with its victims gone: other work, and other reclaims, may use the rest
//! of the cluster, so several reclaims run side by side in one cluster. Work of a higher
//! class than the holder's may still take it (it could preempt the holder anyway).

use chrono::{DateTime, Utc};
use tideway_api::{Preemptibility, PreemptionScope, ReclaimOrder};

use super::capacity::PoolState;
use super::cycle::{ClusterFit, Cycle, HoldKind, may_preempt};
use super::decision::VictimTier;
use super::hash::DetMap;
use super::input::PREEMPTOR_HOLD_GIVE_UP_SECONDS;
use super::input::QuotaOverride;
use super::preemption::{Plan, keep_cheaper};
use super::quota::QuotaBook;
use super::routing::fit_in_pools;
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
    /// The entry a side's quota override (`None` for a queue's) gives for flavor id
    /// `flavor`, with nothing used yet.
    fn of(o: &QuotaOverride, flavor: usize) -> Option<Self> {
        let side = o.side?;
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
    }

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

/// GPUs of `flavor` in a per-flavor list (a request, or what a running workload holds).
pub(crate) fn gpus_of(gpus: &[(usize, u64)], flavor: usize) -> u64 {
    gpus.iter()
        .filter(|(f, _)| *f == flavor)
        .map(|(_, n)| *n)
        .sum()
}

/// The guarantee a side's quota override gives at `now`, as reclaim reads it
/// ([`SideEntry::guarantee_at`]: the next window's from the start of the hand-over), with the
/// side it is for; `None` for a queue's override. The simulator judges a schedule's promise
/// by this, so it must be the rule reclaim runs, not a second reading of the override.
pub fn side_guarantee_at(o: &QuotaOverride, now: DateTime<Utc>) -> Option<(FleetSide, u64)> {
    // The flavor id is the book's; the guarantee does not depend on it.
    SideEntry::of(o, 0).map(|e| (e.side, e.guarantee_at(now)))
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
            .filter_map(|o| SideEntry::of(o, book.flavor_id(&o.quota.flavor)?))
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
    /// Holds for preemptors that have not started: those whose victims are still leaving
    /// (`preempting_for`) and those the caller carries (`input.preemptors`). Each holds the
    /// room its shape needs once its victims are gone, and counts for its side (its
    /// victims no longer do; see `load_running`).
    pub(super) fn load_preemptor_holds(
        &mut self,
        cluster_ids: &DetMap<&str, usize>,
        by_uid: &DetMap<&str, u32>,
    ) {
        let input = self.input;
        let mut preempting: Vec<(u32, usize, DateTime<Utc>)> = Vec::new();
        for r in &input.running {
            if let (Some(for_uid), Some(&ci)) =
                (&r.preempting_for, cluster_ids.get(r.cluster.as_str()))
                && let Some(&idx) = by_uid.get(for_uid.as_str())
                && !preempting.iter().any(|p| p.0 == idx)
            {
                preempting.push((idx, ci, self.now));
            }
        }
        let give_up = chrono::Duration::seconds(PREEMPTOR_HOLD_GIVE_UP_SECONDS);
        for p in &input.preemptors {
            if let (Some(&idx), Some(&ci)) = (
                by_uid.get(p.uid.as_str()),
                cluster_ids.get(p.cluster.as_str()),
            ) && p.expected_start + give_up > self.now
                && !preempting.iter().any(|x| x.0 == idx)
            {
                preempting.push((idx, ci, p.expected_start));
            }
        }
        for (idx, ci, start) in preempting {
            let s = self.shape_of[idx as usize] as usize;
            if self.own_hold.contains_key(&idx) || !self.shapes[s].candidates.contains(&ci) {
                continue;
            }
            let uid = super::input::uid_of(&input.pending[idx as usize].workload);
            let victims: Vec<u32> = self.on_cluster[ci]
                .iter()
                .copied()
                .filter(|&ri| input.running[ri as usize].preempting_for.as_deref() == Some(uid))
                .collect();
            self.add_hold(HoldKind::Preemption, idx, ci, start.max(self.now));
            if let Some(&h) = self.own_hold.get(&idx) {
                self.holds[h].returning = victims;
            }
            self.charge_side(idx, ci);
        }
    }

    /// Running workload `ri`, now a victim, no longer counts for its side (as at load).
    pub fn uncharge_victim(&mut self, ri: u32) {
        let Some(&(side, Some(ci))) = self.sides.runs.get(ri as usize) else {
            return;
        };
        let region = &self.clusters[ci].region;
        for e in &mut self.sides.entries {
            if e.side == side && e.covers(region) {
                for (f, n) in &self.running[ri as usize].gpus {
                    if *f == e.flavor {
                        e.used = e.used.saturating_sub(*n);
                    }
                }
            }
        }
    }

    /// Counts `idx` placed on `ci` against its side, unless its preemptor hold already
    /// counts it.
    pub fn charge_side_once(&mut self, idx: u32, ci: usize) {
        let held = self
            .own_hold
            .get(&idx)
            .is_some_and(|&h| self.holds[h].kind == HoldKind::Preemption);
        if !held {
            self.charge_side(idx, ci);
        }
    }

    /// The preemptor holds on `ci` that keep their room from workload `idx` (base class
    /// value `base`): active, another holder, sharing a flavor with shape `s`, of a class
    /// not lower than `idx`'s.
    pub fn preemptor_holds_against(&self, ci: usize, idx: u32, s: usize, base: i32) -> Vec<usize> {
        let mut owed = None;
        self.holds_on[ci]
            .iter()
            .copied()
            .filter(|&h| {
                let hold = &self.holds[h];
                hold.active
                    && hold.kind == HoldKind::Preemption
                    && hold.holder != idx
                    && hold.holder_base >= base
                    && self.shapes[s].flavors().any(|f| hold.flavors.contains(&f))
                    && !self.owed_passes_borrower(hold.holder, idx, &mut owed)
            })
            .collect()
    }

    /// Whether pending `idx`, owed by its fleet side, may take the room held for `holder`,
    /// a workload of the other side running beyond its guarantee: borrowed room never keeps
    /// out what the other side is owed. `owed` caches `idx`'s answer.
    fn owed_passes_borrower(&self, holder: u32, idx: u32, owed: &mut Option<bool>) -> bool {
        if self.sides.entries.is_empty() {
            return false;
        }
        let side_of =
            |i: u32| FleetSide::of_class(self.input.pending[i as usize].workload.spec.class);
        if side_of(holder) == side_of(idx) {
            return false;
        }
        // The holder already counts for its side (`load_preemptor_holds`).
        let mut mine = self.own_side_entries(holder).peekable();
        let borrows = mine.peek().is_some() && !mine.any(|e| e.used <= e.guarantee_at(self.now));
        borrows && !*owed.get_or_insert_with(|| self.side_borrows(idx))
    }

    /// Whether every holder in `holds` still fits in `pools` (capacity actually free, only
    /// taken from, never returned to: a pool's take is exact only on reported capacity).
    /// Holders whose victims are gone take their fit out of `pools`; a holder whose victims
    /// are still leaving keeps their GPUs (they are not in `pools`) and must fit once they
    /// are back.
    fn holders_fit(&self, mut pools: Vec<PoolState>, holds: &[usize]) -> bool {
        for &h in holds {
            if self.holds[h].returning.is_empty() {
                let holder = self.shape_of[self.holds[h].holder as usize] as usize;
                if !self.take_fit(&mut pools, holder) {
                    return false;
                }
            }
        }
        holds.iter().all(|&h| {
            let hold = &self.holds[h];
            if hold.returning.is_empty() {
                return true;
            }
            // The holder's victims back where they are (holes joined, the accurate model
            // where nodes are known): a defragmenting gang needs its victims' GPUs to join
            // the holes beside them, and the conservative model would keep every other
            // workload off the cluster for the whole grace.
            let mut back = pools.clone();
            self.return_victims(&mut back, &hold.returning, true);
            let holder = self.shape_of[hold.holder as usize] as usize;
            fit_in_pools(&back, &self.shapes[holder], &self.book.flavors).is_some()
        })
    }

    /// Takes a fit of shape `s` out of `pools`; false when it does not fit.
    pub(super) fn take_fit(&self, pools: &mut [PoolState], s: usize) -> bool {
        let shape = &self.shapes[s];
        let Some(fit) = fit_in_pools(pools, shape, &self.book.flavors) else {
            return false;
        };
        self.take_placed(pools, s, &fit)
    }

    /// Takes shape `s`, placed as `fit` says, out of `pools`; false when it does not fit.
    pub(super) fn take_placed(&self, pools: &mut [PoolState], s: usize, fit: &ClusterFit) -> bool {
        for (n, (pi, choice)) in fit.choices.iter().enumerate() {
            let need = &self.shapes[s].needs[n].1;
            if pools
                .get_mut(*pi)
                .and_then(|p| p.take(need, *choice))
                .is_none()
            {
                return false;
            }
        }
        true
    }

    /// Whether placing shape `s` on `ci` as `fit` says leaves the preemptor holds `holds`
    /// their room.
    pub fn leaves_preemptors_room(
        &self,
        ci: usize,
        s: usize,
        fit: &ClusterFit,
        holds: &[usize],
    ) -> bool {
        let mut pools = self.clusters[ci].pools.clone();
        self.take_placed(&mut pools, s, fit) && self.holders_fit(pools, holds)
    }

    /// Whether shape `s` fits on `ci` with `victims` gone, beside the preemptor holds
    /// `holds`: holders whose victims are gone keep their fit of what is free, holders
    /// whose victims are leaving keep those victims' GPUs.
    pub(super) fn fits_beside_holds(
        &self,
        ci: usize,
        s: usize,
        victims: &[u32],
        holds: &[usize],
    ) -> bool {
        if holds.is_empty() {
            return self.fits_without(ci, s, victims);
        }
        let mut pools = self.clusters[ci].pools.clone();
        for &h in holds {
            if self.holds[h].returning.is_empty() {
                let holder = self.shape_of[self.holds[h].holder as usize] as usize;
                // A holder that no longer fits has no room to keep.
                let _ = self.take_fit(&mut pools, holder);
            }
        }
        self.return_into(&mut pools, victims);
        fit_in_pools(&pools, &self.shapes[s], &self.book.flavors).is_some()
    }

    /// The preemptor hold on `ci` that keeps workload `idx` off it, if any: placed as `fit`
    /// says, `idx` must leave every holder of a class not lower than its own the room it
    /// waits for. Without a fit (planning a preemption), any such hold keeps it off.
    pub fn blocking_preemptors(
        &mut self,
        ci: usize,
        idx: u32,
        s: usize,
        fit: Option<&ClusterFit>,
    ) -> Option<usize> {
        if self.holds_on[ci].is_empty() {
            return None;
        }
        let w = &self.input.pending[idx as usize].workload;
        let base = self.prio.class(&w.spec.priority_class).value;
        let holds = self.preemptor_holds_against(ci, idx, s, base);
        let first = *holds.first()?;
        let Some(fit) = fit else {
            return Some(first);
        };
        // The cached answer is for workloads that hold nothing here: they must leave every
        // hold its room, a holder all holds but its own. A holder told "no room" because a
        // workload of its shape would have taken its own room waited a grace period more.
        let holder_here = self.holds_on[ci]
            .iter()
            .any(|&h| self.holds[h].holder == idx && self.holds[h].kind == HoldKind::Preemption);
        if !holder_here
            && holds
                .iter()
                .any(|&h| self.holds[h].no_room.contains(&(s as u32)))
        {
            return Some(first);
        }
        if self.leaves_preemptors_room(ci, s, fit, &holds) {
            return None;
        }
        // Capacity only shrinks within a cycle: the answer holds for this shape.
        if !holder_here {
            for &h in &holds {
                self.holds[h].no_room.push(s as u32);
            }
        }
        Some(first)
    }

    /// The side entries of pending `idx`'s fleet side for the flavors it asks for.
    fn own_side_entries(&self, idx: u32) -> impl Iterator<Item = &SideEntry> + '_ {
        let side = FleetSide::of_class(self.input.pending[idx as usize].workload.spec.class);
        let shape = &self.shapes[self.shape_of[idx as usize] as usize];
        self.sides
            .entries
            .iter()
            .filter(move |e| e.side == side && shape.flavors().any(|f| f == e.flavor))
    }

    /// Whether pending `idx` would run beyond its fleet side's guarantee in every region
    /// where the side has one for its flavors (false without side quotas, or where its side
    /// has none): such work is ordered after work of the same priority that its side is
    /// owed (`ordering`), so a freed GPU goes to the side that is owed it.
    pub fn side_borrows(&self, idx: u32) -> bool {
        if self.sides.entries.is_empty() {
            return false;
        }
        let shape = &self.shapes[self.shape_of[idx as usize] as usize];
        let mut mine = self.own_side_entries(idx).peekable();
        if mine.peek().is_none() {
            return false;
        }
        !mine.any(|e| {
            let ask: u64 = gpus_of(&shape.request, e.flavor);
            e.used.saturating_add(ask) <= e.guarantee_at(self.now)
        })
    }

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
        let base = self.prio.class(&w.spec.priority_class).value;
        let s = self.shape_of[idx as usize] as usize;
        let effective = self.ranks[idx as usize].effective;
        let runtime = self.pending_estimate(idx);
        // A preemptor that reclaims again already counts for its side (its hold).
        let own_hold = self
            .own_hold
            .get(&idx)
            .filter(|&&h| self.holds[h].kind == HoldKind::Preemption)
            .map(|&h| self.holds[h].cluster);
        let mut best: Option<(Plan, u64)> = None;
        for pos in 0..self.shapes[s].candidates.len() {
            let ci = self.shapes[s].candidates[pos];
            // Reservations keep reclaims off; other preemptors' holds do not: the plan
            // leaves them their room (several reclaims run side by side in a cluster).
            if self
                .blocking_reservation(ci, idx, s, effective, runtime, None)
                .is_some()
            {
                continue;
            }
            let holds = self.preemptor_holds_against(ci, idx, s, base);
            let region = self.clusters[ci].region.as_str();
            let counted = own_hold.is_some_and(|hc| self.clusters[hc].region == region);
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
                    let ask = gpus_of(&self.shapes[s].request, e.flavor);
                    let used = if counted {
                        e.used.saturating_sub(ask)
                    } else {
                        e.used
                    };
                    used.saturating_add(ask) <= e.guarantee_at(self.now)
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
            let Some(mut plan) = self.plan_from(ci, s, &victims, &holds) else {
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
        let mut best: Option<(Plan, u64)> = None;
        for ci in self.unheld_candidates(idx, s) {
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

    pub(super) fn commit_reclaim(&mut self, idx: u32, q: usize, plan: Plan) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tidal::Handover;
    use tideway_api::FlavorQuota;

    fn at(h: u32, m: u32) -> DateTime<Utc> {
        use chrono::TimeZone;
        Utc.with_ymd_and_hms(2026, 1, 5, h, m, 0).unwrap()
    }

    /// The side's guarantee switches to the next window's at the start of the hand-over,
    /// not at the boundary, and a queue's override is no side's.
    #[test]
    fn a_side_guarantee_follows_the_hand_over() {
        let mut o = QuotaOverride {
            queue: String::new(),
            side: Some(FleetSide::Inference),
            regions: Vec::new(),
            quota: FlavorQuota::guaranteed("H100", 115),
            window: Some("night".into()),
            until: Some(at(7, 0)),
            handover: Some(Handover {
                schedule: "day-night".into(),
                boundary: at(7, 0),
                next_guaranteed: Some(268),
                lead_seconds: 900,
                grace_seconds: 300,
                reclaim_order: ReclaimOrder::default(),
                handover_seconds: 300,
            }),
        };
        let g = |o: &QuotaOverride, t| side_guarantee_at(o, t).map(|(_, g)| g);
        assert_eq!(g(&o, at(6, 54)), Some(115));
        assert_eq!(g(&o, at(6, 55)), Some(268));
        assert_eq!(g(&o, at(7, 0)), Some(268));
        o.handover.as_mut().unwrap().next_guaranteed = None;
        assert_eq!(
            g(&o, at(6, 58)),
            Some(115),
            "no next quota: the current holds"
        );
        o.side = None;
        assert_eq!(side_guarantee_at(&o, at(6, 58)), None);
    }
}
