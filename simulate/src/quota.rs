//! The simulator's own quota book: usage per queue and flavor, with the scheduler core's
//! cohort rules (guaranteed, lendable, borrowing ceiling).
//!
//! The scheduler core keeps its book private and rebuilds it every cycle; the simulator
//! needs the same numbers between cycles: FIFO mode admits against them, scheduler mode
//! sizes the pending window by each queue's headroom, and both report time over quota.
//! The rules are the ones documented in `federation/src/scheduler/quota.rs`: a queue's
//! guaranteed GPUs split into a private part and a lendable part that joins its cohort's
//! pool; usage above the private part draws on the pool; the ceiling is
//! `guaranteed + borrowingLimit` (and `max`).

use std::collections::HashMap;

use tideway_api::{FlavorQuota, Queue};

#[derive(Debug, Clone, Copy)]
struct Limit {
    guaranteed: u64,
    private: u64,
    lendable: u64,
    ceiling: Option<u64>,
}

impl Limit {
    fn new(q: &FlavorQuota) -> Self {
        let lendable = u64::from(q.lendable());
        Self {
            guaranteed: u64::from(q.guaranteed),
            private: u64::from(q.guaranteed) - lendable,
            lendable,
            ceiling: q.ceiling(),
        }
    }

    fn draw(&self, used: u64) -> u64 {
        used.saturating_sub(self.private)
    }
}

/// Why quota holds a request back: the flavor, what the queue uses and the most it could.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blocked {
    pub flavor: usize,
    pub used: u64,
    pub limit: u64,
}

#[derive(Debug, Clone)]
pub struct QuotaBook {
    nf: usize,
    cohort: Vec<usize>,
    limits: Vec<Option<Limit>>,
    usage: Vec<u64>,
    pool: Vec<u64>,
    drawn: Vec<u64>,
}

impl QuotaBook {
    /// `queues` in the simulator's queue order; `flavors` indexes flavor names.
    pub fn new(queues: &[&Queue], flavors: &HashMap<String, usize>, nf: usize) -> Self {
        let mut cohorts: HashMap<String, usize> = HashMap::new();
        let mut cohort = Vec::with_capacity(queues.len());
        let mut limits = vec![None; queues.len() * nf];
        for (qi, q) in queues.iter().enumerate() {
            let key = q
                .spec
                .cohort
                .clone()
                .unwrap_or_else(|| format!("\u{0}{}", q.metadata.name));
            let next = cohorts.len();
            cohort.push(*cohorts.entry(key).or_insert(next));
            for fq in &q.spec.quotas {
                if let Some(&f) = flavors.get(&fq.flavor) {
                    limits[qi * nf + f] = Some(Limit::new(fq));
                }
            }
        }
        let mut pool = vec![0; cohorts.len() * nf];
        for (qi, c) in cohort.iter().enumerate() {
            for f in 0..nf {
                if let Some(l) = limits[qi * nf + f] {
                    pool[c * nf + f] += l.lendable;
                }
            }
        }
        Self {
            nf,
            usage: vec![0; queues.len() * nf],
            drawn: vec![0; cohorts.len() * nf],
            cohort,
            limits,
            pool,
        }
    }

    pub fn used(&self, q: usize, f: usize) -> u64 {
        self.usage[q * self.nf + f]
    }

    pub fn guaranteed(&self, q: usize, f: usize) -> u64 {
        self.limits[q * self.nf + f].map_or(0, |l| l.guaranteed)
    }

    fn set(&mut self, q: usize, f: usize, new: u64) {
        let i = q * self.nf + f;
        let old = self.usage[i];
        self.usage[i] = new;
        if let Some(l) = self.limits[i] {
            let c = self.cohort[q] * self.nf + f;
            self.drawn[c] = self.drawn[c] - l.draw(old).min(self.drawn[c]) + l.draw(new);
        }
    }

