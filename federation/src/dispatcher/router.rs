//! A first-fit router: sends each pending workload to the first Ready member cluster whose
//! capacity digest fits the whole gang at its required topology level.
//!
//! It stands in for the scheduler core (quotas, fair share, preemption) until that lands, and
//! already gets the parts that must never be wrong right: whole gangs in one cluster, the
//! required topology level honored, placement constraints respected, and capacity reserved
//! within a pass so two workloads are never sent to the same free GPUs.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use chrono::{DateTime, Utc};
use tideway_api::digest::{CapacityDigest, PoolDigest};
use tideway_api::{TopologyLevel, Workload, WorkloadPhase};

use super::DispatchConfig;
use super::liveness::Liveness;
use crate::proposer::Proposer;
use crate::raft::state_machine::StateMachineData;
use crate::raft::types::Raft;
use crate::state::FederationState;
use crate::state::command::Command;

/// Most assignments proposed in one pass, to keep a pass short under a large backlog.
const MAX_PER_PASS: usize = 2048;

/// A member as the router sees it during one pass: its capacity, less what this pass and
/// not-yet-started assignments have taken.
#[derive(Debug, Clone)]
pub struct MemberView {
    pub name: String,
    pub region: String,
    pub digest: CapacityDigest,
}

/// A gang's demand on one pool: `pods` pods of `gpus_per_pod` of `flavor`.
fn demands(w: &Workload) -> Vec<(String, u64, u32)> {
    w.spec
        .pod_sets
        .iter()
        .map(|p| (p.flavor.clone(), u64::from(p.count), p.gpus_per_pod))
        .collect()
}

fn required_level(w: &Workload) -> Option<TopologyLevel> {
    w.spec
        .topology
        .as_ref()
        .filter(|t| t.is_required())
        .map(|t| t.level())
}

/// Takes a gang out of a pool: from one domain at `level` (best fit: the fullest domain that
/// still holds it), and from the pool's own counts. All or nothing.
fn take_from_pool(
    pool: &mut PoolDigest,
    pods: u64,
    gpus: u32,
    level: Option<TopologyLevel>,
) -> bool {
    match level {
        None => pool.counts.take(pods, gpus),
        Some(TopologyLevel::Node) => {
            // One node: the pool histogram knows each node's free GPUs.
            if pool.largest_fit(TopologyLevel::Node, gpus) < pods {
                return false;
            }
            let need = (pods * u64::from(gpus)) as usize;
            let Some(k) = (need..pool.counts.free_histogram.len())
                .find(|k| pool.counts.free_histogram[*k] > 0)
            else {
                return false;
            };
            pool.counts.free_histogram[k] -= 1;
            pool.counts.free_histogram[k - need] += 1;
            pool.counts.allocated += need as u32;
            true
        }
        Some(l) => {
            let best = pool
                .domains
                .iter()
                .enumerate()
                .filter(|(_, d)| d.level == l && d.counts.pods_that_fit(gpus) >= pods)
                .min_by_key(|(_, d)| (d.counts.pods_that_fit(gpus), d.name.clone()))
                .map(|(i, _)| i);
            let Some(i) = best else { return false };
            pool.domains[i].counts.take(pods, gpus) && pool.counts.take(pods, gpus)
        }
    }
}

/// Tries to place the whole workload on `member`; on success the capacity is taken from the
/// view and the chosen pool is returned.
pub fn try_place(member: &mut MemberView, w: &Workload) -> Option<String> {
    let level = required_level(w);
    let mut trial = member.digest.clone();
    let mut pool_name = None;
    for (flavor, pods, gpus) in demands(w) {
        let placed = trial
            .pools
            .iter_mut()
            .filter(|p| p.flavor == flavor)
            .any(|p| {
                if take_from_pool(p, pods, gpus, level) {
                    pool_name.get_or_insert_with(|| p.pool.clone());
                    true
                } else {
                    false
                }
            });
        if !placed {
            return None;
        }
    }
    member.digest = trial;
    pool_name
}

fn allowed(w: &Workload, m: &MemberView) -> bool {
    let Some(p) = &w.spec.placement else {
        return true;
    };
    (p.regions.is_empty() || p.regions.iter().any(|r| r == &m.region))
        && (p.clusters.is_empty() || p.clusters.iter().any(|c| c == &m.name))
}

