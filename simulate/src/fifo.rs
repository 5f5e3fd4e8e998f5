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
            .jobs()
            .queues()
            .iter()
            .enumerate()
            .filter_map(|(q, qs)| qs.head().map(|(k, _)| Reverse((k.1, q))))
            .collect();
        while let Some(Reverse((_, q))) = heads.pop() {
            let Some((_, j)) = self.jobs().queues()[q].head() else {
                continue;
            };
            match self.fifo_place(j) {
                Ok(()) => {
                    if let Some((k, _)) = self.jobs().queues()[q].head() {
                        heads.push(Reverse((k.1, q)));
                    }
                }
                Err(reason) => self.set_reason(j, reason),
            }
        }
    }

    /// Starts `j` on the first cluster that takes it, or says why none does.
    fn fifo_place(&mut self, j: u32) -> Result<(), u8> {
        let jobs = self.jobs();
        if self.quota().check(jobs.queue(j), jobs.request(j)).is_err() {
            return Err(metrics::QUOTA);
        }
        if jobs.gangs(j).is_none() {
            return Err(metrics::QUEUED);
        }
        let allowed: Vec<usize> = match jobs.allowed(j) {
            Some(list) => list.iter().map(|&c| c as usize).collect(),
            None => (0..self.fleet().len()).collect(),
        };
        let mut chosen = None;
        for &c in &allowed {
            self.refresh(c);
            let digest = self.fleet().digest(c);
            if let Some(pools) = self.jobs().gangs(j).and_then(|g| g.place(digest)) {
                let pool = digest.pools[pools[0]].pool.clone();
                chosen = Some((c, pool, pools.len() == 1));
                break;
            }
        }
        let Some((c, pool, restrict)) = chosen else {
            // Enough free in total (in allowed clusters) but nowhere whole: fragmentation.
            let fleet = self.fleet();
            let fragmented = self.jobs().gangs(j).is_some_and(|gangs| {
                gangs.iter().all(|(flavor, gpus, _)| {
                    let free: u64 = allowed
                        .iter()
                        .map(|&c| gangs.free_gpus(fleet.digest(c), flavor))
                        .sum();
                    free >= gpus
                })
            });
            return Err(if fragmented {
                metrics::FRAGMENTATION
            } else {
                metrics::CAPACITY
            });
        };
        if self.assign(j, c, pool, restrict) {
            self.tick_now(c);
        }
        Ok(())
    }
}
