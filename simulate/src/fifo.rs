//! FIFO mode: the baseline that published trace studies compare with.
//!
//! Each queue is a strict FIFO line: its head starts as soon as its queue's quota and some
//! allowed cluster can take the whole gang, and nothing behind a waiting head starts
//! (head-of-line blocking, on purpose: that is what FIFO means in the Helios and Slurm
//! comparisons). Across queues, heads are taken in global arrival order. The cluster is the
//! first allowed one (config order) whose digest fits the gang; the member's gang scheduler
//! then places the pods on nodes, right away, so the next head sees the new free capacity.
//!
//! The step stops at the first head of each queue that does not fit, so it costs the number
//! of jobs that start plus one per queue, whatever the backlog.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::engine::Engine;
use super::metrics;

impl Engine {
    pub(super) fn fifo_step(&mut self) {
        let mut heads: BinaryHeap<Reverse<(u64, usize)>> = self
            .queues
            .iter()
            .enumerate()
            .filter_map(|(q, qs)| qs.pending.first_key_value().map(|(k, _)| Reverse((k.1, q))))
            .collect();
        while let Some(Reverse((_, q))) = heads.pop() {
            let Some((_, &j)) = self.queues[q].pending.first_key_value() else {
                continue;
            };
            match self.fifo_place(j) {
                Ok(()) => {
                    if let Some((k, _)) = self.queues[q].pending.first_key_value() {
                        heads.push(Reverse((k.1, q)));
                    }
                }
                Err(reason) => self.set_reason(j, reason),
            }
        }
    }

    /// Starts `j` on the first cluster that takes it, or says why none does.
    fn fifo_place(&mut self, j: u32) -> Result<(), u8> {
        let ji = j as usize;
        let q = self.js[ji].queue as usize;
        if self.quota.check(q, &self.js[ji].request).is_err() {
            return Err(metrics::QUOTA);
        }
        let Some(gangs) = self.js[ji].gangs.take() else {
            return Err(metrics::QUEUED);
        };
        let allowed: Vec<usize> = match &self.js[ji].allowed {
            Some(list) => list.iter().map(|&c| c as usize).collect(),
            None => (0..self.members.len()).collect(),
        };
        let mut chosen = None;
        for &c in &allowed {
            self.refresh(c);
            let digest = &self.views[c].digest;
            if let Some(pools) = gangs.place(digest) {
                let pool = digest.pools[pools[0]].pool.clone();
                chosen = Some((c, pool, pools.len() == 1));
                break;
            }
        }
        let Some((c, pool, restrict)) = chosen else {
            // Enough free in total (in allowed clusters) but nowhere whole: fragmentation.
            let fragmented = gangs.iter().all(|(flavor, gpus, _)| {
                let free: u64 = allowed
                    .iter()
                    .map(|&c| gangs.free_gpus(&self.views[c].digest, flavor))
                    .sum();
                free >= gpus
            });
            self.js[ji].gangs = Some(gangs);
            return Err(if fragmented {
                metrics::FRAGMENTATION
            } else {
                metrics::CAPACITY
            });
        };
        self.js[ji].gangs = Some(gangs);
        if self.assign(j, c, pool, restrict) {
            self.tick_now(c);
        }
        Ok(())
    }
}
