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
