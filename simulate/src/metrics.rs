//! What a run measures, in the shapes `summary.json`, `jobs.csv` and `timeseries.csv` take.
//!
//! Every statistic is computed from per-job records at the end, in integer seconds, so the
//! numbers can be checked job by job against a reference (the cross-check test does that)
//! and no running average drifts.

use std::collections::BTreeMap;

use serde::Serialize;
use tideway_api::{PendingReason, WorkloadClass};

use super::time::Secs;
use super::trace::TraceReport;

/// Pending reason codes, in a fixed order so they index arrays.
pub const REASONS: [&str; 10] = [
    "Queued",
    "QuotaExhausted",
    "InsufficientCapacity",
    "Fragmentation",
    "NoMatchingCluster",
    "WindowClosed",
    "RateLimited",
    "MemberUnavailable",
    "WaitingForPreemption",
    "WindowClosing",
];

pub const QUEUED: u8 = 0;
pub const QUOTA: u8 = 1;
pub const CAPACITY: u8 = 2;
pub const FRAGMENTATION: u8 = 3;
pub const WAITING_FOR_PREEMPTION: u8 = 8;
/// Not pending.
pub const NO_REASON: u8 = u8::MAX;

pub fn reason_index(r: &PendingReason) -> u8 {
    match r {
        PendingReason::Queued => 0,
        PendingReason::QuotaExhausted { .. } => 1,
        PendingReason::InsufficientCapacity { .. } => 2,
        PendingReason::Fragmentation { .. } => 3,
        PendingReason::NoMatchingCluster { .. } => 4,
        PendingReason::WindowClosed { .. } => 5,
        PendingReason::RateLimited => 6,
        PendingReason::MemberUnavailable { .. } => 7,
        PendingReason::WaitingForPreemption { .. } => 8,
        PendingReason::WindowClosing { .. } => 9,
        PendingReason::BackingOff { .. } => 10,
    }
}

/// How a job's life ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Outcome {
    Succeeded,
    /// Deleted by the trace (inference instances), started or not.
    Removed,
    /// Still pending or running when the events ran out.
    Unfinished,
    /// Refused at submission (unknown queue, never fits, ...).
    Rejected,
    /// Stopped by its member at its `runtimeLimitSeconds` (its own or its queue's).
    TimedOut,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Succeeded => "succeeded",
            Self::Removed => "removed",
            Self::Unfinished => "unfinished",
            Self::Rejected => "rejected",
            Self::TimedOut => "timed-out",
        }
    }
}

/// One job, as `jobs.csv` lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRecord {
    pub uid: String,
    pub tenant: String,
    pub queue: String,
    pub class: WorkloadClass,
    pub gpus: u64,
    pub submit: Secs,
    /// First start.
    pub start: Option<Secs>,
    pub end: Option<Secs>,
    pub cluster: Option<String>,
    pub preemptions: u32,
    pub gpu_seconds: u64,
    pub lost_gpu_seconds: u64,
    pub outcome: Outcome,
    pub reject_reason: Option<String>,
    /// Pending reasons seen, as a bit set over [`REASONS`].
    pub reasons_seen: u16,
    /// Each wait to run again after an eviction (to the restart, the deletion or the end
    /// of the run), in seconds.
    pub rewaits: Vec<Secs>,
    /// The part of each wait (first or again) that a quota schedule owed: from the moment
    /// the job fit within its side's guarantee to its start (see `tidal::owed_inference`).
    pub owed_waits: Vec<Secs>,
}

impl JobRecord {
    pub fn queueing(&self) -> Option<Secs> {
        self.start.map(|s| s - self.submit)
    }

    /// Completion time: submit to end, for jobs that started and ended.
    pub fn jct(&self) -> Option<Secs> {
        match (self.start, self.end) {
            (Some(_), Some(e)) => Some(e - self.submit),
            _ => None,
        }
    }
}

/// Mean and nearest-rank percentiles of a set of seconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Stats {
    pub count: u64,
    pub mean: f64,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
    /// Exact sum, so means can be recomputed without float error.
    pub sum: i64,
}

