//! Policy dry-run on the live state: the leader's own cycle, run twice on the same snapshot
//! of the state, under the current policy and under a candidate, compared decision by
//! decision. Nothing is proposed; the state is only read (the candidate is installed into a
//! copy).

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use tideway_api::digest::CapacityDigest;
use tideway_api::{DryRunReport, DryRunWorkload, Policy, QuotaMove};
use tideway_scheduler::{Decision, SchedulerInput, SchedulerOutput, schedule};

use super::cycle::build_input;
use crate::state::FederationState;
use crate::state::command::Rejection;

/// What `candidate` would change now, compared with the current policy, on `state`.
pub fn dry_run(
    state: &FederationState,
    candidate: Policy,
    latest: impl Fn(&str) -> Option<CapacityDigest>,
    now: DateTime<Utc>,
    applied_index: u64,
) -> Result<DryRunReport, Rejection> {
    let mut cand_state = state.clone();
    cand_state.preview_policy(candidate, now)?;
    // The same cycle number for both: equal seeds, so only the policy differs.
    let now_in = build_input(state, &latest, now, 0);
    let cand_in = build_input(&cand_state, &latest, now, 0);
    let now_out = schedule(&now_in);
    let cand_out = schedule(&cand_in);
    Ok(compare(
        state,
        (&now_in, &now_out),
        (&cand_in, &cand_out),
        now,
        applied_index,
    ))
}

struct Fate<'a> {
    assigned: BTreeMap<&'a str, &'a str>,
    victims: BTreeMap<&'a str, &'a str>,
}

fn fate(out: &SchedulerOutput) -> Fate<'_> {
    let mut assigned = BTreeMap::new();
    let mut victims = BTreeMap::new();
    for d in &out.decisions {
        match d {
            Decision::Assign { uid, cluster, .. } => {
                assigned.insert(uid.as_str(), cluster.as_str());
            }
            Decision::Preempt {
                victims: vs,
                cluster,
                ..
            } => {
                for v in vs {
                    victims.insert(v.as_str(), cluster.as_str());
                }
            }
            _ => {}
        }
    }
    Fate { assigned, victims }
}

fn compare(
    state: &FederationState,
    (now_in, now_out): (&SchedulerInput, &SchedulerOutput),
    (cand_in, cand_out): (&SchedulerInput, &SchedulerOutput),
    at: DateTime<Utc>,
    applied_index: u64,
) -> DryRunReport {
    let (a, b) = (fate(now_out), fate(cand_out));
    let entry = |uid: &str, cluster: Option<&str>| -> Option<DryRunWorkload> {
        let w = state.workload(uid)?;
        Some(DryRunWorkload {
            workload: w.metadata.name.clone(),
            queue: w.spec.queue.to_string(),
            cluster: cluster.map(str::to_owned),
            reason: None,
        })
    };
    let newly_admitted = b
        .assigned
        .iter()
        .filter(|(uid, _)| !a.assigned.contains_key(*uid))
        .filter_map(|(uid, c)| entry(uid, Some(c)))
        .collect();
    let newly_pending = a
        .assigned
        .keys()
        .filter(|uid| !b.assigned.contains_key(*uid))
        .filter_map(|uid| {
            let mut e = entry(uid, None)?;
            e.reason = cand_out
                .decisions
                .iter()
                .find(|d| d.uid() == *uid)
                .and_then(Decision::pending_reason);
            Some(e)
        })
        .collect();
    let newly_preempted = b
        .victims
        .iter()
        .filter(|(uid, _)| !a.victims.contains_key(*uid))
        .filter_map(|(uid, c)| entry(uid, Some(c)))
        .collect();

    let (ga, gb) = (guaranteed(now_in), guaranteed(cand_in));
    let (aa, ab) = (admitted(state, &a), admitted(state, &b));
    let queues: BTreeSet<&String> = ga.keys().chain(gb.keys()).collect();
    let quota_moves = queues
        .into_iter()
        .map(|q| QuotaMove {
            queue: q.clone(),
            guaranteed_now: ga.get(q).copied().unwrap_or(0),
            guaranteed_candidate: gb.get(q).copied().unwrap_or(0),
            admitted_gpus_now: aa.get(q.as_str()).copied().unwrap_or(0),
            admitted_gpus_candidate: ab.get(q.as_str()).copied().unwrap_or(0),
        })
        .filter(|m| {
            m.guaranteed_now != m.guaranteed_candidate
                || m.admitted_gpus_now != m.admitted_gpus_candidate
        })
        .collect();
    DryRunReport {
        current_version: state.policy.current(),
        at,
        applied_index,
        newly_admitted,
        newly_pending,
        newly_preempted,
        quota_moves,
    }
}

/// Guaranteed GPUs per queue, all flavors, with the tidal windows' overrides in force.
fn guaranteed(input: &SchedulerInput) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for q in &input.queues {
        let mut by_flavor: BTreeMap<&str, u64> = q
            .spec
            .quotas
            .iter()
            .map(|f| (f.flavor.as_str(), u64::from(f.guaranteed)))
            .collect();
        for o in input
            .quota_overrides
            .iter()
            .filter(|o| o.queue == q.metadata.name)
        {
            by_flavor.insert(o.quota.flavor.as_str(), u64::from(o.quota.guaranteed));
        }
        out.insert(q.metadata.name.clone(), by_flavor.values().sum());
    }
    out
}

