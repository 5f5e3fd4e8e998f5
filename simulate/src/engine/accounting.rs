//! What a run measures while it runs: allocated GPU-seconds per pool (overall and up to the
//! last arrival), over-quota time per queue, pending time per queue and reason,
//! fragmentation and the `timeseries.csv` samples; and at the end, the summary built from
//! these and the job records.

use std::collections::BTreeMap;

use super::super::metrics::{
    JobRecord, PoolSummary, QueueSummary, REASONS, RunStats, Sample, Summary,
};
use super::super::sched::SchedStats;
use super::super::summary::{group_summary, ratio};
use super::super::time::Secs;

/// A bound on `timeseries.csv` whatever `sampleSeconds` says: a one-second interval over a
/// year of trace must not exhaust memory.
pub(super) const MAX_SAMPLES: usize = 1_000_000;

/// The next sample due before some time.
pub(super) enum SampleDue {
    None,
    At(Secs),
    /// The bound on samples was reached (reported once).
    Capped,
}

pub(super) struct Accounting {
    events: u64,
    alloc_secs: Vec<u128>,
    alloc_secs_at_last_arrival: Vec<u128>,
    frag_stranded: Vec<u64>,
    frag_free: Vec<u64>,
    over_secs: Vec<u64>,
    over_gpu_secs: Vec<u128>,
    reason_secs: Vec<[u64; REASONS.len()]>,
    samples: Vec<Sample>,
    next_sample: Secs,
    sample_every: Secs,
    rejected: BTreeMap<String, u64>,
}

/// A pool as the summary shows it.
pub(super) struct PoolLine<'a> {
    pub label: &'a str,
    pub cluster: &'a str,
    pub pool: &'a str,
    pub flavor: &'a str,
    pub total: u64,
}

/// A queue as the summary shows it.
pub(super) struct QueueLine<'a> {
    pub name: &'a str,
    /// What the queue declares for the fleet's flavors.
    pub guaranteed: u64,
}

/// What the summary needs besides the accounts.
pub(super) struct SummaryInput<'a> {
    pub mode: &'static str,
    pub policy: String,
    pub seed: u64,
    pub clusters: Vec<String>,
    pub first: Secs,
    pub end: Secs,
    pub last_arrival: Secs,
    pub wall: f64,
    pub sched: SchedStats,
    pub traces: Vec<super::super::trace::TraceReport>,
    pub notes: Vec<String>,
    pub warnings: Vec<String>,
    pub estimates: Option<super::super::metrics::EstimateSummary>,
    pub pools: Vec<PoolLine<'a>>,
    pub queues: Vec<QueueLine<'a>>,
}

impl Accounting {
    pub fn new(pools: usize, queues: usize, first: Secs, sample_every: Secs) -> Self {
        Self {
            events: 0,
            alloc_secs: vec![0; pools],
            alloc_secs_at_last_arrival: vec![0; pools],
            frag_stranded: vec![0; pools],
            frag_free: vec![0; pools],
            over_secs: vec![0; queues],
            over_gpu_secs: vec![0; queues],
            reason_secs: vec![[0; REASONS.len()]; queues],
            samples: Vec::new(),
            next_sample: first,
            sample_every,
            rejected: BTreeMap::new(),
        }
    }

    pub fn count_event(&mut self) {
        self.events += 1;
    }

    pub fn events(&self) -> u64 {
        self.events
    }

    pub fn rejected(&mut self, why: &str) {
        *self.rejected.entry(why.to_owned()).or_insert(0) += 1;
    }

    /// Pending time of a closed (queue, reason, seconds) interval.
    pub fn reason_time(&mut self, closed: Option<(usize, u8, u64)>) {
        if let Some((q, r, secs)) = closed {
            self.reason_secs[q][r as usize] += secs;
        }
    }

    /// The next sample due before `t`, moving the schedule on.
    pub fn sample_due(&mut self, t: Secs) -> SampleDue {
        if self.next_sample >= t {
            return SampleDue::None;
        }
        if self.samples.len() >= MAX_SAMPLES {
            self.next_sample = Secs::MAX;
            return SampleDue::Capped;
        }
        let at = self.next_sample;
        self.next_sample = self.next_sample.saturating_add(self.sample_every);
        SampleDue::At(at)
    }

    /// A sample, with the fleet's (pool, free, stranded) fragmentation at that time.
    pub fn sample(&mut self, sample: Sample, fragmentation: Vec<(usize, u64, u64)>) {
        for (gi, free, stranded) in fragmentation {
            self.frag_free[gi] += free;
            self.frag_stranded[gi] += stranded;
        }
        self.samples.push(sample);
    }

    /// `dt` seconds passed with `allocated` GPUs per pool and `over` GPUs above guarantee
    /// per queue.
    pub fn integrate(
        &mut self,
        dt: Secs,
        allocated: impl Iterator<Item = u64>,
        over: impl Iterator<Item = u64>,
    ) {
        for (i, a) in allocated.enumerate() {
            self.alloc_secs[i] += u128::from(a) * dt as u128;
        }
        for (q, over) in over.enumerate() {
            if over > 0 {
                self.over_secs[q] += dt as u64;
                self.over_gpu_secs[q] += u128::from(over) * dt as u128;
            }
        }
    }

