//! Run-time estimates learned from the replicated state, for the scheduler's input.
//!
//! Most users give no `runtimeEstimateSeconds`, and without one backfill and reservations
//! must assume the conservative default. The core's `RuntimeEstimator` learns from completed
//! work instead; here it is fed from the workloads the replicated state shows succeeded, in
//! completion order (ties by submission order), so every node that would lead computes the
//! same estimates from the same log. The learned estimate is written into the input's copy
//! of a workload that has none; the stored workload is not changed.

use chrono::{DateTime, Utc};
use tideway_api::{Workload, WorkloadPhase};
use tideway_scheduler::{RuntimeEstimator, SchedulerInput};

use crate::state::FederationState;

/// Completions learned from per cycle at most: the most recent ones.
pub const MAX_LEARNED: usize = 20_000;

/// The estimator over the state's succeeded workloads.
pub fn learned(state: &FederationState) -> RuntimeEstimator {
    let mut done = Vec::new();
    for (seq, name) in &state.order {
        let Some(w) = state.workloads.get(&**name) else {
            continue;
        };
        let Some(st) = &w.status else { continue };
        if st.phase != WorkloadPhase::Succeeded {
            continue;
        }
        if let (Some(start), Some(end)) = (st.started_at, st.finished_at) {
            let secs = u64::try_from((end - start).num_seconds()).unwrap_or(0);
            done.push((end, *seq, &**w, secs));
        }
    }
    learned_from(done)
}

/// The estimator over completions given as (finished at, submission sequence, workload, run
/// seconds): the most recent [`MAX_LEARNED`], in completion order.
pub fn learned_from(mut done: Vec<(DateTime<Utc>, u64, &Workload, u64)>) -> RuntimeEstimator {
    done.sort_unstable_by_key(|d| (d.0, d.1));
    let skip = done.len().saturating_sub(MAX_LEARNED);
    let mut est = RuntimeEstimator::default();
    for (_, _, w, secs) in done.into_iter().skip(skip) {
        est.observe(w, secs);
    }
    est
}

/// Gives pending and running workloads without an estimate of their own the learned one.
pub fn fill(input: &mut SchedulerInput, est: &RuntimeEstimator) {
    let workloads = input
        .pending
        .iter_mut()
        .map(|p| &mut p.workload)
        .chain(input.running.iter_mut().map(|r| &mut r.workload));
    for w in workloads {
        if w.spec.runtime_estimate_seconds.is_none()
            && let Some(e) = est.estimate(w)
        {
            w.spec.runtime_estimate_seconds = Some(e.seconds.max(1));
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, Duration, Utc};
    use tideway_api::{PodSet, WorkloadClass, WorkloadSpec, WorkloadStatus};

    use super::*;

    fn t0() -> DateTime<Utc> {
        "2030-01-01T00:00:00Z".parse().unwrap()
    }

    fn add(s: &mut FederationState, name: &str, phase: WorkloadPhase, ran: Option<i64>) {
        let mut spec = WorkloadSpec::new(
            "q",
            WorkloadClass::Training,
            vec![PodSet::new("w", 1, 8, "H100")],
        );
        spec.user = Some("ann".into());
        let mut w = Workload::new(name, spec);
        w.status = Some(WorkloadStatus {
            phase,
            started_at: ran.map(|_| t0()),
            finished_at: ran.map(|r| t0() + Duration::seconds(r)),
            ..WorkloadStatus::default()
        });
        s.next_seq += 1;
        s.order.insert(s.next_seq, name.into());
        s.workloads.insert(name.to_owned(), w);
    }

    #[test]
    fn pending_work_gets_what_its_kind_took() {
        let mut s = FederationState::default();
        for (i, ran) in [3000, 3300, 3600, 3900].into_iter().enumerate() {
            add(
                &mut s,
                &format!("train-{i}"),
                WorkloadPhase::Succeeded,
                Some(ran),
            );
        }
        // Failed work teaches nothing (it did not run its course).
        add(&mut s, "train-9", WorkloadPhase::Failed, Some(5));
        add(&mut s, "train-new", WorkloadPhase::Pending, None);
        assert_eq!(learned(&s), learned(&s), "deterministic");
        // The leader's input carries the learned estimate.
        let input = super::super::cycle::build_input(&s, |_| None, t0(), 1);
        let w = &input.pending[0].workload;
        assert_eq!(w.spec.runtime_estimate_seconds, Some(3900));
        // The stored workload keeps having none.
        assert_eq!(s.workloads["train-new"].spec.runtime_estimate_seconds, None);
    }
}
