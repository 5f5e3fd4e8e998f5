//! Gradual rollout: the policy a scoped candidate gives the fleet, and the rollback
//! triggers, evaluated purely on what the caller measured and the time it passes in.
//!
//! While a rollout is scoped the fleet runs one merged policy rather than two schedulers
//! side by side: the queues in scope (named, or serving a scoped pool) take the candidate's
//! definition, the quota-schedule quotas naming a scoped pool or queue take the candidate's
//! windows, and everything else keeps the base version. One scheduler run on one merged
//! policy cannot book the same GPUs twice, which two runs over halves of the fleet could.

use chrono::{DateTime, Utc};
use tideway_api::{
    PolicySpec, Queue, QuotaSchedule, QuotaTarget, RollbackTrigger, RolloutScope, WorkloadClass,
};

use crate::tidal::FleetSide;

/// Suffix of a candidate's quota schedule that runs next to the base's schedule of the
/// same name while the rollout is scoped.
pub const ROLLOUT_SCHEDULE_SUFFIX: &str = "-rollout";

const CLASSES: [WorkloadClass; 4] = [
    WorkloadClass::Training,
    WorkloadClass::Inference,
    WorkloadClass::Eval,
    WorkloadClass::Experiment,
];

/// Whether `queue` is in `scope`: named, or serving a scoped pool's side of the fleet.
pub fn queue_in_scope(scope: &RolloutScope, queue: &Queue) -> bool {
    let name = queue.metadata.name.as_str();
    scope.queues.iter().any(|q| q == name)
        || scope.pools.iter().any(|p| {
            FleetSide::of_pool(p).is_some_and(|side| {
                CLASSES
                    .iter()
                    .any(|c| queue.spec.serves(*c) && FleetSide::of_class(*c) == side)
            })
        })
}

fn target_in_scope(scope: &RolloutScope, t: &QuotaTarget, candidate: &PolicySpec) -> bool {
    match t {
        QuotaTarget::Pool(p) => scope.pools.contains(p),
        QuotaTarget::Queue(q) => candidate
            .queue(q)
            .is_some_and(|queue| queue_in_scope(scope, queue)),
    }
}

/// The policy the fleet runs while `candidate` is scoped to `scope` over `base`.
pub fn effective_spec(
    base: &PolicySpec,
    candidate: &PolicySpec,
    scope: &RolloutScope,
) -> PolicySpec {
    if scope.is_everything() {
        return candidate.clone();
    }
    let mut out = base.clone();
    out.rollout = None;
    // Who may do what is not scoped to part of the fleet: a candidate that lists bindings
    // brings them in at once.
    if candidate.role_bindings.is_some() {
        out.role_bindings = candidate.role_bindings.clone();
    }
    // A name is scoped if either side's definition is: it then takes the candidate's
    // definition, or none if the candidate dropped it.
    let scoped = |name: &str| {
        base.queue(name).is_some_and(|q| queue_in_scope(scope, q))
            || candidate
                .queue(name)
                .is_some_and(|q| queue_in_scope(scope, q))
    };
    out.queues.retain(|q| !scoped(&q.metadata.name));
    for q in &candidate.queues {
        if scoped(&q.metadata.name) {
            out.queues.push(q.clone());
        }
    }
    // Classes a scoped queue may name must exist; the base's definitions win otherwise.
    for pc in &candidate.priority_classes {
        if out.priority_class(&pc.metadata.name).is_none() {
            out.priority_classes.push(pc.clone());
        }
    }
    let in_scope = |t: &QuotaTarget| target_in_scope(scope, t, candidate);
    for s in &mut out.quota_schedules {
        for w in &mut s.spec.windows {
            w.quotas.retain(|q| !in_scope(&q.target));
        }
    }
    for s in &candidate.quota_schedules {
        let mut s: QuotaSchedule = s.clone();
        for w in &mut s.spec.windows {
            w.quotas.retain(|q| in_scope(&q.target));
        }
        if let Some(d) = &mut s.spec.default_quotas {
            d.retain(|q| in_scope(&q.target));
        }
        if s.spec.windows.iter().all(|w| w.quotas.is_empty()) {
            continue;
        }
        if !scope.clusters.is_empty() {
            s.spec.scope.clusters = scope.clusters.clone();
        }
        if out.quota_schedule(&s.metadata.name).is_some() {
            s.metadata.name = format!("{}{ROLLOUT_SCHEDULE_SUFFIX}", s.metadata.name);
        }
        out.quota_schedules.push(s);
    }
    out
}

/// What the leader measured for the triggers; the caller gathers it from the replicated state.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RolloutObservations {
    /// When the rollout began.
    pub since: Option<DateTime<Utc>>,
    /// Per protected queue: waits (seconds) of work admitted in the window before the
    /// rollout began (the baseline) ...
    pub baseline_waits: Vec<(String, Vec<f64>)>,
    /// ... and since it began, counting work still pending at its wait so far (starved work
    /// is never admitted; leaving it out would hide exactly what the trigger is for).
    pub rollout_waits: Vec<(String, Vec<f64>)>,
    /// Longest current wait of a pending inference workload, seconds.
    pub oldest_unserved_inference: Option<f64>,
    /// Workloads preempted since the rollout began.
    pub preemptions: u64,
}

