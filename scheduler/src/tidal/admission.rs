//! Window-aware admission: within a schedule's lead time before a boundary that lowers a
//! fleet side's guarantee, that side starts no work that would outlast the boundary and end
//! up over the new quota, unless it can checkpoint. Such work would only be reclaimed a few
//! minutes later, losing everything it did.
//!
//! The workload waits with reason `WindowClosing` (boundary and estimate), and the same
//! in its explanation's way to unblock.

use super::super::cycle::Cycle;
use super::super::explain::Unblock;
use super::super::reclaim::gpus_of;
use super::FleetSide;

impl Cycle<'_> {
    /// `Some` when pending workload `idx` must wait for the coming boundary.
    pub fn window_closing(&self, idx: u32) -> Option<Unblock> {
        if self.sides.entries.is_empty() {
            return None;
        }
        let w = &self.input.pending[idx as usize].workload;
        if w.spec.checkpoint.is_some() {
            return None;
        }
        let side = FleetSide::of_class(w.spec.class);
        let s = self.shape_of[idx as usize] as usize;
        let shape = &self.shapes[s];
        // The same estimate backfill and reservations use (learned, limit, or default).
        let estimate = self.pending_estimate(idx);
        let ends = super::super::cycle::plus_secs(self.now, estimate);
        for e in &self.sides.entries {
            let (Some(boundary), Some(next)) = (e.boundary, e.next_guaranteed) else {
                continue;
            };
            let lead = chrono::Duration::seconds(i64::try_from(e.lead_seconds).unwrap_or(0));
            let losing = next < e.guaranteed;
            let in_lead = self.now < boundary && self.now >= boundary - lead;
            let applies = e.side == side
                && shape.candidates.iter().any(|&ci| {
                    e.regions.is_empty() || e.regions.contains(&self.clusters[ci].region)
                });
            let ask: u64 = gpus_of(&shape.request, e.flavor);
            if applies && losing && in_lead && ask > 0 && ends > boundary && e.used + ask > next {
                return Some(Unblock::WindowClosing {
                    boundary,
                    estimate_seconds: estimate,
                });
            }
        }
        None
    }
}
