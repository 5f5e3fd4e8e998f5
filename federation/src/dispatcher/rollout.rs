//! The leader's rollout watch: while a policy version is scoped, its rollback triggers are
//! measured on the replicated state every tick and evaluated by the pure core
//! (`tideway_scheduler::rollout::evaluate`) at the leader's clock. The first trigger that
//! fires is answered with one log entry that restores the base version; apply accepts it
//! only while that candidate is still being rolled out, so two leaders (or two ticks) that
//! both saw it fire roll back once.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tideway_api::clock::SharedClock;
use tideway_api::{RollbackTrigger, WorkloadClass, WorkloadPhase};
use tideway_scheduler::rollout::{Fired, RolloutObservations, evaluate};

use crate::propose::Proposer;
use crate::raft::state_machine::StateMachineData;
use crate::raft::types::Raft;
use crate::state::FederationState;
use crate::state::audit::LEADER;
use crate::state::command::Command;

/// How often the leader measures a scoped rollout.
pub const ROLLOUT_TICK: Duration = Duration::from_millis(500);

fn secs(d: chrono::Duration) -> f64 {
    d.num_milliseconds().max(0) as f64 / 1000.0
}

/// What the triggers of the rollout in progress measure, on `state` at `now`.
pub fn observe(state: &FederationState, now: DateTime<Utc>) -> Option<RolloutObservations> {
    let r = state.policy.rollout.as_ref()?;
    let since = r.since;
    let mut obs = RolloutObservations {
        since: Some(since),
        preemptions: state
            .scheduling
            .evictions
            .iter()
            .filter(|t| **t >= since)
            .count() as u64,
        ..Default::default()
    };
    for t in &r.triggers {
        if let RollbackTrigger::P95WaitWorse {
            queue,
            window_seconds,
            ..
        } = t
        {
            let window = chrono::Duration::seconds(*window_seconds as i64);
            let (mut before, mut after) = (Vec::new(), Vec::new());
            for w in state.workloads.values().filter(|w| w.spec.queue == queue) {
                let Some(st) = &w.status else { continue };
                let Some(sub) = st.submitted_at else { continue };
                match (st.phase, st.admitted_at) {
                    // Pending work counts at its wait under the candidate so far.
                    (WorkloadPhase::Pending, _) if sub >= since - window => {
                        after.push(secs(now - sub.max(since)));
                    }
                    (_, Some(adm)) if adm < since && adm >= since - window => {
                        before.push(secs(adm - sub));
                    }
                    (_, Some(adm)) if adm >= since && adm >= now - window => {
                        after.push(secs(adm - sub));
                    }
                    _ => {}
                }
            }
            obs.baseline_waits.push((queue.clone(), before));
            obs.rollout_waits.push((queue.clone(), after));
        }
    }
    obs.oldest_unserved_inference = state
        .workloads
        .values()
        .filter(|w| w.spec.class == WorkloadClass::Inference)
        .filter_map(|w| {
            let st = w.status.as_ref()?;
            (st.phase == WorkloadPhase::Pending).then_some(st.submitted_at?)
        })
        // Only the wait under the candidate counts against it.
        .map(|sub| secs(now - sub.max(since)))
        .reduce(f64::max);
    Some(obs)
}

/// The trigger that fires now, with the candidate it concerns.
pub fn check(state: &FederationState, now: DateTime<Utc>) -> Option<(u64, Fired)> {
    let r = state.policy.rollout.as_ref()?;
    if r.triggers.is_empty() {
        return None;
    }
    let obs = observe(state, now)?;
    evaluate(&r.triggers, &obs, now).map(|f| (r.candidate, f))
}

/// Measures the rollout in progress every tick while this node leads.
pub async fn rollout_loop(
    raft: Raft,
    data: Arc<RwLock<StateMachineData>>,
    proposer: Proposer,
    clock: SharedClock,
) {
    loop {
        tokio::time::sleep(ROLLOUT_TICK).await;
        if !raft.is_leader() {
            continue;
        }
        let now = clock.now();
        let fired = {
            let Ok(d) = data.read() else { continue };
            check(&d.state, now)
        };
        let Some((candidate, f)) = fired else {
            continue;
        };
        tracing::warn!(
            candidate,
            trigger = f.trigger,
            value = f.value,
            "rollout trigger fired"
        );
        let cmd = Command::RollbackPolicy {
            to: None,
            only_candidate: Some(candidate),
            applied_by: Some(LEADER.into()),
            message: Some(format!(
                "rollout trigger {} fired (measured {:.1}): {}",
                f.trigger, f.value, f.evidence
            )),
            at: now,
        };
        if let Err(e) = proposer.propose(cmd).await {
            tracing::warn!(error = %e, "could not commit a rollout rollback");
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use tideway_api::{
        FlavorQuota, PodSet, Policy, PolicySpec, Queue, QueueSpec, Rollout, RolloutScope, Workload,
        WorkloadSpec,
    };

    use super::*;

    fn t(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000 + s, 0)
            .single()
            .expect("time")
    }

    fn bundle(serving: u32, rollout: Option<Rollout>) -> Policy {
        let mut spec = QueueSpec::new("platform");
        spec.classes = vec![WorkloadClass::Inference];
        spec.quotas = vec![FlavorQuota::guaranteed("H100", serving)];
        Policy::new(
            "p",
            PolicySpec {
                queues: vec![Queue::new("serving", spec)],
                priority_classes: crate::state::bootstrap::default_priority_classes(),
                rollout,
                ..Default::default()
            },
        )
    }

    #[test]
    fn starved_inference_fires_after_its_limit_counted_from_the_rollout() {
        let mut s = FederationState::default();
        s.apply(
            1,
            Command::PutPolicy {
                policy: Box::new(bundle(8, None)),
                at: t(0),
            },
        );
        let mut w = Workload::new(
            "infer",
            WorkloadSpec::new(
                "serving",
                WorkloadClass::Inference,
                vec![PodSet::new("p", 1, 1, "H100")],
            ),
        );
        w.metadata.uid = Some("u".into());
        s.apply(
            2,
            Command::SubmitWorkload {
                workload: Box::new(w),
                idempotency_key: "k".into(),
                at: t(0),
                digest: None,
            },
        );
        assert_eq!(check(&s, t(100)), None, "no rollout, nothing to watch");
        let rollout = Rollout {
            scope: RolloutScope {
                pools: vec!["inference".into()],
                ..Default::default()
            },
            triggers: vec![RollbackTrigger::UnservedInference { seconds: 30 }],
        };
        s.apply(
            3,
            Command::PutPolicy {
                policy: Box::new(bundle(0, Some(rollout))),
                at: t(50),
            },
        );
        // Pending since t(0), but only 30 s of it under the candidate.
        assert_eq!(check(&s, t(80)), None);
        let (candidate, f) = check(&s, t(81)).expect("fires");
        assert_eq!(candidate, 2);
        assert_eq!(f.trigger, "unservedInference");
        assert_eq!(f.value, 31.0);
    }
}
