//! Quota accounting per queue and flavor, with Kueue's cohort semantics.
//!
//! A queue's guaranteed GPUs split into a private part (`guaranteed - lendable`) that is never
//! lent and a lendable part that joins its cohort's shared pool. Usage above the private part
//! draws on the pool; a queue may draw beyond its own lendable part (borrow) while the pool
//! has room, up to its ceiling (`guaranteed + borrowingLimit`, and `max`). Within its
//! guarantee a queue is always admitted quota-wise, even when peers borrowed its share: the
//! capacity it then lacks is reclaimed by preemption. Usage is running plus admitted in this
//! cycle, so a queue never passes its limits within one cycle either.

use chrono::{DateTime, Utc};
use tideway_api::{FlavorQuota, PendingReason, Queue, QueuePreemption, WorkloadClass};

use super::hash::DetMap;
use super::input::QuotaOverride;

/// The guarantee of a queue without quotas: more than any fleet has.
const UNLIMITED_GPUS: u32 = u32::MAX / 4;

/// Effective limits of one queue for one flavor.
#[derive(Debug, Clone)]
pub struct Limit {
    pub guaranteed: u64,
    /// Never lent: `guaranteed - lendable`.
    pub private: u64,
    pub lendable: u64,
    pub ceiling: Option<u64>,
    /// Set when a tidal window supplied this limit.
    pub window_until: Option<DateTime<Utc>>,
}

impl Limit {
    fn from_quota(q: &FlavorQuota, until: Option<DateTime<Utc>>) -> Self {
        let lendable = u64::from(q.lendable());
        Self {
            guaranteed: u64::from(q.guaranteed),
            private: u64::from(q.guaranteed) - lendable,
            lendable,
            ceiling: q.ceiling(),
            window_until: until,
        }
    }

    fn draw(&self, used: u64) -> u64 {
        used.saturating_sub(self.private)
    }
}

/// A queue as the book knows it: its cohort (by id), fair-share weight, preemption policy,
/// per-user limit and classes.
#[derive(Debug, Clone)]
pub struct QueueInfo {
    pub name: String,
    pub cohort: usize,
    pub has_cohort: bool,
    pub weight: f64,
    pub preemption: QueuePreemption,
    pub per_user_limit: Option<u32>,
    pub classes: Vec<WorkloadClass>,
}

/// Why quota holds a workload back.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum QuotaBlock {
    Exhausted {
        flavor: usize,
        used: u64,
        limit: u64,
        short: u64,
    },
    WindowClosed {
        until: DateTime<Utc>,
    },
}

#[derive(Debug, Clone, Default)]
pub struct QuotaBook {
    pub flavors: Vec<String>,
    flavor_ids: DetMap<String, usize>,
    pub queues: Vec<QueueInfo>,
    queue_ids: DetMap<String, usize>,
    limits: Vec<Option<Limit>>,
    usage: Vec<u64>,
    /// Per cohort and flavor: the shared pool and what is drawn from it.
    pool: Vec<u64>,
    drawn: Vec<u64>,
    /// Fleet capacity per flavor, the denominator of dominant shares.
    pub capacity: Vec<u64>,
}