    /// Snapshot at the last arrival, `after` seconds before the integrated time, for
    /// utilization while submitting.
    pub fn at_last_arrival(&mut self, after: Secs, allocated: impl Iterator<Item = u64>) {
        for (i, a) in allocated.enumerate() {
            self.alloc_secs_at_last_arrival[i] =
                self.alloc_secs[i] - u128::from(a) * after.max(0) as u128;
        }
    }

    /// Called at the end when the run ended before the last arrival's time.
    pub fn at_last_arrival_now(&mut self) {
        self.alloc_secs_at_last_arrival = self.alloc_secs.clone();
    }

    /// The summary, and the samples.
    pub fn finish(self, records: &[JobRecord], s: SummaryInput<'_>) -> (Summary, Vec<Sample>) {
        let span = (s.end - s.first).max(0);
        let submitting = (s.last_arrival - s.first).max(0);
        let fleet_gpus: u64 = s.pools.iter().map(|p| p.total).sum();
        let fleet_secs = fleet_gpus as f64 * span as f64;
        let group = |recs: &mut dyn Iterator<Item = &JobRecord>, reason_secs: &[u64]| {
            group_summary(recs, reason_secs, fleet_secs)
        };

        let total_reason_secs: Vec<u64> = (0..REASONS.len())
            .map(|r| self.reason_secs.iter().map(|q| q[r]).sum())
            .collect();
        let overall = group(&mut records.iter(), &total_reason_secs);

        let mut queues = BTreeMap::new();
        for (qi, q) in s.queues.iter().enumerate() {
            let g = group(
                &mut records.iter().filter(|r| r.queue == q.name),
                &self.reason_secs[qi],
            );
            let guaranteed = q.guaranteed;
            let util = (guaranteed > 0 && span > 0)
                .then(|| g.gpu_hours * 3600.0 / (guaranteed as f64 * span as f64));
            queues.insert(
                q.name.to_owned(),
                QueueSummary {
                    group: g,
                    guaranteed_gpus: guaranteed,
                    utilization_of_guarantee: util,
                    over_quota_hours: self.over_secs[qi] as f64 / 3600.0,
                    over_quota_gpu_hours: self.over_gpu_secs[qi] as f64 / 3600.0,
                },
            );
        }
        let mut classes = BTreeMap::new();
        let class_set: std::collections::BTreeSet<_> = records.iter().map(|r| r.class).collect();
        for class in class_set {
            // Reason time is kept per queue; per class it is left out (counts stay).
            let g = group(
                &mut records.iter().filter(|r| r.class == class),
                &[0; REASONS.len()],
            );
            classes.insert(class.as_str().to_owned(), g);
        }

        let mut pools = BTreeMap::new();
        let mut total_alloc: u128 = 0;
        let mut total_alloc_sub: u128 = 0;
        for (i, p) in s.pools.iter().enumerate() {
            total_alloc += self.alloc_secs[i];
            total_alloc_sub += self.alloc_secs_at_last_arrival[i];
            let denom = p.total as f64 * span as f64;
            let denom_sub = p.total as f64 * submitting as f64;
            pools.insert(
                p.label.to_owned(),
                PoolSummary {
                    cluster: p.cluster.to_owned(),
                    pool: p.pool.to_owned(),
                    flavor: p.flavor.to_owned(),
                    total_gpus: p.total,
                    utilization: ratio(self.alloc_secs[i] as f64, denom),
                    utilization_while_submitting: ratio(
                        self.alloc_secs_at_last_arrival[i] as f64,
                        denom_sub,
                    ),
                    fragmentation: ratio(self.frag_stranded[i] as f64, self.frag_free[i] as f64),
                },
            );
        }
        let bad_rows = s.traces.iter().map(|t| t.bad_rows.count).sum();
        let wall = s.wall;
        let summary = Summary {
            mode: s.mode.into(),
            policy: s.policy,
            seed: s.seed,
            clusters: s.clusters,
            fleet_gpus,
            start: super::super::time::iso(s.first),
            end: super::super::time::iso(s.end),
            simulated_seconds: span,
            run: RunStats {
                wall_seconds: wall,
                events: self.events,
                events_per_second: if wall > 0.0 {
                    self.events as f64 / wall
                } else {
                    0.0
                },
                scheduler_cycles: s.sched.cycles(),
                scheduler_wall_seconds: s.sched.wall_seconds(),
                preemption_decisions: s.sched.preemption_decisions(),
                defragmentations: s.sched.defragmentations(),
                reservations: s.sched.reservations(),
            },
            traces: s.traces,
            bad_rows,
            rejected_by_reason: self.rejected,
            overall,
            queues,
            classes,
            pools,
            utilization: ratio(total_alloc as f64, fleet_secs),
            utilization_while_submitting: ratio(
                total_alloc_sub as f64,
                fleet_gpus as f64 * submitting as f64,
            ),
            notes: s.notes,
            tidal: None,
            warnings: s.warnings,
            estimates: s.estimates,
        };
        (summary, self.samples)
    }
}