fn admitted<'a>(state: &'a FederationState, f: &Fate<'_>) -> BTreeMap<&'a str, u64> {
    let mut out = BTreeMap::new();
    for uid in f.assigned.keys() {
        if let Some(w) = state.workload(uid) {
            *out.entry(w.spec.queue.as_str()).or_default() += w.spec.total_gpus();
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use tideway_api::digest::{GpuCounts, PoolDigest};
    use tideway_api::{
        FlavorQuota, MemberCluster, MemberClusterSpec, PendingReason, PodSet, PolicySpec, PoolKind,
        Queue, QueueSpec, Workload, WorkloadClass, WorkloadSpec,
    };

    use super::*;
    use crate::state::command::Command;

    fn t(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000 + s, 0)
            .single()
            .expect("time")
    }

    fn policy(gpus: u32) -> Policy {
        let mut spec = QueueSpec::new("default");
        spec.quotas = vec![FlavorQuota {
            max: Some(gpus),
            ..FlavorQuota::guaranteed("H100", gpus)
        }];
        Policy::new(
            "p",
            PolicySpec {
                queues: vec![Queue::new("default", spec)],
                ..Default::default()
            },
        )
    }

    fn digest() -> CapacityDigest {
        CapacityDigest {
            cluster: "a".into(),
            generated_at: t(0),
            pools: vec![PoolDigest {
                pool: "p0".into(),
                kind: PoolKind::Training,
                flavor: "H100".into(),
                counts: GpuCounts {
                    total: 16,
                    free_histogram: vec![0, 0, 0, 0, 0, 0, 0, 0, 2],
                    ..Default::default()
                },
                domains: vec![],
            }],
        }
    }

    fn state() -> FederationState {
        let mut s = FederationState::default();
        s.apply(
            1,
            Command::RegisterMember {
                member: Box::new(MemberCluster::new(
                    "a",
                    MemberClusterSpec::new("eu", vec![]),
                )),
                agent_version: None,
                at: t(0),
                flaps: None,
            },
        );
        s.apply(
            2,
            Command::PutPolicy {
                policy: Box::new(policy(16)),
                at: t(1),
            },
        );
        let mut w = Workload::new(
            "wait",
            WorkloadSpec::new(
                "default",
                WorkloadClass::Training,
                vec![PodSet::new("w", 1, 8, "H100")],
            ),
        );
        w.metadata.uid = Some("u-wait".into());
        s.apply(
            3,
            Command::SubmitWorkload {
                workload: Box::new(w),
                idempotency_key: "k".into(),
                at: t(2),
                digest: None,
            },
        );
        s
    }

    #[test]
    fn a_starving_candidate_shows_newly_pending_work_and_the_quota_move() {
        let s = state();
        let before = s.clone();
        let r = dry_run(&s, policy(0), |_| Some(digest()), t(10), 3).unwrap();
        assert_eq!(s, before, "a dry-run changes nothing");
        assert!(
            r.newly_admitted.is_empty() && r.newly_preempted.is_empty(),
            "{r:?}"
        );
        assert_eq!(r.newly_pending.len(), 1, "{r:?}");
        assert_eq!(r.newly_pending[0].workload, "wait");
        assert!(
            matches!(
                r.newly_pending[0].reason,
                Some(PendingReason::QuotaExhausted { .. })
            ),
            "{r:?}"
        );
        assert_eq!(
            r.quota_moves,
            vec![QuotaMove {
                queue: "default".into(),
                guaranteed_now: 16,
                guaranteed_candidate: 0,
                admitted_gpus_now: 8,
                admitted_gpus_candidate: 0,
            }]
        );
        // The other way round, the same work is newly admitted.
        let mut starved = s.clone();
        starved.apply(
            4,
            Command::PutPolicy {
                policy: Box::new(policy(0)),
                at: t(3),
            },
        );
        let r = dry_run(&starved, policy(16), |_| Some(digest()), t(10), 4).unwrap();
        assert_eq!(r.newly_admitted.len(), 1, "{r:?}");
        assert_eq!(r.newly_admitted[0].cluster.as_deref(), Some("a"));
    }

    #[test]
    fn the_version_in_force_and_its_rollback_change_nothing() {
        let mut s = state();
        let r = dry_run(&s, policy(16), |_| Some(digest()), t(10), 3).unwrap();
        assert!(r.no_change(), "{r:?}");
        s.apply(
            4,
            Command::PutPolicy {
                policy: Box::new(policy(0)),
                at: t(3),
            },
        );
        s.apply(
            5,
            Command::RollbackPolicy {
                to: None,
                only_candidate: None,
                applied_by: None,
                message: None,
                at: t(4),
            },
        );
        assert_eq!(s.policy.current(), 3);
        let r = dry_run(&s, policy(16), |_| Some(digest()), t(10), 5).unwrap();
        assert!(r.no_change(), "{r:?}");
    }

    #[test]
    fn a_candidate_apply_would_refuse_is_refused() {
        let s = state();
        let mut p = policy(16);
        p.spec.queues[0].metadata.name = "other".into();
        let r = dry_run(&s, p, |_| Some(digest()), t(10), 3);
        assert!(matches!(r, Err(Rejection::Invalid { .. })), "{r:?}");
    }
}
