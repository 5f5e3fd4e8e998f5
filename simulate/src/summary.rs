//! The statistics of a group of jobs (all, a queue, a class), computed from their records
//! at the end of a run, in integer seconds, so each figure can be recomputed from
//! `jobs.csv`.

use super::metrics::{GroupSummary, JobCounts, JobRecord, Outcome, REASONS, ReasonStats, Stats};

/// `a / b`, or 0 when there is nothing to divide by (an empty fleet or span).
pub fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { 0.0 }
}

/// Counts, JCT and queueing statistics, GPU time, work lost and pending reasons of `recs`;
/// `reason_secs` is the pending time per reason, `fleet_secs` the fleet's GPU time.
pub fn group_summary(
    recs: &mut dyn Iterator<Item = &JobRecord>,
    reason_secs: &[u64],
    fleet_secs: f64,
) -> GroupSummary {
    let mut counts = JobCounts::default();
    let mut jct = Vec::new();
    let mut queueing = Vec::new();
    let mut gpu_secs: u64 = 0;
    let mut lost: u64 = 0;
    let mut preemptions: u64 = 0;
    let mut seen = [0u64; REASONS.len()];
    for r in recs {
        counts.submitted += 1;
        match r.outcome {
            Outcome::Rejected => {
                counts.rejected += 1;
                continue;
            }
            Outcome::Succeeded => counts.succeeded += 1,
            Outcome::Removed => counts.removed += 1,
            Outcome::Unfinished => counts.unfinished += 1,
            Outcome::TimedOut => counts.timed_out += 1,
        }
        if r.start.is_some() {
            counts.started += 1;
        } else {
            counts.never_started += 1;
        }
        if let Some(q) = r.queueing() {
            queueing.push(q);
        }
        if let Some(t) = r.jct() {
            jct.push(t);
        }
        gpu_secs += r.gpu_seconds;
        lost += r.lost_gpu_seconds;
        preemptions += u64::from(r.preemptions);
        for (i, s) in seen.iter_mut().enumerate() {
            if r.reasons_seen & (1 << i) != 0 {
                *s += 1;
            }
        }
    }
    let pending_reasons = REASONS
        .iter()
        .enumerate()
        .filter(|(i, _)| seen[*i] > 0 || reason_secs.get(*i).copied().unwrap_or(0) > 0)
        .map(|(i, name)| {
            (
                (*name).to_owned(),
                ReasonStats {
                    workloads: seen[i],
                    hours: reason_secs.get(i).copied().unwrap_or(0) as f64 / 3600.0,
                },
            )
        })
        .collect();
    GroupSummary {
        jobs: counts,
        jct: Stats::of(jct),
        queueing_delay: Stats::of(queueing),
        gpu_hours: gpu_secs as f64 / 3600.0,
        fleet_share: ratio(gpu_secs as f64, fleet_secs),
        preemptions,
        work_lost_gpu_hours: lost as f64 / 3600.0,
        pending_reasons,
    }
}