/// A trigger that fired, with what was measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Fired {
    /// The trigger's name (`p95WaitWorse`).
    pub trigger: &'static str,
    /// The measured value and the threshold, in words.
    pub evidence: String,
    /// The measured value.
    pub value: f64,
}

/// The 95th percentile (nearest rank) of `xs`; 0 for none.
pub fn p95(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = ((v.len() as f64) * 0.95).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

fn waits<'a>(list: &'a [(String, Vec<f64>)], queue: &str) -> &'a [f64] {
    list.iter()
        .find(|(q, _)| q == queue)
        .map_or(&[], |(_, w)| w.as_slice())
}

/// The first trigger that fires at `now`, in the order they are listed.
pub fn evaluate(
    triggers: &[RollbackTrigger],
    obs: &RolloutObservations,
    now: DateTime<Utc>,
) -> Option<Fired> {
    for t in triggers {
        match t {
            RollbackTrigger::P95WaitWorse { queue, percent, .. } => {
                let now_w = waits(&obs.rollout_waits, queue);
                if now_w.is_empty() {
                    continue;
                }
                let base = p95(waits(&obs.baseline_waits, queue));
                // A baseline of a few seconds (or none) must not make any wait a regression.
                let threshold = base.max(1.0) * (1.0 + percent / 100.0);
                let p = p95(now_w);
                if p > threshold {
                    return Some(Fired {
                        trigger: t.name(),
                        value: p,
                        evidence: format!(
                            "p95 wait of queue '{queue}' is {p:.1} s, baseline {base:.1} s, \
                             threshold {threshold:.1} s (+{percent}%)"
                        ),
                    });
                }
            }
            RollbackTrigger::UnservedInference { seconds } => {
                if let Some(w) = obs.oldest_unserved_inference
                    && w > *seconds as f64
                {
                    return Some(Fired {
                        trigger: t.name(),
                        value: w,
                        evidence: format!(
                            "inference demand unserved for {w:.1} s (limit {seconds} s)"
                        ),
                    });
                }
            }
            RollbackTrigger::PreemptionsPerHour { max } => {
                let Some(since) = obs.since else { continue };
                // At least a minute of rollout, so the first preemption is not a rate of
                // thousands per hour.
                let hours = ((now - since).num_milliseconds() as f64 / 3.6e6).max(1.0 / 60.0);
                let rate = obs.preemptions as f64 / hours;
                if obs.preemptions > 0 && rate > *max as f64 {
                    return Some(Fired {
                        trigger: t.name(),
                        value: rate,
                        evidence: format!(
                            "{} preemptions since the rollout began: {rate:.1} per hour \
                             (limit {max})",
                            obs.preemptions
                        ),
                    });
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use tideway_api::{
        FlavorQuota, QueueSpec, QuotaAmount, QuotaScheduleSpec, QuotaWindow, ScheduleScope,
        Transition, WindowQuota,
    };

    use super::*;

    fn queue(name: &str, class: WorkloadClass, gpus: u32) -> Queue {
        let mut spec = QueueSpec::new(name);
        spec.classes = vec![class];
        spec.quotas = vec![FlavorQuota::guaranteed("H100", gpus)];
        Queue::new(name, spec)
    }

    fn pool_schedule(gpus: u32) -> QuotaSchedule {
        QuotaSchedule::new(
            "tide",
            QuotaScheduleSpec {
                time_zone: "UTC".into(),
                windows: vec![QuotaWindow::daily(
                    "all",
                    "00:00",
                    "00:00",
                    vec![
                        WindowQuota {
                            target: QuotaTarget::Pool("inference".into()),
                            flavor: None,
                            amount: QuotaAmount::Gpus(gpus),
                        },
                        WindowQuota {
                            target: QuotaTarget::Pool("training".into()),
                            flavor: None,
                            amount: QuotaAmount::Gpus(8),
                        },
                    ],
                )],
                default_quotas: None,
                transition: Transition::default(),
                scope: ScheduleScope::default(),
            },
        )
    }

    fn spec(serving: u32, batch: u32, pool: u32) -> PolicySpec {
        PolicySpec {
            queues: vec![
                queue("serving", WorkloadClass::Inference, serving),
                queue("batch", WorkloadClass::Training, batch),
            ],
            quota_schedules: vec![pool_schedule(pool)],
            ..Default::default()
        }
    }

    #[test]
    fn a_pool_scope_takes_the_candidates_queues_and_pool_quotas_of_that_side_only() {
        let base = spec(16, 16, 8);
        let cand = spec(0, 4, 0);
        let scope = RolloutScope {
            pools: vec!["inference".into()],
            ..Default::default()
        };
        let eff = effective_spec(&base, &cand, &scope);
        let g = |n: &str| eff.queue(n).unwrap().spec.quotas[0].guaranteed;
        assert_eq!(g("serving"), 0, "inference side from the candidate");
        assert_eq!(g("batch"), 16, "training side keeps the base");
        let base_s = eff.quota_schedule("tide").unwrap();
        assert_eq!(base_s.spec.windows[0].quotas.len(), 1);
        assert_eq!(
            base_s.spec.windows[0].quotas[0].target,
            QuotaTarget::Pool("training".into())
        );
        let cand_s = eff.quota_schedule("tide-rollout").unwrap();
        assert_eq!(
            cand_s.spec.windows[0].quotas,
            vec![WindowQuota {
                target: QuotaTarget::Pool("inference".into()),
                flavor: None,
                amount: QuotaAmount::Gpus(0),
            }]
        );
        assert_eq!(effective_spec(&base, &cand, &RolloutScope::default()), cand);
    }

    #[test]
    fn a_cluster_scope_narrows_only_the_candidates_schedule_quotas_to_those_members() {
        let base = spec(16, 16, 8);
        let cand = spec(0, 4, 0);
        let scope = RolloutScope {
            pools: vec!["inference".into()],
            clusters: vec!["sim-eu".into()],
            ..Default::default()
        };
        let eff = effective_spec(&base, &cand, &scope);
        // The scoped queue's definition is the candidate's wherever its work runs: one
        // queue has one quota book, it is not split per cluster.
        let g = |n: &str| eff.queue(n).unwrap().spec.quotas[0].guaranteed;
        assert_eq!((g("serving"), g("batch")), (0, 16));
        // The candidate's pool quota counts only the scoped members' capacity; the base's
        // schedule keeps its own scope (the whole fleet).
        let cand_s = eff.quota_schedule("tide-rollout").unwrap();
        assert_eq!(cand_s.spec.scope.clusters, vec!["sim-eu".to_string()]);
        let base_s = eff.quota_schedule("tide").unwrap();
        assert!(base_s.spec.scope.clusters.is_empty(), "{base_s:?}");
        // Without the cluster scope, the same candidate's quota counts the whole fleet.
        let wide = effective_spec(
            &base,
            &cand,
            &RolloutScope {
                pools: vec!["inference".into()],
                ..Default::default()
            },
        );
        assert!(
            wide.quota_schedule("tide-rollout")
                .unwrap()
                .spec
                .scope
                .clusters
                .is_empty()
        );
    }

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::<Utc>::from_timestamp(1_800_000_000 + s, 0).unwrap()
    }

    #[test]
    fn triggers_fire_on_their_measure_and_name_it() {
        let p95_trigger = RollbackTrigger::P95WaitWorse {
            queue: "serving".into(),
            percent: 50.0,
            window_seconds: 600,
        };
        let mut obs = RolloutObservations {
            since: Some(t(0)),
            baseline_waits: vec![("serving".into(), vec![10.0; 20])],
            rollout_waits: vec![("serving".into(), vec![14.0; 20])],
            ..Default::default()
        };
        assert_eq!(
            evaluate(std::slice::from_ref(&p95_trigger), &obs, t(60)),
            None
        );
        obs.rollout_waits[0].1.push(40.0);
        obs.rollout_waits[0].1.push(40.0);
        let f = evaluate(std::slice::from_ref(&p95_trigger), &obs, t(60)).unwrap();
        assert_eq!(f.trigger, "p95WaitWorse");
        assert_eq!(f.value, 40.0);
        assert!(f.evidence.contains("baseline 10.0 s"), "{}", f.evidence);

        let unserved = RollbackTrigger::UnservedInference { seconds: 30 };
        let mut obs = RolloutObservations {
            oldest_unserved_inference: Some(30.0),
            ..Default::default()
        };
        assert_eq!(evaluate(std::slice::from_ref(&unserved), &obs, t(0)), None);
        obs.oldest_unserved_inference = Some(31.0);
        assert_eq!(
            evaluate(std::slice::from_ref(&unserved), &obs, t(0)).map(|f| f.value),
            Some(31.0)
        );

        let rate = RollbackTrigger::PreemptionsPerHour { max: 10 };
        let obs = RolloutObservations {
            since: Some(t(0)),
            preemptions: 6,
            ..Default::default()
        };
        // 6 in an hour is fine, 6 in half an hour is 12 per hour.
        assert_eq!(evaluate(std::slice::from_ref(&rate), &obs, t(3600)), None);
        let f = evaluate(std::slice::from_ref(&rate), &obs, t(1800)).unwrap();
        assert!((f.value - 12.0).abs() < 1e-9, "{f:?}");
    }

    #[test]
    fn p95_is_the_nearest_rank() {
        assert_eq!(p95(&[]), 0.0);
        let xs: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(p95(&xs), 95.0);
        assert_eq!(p95(&[3.0]), 3.0);
    }
}
