//! The preemption and reclaim planner.
//!
//! A workload that fits nowhere may evict others if it has the right to:
//! - within its own queue, lower-priority work (or equal, with `within_queue: any`);
//! - in another queue, only work that queue runs beyond its guarantee (borrowed quota, or
//!   over a tidal window's shrunk quota), and only if the preemptor has a higher priority
//!   or is reclaiming its own guarantee in the same cohort (`reclaim_within_cohort`).
//!
//! Base class values decide the right to preempt, not aged priorities: aging orders the
//! queue, it must not let equal work evict equal work.
//!
//! Victims come from ONE member cluster, never two: disrupting two clusters for one workload
//! doubles the blast radius and a gang cannot span clusters anyway. In a cluster, candidates
//! are taken in tiers, not-started first, then checkpointing work by least work lost, then
//! the rest (lowest priority, least work lost); `forbidden` classes never, `cautious` ones
//! only when the others cannot free enough; whole workloads only. The planner finds the
//! shortest prefix of that order after which the preemptor fits (binary search: freeing more
//! never hurts), drops victims the fit does not need, and then proves the plan by re-running
//! the fit with exactly the victims' GPUs returned. Returned GPUs are modelled as separate
//! nodes unless the member reported which nodes the victims occupy; then GPUs freed on one
//! node come back as one node, and a second order of the same victims, grouped by node
//! with the cheapest nodes to empty first, is planned too: a gang of whole nodes needs
//! victims that free whole nodes, not a little everywhere (see `nodes`).
//! Clusters are compared by cost; the preemption budget caps victims per window.

use tideway_api::{PendingReason, Preemptibility, PreemptionScope};

use super::capacity::PoolState;
use super::cycle::{Cycle, HoldKind, may_preempt, plus_secs};
use super::decision::{Decision, PreemptionCost, VictimTier};
use super::explain::{Explanation, Unblock};
use super::hash::DetMap;
use super::input::uid_of;
use super::routing::fit_in_pools;

/// At most this many "can we do without this victim" checks per plan.
const MAX_MINIMISE_CHECKS: usize = 32;

pub(super) struct Plan {
    pub cluster: usize,
    pub victims: Vec<u32>,
    pub cost: PreemptionCost,
    pub grace_seconds: u64,
}

/// Keeps the cheaper of `best` and `plan` (cluster `tie` breaks equal costs, seeded so the
/// choice is deterministic): the one rule by which capacity preemption and quota reclaim
/// choose among clusters.
pub(super) fn keep_cheaper(best: &mut Option<(Plan, u64)>, plan: Plan, tie: u64) {
    if best
        .as_ref()
        .is_none_or(|(b, bt)| (cost_key(&plan.cost), tie) < (cost_key(&b.cost), *bt))
    {
        *best = Some((plan, tie));
    }
}

pub(super) fn cost_key(c: &PreemptionCost) -> (u32, VictimTier, u32, u64, u64) {
    (
        c.cautious,
        c.worst_tier,
        c.victims,
        c.gpus,
        c.work_lost_gpu_seconds,
    )
}

