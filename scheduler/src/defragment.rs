//! Defragmentation: moving small checkpointing work so that a gang gets whole nodes.
//!
//! A gang of whole nodes can wait all night while enough GPUs sit free in its cluster,
//! scattered over nodes that small work keeps part-used: best fit packs well, but work
//! ends in a different order than it started, and each departure leaves a hole. Neither
//! the capacity planner (it evicts only lower-priority work) nor reclaim (only what the
//! other side or queue borrowed) moves equal work, so the holes stay until chance fills a
//! node's last GPU.
//!
//! Here a gang of at least `defragmentMinGpus` GPUs that fits nowhere may evict equal or
//! lower-priority work in ONE cluster, on these conditions, which make it a migration, not
//! a loss for the victims:
//! - every victim checkpoints (or has not started), would lose at most
//!   `defragmentMaxWorkLostSeconds` since its last checkpoint, and may be preempted
//!   without caution;
//! - every victim is strictly smaller than the gang, so moves only ever go from small to
//!   big and cannot cycle;
//! - with the victims gone and the gang placed, every victim fits again in what is left of
//!   the same cluster (the proof below), so the running GPUs only grow: the victims
//!   restart in the holes the gang could not use, the gang on the nodes they emptied.
//!
//! With fleet sides (a tidal schedule), a side counts as owed while some of its pending
//! work waits within its guarantee, or while its guarantee grows within the hour. A gang
//! whose side borrows moves nothing while the other side is owed (the room held for it
//! would keep that work out). Training-like work may be moved for a gang of its own side
//! at any time (a moved job that finds its holes taken waits, as it would have); any other
//! move, serving replicas or work of the other side, only while the victim's side is not
//! owed: at night the evening's serving replicas, scattered over the nodes, are what keeps
//! training's gangs off whole nodes, and moving one is a restart on another node; but a
//! replica moved during the morning ramp finds its holes taken by the ramp and waits.
//!
//! Victims are chosen node by node, the nodes cheapest to empty first (`nodes`), with the
//! short preemption grace as their notice: what they lose is bounded already, and every
//! second of notice is a second in which the holes they must restart in can fill. The
//! gang holds the room they free until it starts (`reclaim`, preemptor holds). Victims
//! whose nodes the member did not report are never moved.

use tideway_api::Preemptibility;

use super::capacity::{GroupNeed, PoolState};
use super::cycle::{Cycle, HoldKind};
use super::decision::VictimTier;
use super::preemption::{Plan, keep_cheaper};
use super::routing::fit_in_pools;
use super::tidal::FleetSide;

/// How far ahead a side's coming gain counts as owed now: moving its work then would free
/// holes that its own ramp fills before the moved work restarts.
const GAIN_HORIZON_SECONDS: i64 = 3600;

