//! Gradual rollout: the policy a scoped candidate gives the fleet, and the rollback
//! triggers, evaluated purely on what the caller measured and the time it passes in.
//!
//! While a rollout is scoped the fleet runs one merged policy rather than two schedulers
//! side by side: the queues in scope (named, or serving a scoped pool) take the candidate's
//! definition, the quota-schedule quotas naming a scoped pool or queue take the candidate's
//! windows, and everything else keeps the base version. One scheduler run on one merged
//! policy cannot book the same GPUs twice, which two runs over halves of the fleet could.
//!
//! A scope that names clusters also restricts placement: new work of the queues in scope
//! (the work the candidate decides) is placed only on those clusters, so a canary cluster
//! is where the candidate's decisions land and nowhere else. Work of the other queues is
//! placed anywhere, as before; running work keeps its placement (nothing migrates).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
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

/// The pools a scope may name, each a side of the fleet.
const POOLS: [&str; 2] = ["inference", "training"];

/// The schedules of `spec` cut down to the quotas naming `target` (schedules left with none
/// dropped), by name: what `spec` says about that target, to compare two versions.
fn schedules_for(spec: &PolicySpec, target: &QuotaTarget) -> Vec<QuotaSchedule> {
    let mut out: Vec<QuotaSchedule> = spec
        .quota_schedules
        .iter()
        .filter_map(|s| {
            let mut s = s.clone();
            for w in &mut s.spec.windows {
                w.quotas.retain(|q| &q.target == target);
            }
            if let Some(d) = &mut s.spec.default_quotas {
                d.retain(|q| &q.target == target);
            }
            let any = s.spec.windows.iter().any(|w| !w.quotas.is_empty())
                || s.spec
                    .default_quotas
                    .as_ref()
                    .is_some_and(|d| !d.is_empty());
            any.then_some(s)
        })
        .collect();
    out.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    out
}

/// The scope a rollout runs with. A scope of clusters alone takes what the candidate
/// changes: the queues whose definition or schedule quotas differ from the base's and the
/// pools whose schedule quotas differ, so "try this version on cluster X" needs no list of
/// what the version is about. Scopes naming queues or pools are taken as written.
pub fn resolve_scope(
    base: &PolicySpec,
    candidate: &PolicySpec,
    scope: &RolloutScope,
) -> RolloutScope {
    if scope.clusters.is_empty() || !scope.queues.is_empty() || !scope.pools.is_empty() {
        return scope.clone();
    }
    let mut names: Vec<&str> = base
        .queues
        .iter()
        .chain(&candidate.queues)
        .map(|q| q.metadata.name.as_str())
        .collect();
    names.sort_unstable();
    names.dedup();
    let queues = names
        .into_iter()
        .filter(|n| {
            let target = QuotaTarget::Queue((*n).to_owned());
            base.queue(n).map(|q| &q.spec) != candidate.queue(n).map(|q| &q.spec)
                || schedules_for(base, &target) != schedules_for(candidate, &target)
        })
        .map(str::to_owned)
        .collect();
    let pools = POOLS
        .iter()
        .filter(|p| {
            let target = QuotaTarget::Pool((**p).to_owned());
            schedules_for(base, &target) != schedules_for(candidate, &target)
        })
        .map(|p| (*p).to_owned())
        .collect();
    RolloutScope {
        queues,
        pools,
        clusters: scope.clusters.clone(),
    }
}

/// Where a scoped candidate's new work may go: the queues in scope and the clusters their
/// pending work is placed on while version `version` is being rolled out.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutPlacement {
    /// The candidate version, for explanations.
    pub version: u64,
    /// Queues whose pending work the candidate decides.
    pub queues: Vec<String>,
    /// The only clusters that work is placed on.
    pub clusters: Vec<String>,
}

impl RolloutPlacement {
    /// The clusters `queue`'s pending work is confined to, if it is.
    pub fn clusters_for(&self, queue: &str) -> Option<&[String]> {
        self.queues
            .iter()
            .any(|q| q == queue)
            .then_some(self.clusters.as_slice())
    }
}

/// The placement restriction of a rollout `scope` (already resolved) over the fleet's
/// merged `queues`: `None` when the scope names no clusters (placement is then unchanged).
pub fn placement(scope: &RolloutScope, queues: &[Queue], version: u64) -> Option<RolloutPlacement> {
    if scope.clusters.is_empty() {
        return None;
    }
    let mut names: Vec<String> = queues
        .iter()
        .filter(|q| queue_in_scope(scope, q))
        .map(|q| q.metadata.name.clone())
        .collect();
    names.sort_unstable();
    names.dedup();
    Some(RolloutPlacement {
        version,
        queues: names,
        clusters: scope.clusters.clone(),
    })
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
    let scope = &resolve_scope(base, candidate, scope);
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

    #[test]
    fn a_clusters_only_scope_takes_what_the_candidate_changes() {
        let base = spec(16, 16, 8);
        // Only the serving queue and the inference pool quota change.
        let mut cand = spec(4, 16, 8);
        let clusters = RolloutScope {
            clusters: vec!["sim-eu".into()],
            ..Default::default()
        };
        let r = resolve_scope(&base, &cand, &clusters);
        assert_eq!(r.queues, vec!["serving".to_string()]);
        assert!(r.pools.is_empty(), "{r:?}");
        assert_eq!(r.clusters, clusters.clusters);
        cand.quota_schedules = vec![pool_schedule(2)];
        let r = resolve_scope(&base, &cand, &clusters);
        assert_eq!(
            (r.queues, r.pools),
            (vec!["serving".to_string()], vec!["inference".to_string()])
        );
        // Nothing changed: nothing in scope (apply refuses such a rollout).
        let r = resolve_scope(&base, &base, &clusters);
        assert!(r.queues.is_empty() && r.pools.is_empty(), "{r:?}");
        // Named queues or pools are taken as written.
        let named = RolloutScope {
            queues: vec!["batch".into()],
            clusters: vec!["sim-eu".into()],
            ..Default::default()
        };
        assert_eq!(resolve_scope(&base, &cand, &named), named);
        // The merged policy runs the resolved scope: serving from the candidate, batch not.
        let eff = effective_spec(&base, &spec(4, 2, 8), &clusters);
        let g = |n: &str| eff.queue(n).unwrap().spec.quotas[0].guaranteed;
        assert_eq!(
            (g("serving"), g("batch")),
            (4, 2),
            "both changed, both in scope"
        );
        let eff = effective_spec(&base, &cand, &clusters);
        let g = |n: &str| eff.queue(n).unwrap().spec.quotas[0].guaranteed;
        assert_eq!((g("serving"), g("batch")), (4, 16));
    }

    #[test]
    fn placement_confines_the_queues_in_scope_to_the_scoped_clusters() {
        let eff = spec(16, 16, 8);
        let pools = RolloutScope {
            pools: vec!["inference".into()],
            clusters: vec!["sim-eu".into()],
            ..Default::default()
        };
        let p = placement(&pools, &eff.queues, 3).unwrap();
        assert_eq!(p.queues, vec!["serving".to_string()]);
        assert_eq!(p.clusters_for("serving"), Some(&["sim-eu".to_string()][..]));
        assert_eq!(p.clusters_for("batch"), None);
        assert_eq!(p.version, 3);
        // Without clusters a scope does not touch placement.
        let no_clusters = RolloutScope {
            pools: vec!["inference".into()],
            ..Default::default()
        };
        assert_eq!(placement(&no_clusters, &eff.queues, 3), None);
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