impl Cycle<'_> {
    /// Tries to plan a preemption for `idx`. Returns true when a decision was pushed
    /// (`Preempt`, or `Pending` with `RateLimited`).
    pub fn try_preempt(&mut self, idx: u32, q: usize) -> bool {
        if !self.input.settings.preemption {
            return false;
        }
        let w = &self.input.pending[idx as usize].workload;
        let class = self.prio.class(&w.spec.priority_class);
        if !may_preempt(class.preemption_policy) {
            return false;
        }
        let base = class.value;
        let s = self.shape_of[idx as usize] as usize;
        let may_reclaim = self.book.queues[q].has_cohort
            && self.book.within_guarantee(q, &self.shapes[s].request);
        // `reclaimMinGpus`, when set, is the old gang-size threshold; the default reclaims
        // for every workload within its guarantee (the guarantee comes first); with
        // `reclaimByPartitionWait`, the rule of `promise`: reclaim when the workload would
        // otherwise wait longer than on its queue's static partition. That estimate walks
        // the cluster's expected ends, so it is skipped where a reclaiming plan already
        // failed or no attempt is left.
        let reclaim = may_reclaim
            && match self.tuning.reclaim_min_gpus {
                Some(min) => self.needs_at_least(s, Some(min)),
                None if !self.tuning.reclaim_by_partition_wait => true,
                None => {
                    !self.shapes[s].preempt_failed.contains(&(q, base, true))
                        && self.attempts < self.tuning.max_preemption_attempts_per_cycle
                        && self.waits_past_partition(q, s)
                }
            };
        if self.shapes[s].preempt_failed.contains(&(q, base, reclaim)) {
            return false;
        }
        if self.attempts >= self.tuning.max_preemption_attempts_per_cycle {
            return false;
        }
        self.attempts += 1;
        self.stats.preemption_attempts += 1;

        // Not part of the `preempt_failed` key: in FIFO order a later workload of the same
        // queue and class has waited no longer, so its bound is no looser; under another
        // order one skipped here tries again next cycle.
        let max_lost = self.reclaim_max_lost(idx);
        let mut best: Option<(Plan, u64)> = None;
        for ci in self.unheld_candidates(idx, s) {
            let Some(plan) = self.plan_in(ci, s, q, base, reclaim, max_lost) else {
                continue;
            };
            keep_cheaper(&mut best, plan, self.clusters[ci].tie);
        }
        let Some((plan, _)) = best else {
            self.shapes[s].preempt_failed.push((q, base, reclaim));
            return false;
        };
        // A plan larger than a whole window's budget would never run if it had to fit in
        // one; it runs in a window where nothing else was evicted, and spends it all.
        let whole_window = self.budget_left == self.input.preemption_budget.max
            && self.input.preemption_budget.used_in_window == 0;
        if plan.victims.len() > self.budget_left as usize && !whole_window {
            let at = self.input.preemption_budget.refills_at;
            self.pending(
                idx,
                PendingReason::RateLimited,
                Explanation::new(Unblock::PreemptionBudgetRefills { at }),
            );
            return true;
        }
        self.commit(idx, q, plan);
        true
    }

    /// The candidate clusters of pending `idx` (shape `s`) where no hold keeps it from
    /// planning a preemption: capacity held for another workload is not ours to preempt for.
    pub(super) fn unheld_candidates(&mut self, idx: u32, s: usize) -> Vec<usize> {
        let effective = self.ranks[idx as usize].effective;
        let runtime = self.pending_estimate(idx);
        let mut out = Vec::with_capacity(self.shapes[s].candidates.len());
        for pos in 0..self.shapes[s].candidates.len() {
            let ci = self.shapes[s].candidates[pos];
            if self
                .blocking_hold(ci, idx, s, effective, runtime, None)
                .is_none()
            {
                out.push(ci);
            }
        }
        out
    }

    /// The most work (seconds since start or last checkpoint) an equal-priority borrower
    /// may lose to reclaim for pending workload `idx`: `reclaimMaxWorkLostSeconds`, and
    /// `reclaimLossPerWait` times how long `idx` has waited; unset: no bound.
    fn reclaim_max_lost(&self, idx: u32) -> Option<u64> {
        let waited =
            super::cycle::secs_between(self.input.pending[idx as usize].submitted_at, self.now);
        let by_wait = self
            .tuning
            .reclaim_loss_per_wait
            .map(|f| (waited as f64 * f.max(0.0)).min(u64::MAX as f64) as u64);
        match (self.tuning.reclaim_max_work_lost_seconds, by_wait) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Victims `q`'s workload (base priority `base`) may evict on cluster `ci`, cheapest
    /// first, with cautious ones last.
    fn eligible_victims(
        &self,
        ci: usize,
        s: usize,
        q: usize,
        base: i32,
        reclaim: bool,
        max_lost: Option<u64>,
    ) -> Vec<u32> {
        let shape = &self.shapes[s];
        let my_cohort = self.book.queues[q].cohort;
        let scope = self.book.queues[q].preemption;
        let mut cands: Vec<(bool, VictimTier, i64, i64, u32)> = Vec::new();
        for &ri in &self.on_cluster[ci] {
            let r = &self.running[ri as usize];
            if r.terminating
                || !r.preemptible_now
                || r.preemptibility == Preemptibility::Forbidden
                || !r
                    .gpus
                    .iter()
                    .any(|(f, _)| shape.flavors().any(|sf| sf == *f))
            {
                continue;
            }
            let allowed = match r.queue {
                Some(p) if p == q => match scope.within_queue {
                    PreemptionScope::Never => false,
                    PreemptionScope::LowerPriority => r.base < base,
                    PreemptionScope::Any => r.base <= base,
                },
                Some(p) => {
                    let reclaiming = reclaim
                        && self.book.queues[p].cohort == my_cohort
                        && max_lost.is_none_or(|max| r.work_lost_seconds <= max)
                        && match scope.reclaim_within_cohort {
                            PreemptionScope::Never => false,
                            PreemptionScope::LowerPriority => r.base < base,
                            PreemptionScope::Any => true,
                        };
                    reclaiming || r.base < base
                }
                None => r.base < base,
            };
            if !allowed {
                continue;
            }
            let (k1, k2) = match r.tier {
                VictimTier::NotStarted => (i64::from(r.base), -r.admitted_at.timestamp()),
                VictimTier::Checkpointable => (
                    r.work_lost_seconds.min(i64::MAX as u64) as i64,
                    i64::from(r.base),
                ),
                VictimTier::Running => (
                    i64::from(r.base),
                    r.work_lost_seconds.min(i64::MAX as u64) as i64,
                ),
            };
            cands.push((
                r.preemptibility == Preemptibility::Cautious,
                r.tier,
                k1,
                k2,
                ri,
            ));
        }
        cands.sort_unstable();
        cands.into_iter().map(|c| c.4).collect()
    }

    /// The prefix-closed part of `order` that `q` may take: work of another queue is only
    /// reclaimable while that queue is above its guarantee.
    fn within_guarantees(&self, s: usize, q: usize, order: &[u32]) -> Vec<u32> {
        let shape = &self.shapes[s];
        let mut removed: DetMap<(usize, usize), u64> = DetMap::default();
        let mut out = Vec::with_capacity(order.len());
        for &ri in order {
            let r = &self.running[ri as usize];
            if let Some(p) = r.queue
                && p != q
            {
                let over = r.gpus.iter().any(|(f, _)| {
                    shape.flavors().any(|sf| sf == *f)
                        && self.book.over_guarantee(p, *f)
                            > removed.get(&(p, *f)).copied().unwrap_or(0)
                });
                if !over {
                    continue;
                }
                for (f, n) in &r.gpus {
                    let r = removed.entry((p, *f)).or_insert(0);
                    *r = r.saturating_add(*n);
                }
            }
            out.push(ri);
        }
        out
    }

    /// The cluster's pools with the GPUs of `victims` (or finished work) returned.
    pub fn pools_returning(&self, ci: usize, victims: &[u32]) -> Vec<PoolState> {
        let mut pools = self.clusters[ci].pools.clone();
        self.return_into(&mut pools, victims);
        pools
    }

    pub(super) fn fits_without(&self, ci: usize, s: usize, victims: &[u32]) -> bool {
        let pools = self.pools_returning(ci, victims);
        fit_in_pools(&pools, &self.shapes[s], &self.book.flavors).is_some()
    }

    /// The cheapest plan on `ci` from two orders of the same eligible victims: cheapest
    /// first, and grouped by node (whole nodes for a gang; see `nodes`).
    fn plan_in(
        &self,
        ci: usize,
        s: usize,
        q: usize,
        base: i32,
        reclaim: bool,
        max_lost: Option<u64>,
    ) -> Option<Plan> {
        let cands = self.eligible_victims(ci, s, q, base, reclaim, max_lost);
        if cands.is_empty() || self.fits_without(ci, s, &[]) {
            return None;
        }
        let order = self.within_guarantees(s, q, &cands);
        let grouped = self.node_order(&cands);
        let cheapest = self.plan_from(ci, s, &order, &[]);
        if grouped == cands {
            return cheapest;
        }
        let by_node = self.within_guarantees(s, q, &grouped);
        match (cheapest, self.plan_from(ci, s, &by_node, &[])) {
            (Some(a), Some(b)) => Some(if cost_key(&b.cost) < cost_key(&a.cost) {
                b
            } else {
                a
            }),
            (a, b) => a.or(b),
        }
    }

    /// A plan taking the shortest prefix of `order` that frees enough, minimised and proved,
    /// leaving the preemptor holds `holds` their room.
    pub(super) fn plan_from(
        &self,
        ci: usize,
        s: usize,
        order: &[u32],
        holds: &[usize],
    ) -> Option<Plan> {
        // Evicting everything would not do.
        if order.is_empty() || !self.fits_beside_holds(ci, s, order, holds) {
            return None;
        }
        // Shortest prefix that frees enough.
        let (mut lo, mut hi) = (1usize, order.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.fits_beside_holds(ci, s, &order[..mid], holds) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        let mut victims = order[..lo].to_vec();
        // Drop victims the fit does not need, most expensive first.
        let mut checks = 0;
        let mut i = victims.len();
        while i > 0 && checks < MAX_MINIMISE_CHECKS && victims.len() > 1 {
            i -= 1;
            checks += 1;
            let mut without = victims.clone();
            without.remove(i);
            if self.fits_beside_holds(ci, s, &without, holds) {
                victims = without;
            }
        }
        // The proof: with exactly these victims gone, the preemptor fits.
        if !self.fits_beside_holds(ci, s, &victims, holds) {
            return None;
        }
        Some(self.plan_of(ci, victims))
    }

    /// What evicting `victims` from `ci` costs, and the notice they get.
    pub(super) fn plan_of(&self, ci: usize, victims: Vec<u32>) -> Plan {
        let mut cost = PreemptionCost::default();
        let mut grace = 0u64;
        for &ri in &victims {
            let r = &self.running[ri as usize];
            let gpus: u64 = r.gpus.iter().fold(0u64, |a, (_, n)| a.saturating_add(*n));
            cost.victims += 1;
            cost.gpus = cost.gpus.saturating_add(gpus);
            cost.worst_tier = cost.worst_tier.max(r.tier);
            cost.work_lost_gpu_seconds = cost
                .work_lost_gpu_seconds
                .saturating_add(r.work_lost_seconds.saturating_mul(gpus));
            let mut g = if r.checkpointable && r.tier != VictimTier::NotStarted {
                self.tuning.checkpoint_grace_seconds
            } else {
                self.tuning.preemption_grace_seconds
            };
            if r.preemptibility == Preemptibility::Cautious {
                cost.cautious += 1;
                g = g.max(self.tuning.cautious_grace_seconds);
            }
            grace = grace.max(g);
        }
        Plan {
            cluster: ci,
            victims,
            cost,
            grace_seconds: grace,
        }
    }

    pub(super) fn commit(&mut self, idx: u32, q: usize, plan: Plan) {
        let mut victims = Vec::with_capacity(plan.victims.len());
        for &ri in &plan.victims {
            let r = &mut self.running[ri as usize];
            r.terminating = true;
            victims.push(r.uid.as_str().into());
            self.uncharge_victim(ri);
            self.forget_running(ri);
        }
        self.budget_left = self.budget_left.saturating_sub(plan.victims.len() as u32);
        self.admit(idx, q);
        self.charge_side_once(idx, plan.cluster);
        let start = plus_secs(self.now, plan.grace_seconds);
        self.release_hold(idx);
        self.add_hold(HoldKind::Preemption, idx, plan.cluster, start);
        // The hold keeps what the victims free for the preemptor, and only that.
        if let Some(&h) = self.own_hold.get(&idx) {
            self.holds[h].returning = plan.victims.clone();
        }
        let preemptor = uid_of(&self.input.pending[idx as usize].workload).to_owned();
        self.decisions.push(Decision::Preempt {
            preemptor: preemptor.into(),
            victims,
            cluster: self.clusters[plan.cluster].name.as_str().into(),
            grace_seconds: plan.grace_seconds,
            cost: plan.cost,
        });
    }
}