impl Cycle<'_> {
    /// Plans a defragmentation for pending `idx` of queue `q`. Returns true when a decision
    /// was pushed (`Preempt`, or `Pending` with `RateLimited`).
    pub fn try_defragment(&mut self, idx: u32, q: usize) -> bool {
        let Some(min) = self.tuning.defragment_min_gpus else {
            return false;
        };
        if !self.input.settings.preemption {
            return false;
        }
        let s = self.shape_of[idx as usize] as usize;
        let gang: u64 = self.shapes[s].request.iter().map(|(_, n)| *n).sum();
        if gang < min || self.attempts >= self.tuning.max_preemption_attempts_per_cycle {
            return false;
        }
        // Work beyond its side's guarantee only borrows: it moves nothing while the other
        // side has work waiting that it is owed, which the room held for the gang could
        // keep out (a tidal hand-over).
        let owed = self.owed_sides();
        let side = FleetSide::of_class(self.input.pending[idx as usize].workload.spec.class);
        if owed[1 - side as usize] && self.side_borrows(idx) {
            return false;
        }
        let w = &self.input.pending[idx as usize].workload;
        let base = self.prio.class(&w.spec.priority_class).value;
        // A preemptor already holding room somewhere waits for it.
        if self
            .own_hold
            .get(&idx)
            .is_some_and(|&h| self.holds[h].kind == HoldKind::Preemption)
        {
            return false;
        }
        self.attempts += 1;
        self.stats.preemption_attempts += 1;
        // Only this planner lets returned GPUs join a node's holes (`nodes`): the others keep
        // the conservative model their tuning was measured with.
        self.join_holes = true;
        let best = self.plan_defragment(idx, s, base, gang, owed);
        self.join_holes = false;
        let Some((plan, _)) = best else {
            return false;
        };
        self.stats.defragmentations += 1;
        self.commit_reclaim(idx, q, plan)
    }

    /// The cheapest defragmentation plan for `idx` (shape `s`, base priority `base`, `gang`
    /// GPUs) over its candidate clusters.
    fn plan_defragment(
        &mut self,
        idx: u32,
        s: usize,
        base: i32,
        gang: u64,
        owed: [bool; 2],
    ) -> Option<(Plan, u64)> {
        let max_lost = self.tuning.defragment_max_work_lost_seconds;
        let mut best: Option<(Plan, u64)> = None;
        for ci in self.unheld_candidates(idx, s) {
            // Fragmentation, not shortage: the free GPUs of the gang's flavors would hold it.
            let free: u64 = self.clusters[ci]
                .pools
                .iter()
                .filter(|p| {
                    self.shapes[s]
                        .flavors()
                        .any(|f| self.book.flavors[f] == p.flavor)
                })
                .map(PoolState::free)
                .sum();
            if free < gang {
                continue;
            }
            let movable = self.movable(ci, idx, base, gang, max_lost, owed);
            if movable.is_empty() {
                continue;
            }
            let holds = self.preemptor_holds_against(ci, idx, s, base);
            let order = self.node_order(&movable);
            let Some(mut plan) = self.plan_from(ci, s, &order, &holds) else {
                continue;
            };
            if !self.victims_fit_again(ci, s, &plan.victims, &holds) {
                continue;
            }
            // A short notice: what a victim loses is bounded by `max_lost` already, and every
            // second of notice is a second in which the holes it must restart in can fill.
            plan.grace_seconds = self.tuning.preemption_grace_seconds;
            keep_cheaper(&mut best, plan, self.clusters[ci].tie);
        }
        best
    }

    /// Per fleet side: whether it is owed now, i.e. some of its pending work waits within its
    /// guarantee, or its guarantee grows within the hour (taken once per cycle, at the first
    /// defragmentation: cheap with a large backlog).
    fn owed_sides(&mut self) -> [bool; 2] {
        if let Some(o) = self.owed_sides {
            return o;
        }
        let mut o = [false; 2];
        for j in 0..self.input.pending.len() as u32 {
            let side = FleetSide::of_class(self.input.pending[j as usize].workload.spec.class);
            let i = side as usize;
            if !o[i] && !self.side_borrows(j) {
                o[i] = true;
            }
            if o[0] && o[1] {
                break;
            }
        }
        let soon = self.now + chrono::Duration::seconds(GAIN_HORIZON_SECONDS);
        for e in &self.sides.entries {
            if e.boundary.is_some_and(|b| b <= soon)
                && e.next_guaranteed.is_some_and(|n| n > e.guaranteed)
            {
                o[e.side as usize] = true;
            }
        }
        self.owed_sides = Some(o);
        o
    }

    /// Running work on `ci` that pending `idx`, a gang of `gang` GPUs (base priority `base`),
    /// may move: training-like work for a gang of its side, other work only while its side is
    /// not `owed` (a moved replica then finds its holes free), checkpointing or not
    /// started, smaller than the gang, of its flavors only, on known nodes of one pool,
    /// losing at most `max_lost` seconds; least work lost first.
    fn movable(
        &self,
        ci: usize,
        idx: u32,
        base: i32,
        gang: u64,
        max_lost: u64,
        owed: [bool; 2],
    ) -> Vec<u32> {
        let shape = &self.shapes[self.shape_of[idx as usize] as usize];
        let side = FleetSide::of_class(self.input.pending[idx as usize].workload.spec.class);
        let mut cands: Vec<(u64, u64, u32)> = Vec::new();
        for &ri in &self.on_cluster[ci] {
            let r = &self.running[ri as usize];
            let gpus: u64 = r.gpus.iter().map(|(_, n)| *n).sum();
            let checkpoints = r.tier == VictimTier::NotStarted
                || (r.checkpointable && r.tier == VictimTier::Checkpointable);
            let one_pool = r.pods.first().is_some_and(|(pi, _, _)| {
                r.pods.iter().all(|(p, _, _)| p == pi) && r.nodes.iter().all(|n| n.0 == *pi)
            });
            if r.terminating
                || !r.preemptible_now
                || r.preemptibility != Preemptibility::Allowed
                || r.base > base
                || !checkpoints
                || gpus == 0
                || gpus >= gang
                || r.nodes.is_empty()
                || !one_pool
                || !self.sides.runs.get(ri as usize).is_some_and(|(rs, _)| {
                    (*rs == side && *rs == FleetSide::Training) || !owed[*rs as usize]
                })
                || !r
                    .gpus
                    .iter()
                    .all(|(f, _)| shape.flavors().any(|sf| sf == *f))
            {
                continue;
            }
            let lost = if r.tier == VictimTier::NotStarted {
                0
            } else {
                r.work_lost_seconds
            };
            if lost > max_lost {
                continue;
            }
            cands.push((lost.saturating_mul(gpus), gpus, ri));
        }
        cands.sort_unstable();
        cands.into_iter().map(|c| c.2).collect()
    }

    /// The proof that moving `victims` loses no running work: on `ci` with them gone, the
    /// preemptor holds `holds` and the gang of shape `s` placed, every victim's pods fit
    /// again (largest victim first, best fit, anywhere in its pool).
    fn victims_fit_again(&self, ci: usize, s: usize, victims: &[u32], holds: &[usize]) -> bool {
        let mut pools = self.clusters[ci].pools.clone();
        for &h in holds {
            if self.holds[h].returning.is_empty() {
                let holder = self.shape_of[self.holds[h].holder as usize] as usize;
                if let Some(fit) = fit_in_pools(&pools, &self.shapes[holder], &self.book.flavors)
                    && !self.take_placed(&mut pools, holder, &fit)
                {
                    return false;
                }
            }
        }
        self.return_into(&mut pools, victims);
        if !self.take_fit(&mut pools, s) {
            return false;
        }
        let mut order: Vec<(u64, u32)> = victims
            .iter()
            .map(|&ri| {
                let gpus = self.running[ri as usize].gpus.iter().map(|(_, n)| *n).sum();
                (gpus, ri)
            })
            .collect();
        order.sort_unstable_by(|a, b| b.cmp(a));
        for (_, ri) in order {
            for &(pi, _, pc) in &self.running[ri as usize].pods {
                let need = GroupNeed {
                    pods: vec![pc],
                    gpus: u64::from(pc.gpus_per_pod) * u64::from(pc.count),
                    level: None,
                    required: false,
                };
                let Some(pool) = pools.get_mut(pi) else {
                    return false;
                };
                let Some(choice) = pool.best_fit(&need) else {
                    return false;
                };
                if pool.take(&need, choice).is_none() {
                    return false;
                }
            }
        }
        true
    }
}