impl QuotaBook {
    /// `flavors` must list every flavor named by a queue, an override, a digest or a
    /// workload, so ids are stable for the cycle.
    pub fn new(queues: &[Queue], overrides: &[QuotaOverride], flavors: Vec<String>) -> Self {
        let flavor_ids: DetMap<String, usize> = flavors
            .iter()
            .enumerate()
            .map(|(i, f)| (f.clone(), i))
            .collect();
        let nf = flavors.len();
        let mut book = Self {
            flavors,
            flavor_ids,
            ..Self::default()
        };
        let mut cohorts: DetMap<String, usize> = DetMap::default();
        for q in queues {
            let name = q.metadata.name.clone();
            if book.queue_ids.contains_key(&name) {
                continue;
            }
            let next = cohorts.len();
            let (cohort, has_cohort) = match &q.spec.cohort {
                Some(c) => (*cohorts.entry(c.clone()).or_insert(next), true),
                // A queue outside any cohort is a cohort of its own: nobody to borrow from.
                None => (
                    *cohorts.entry(format!("\u{0}{name}")).or_insert(next),
                    false,
                ),
            };
            let weight = q.spec.fair_share_weight;
            book.queue_ids.insert(name.clone(), book.queues.len());
            book.queues.push(QueueInfo {
                name,
                cohort,
                has_cohort,
                weight: if weight.is_finite() && weight > 0.0 {
                    weight
                } else {
                    1.0
                },
                preemption: q.spec.preemption,
                per_user_limit: q.spec.per_user_active_limit,
                classes: q.spec.classes.clone(),
            });
            let mut limits = vec![None; nf];
            if q.spec.quotas.is_empty() {
                // A queue that names no quotas is not quota-limited (the bootstrap `default`
                // queue): it competes on priority and fair share only, and lends nothing.
                for (f, flavor) in book.flavors.iter().enumerate() {
                    let unlimited = FlavorQuota {
                        flavor: flavor.clone(),
                        guaranteed: UNLIMITED_GPUS,
                        borrowing_limit: None,
                        lending_limit: Some(0),
                        max: None,
                    };
                    limits[f] = Some(Limit::from_quota(&unlimited, None));
                }
            }
            for fq in &q.spec.quotas {
                if let Some(&f) = book.flavor_ids.get(&fq.flavor) {
                    limits[f] = Some(Limit::from_quota(fq, None));
                }
            }
            book.limits.extend(limits);
        }
        for o in overrides {
            if let (Some(&q), Some(&f)) = (
                book.queue_ids.get(&o.queue),
                book.flavor_ids.get(&o.quota.flavor),
            ) {
                book.limits[q * nf + f] = Some(Limit::from_quota(&o.quota, o.until));
            }
        }
        book.usage = vec![0; book.queues.len() * nf];
        book.pool = vec![0; cohorts.len() * nf];
        book.drawn = vec![0; cohorts.len() * nf];
        book.capacity = vec![0; nf];
        for (q, info) in book.queues.iter().enumerate() {
            for f in 0..nf {
                if let Some(l) = &book.limits[q * nf + f] {
                    book.pool[info.cohort * nf + f] += l.lendable;
                }
            }
        }
        book
    }

    pub fn flavor_id(&self, f: &str) -> Option<usize> {
        self.flavor_ids.get(f).copied()
    }

    pub fn queue_id(&self, q: &str) -> Option<usize> {
        self.queue_ids.get(q).copied()
    }

    fn nf(&self) -> usize {
        self.flavors.len()
    }

    pub fn limit(&self, q: usize, f: usize) -> Option<&Limit> {
        self.limits[q * self.nf() + f].as_ref()
    }

    pub fn used(&self, q: usize, f: usize) -> u64 {
        self.usage[q * self.nf() + f]
    }

    /// Adds usage unconditionally: running work counts whether or not it fits today's
    /// limits (a tidal window may have shrunk them).
    pub fn charge(&mut self, q: usize, f: usize, gpus: u64) {
        let nf = self.nf();
        let old = self.usage[q * nf + f];
        let new = old.saturating_add(gpus);
        self.usage[q * nf + f] = new;
        if let Some(l) = &self.limits[q * nf + f] {
            let c = self.queues[q].cohort * nf + f;
            self.drawn[c] =
                (self.drawn[c] - l.draw(old).min(self.drawn[c])).saturating_add(l.draw(new));
        }
    }

    /// Whether `q` may take `request` (GPUs per flavor) more now.
    pub fn check(&self, q: usize, request: &[(usize, u64)]) -> Result<(), QuotaBlock> {
        let nf = self.nf();
        for &(f, r) in request {
            let used = self.usage[q * nf + f];
            let Some(l) = &self.limits[q * nf + f] else {
                return Err(QuotaBlock::Exhausted {
                    flavor: f,
                    used,
                    limit: 0,
                    short: r,
                });
            };
            let new = used.saturating_add(r);
            if let Some(ceiling) = l.ceiling
                && new > ceiling
            {
                if ceiling == 0
                    && let Some(until) = l.window_until
                {
                    return Err(QuotaBlock::WindowClosed { until });
                }
                return Err(QuotaBlock::Exhausted {
                    flavor: f,
                    used,
                    limit: ceiling,
                    short: new - ceiling,
                });
            }
            if new <= l.guaranteed {
                continue;
            }
            let c = self.queues[q].cohort * nf + f;
            let others = self.drawn[c] - l.draw(used).min(self.drawn[c]);
            let room = self.pool[c].saturating_sub(others);
            if l.draw(new) > room {
                // The most this queue could use right now.
                let reachable = l.private.saturating_add(room).max(l.guaranteed);
                let limit = l.ceiling.map_or(reachable, |c| c.min(reachable));
                if limit == 0
                    && let Some(until) = l.window_until
                {
                    return Err(QuotaBlock::WindowClosed { until });
                }
                return Err(QuotaBlock::Exhausted {
                    flavor: f,
                    used,
                    limit,
                    short: new.saturating_sub(limit),
                });
            }
        }
        Ok(())
    }