impl Stats {
    pub fn of(mut v: Vec<Secs>) -> Self {
        if v.is_empty() {
            return Self::default();
        }
        v.sort_unstable();
        let n = v.len();
        let sum: i64 = v.iter().sum();
        let rank = |p: f64| {
            let k = ((p / 100.0) * n as f64).ceil() as usize;
            v[k.clamp(1, n) - 1] as f64
        };
        Self {
            count: n as u64,
            mean: sum as f64 / n as f64,
            p50: rank(50.0),
            p95: rank(95.0),
            p99: rank(99.0),
            max: v[n - 1] as f64,
            sum,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReasonStats {
    /// Workloads that waited with this reason at least once.
    pub workloads: u64,
    /// Time spent pending with it, summed over workloads.
    pub hours: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JobCounts {
    pub submitted: u64,
    pub rejected: u64,
    pub started: u64,
    pub succeeded: u64,
    pub removed: u64,
    /// Pending or running when the run ended.
    pub unfinished: u64,
    /// Stopped at their run-time limit.
    pub timed_out: u64,
    /// Removed or unfinished without ever starting.
    pub never_started: u64,
}

/// The statistics of one group of jobs (all, a queue, a class).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupSummary {
    pub jobs: JobCounts,
    /// Submit to end, jobs that started and ended (for inference: the replica's lifetime).
    pub jct: Stats,
    /// Submit to first start.
    pub queueing_delay: Stats,
    pub gpu_hours: f64,
    /// Share of the fleet's GPU time over the simulated span.
    pub fleet_share: f64,
    pub preemptions: u64,
    pub work_lost_gpu_hours: f64,
    pub pending_reasons: BTreeMap<String, ReasonStats>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueSummary {
    #[serde(flatten)]
    pub group: GroupSummary,
    pub guaranteed_gpus: u64,
    /// GPU time used over the guarantee's GPU time over the span (can exceed 1 by borrowing).
    pub utilization_of_guarantee: Option<f64>,
    /// Time with usage above the guarantee (borrowing), and the GPU-hours above it.
    pub over_quota_hours: f64,
    pub over_quota_gpu_hours: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolSummary {
    pub cluster: String,
    pub pool: String,
    pub flavor: String,
    pub total_gpus: u64,
    /// Allocated GPU time over total GPU time, over the simulated span.
    pub utilization: f64,
    /// The same, from the first to the last arrival (leaves out the drain at the end).
    pub utilization_while_submitting: f64,
    /// Share of free GPUs that a whole-node pod could not use, averaged over samples
    /// (weighted by free GPUs).
    pub fragmentation: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunStats {
    pub wall_seconds: f64,
    pub events: u64,
    pub events_per_second: f64,
    pub scheduler_cycles: u64,
    pub scheduler_wall_seconds: f64,
    /// Decisions by type over all cycles.
    pub preemption_decisions: u64,
    /// Of those, the ones that moved small checkpointing work off nodes a gang needed
    /// (`defragmentMinGpus`).
    pub defragmentations: u64,
    pub reservations: u64,
}

/// What the scheduler planned with, against what jobs took (`summary.json` `estimates`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EstimateSummary {
    /// `online` (learned as the live leader does), `none`, or `exact (oracle)`.
    pub source: String,
    /// The trace's true durations were given to the scheduler.
    pub oracle: bool,
    /// Completed jobs dispatched with an estimate, and without one (the default assumed).
    pub estimated: u64,
    pub defaulted: u64,
    /// Of the estimated: estimate below / above the run time.
    pub under: u64,
    pub over: u64,
    /// Median of estimate / run time over the estimated.
    pub median_ratio: f64,
    /// GPU-hours that reservations kept idle: free GPUs of a reserved cluster, up to the
    /// holder's gang size, while the reservation was held.
    pub reserved_idle_gpu_hours: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub mode: String,
    pub policy: String,
    pub seed: u64,
    pub clusters: Vec<String>,
    pub fleet_gpus: u64,
    /// First arrival to last event, RFC 3339.
    pub start: String,
    pub end: String,
    pub simulated_seconds: i64,
    pub run: RunStats,
    pub traces: Vec<TraceReport>,
    pub bad_rows: u64,
    pub rejected_by_reason: BTreeMap<String, u64>,
    pub overall: GroupSummary,
    pub queues: BTreeMap<String, QueueSummary>,
    pub classes: BTreeMap<String, GroupSummary>,
    pub pools: BTreeMap<String, PoolSummary>,
    /// Fleet-wide utilization over the span and while submitting.
    pub utilization: f64,
    pub utilization_while_submitting: f64,
    /// Caveats of this run (e.g. settings the simulator does not model).
    pub notes: Vec<String>,
    /// Quota schedules' figures, when the policy has any (scheduler mode).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tidal: Option<super::tidal::TidalSummary>,
    /// Scheduler mode: run-time estimates against run times, reserved-but-idle time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimates: Option<EstimateSummary>,
    /// Problems with the inputs that make the results doubtful (e.g. guarantees that add
    /// up to more than the fleet); also printed on the terminal.
    pub warnings: Vec<String>,
}

/// One `timeseries.csv` row.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub at: Secs,
    /// Per pool, in `Summary::pools` label order.
    pub allocated: Vec<u64>,
    pub pending: u64,
    pub running: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let s = Stats::of((1..=100).collect());
        assert_eq!((s.p50, s.p95, s.p99, s.max), (50.0, 95.0, 99.0, 100.0));
        assert_eq!(s.mean, 50.5);
        assert_eq!(s.sum, 5050);
        let one = Stats::of(vec![7]);
        assert_eq!((one.p50, one.p99), (7.0, 7.0));
        assert_eq!(Stats::of(vec![]).count, 0);
    }
}
