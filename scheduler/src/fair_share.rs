//! Weighted dominant-resource fairness across queues.
//!
//! A queue's dominant share is the largest fraction of any flavor's fleet capacity it uses,
//! divided by its fair-share weight. Among workloads of equal (aged) priority, the queue with
//! the lowest share goes first, so a team that already holds much of the scarce flavor
//! yields to one that holds little, in proportion to the weights the platform team set.
//! Shares are recomputed after each admission, within the cycle.

use std::cmp::Ordering;

use super::quota::QuotaBook;

/// Lower goes first; `0.0` for every queue when fair sharing is off.
pub fn dominant_share(book: &QuotaBook, q: usize) -> f64 {
    let mut share = 0.0f64;
    for (f, cap) in book.capacity.iter().enumerate() {
        if *cap > 0 {
            share = share.max(book.used(q, f) as f64 / *cap as f64);
        }
    }
    share / book.queues[q].weight
}

/// A total order on shares (they are finite, but `total_cmp` keeps it panic-free anyway).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Share(pub f64);

impl Eq for Share {}

impl PartialOrd for Share {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Share {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

#[cfg(test)]
mod tests {
    use tideway_api::{FlavorQuota, Queue, QueueSpec};

    use super::*;

    #[test]
    fn heavier_weight_lowers_share() {
        let mk = |name: &str, w: f64| {
            let mut spec = QueueSpec::new("t");
            spec.cohort = Some("c".into());
            spec.fair_share_weight = w;
            spec.quotas = vec![FlavorQuota::guaranteed("H100", 10)];
            Queue::new(name, spec)
        };
        let mut book = QuotaBook::new(&[mk("a", 1.0), mk("b", 2.0)], &[], vec!["H100".into()]);
        book.capacity = vec![100];
        book.charge(0, 0, 10);
        book.charge(1, 0, 10);
        assert!(dominant_share(&book, 1) < dominant_share(&book, 0));
        assert!(Share(0.1) < Share(0.2));
    }
}