    /// Whether the request stays within `q`'s guarantee: the right to reclaim lent quota.
    pub fn within_guarantee(&self, q: usize, request: &[(usize, u64)]) -> bool {
        request.iter().all(|&(f, r)| {
            self.limit(q, f)
                .is_some_and(|l| self.used(q, f).saturating_add(r) <= l.guaranteed)
        })
    }

    /// GPUs `q` uses of `f` beyond its guarantee (borrowed, or over a shrunk window quota).
    pub fn over_guarantee(&self, q: usize, f: usize) -> u64 {
        let g = self.limit(q, f).map_or(0, |l| l.guaranteed);
        self.used(q, f).saturating_sub(g)
    }

    /// The structured reason for a block.
    pub fn reason(&self, q: usize, block: &QuotaBlock) -> PendingReason {
        match block {
            QuotaBlock::Exhausted {
                flavor,
                used,
                limit,
                ..
            } => PendingReason::QuotaExhausted {
                queue: self.queues[q].name.clone(),
                flavor: self.flavors[*flavor].clone(),
                used: *used,
                limit: *limit,
            },
            QuotaBlock::WindowClosed { until } => PendingReason::WindowClosed { until: *until },
        }
    }
}

/// Book-keeping across cycles. A cycle builds its book afresh and only ever adds usage; a
/// caller that keeps one book for a whole run (the trace simulator, which admits in FIFO
/// mode and sizes its pending window from it) also needs work to stop and to ask what a
/// queue could reach, by the same cohort rules as [`QuotaBook::check`].
impl QuotaBook {
    /// Takes usage back when work stops: the inverse of [`QuotaBook::charge`].
    pub fn release(&mut self, q: usize, f: usize, gpus: u64) {
        let nf = self.nf();
        let old = self.usage[q * nf + f];
        let new = old.saturating_sub(gpus);
        self.usage[q * nf + f] = new;
        if let Some(l) = &self.limits[q * nf + f] {
            let c = self.queues[q].cohort * nf + f;
            self.drawn[c] =
                (self.drawn[c] - l.draw(old).min(self.drawn[c])).saturating_add(l.draw(new));
        }
    }

    /// The most `q` could use of `f` right now, given what its cohort peers draw: a request
    /// passes [`QuotaBook::check`] exactly when usage plus request stays within this.
    pub fn reachable(&self, q: usize, f: usize) -> u64 {
        let nf = self.nf();
        let Some(l) = &self.limits[q * nf + f] else {
            return 0;
        };
        let used = self.usage[q * nf + f];
        let c = self.queues[q].cohort * nf + f;
        let others = self.drawn[c] - l.draw(used).min(self.drawn[c]);
        let room = self.pool[c].saturating_sub(others);
        let reachable = l.private.saturating_add(room).max(l.guaranteed);
        l.ceiling.map_or(reachable, |ce| ce.min(reachable))
    }

    /// The most `q` could ever use of `f`: its ceiling, or its guarantee plus all its cohort
    /// could lend. A request above it is never admitted, whatever else runs.
    pub fn max_ever(&self, q: usize, f: usize) -> u64 {
        let nf = self.nf();
        let Some(l) = &self.limits[q * nf + f] else {
            return 0;
        };
        let c = self.queues[q].cohort * nf + f;
        let all = l.private.saturating_add(self.pool[c]).max(l.guaranteed);
        l.ceiling.map_or(all, |ce| ce.min(all))
    }
}

