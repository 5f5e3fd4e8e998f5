//! Checkpoint notices at a hand-over: "checkpoint now, keep running".
//!
//! When a boundary lowers a fleet side's guarantee, what that side holds beyond its coming
//! quota is what the other side may reclaim. Reclaim happens only if the other side needs
//! the capacity, and then with a grace period; but work that has not checkpointed for a
//! while would lose everything since its last checkpoint. So from the start of the
//! hand-over (the schedule's `handoverLeadSeconds`, at least its checkpoint grace, before
//! the boundary) that work is asked to checkpoint by the boundary and keeps running. A
//! workload that has checkpointed since the hand-over started is not asked again: the
//! decision is a function of the cycle's input, so the caller may apply it idempotently.
//!
//! Which work: running, checkpointable work of the losing side in the schedule's regions,
//! in the order reclaim would take it (not started, then least work lost, then lowest
//! priority), until what is left is within the coming quota. Work that has not started,
//! is already being reclaimed, or has checkpointed since the hand-over began counts toward
//! that without a notice.

use super::super::cycle::{Cycle, secs_between};
use super::super::decision::{CheckpointNotice, VictimTier};
use super::super::reclaim::gpus_of;

impl Cycle<'_> {
    /// The checkpoint notices this cycle gives; empty outside every hand-over.
    pub fn checkpoint_notices(&self) -> Vec<CheckpointNotice> {
        let mut out = Vec::new();
        let mut taken = vec![false; self.running.len()];
        for e in &self.sides.entries {
            let (Some(boundary), Some(next)) = (e.boundary, e.next_guaranteed) else {
                continue;
            };
            if next >= e.guaranteed {
                continue;
            }
            let lead = e.handover_seconds.max(e.grace_seconds.unwrap_or(0));
            let from = boundary - chrono::Duration::seconds(i64::try_from(lead).unwrap_or(0));
            if self.now < from || self.now >= boundary {
                continue;
            }
            let since_from = secs_between(from, self.now);
            let mut cands: Vec<(VictimTier, u64, i32, usize, u64)> = Vec::new();
            for (ri, r) in self.running.iter().enumerate() {
                let Some(&(side, Some(ci))) = self.sides.runs.get(ri) else {
                    continue;
                };
                // Work already being reclaimed has its notice (the preemption's grace) and
                // no longer counts for its side.
                if side != e.side
                    || taken[ri]
                    || r.terminating
                    || !e.covers(&self.clusters[ci].region)
                    || (r.tier != VictimTier::NotStarted && !r.checkpointable)
                {
                    continue;
                }
                let gpus: u64 = gpus_of(&r.gpus, e.flavor);
                if gpus > 0 {
                    cands.push((r.tier, r.work_lost_seconds, r.base, ri, gpus));
                }
            }
            cands.sort_unstable();
            let mut over = e.used.saturating_sub(next);
            for (tier, lost, _, ri, gpus) in cands {
                if over == 0 {
                    break;
                }
                over = over.saturating_sub(gpus);
                taken[ri] = true;
                if tier == VictimTier::NotStarted || lost <= since_from {
                    continue;
                }
                let Some(&(_, Some(ci))) = self.sides.runs.get(ri) else {
                    continue;
                };
                out.push(CheckpointNotice {
                    uid: self.running[ri].uid.clone().into(),
                    cluster: self.clusters[ci].name.clone().into(),
                    deadline: boundary,
                });
            }
        }
        out.sort_by(|a, b| a.uid.as_str().cmp(b.uid.as_str()));
        out
    }
}