    pub fn charge(&mut self, q: usize, f: usize, gpus: u64) {
        let new = self.used(q, f) + gpus;
        self.set(q, f, new);
    }

    pub fn release(&mut self, q: usize, f: usize, gpus: u64) {
        let new = self.used(q, f).saturating_sub(gpus);
        self.set(q, f, new);
    }

    /// The most `q` could use of `f` right now, given what its cohort peers draw.
    pub fn reachable(&self, q: usize, f: usize) -> u64 {
        let i = q * self.nf + f;
        let Some(l) = self.limits[i] else {
            return 0;
        };
        let used = self.usage[i];
        let c = self.cohort[q] * self.nf + f;
        let others = self.drawn[c] - l.draw(used).min(self.drawn[c]);
        let room = self.pool[c].saturating_sub(others);
        let reachable = (l.private + room).max(l.guaranteed);
        l.ceiling.map_or(reachable, |ce| ce.min(reachable))
    }

    /// The most `q` could ever use of `f`: its ceiling, or its guarantee plus everything its
    /// cohort peers could lend. A request above it can never be admitted.
    pub fn max_ever(&self, q: usize, f: usize) -> u64 {
        let i = q * self.nf + f;
        let Some(l) = self.limits[i] else {
            return 0;
        };
        let c = self.cohort[q] * self.nf + f;
        let all = (l.private + self.pool[c]).max(l.guaranteed);
        l.ceiling.map_or(all, |ce| ce.min(all))
    }

    /// Whether `q` may take `request` (GPUs per flavor) more now; the scheduler core's rule.
    pub fn check(&self, q: usize, request: &[(usize, u64)]) -> Result<(), Blocked> {
        for &(f, r) in request {
            let used = self.used(q, f);
            let reachable = self.reachable(q, f);
            if used + r > reachable {
                return Err(Blocked {
                    flavor: f,
                    used,
                    limit: reachable,
                });
            }
        }
        Ok(())
    }

    /// GPUs above the guarantee, summed over flavors: borrowed capacity.
    pub fn over_guarantee(&self, q: usize) -> u64 {
        (0..self.nf)
            .map(|f| self.used(q, f).saturating_sub(self.guaranteed(q, f)))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use tideway_api::QueueSpec;

    use super::*;

    fn queue(name: &str, cohort: Option<&str>, guaranteed: u32, borrow: Option<u32>) -> Queue {
        let mut spec = QueueSpec::new(name);
        spec.cohort = cohort.map(str::to_owned);
        let mut fq = FlavorQuota::guaranteed("P100", guaranteed);
        fq.borrowing_limit = borrow;
        spec.quotas = vec![fq];
        Queue::new(name, spec)
    }

    #[test]
    fn borrowing_within_a_cohort() {
        let a = queue("a", Some("c"), 10, None);
        let b = queue("b", Some("c"), 10, Some(5));
        let solo = queue("s", None, 4, None);
        let flavors = HashMap::from([("P100".to_owned(), 0)]);
        let mut book = QuotaBook::new(&[&a, &b, &solo], &flavors, 1);
        assert_eq!(book.max_ever(0, 0), 20);
        assert_eq!(book.max_ever(1, 0), 15, "borrowing limit");
        assert_eq!(book.max_ever(2, 0), 4, "no cohort: its guarantee");
        // a borrows all of b's idle guarantee
        book.check(0, &[(0, 20)]).unwrap();
        book.charge(0, 0, 20);
        assert_eq!(book.over_guarantee(0), 10);
        // b is still within its guarantee quota-wise (reclaim is preemption's job)
        book.check(1, &[(0, 10)]).unwrap();
        assert_eq!(
            book.check(1, &[(0, 11)]),
            Err(Blocked {
                flavor: 0,
                used: 0,
                limit: 10
            })
        );
        book.release(0, 0, 15);
        assert_eq!(book.reachable(1, 0), 15);
        assert!(book.check(2, &[(0, 5)]).is_err());
    }
}