/// One routing pass over the state: which pending workload goes where.
pub fn plan(
    state: &FederationState,
    latest: impl Fn(&str) -> Option<CapacityDigest>,
    now: DateTime<Utc>,
) -> Vec<Command> {
    // Assignments the agents have not started yet, by member: they may not show in digests.
    let mut unstarted: BTreeMap<&str, Vec<&Workload>> = BTreeMap::new();
    for w in state.workloads.values() {
        if let Some(st) = &w.status
            && st.phase == WorkloadPhase::Assigned
            && let Some(c) = st.cluster.as_deref()
        {
            unstarted.entry(c).or_default().push(w);
        }
    }
    let mut views: Vec<MemberView> = Vec::new();
    for (name, rec) in &state.members {
        if !rec
            .cluster
            .status
            .as_ref()
            .is_some_and(|s| s.phase.accepts_work())
        {
            continue;
        }
        let Some(digest) = latest(name).or_else(|| rec.digest.clone()) else {
            continue;
        };
        let since = digest.generated_at;
        let mut view = MemberView {
            name: name.clone(),
            region: rec.cluster.spec.region.clone(),
            digest,
        };
        for w in unstarted.get(name.as_str()).into_iter().flatten() {
            if w.status
                .as_ref()
                .and_then(|s| s.admitted_at)
                .is_some_and(|t| t >= since)
            {
                let _ = try_place(&mut view, w);
            }
        }
        views.push(view);
    }
    let mut out = Vec::new();
    for name in state.order.values() {
        if out.len() >= MAX_PER_PASS {
            break;
        }
        let Some(w) = state.workloads.get(name) else {
            continue;
        };
        if w.status.as_ref().map(|s| s.phase) != Some(WorkloadPhase::Pending) {
            continue;
        }
        for m in views.iter_mut() {
            if !allowed(w, m) {
                continue;
            }
            if let Some(pool) = try_place(m, w) {
                out.push(Command::Assign {
                    workload: name.clone(),
                    cluster: m.name.clone(),
                    pool: Some(pool),
                    at: now,
                });
                break;
            }
        }
    }
    out
}

