//! The order in which pending workloads are considered.
//!
//! 1. effective priority: the class value aged by waiting time (rate and cap from the class),
//!    so low-priority work cannot starve forever yet never overtakes a truly higher class;
//! 2. work its fleet side is owed before work that would borrow: under tidal side quotas, a
//!    workload that fits within its side's guarantee goes before one of the other side that
//!    would run beyond its own (Kueue orders work within nominal quota before borrowing work
//!    the same way), so training that merely borrows never takes the capacity inference is
//!    guaranteed, and inference need not evict it again;
//! 3. weighted dominant-resource fair share of the workload's queue, lowest first;
//! 4. with `tuning.order: shortestExpectedFirst`, the least expected GPU-time (run-time
//!    estimate times GPUs, as Helios's QSSF) first;
//! 5. FIFO by submission sequence number.
//!
//! Fair share changes as the cycle admits work, so a static sort cannot express it. Each
//! queue's workloads are sorted once by (priority, seq); the cycle then repeatedly takes the
//! best queue head from a heap, and only the queue that just admitted is re-keyed. That is
//! O(n log n + n log queues), with no head-of-line blocking: a head that cannot be placed is
//! answered and the queue moves on.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use tideway_api::{PriorityClass, PriorityClassSpec};

use super::fair_share::Share;
use super::hash::DetMap;

/// Priority classes by name, with the policy's default for workloads naming an unknown one.
pub struct PriorityBook {
    by_name: DetMap<String, PriorityClassSpec>,
    default: PriorityClassSpec,
}

impl PriorityBook {
    pub fn new(classes: &[PriorityClass], default_class: &str) -> Self {
        let mut by_name = DetMap::default();
        for c in classes {
            by_name
                .entry(c.metadata.name.clone())
                .or_insert_with(|| c.spec.clone());
        }
        // No default class defined: value 0, preemptible, no aging.
        let default = by_name
            .get(default_class)
            .cloned()
            .unwrap_or_else(|| PriorityClassSpec::new(0));
        Self { by_name, default }
    }

    pub fn class(&self, name: &str) -> &PriorityClassSpec {
        self.by_name.get(name).unwrap_or(&self.default)
    }
}

/// The part of a pending workload the order looks at.
#[derive(Debug, Clone, Copy)]
pub struct Rank {
    pub effective: i64,
    /// Expected GPU-seconds under shortest-expected-first, else 0.
    pub expected: u64,
    pub seq: u64,
}

/// What a queue's head is ranked by besides its own [`Rank`]: whether it would borrow beyond
/// its side's guarantee, and its queue's current fair share. Both change as the cycle admits
/// work, so they are read when the head is (re)queued.
#[derive(Debug, Clone, Copy)]
pub struct HeadKey {
    pub borrows: bool,
    pub share: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Head {
    effective: i64,
    borrows: bool,
    share: Share,
    expected: u64,
    seq: u64,
    list: usize,
}

impl Ord for Head {
    /// `BinaryHeap` pops the greatest: higher priority, then not borrowing, then lower
    /// share, then lower seq.
    fn cmp(&self, other: &Self) -> Ordering {
        self.effective
            .cmp(&other.effective)
            .then_with(|| other.borrows.cmp(&self.borrows))
            .then_with(|| other.share.cmp(&self.share))
            .then_with(|| other.expected.cmp(&self.expected))
            .then_with(|| other.seq.cmp(&self.seq))
            .then_with(|| other.list.cmp(&self.list))
    }
}

impl Head {
    /// List `l`'s head `idx`, ranked by its own rank and the list's current key.
    fn of(l: usize, idx: u32, ranks: &[Rank], key: impl Fn(usize, u32) -> HeadKey) -> Self {
        let r = ranks[idx as usize];
        let k = key(l, idx);
        Head {
            effective: r.effective,
            borrows: k.borrows,
            share: Share(k.share),
            expected: r.expected,
            seq: r.seq,
            list: l,
        }
    }
}

impl PartialOrd for Head {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Merges per-queue lists by priority, fair share and FIFO.
pub struct Order {
    lists: Vec<Vec<u32>>,
    pos: Vec<usize>,
    heap: BinaryHeap<Head>,
}

impl Order {
    /// `lists[l]` holds pending indices of one queue (the last list: unknown queues);
    /// `ranks` is indexed by pending index; `key(l, idx)` is list `l`'s key with `idx` at
    /// its head.
    pub fn new(
        mut lists: Vec<Vec<u32>>,
        ranks: &[Rank],
        key: impl Fn(usize, u32) -> HeadKey,
    ) -> Self {
        for list in &mut lists {
            list.sort_unstable_by(|a, b| {
                let (ra, rb) = (ranks[*a as usize], ranks[*b as usize]);
                rb.effective
                    .cmp(&ra.effective)
                    .then(ra.expected.cmp(&rb.expected))
                    .then(ra.seq.cmp(&rb.seq))
                    .then(a.cmp(b))
            });
        }
        let mut heap = BinaryHeap::with_capacity(lists.len());
        for (l, list) in lists.iter().enumerate() {
            if let Some(&first) = list.first() {
                heap.push(Head::of(l, first, ranks, &key));
            }
        }
        Self {
            pos: vec![0; lists.len()],
            lists,
            heap,
        }
    }

    /// The next workload to consider and its list; call [`Order::advance`] with the list
    /// once the workload's decision has been charged.
    pub fn pop(&mut self) -> Option<(usize, u32)> {
        let head = self.heap.pop()?;
        let l = head.list;
        let idx = self.lists[l][self.pos[l]];
        self.pos[l] += 1;
        Some((l, idx))
    }

    pub fn advance(&mut self, l: usize, ranks: &[Rank], key: impl Fn(usize, u32) -> HeadKey) {
        if let Some(&idx) = self.lists[l].get(self.pos[l]) {
            self.heap.push(Head::of(l, idx, ranks, key));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priority_then_share_then_fifo() {
        let ranks = [
            Rank {
                effective: 10,
                expected: 0,
                seq: 5,
            },
            Rank {
                effective: 10,
                expected: 0,
                seq: 1,
            },
            Rank {
                effective: 20,
                expected: 0,
                seq: 9,
            },
            Rank {
                effective: 10,
                expected: 0,
                seq: 2,
            },
        ];
        // Queue 0 holds 0 and 1; queue 1 holds 2 and 3. Queue 1 has the higher share.
        let shares = [0.1, 0.5];
        let walk = |borrower: Option<u32>| {
            let key = |l: usize, i: u32| HeadKey {
                borrows: Some(i) == borrower,
                share: shares[l],
            };
            let mut o = Order::new(vec![vec![0, 1], vec![2, 3]], &ranks, key);
            let mut seen = Vec::new();
            while let Some((l, i)) = o.pop() {
                seen.push(i);
                o.advance(l, &ranks, key);
            }
            seen
        };
        // 2 (priority 20), then queue 0 (lower share) in FIFO order, then 3.
        assert_eq!(walk(None), vec![2, 1, 0, 3]);
        // Workload 1 would borrow: at equal priority the other queue's 3 goes first,
        // whatever the shares; priority still comes before it (2 first).
        assert_eq!(walk(Some(1)), vec![2, 3, 1, 0]);
    }
}