#[cfg(test)]
mod tests {
    use tideway_api::QueueSpec;

    use super::*;

    fn queue(name: &str, cohort: Option<&str>, quotas: Vec<FlavorQuota>) -> Queue {
        let mut spec = QueueSpec::new("t");
        spec.cohort = cohort.map(str::to_owned);
        spec.quotas = quotas;
        Queue::new(name, spec)
    }

    #[test]
    fn borrowing_within_cohort_respects_lending_and_borrowing_limits() {
        let mut a = FlavorQuota::guaranteed("H100", 10);
        a.borrowing_limit = Some(5);
        let mut b = FlavorQuota::guaranteed("H100", 10);
        b.lending_limit = Some(4);
        let book = QuotaBook::new(
            &[
                queue("a", Some("c"), vec![a]),
                queue("b", Some("c"), vec![b]),
            ],
            &[],
            vec!["H100".into()],
        );
        let mut book = book;
        let (qa, qb) = (0, 1);
        assert!(book.check(qa, &[(0, 10)]).is_ok());
        // b lends 4 only: a can reach 14, not its borrowing limit of 15.
        assert!(book.check(qa, &[(0, 14)]).is_ok());
        assert_eq!(
            book.check(qa, &[(0, 15)]),
            Err(QuotaBlock::Exhausted {
                flavor: 0,
                used: 0,
                limit: 14,
                short: 1
            })
        );
        book.charge(qa, 0, 14);
        // b is still admitted within its own guarantee (it reclaims by preemption).
        assert!(book.check(qb, &[(0, 10)]).is_ok());
        assert_eq!(book.over_guarantee(qa, 0), 4);
        assert!(book.within_guarantee(qb, &[(0, 10)]));
    }

    #[test]
    fn no_entry_means_no_quota_and_closed_window_says_until() {
        let until: DateTime<Utc> = "2030-01-01T00:00:00Z".parse().unwrap();
        let book = QuotaBook::new(
            &[queue("a", None, vec![FlavorQuota::guaranteed("H100", 8)])],
            &[QuotaOverride {
                queue: "a".into(),
                quota: FlavorQuota {
                    max: Some(0),
                    ..FlavorQuota::guaranteed("H100", 0)
                },
                window: Some("day".into()),
                until: Some(until),
                side: None,
                regions: Vec::new(),
                handover: None,
            }],
            vec!["H100".into(), "A100".into()],
        );
        assert_eq!(
            book.check(0, &[(0, 1)]),
            Err(QuotaBlock::WindowClosed { until })
        );
        assert!(matches!(
            book.check(0, &[(1, 1)]),
            Err(QuotaBlock::Exhausted { limit: 0, .. })
        ));
    }

    #[test]
    fn release_reachable_and_max_ever_follow_the_cohort() {
        let a = queue("a", Some("c"), vec![FlavorQuota::guaranteed("P100", 10)]);
        let mut bq = FlavorQuota::guaranteed("P100", 10);
        bq.borrowing_limit = Some(5);
        let b = queue("b", Some("c"), vec![bq]);
        let solo = queue("s", None, vec![FlavorQuota::guaranteed("P100", 4)]);
        let mut book = QuotaBook::new(&[a, b, solo], &[], vec!["P100".into()]);
        assert_eq!(book.max_ever(0, 0), 20);
        assert_eq!(book.max_ever(1, 0), 15, "borrowing limit");
        assert_eq!(book.max_ever(2, 0), 4, "no cohort: its guarantee");
        // a borrows all of b's idle guarantee
        assert!(book.check(0, &[(0, 20)]).is_ok());
        book.charge(0, 0, 20);
        assert_eq!(book.reachable(0, 0), 20);
        // b is still within its guarantee quota-wise (reclaim is preemption's job)
        assert!(book.check(1, &[(0, 10)]).is_ok());
        assert!(book.check(1, &[(0, 11)]).is_err());
        assert_eq!(book.reachable(1, 0), 10);
        book.release(0, 0, 15);
        assert_eq!(book.used(0, 0), 5);
        assert_eq!(book.reachable(1, 0), 15);
        assert_eq!(book.reachable(2, 0), 4);
        book.release(0, 0, 100);
        assert_eq!(book.used(0, 0), 0, "release saturates");
    }
}