/// The routing loop. Runs on every node; plans and proposes only on the leader.
pub async fn route_loop(
    raft: Raft,
    data: Arc<RwLock<StateMachineData>>,
    proposer: Proposer,
    live: Liveness,
    cfg: DispatchConfig,
) {
    let mut tick = tokio::time::interval(cfg.route_interval);
    loop {
        tick.tick().await;
        if !raft.is_leader() {
            continue;
        }
        let cmds = {
            let Ok(d) = data.read() else { continue };
            plan(&d.state, |n| live.latest_digest(n), Utc::now())
        };
        if cmds.is_empty() {
            continue;
        }
        let n = cmds.len();
        let results =
            futures::future::join_all(cmds.into_iter().map(|c| proposer.propose(c))).await;
        let ok = results.iter().filter(|r| r.is_ok()).count();
        tracing::debug!(proposed = n, ok, "routing pass");
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use tideway_api::digest::{DomainDigest, GpuCounts};
    use tideway_api::{
        MemberCluster, MemberClusterSpec, PodSet, Pool, PoolKind, TopologyRequirement,
        WorkloadClass, WorkloadSpec,
    };

    use super::*;

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0)
            .single()
            .expect("time")
    }

    /// A member with `racks` racks of `nodes` idle 8-GPU H100 nodes.
    fn digest(name: &str, racks: u32, nodes: u32) -> CapacityDigest {
        let rack = GpuCounts {
            total: 8 * nodes,
            allocated: 0,
            unhealthy: 0,
            cordoned: 0,
            free_histogram: {
                let mut h = vec![0; 9];
                h[8] = nodes;
                h
            },
        };
        let mut all = GpuCounts::default();
        let mut domains = Vec::new();
        for r in 0..racks {
            all.add(&rack);
            domains.push(DomainDigest {
                level: TopologyLevel::Rack,
                name: format!("r{r}"),
                counts: rack.clone(),
            });
        }
        CapacityDigest {
            cluster: name.into(),
            generated_at: t0(),
            pools: vec![PoolDigest {
                pool: "train".into(),
                kind: PoolKind::Training,
                flavor: "H100".into(),
                counts: all,
                domains,
            }],
        }
    }

    fn state_with(members: &[(&str, &str, u32, u32)]) -> FederationState {
        let mut s = FederationState::default();
        for (i, (name, region, racks, nodes)) in members.iter().enumerate() {
            let spec = MemberClusterSpec::new(
                region.to_string(),
                vec![Pool {
                    name: "train".into(),
                    kind: PoolKind::Training,
                }],
            );
            s.apply(
                i as u64 + 1,
                Command::RegisterMember {
                    member: Box::new(MemberCluster::new(name.to_string(), spec)),
                    agent_version: None,
                    at: t0(),
                },
            );
            s.apply(
                i as u64 + 100,
                Command::MemberDigest {
                    name: name.to_string(),
                    digest: Box::new(digest(name, *racks, *nodes)),
                    at: t0(),
                },
            );
        }
        s
    }

    fn submit(s: &mut FederationState, name: &str, pods: u32, level: TopologyLevel, idx: u64) {
        let mut spec = WorkloadSpec::new(
            "default",
            WorkloadClass::Training,
            vec![PodSet::new("worker", pods, 8, "H100")],
        );
        spec.topology = Some(TopologyRequirement::Required(level));
        let mut w = Workload::new(name, spec);
        w.metadata.uid = Some(format!("uid-{name}"));
        s.apply(
            idx,
            Command::SubmitWorkload {
                workload: Box::new(w),
                idempotency_key: name.into(),
                at: t0(),
            },
        );
    }

    fn apply_plan(s: &mut FederationState, idx: u64) -> Vec<(String, String)> {
        let cmds = plan(s, |_| None, t0());
        let mut out = Vec::new();
        for (i, c) in cmds.into_iter().enumerate() {
            if let Command::Assign {
                workload, cluster, ..
            } = &c
            {
                out.push((workload.clone(), cluster.clone()));
            }
            s.apply(idx + i as u64, c);
        }
        out
    }

    #[test]
    fn whole_gang_goes_to_one_cluster_at_the_required_level() {
        // a: 2 racks of 2 nodes; b: 1 rack of 4 nodes.
        let mut s = state_with(&[("a", "eu", 2, 2), ("b", "us", 1, 4)]);
        // 4 pods in one rack only fit in b.
        submit(&mut s, "big", 4, TopologyLevel::Rack, 1000);
        // 2 pods fit in a rack of a.
        submit(&mut s, "small", 2, TopologyLevel::Rack, 1001);
        let placed = apply_plan(&mut s, 2000);
        assert_eq!(
            placed,
            vec![
                ("big".to_string(), "b".to_string()),
                ("small".to_string(), "a".to_string())
            ]
        );
    }

    #[test]
    fn capacity_is_reserved_within_a_pass_and_across_unstarted_assignments() {
        let mut s = state_with(&[("a", "eu", 1, 2)]);
        submit(&mut s, "one", 2, TopologyLevel::Rack, 1000);
        submit(&mut s, "two", 2, TopologyLevel::Rack, 1001);
        let placed = apply_plan(&mut s, 2000);
        assert_eq!(placed.len(), 1, "only one 2-node gang fits: {placed:?}");
        // The digest still says 'all free', but the Assigned workload holds the capacity.
        let again = apply_plan(&mut s, 3000);
        assert!(again.is_empty(), "double booking: {again:?}");
    }

    #[test]
    fn placement_constraints_and_readiness_filter_members() {
        let mut s = state_with(&[("a", "eu", 1, 2), ("b", "us", 1, 2)]);
        let mut spec = WorkloadSpec::new(
            "default",
            WorkloadClass::Training,
            vec![PodSet::new("worker", 1, 8, "H100")],
        );
        spec.placement = Some(tideway_api::Placement {
            regions: vec!["us".into()],
            clusters: vec![],
            spread: false,
        });
        let mut w = Workload::new("pinned", spec);
        w.metadata.uid = Some("uid-pinned".into());
        s.apply(
            1000,
            Command::SubmitWorkload {
                workload: Box::new(w),
                idempotency_key: "k".into(),
                at: t0(),
            },
        );
        s.apply(
            1001,
            Command::MemberHealth {
                name: "b".into(),
                phase: tideway_api::MemberPhase::NotReady,
                message: None,
                at: t0(),
            },
        );
        assert!(
            apply_plan(&mut s, 2000).is_empty(),
            "b is NotReady and a is in the wrong region"
        );
        s.apply(
            2001,
            Command::MemberHealth {
                name: "b".into(),
                phase: tideway_api::MemberPhase::Ready,
                message: None,
                at: t0(),
            },
        );
        assert_eq!(
            apply_plan(&mut s, 3000),
            vec![("pinned".into(), "b".into())]
        );
    }
}
