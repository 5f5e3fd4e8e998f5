//! `SimCluster`: an embedded member cluster with nodes, GPUs, a local gang scheduler, job run
//! times and node faults.
//!
//! It is pure and deterministic: there is no clock inside, every call that depends on time
//! takes `now`, and every collection is ordered. The same calls with the same times give the
//! same cluster, which is what lets the trace simulator replay a trace and the tests assert
//! exact outcomes.
//!
//! Workloads are keyed by (uid, attempt), the identity the federation gives a dispatch: a
//! replayed assignment finds its object and does nothing, a retry (next attempt) is a new
//! object. Scheduling and completions happen in [`SimCluster::tick`]; the scheduler starts
//! pending workloads at tick time, so a caller that wants event-exact timing ticks at
//! [`SimCluster::next_event`].

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};
use tideway_api::agent::NodeFaultKind;
use tideway_api::{PoolKind, Workload};

use crate::backend::{Assignment, LocalPhase, LocalStatus};

use super::gang::{GangRequest, NodeCapacity, PlacementError, PodGroup, place_gang};
use super::inventory::Inventory;

/// Overrides `spec.runtimeEstimateSeconds` for the simulated run time, so a demo or test can
/// make a job finish early or late relative to its estimate.
pub const RUNTIME_ANNOTATION: &str = "tideway.dev/sim-runtime-seconds";

/// The reason an evicted workload reports after a preemption notice ran out.
pub const PREEMPTED_REASON: &str = "preempted";
/// The failure reason of a workload stopped at its `spec.runtimeLimitSeconds` (Slurm's TIMEOUT).
pub const RUNTIME_LIMIT_REASON: &str = "RuntimeLimitExceeded";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    /// Everything in the cluster is keyed by UID; without one there is no idempotency.
    #[error("workload {name:?} has no metadata.uid")]
    MissingUid { name: String },
    #[error("workload {uid}: metadata.annotations[{key:?}] = {value:?} is not a number of seconds")]
    InvalidAnnotation {
        uid: String,
        key: String,
        value: String,
    },
    #[error("workload {uid}: has no pods")]
    NoPods { uid: String },
    #[error("workload {uid}: assigned to pool {pool:?}, which this cluster does not have")]
    UnknownPool { uid: String, pool: String },
    /// No node could ever run the pod set: the federation routed it to the wrong cluster.
    #[error("workload {uid}: spec.podSets[{index}].flavor {flavor:?} has no node in {scope}")]
    NoSuchFlavor {
        uid: String,
        index: usize,
        flavor: String,
        scope: String,
    },
    #[error("no node named {0:?}")]
    UnknownNode(String),
}

/// What a node fault does to the workloads on the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultPolicy {
    /// The gang fails (what a job without restart policy sees).
    Fail,
    /// The gang is evicted and may be retried elsewhere (what Volcano does with
    /// `PodEvicted -> RestartJob`-style policies).
    Evict,
}

/// One node and what is allocated on it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SimNode {
    pub name: String,
    pub zone: String,
    pub rack: String,
    pub pool: String,
    /// GPU model: the flavor.
    pub model: String,
    pub gpus: u32,
    pub allocated: u32,
    pub healthy: bool,
    pub cordoned: bool,
}

impl SimNode {
    pub fn free(&self) -> u32 {
        self.gpus.saturating_sub(self.allocated)
    }

    /// Whether the scheduler may place new pods here.
    pub fn schedulable(&self) -> bool {
        self.healthy && !self.cordoned
    }
}

/// One dispatch of a workload and its life in the cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimWorkload {
    pub uid: String,
    pub attempt: u32,
    pub workload: Workload,
    /// The pool the federation chose; any pool when `None`.
    pub pool: Option<String>,
    /// Arrival order, for FIFO scheduling.
    pub seq: u64,
    /// Node index -> GPUs held there; empty unless running.
    pub placement: BTreeMap<usize, u32>,
    pub phase: LocalPhase,
    /// When `phase` was entered.
    pub since: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    /// How long it runs once started; `None` runs until removed or stopped.
    #[serde(with = "millis")]
    pub runtime: Option<TimeDelta>,
    /// Set by a preemption notice: it stops at this time unless it finishes before.
    pub stop_at: Option<DateTime<Utc>>,
    /// Why the last scheduling pass left it pending.
    pub pending_reason: Option<PlacementError>,
    /// When it last wrote a checkpoint on a hand-over notice.
    #[serde(default)]
    pub last_checkpoint_at: Option<DateTime<Utc>>,
    /// The deadline of the notice that checkpoint answered: one checkpoint per notice.
    #[serde(default)]
    pub checkpointed_for: Option<DateTime<Utc>>,
}

impl SimWorkload {
    /// When it will finish on its own, if running with a known run time.
    pub fn finishes_at(&self) -> Option<DateTime<Utc>> {
        match (&self.phase, self.started_at, self.runtime) {
            (LocalPhase::Running, Some(start), Some(runtime)) => start.checked_add_signed(runtime),
            _ => None,
        }
    }

    /// When it is stopped for running past `spec.runtimeLimitSeconds`, if running with one.
    pub fn limit_at(&self) -> Option<DateTime<Utc>> {
        let limit = self.workload.spec.runtime_limit_seconds?;
        let limit = TimeDelta::try_seconds(i64::try_from(limit).ok()?)?;
        match (&self.phase, self.started_at) {
            (LocalPhase::Running, Some(start)) => start.checked_add_signed(limit),
            _ => None,
        }
    }

    /// Its status; `nodes` names the nodes of `placement` (indices into `nodes`).
    pub fn status(&self, nodes: &[SimNode]) -> LocalStatus {
        LocalStatus {
            uid: self.uid.clone(),
            attempt: self.attempt,
            phase: self.phase.clone(),
            since: self.since,
            nodes: self
                .placement
                .iter()
                .filter_map(|(&i, &gpus)| {
                    nodes.get(i).map(|n| tideway_api::NodeGpus {
                        node: n.name.clone(),
                        gpus,
                        zone: Some(n.zone.clone()),
                        rack: Some(n.rack.clone()),
                    })
                })
                .collect(),
        }
    }

    fn is_active(&self) -> bool {
        !self.phase.is_terminal()
    }

    /// Work a stop at `now` would lose: the time running since its start or its last
    /// checkpoint, whichever is later; zero unless running.
    pub fn work_since_checkpoint(&self, now: DateTime<Utc>) -> TimeDelta {
        match (&self.phase, self.started_at) {
            (LocalPhase::Running, Some(start)) => {
                let from = self.last_checkpoint_at.map_or(start, |c| c.max(start));
                (now - from).max(TimeDelta::zero())
            }
            _ => TimeDelta::zero(),
        }
    }
}

/// What `ensure` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ensured {
    Created,
    /// This uid and attempt exist already: nothing changed.
    AlreadyPresent,
    /// A later attempt of this uid exists; the stale assignment was ignored.
    Stale {
        current: u32,
    },
}

/// A phase change, for callers that record history (the trace simulator, tests).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PhaseChange {
    pub uid: String,
    pub attempt: u32,
    pub phase: LocalPhase,
    pub at: DateTime<Utc>,
}

/// `Option<TimeDelta>` as milliseconds: chrono's durations have no serde form.
mod millis {
    use chrono::TimeDelta;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<TimeDelta>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(d) => s.serialize_some(&d.num_milliseconds()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<TimeDelta>, D::Error> {
        Ok(Option::<i64>::deserialize(d)?.map(TimeDelta::milliseconds))
    }
}

/// The whole simulated cluster. Serializable so the sim backend can outlive an agent
/// process, as a real cluster does: a restarted agent finds its workloads still there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimCluster {
    name: String,
    region: String,
    pools: BTreeMap<String, PoolKind>,
    nodes: Vec<SimNode>,
    node_index: BTreeMap<String, usize>,
    workloads: BTreeMap<(String, u32), SimWorkload>,
    next_seq: u64,
    /// Workload objects ever created: a restarted agent that replays its assignments must
    /// not raise it.
    #[serde(default)]
    creations: u64,
}

type Key = (String, u32);

impl SimCluster {
    /// Workload objects ever created in this cluster.
    pub fn creations(&self) -> u64 {
        self.creations
    }

    pub fn new(inventory: &Inventory) -> Self {
        let nodes: Vec<SimNode> = inventory
            .nodes()
            .iter()
            .map(|n| SimNode {
                name: n.name.clone(),
                zone: n.zone.clone(),
                rack: n.rack.clone(),
                pool: n.pool.clone(),
                model: n.model.clone(),
                gpus: n.gpus,
                allocated: 0,
                healthy: true,
                cordoned: false,
            })
            .collect();
        let node_index = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), i))
            .collect();
        Self {
            name: inventory.cluster().to_owned(),
            region: inventory.region().to_owned(),
            pools: inventory.pools().clone(),
            nodes,
            node_index,
            workloads: BTreeMap::new(),
            next_seq: 0,
            creations: 0,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn region(&self) -> &str {
        &self.region
    }

    pub fn pools(&self) -> &BTreeMap<String, PoolKind> {
        &self.pools
    }

    pub fn nodes(&self) -> &[SimNode] {
        &self.nodes
    }

    pub fn node(&self, name: &str) -> Option<&SimNode> {
        self.node_index.get(name).map(|&i| &self.nodes[i])
    }

    pub fn workload(&self, uid: &str, attempt: u32) -> Option<&SimWorkload> {
        self.workloads.get(&(uid.to_owned(), attempt))
    }

    /// Every workload, by (uid, attempt).
    pub fn workloads(&self) -> impl Iterator<Item = &SimWorkload> {
        self.workloads.values()
    }

    /// Creates the workload unless this uid and attempt exist (idempotent).
    ///
    /// A later attempt supersedes earlier ones still active: they are aborted, since two
    /// copies of one workload must never run. An earlier attempt arriving after a later one
    /// (a replayed, stale assignment) is ignored. Assignments that can never run here
    /// (unknown pool, a flavor with no node) are rejected at once rather than left pending
    /// forever.
    pub fn ensure(
        &mut self,
        assignment: &Assignment,
        now: DateTime<Utc>,
    ) -> Result<Ensured, SimError> {
        let w = &assignment.workload;
        let uid = assignment.uid();
        if uid.is_empty() {
            return Err(SimError::MissingUid {
                name: w.metadata.name.clone(),
            });
        }
        let key = (uid.to_owned(), assignment.attempt);
        if self.workloads.contains_key(&key) {
            return Ok(Ensured::AlreadyPresent);
        }
        if let Some(current) = self
            .attempts(uid)
            .map(|(k, _)| k.1)
            .filter(|a| *a > assignment.attempt)
            .max()
        {
            return Ok(Ensured::Stale { current });
        }
        let runtime = runtime_of(w, uid)?;
        self.check_runnable(assignment, uid)?;

        let older: Vec<Key> = self
            .attempts(uid)
            .filter(|(_, w)| w.is_active())
            .map(|(k, _)| k.clone())
            .collect();
        for k in older {
            let reason = format!("superseded by attempt {}", assignment.attempt);
            self.stop(&k, LocalPhase::Aborted { reason }, now);
        }

        let seq = self.next_seq;
        self.next_seq += 1;
        self.creations += 1;
        self.workloads.insert(
            key,
            SimWorkload {
                uid: uid.to_owned(),
                attempt: assignment.attempt,
                workload: w.clone(),
                pool: assignment.pool.clone(),
                seq,
                placement: BTreeMap::new(),
                phase: LocalPhase::Pending,
                since: now,
                created_at: now,
                started_at: None,
                runtime,
                stop_at: None,
                pending_reason: None,
                last_checkpoint_at: None,
                checkpointed_for: None,
            },
        );
        Ok(Ensured::Created)
    }

    /// Finishes workloads whose run time elapsed, stops those whose preemption deadline
    /// passed (each at its own event time), then runs the gang scheduler over pending
    /// workloads in arrival order. A gang that does not fit does not block later ones.
    pub fn tick(&mut self, now: DateTime<Utc>) -> Vec<PhaseChange> {
        let mut changes = Vec::new();
        // Stops and completions due by now, in time order.
        let mut due: Vec<(DateTime<Utc>, Key, LocalPhase)> = self
            .workloads
            .iter()
            .filter(|(_, w)| w.is_active())
            .filter_map(|(k, w)| {
                // The earliest due event; at equal times finishing wins (finishing at the
                // deadline or at the limit counts as finishing), then the limit.
                let event = [(w.finishes_at(), 0u8), (w.limit_at(), 1), (w.stop_at, 2)]
                    .into_iter()
                    .filter_map(|(t, order)| t.filter(|t| *t <= now).map(|t| (t, order)))
                    .min()?;
                let phase = match event.1 {
                    0 => LocalPhase::Succeeded,
                    1 => LocalPhase::Failed {
                        reason: RUNTIME_LIMIT_REASON.to_owned(),
                    },
                    _ => evicted(PREEMPTED_REASON),
                };
                Some((event.0, k.clone(), phase))
            })
            .collect();
        due.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        for (at, key, phase) in due {
            if let Some(c) = self.stop(&key, phase, at) {
                changes.push(c);
            }
        }
        changes.extend(self.schedule(now));
        changes
    }

    /// The earliest time a running workload finishes or a preemption deadline falls: the next
    /// time `tick` has something to do besides scheduling.
    pub fn next_event(&self) -> Option<DateTime<Utc>> {
        self.workloads
            .values()
            .filter(|w| w.is_active())
            .flat_map(|w| [w.finishes_at(), w.limit_at(), w.stop_at])
            .flatten()
            .min()
    }

    /// Asks every active attempt of `uid` to stop within `grace`: a pending one stops at once
    /// (there is nothing to checkpoint), a running one at `now + grace` unless it finishes
    /// first. A second notice can only bring the deadline forward. Returns the changes made
    /// now; an unknown or finished uid changes nothing.
    pub fn preempt(&mut self, uid: &str, grace: Duration, now: DateTime<Utc>) -> Vec<PhaseChange> {
        let deadline = TimeDelta::from_std(grace)
            .ok()
            .and_then(|g| now.checked_add_signed(g))
            .unwrap_or(DateTime::<Utc>::MAX_UTC);
        let keys: Vec<Key> = self
            .attempts(uid)
            .filter(|(_, w)| w.is_active())
            .map(|(k, _)| k.clone())
            .collect();
        let mut changes = Vec::new();
        for key in keys {
            let Some(w) = self.workloads.get_mut(&key) else {
                continue;
            };
            if w.phase == LocalPhase::Pending || deadline <= now {
                changes.extend(self.stop(&key, evicted(PREEMPTED_REASON), now));
            } else {
                w.stop_at = Some(w.stop_at.map_or(deadline, |d| d.min(deadline)));
            }
        }
        changes
    }

    /// A hand-over notice: every running attempt of `uid` writes a checkpoint now (the work
    /// a stop would lose drops to zero) and keeps running. One checkpoint per notice: a
    /// replayed notice with the same deadline changes nothing. Pending work has nothing to
    /// checkpoint. Returns how many attempts checkpointed.
    pub fn checkpoint(&mut self, uid: &str, deadline: DateTime<Utc>, now: DateTime<Utc>) -> usize {
        let keys: Vec<Key> = self
            .attempts(uid)
            .filter(|(_, w)| {
                w.phase == LocalPhase::Running && w.checkpointed_for.is_none_or(|d| d < deadline)
            })
            .map(|(k, _)| k.clone())
            .collect();
        for key in &keys {
            if let Some(w) = self.workloads.get_mut(key) {
                w.last_checkpoint_at = Some(now);
                w.checkpointed_for = Some(deadline);
            }
        }
        keys.len()
    }

    /// The checkpoints taken on hand-over notices, for the agent's local view.
    pub fn checkpoints(&self) -> Vec<tideway_api::agent::LocalCheckpoint> {
        self.workloads
            .values()
            .filter_map(|w| {
                Some(tideway_api::agent::LocalCheckpoint {
                    uid: w.uid.clone(),
                    attempt: w.attempt,
                    at: w.last_checkpoint_at?,
                    deadline: w.checkpointed_for?,
                })
            })
            .collect()
    }

    /// The newest checkpoint of every running attempt, as the agent reports them.
    pub fn reported_checkpoints(&self) -> Vec<tideway_api::agent::ReportedCheckpoint> {
        self.workloads
            .values()
            .filter(|w| w.phase == LocalPhase::Running)
            .filter_map(|w| {
                Some(tideway_api::agent::ReportedCheckpoint {
                    uid: w.uid.clone(),
                    attempt: w.attempt,
                    at: w.last_checkpoint_at?,
                })
            })
            .collect()
    }

    /// Deletes every attempt of `uid`, releasing its GPUs. Returns whether anything existed.
    pub fn remove(&mut self, uid: &str) -> bool {
        let keys: Vec<Key> = self.attempts(uid).map(|(k, _)| k.clone()).collect();
        for key in &keys {
            if let Some(w) = self.workloads.remove(key) {
                self.release(&w.placement);
            }
        }
        !keys.is_empty()
    }

    /// An uncorrectable ECC error: the node becomes unhealthy and every gang with a pod on it
    /// fails or is evicted as a whole, releasing its GPUs on every node.
    pub fn inject_ecc(
        &mut self,
        node: &str,
        now: DateTime<Utc>,
        policy: FaultPolicy,
    ) -> Result<Vec<PhaseChange>, SimError> {
        let index = self.node_idx(node)?;
        self.nodes[index].healthy = false;
        let hit: Vec<Key> = self
            .workloads
            .iter()
            .filter(|(_, w)| w.is_active() && w.placement.contains_key(&index))
            .map(|(k, _)| k.clone())
            .collect();
        let mut changes = Vec::new();
        for key in hit {
            let phase = match policy {
                FaultPolicy::Fail => LocalPhase::Failed {
                    reason: format!("ECC error on node {node}"),
                },
                FaultPolicy::Evict => evicted(&format!("node {node} unhealthy: ECC error")),
            };
            changes.extend(self.stop(&key, phase, now));
        }
        Ok(changes)
    }

    /// Node health: the node is cordoned (no new pods). For an ECC warning every gang with a
    /// pod on it gets a checkpoint notice of `grace` and is evicted at its end (so it resumes
    /// elsewhere from that checkpoint); a GPU fault or a NotReady node also takes the node
    /// out of service and evicts those gangs now. Returns the UIDs affected.
    pub fn node_fault(
        &mut self,
        node: &str,
        kind: NodeFaultKind,
        grace: Duration,
        now: DateTime<Utc>,
    ) -> Result<(Vec<String>, Vec<PhaseChange>), SimError> {
        let index = self.node_idx(node)?;
        self.nodes[index].cordoned = true;
        let hit: Vec<Key> = self
            .workloads
            .iter()
            .filter(|(_, w)| w.is_active() && w.placement.contains_key(&index))
            .map(|(k, _)| k.clone())
            .collect();
        let mut uids: Vec<String> = hit.iter().map(|k| k.0.clone()).collect();
        uids.dedup();
        let mut changes = Vec::new();
        match kind {
            NodeFaultKind::Ecc => {
                for uid in &uids {
                    changes.extend(self.preempt(uid, grace, now));
                }
            }
            NodeFaultKind::Gpu | NodeFaultKind::NotReady => {
                self.nodes[index].healthy = false;
                let why = match kind {
                    NodeFaultKind::Gpu => "GPU fault",
                    _ => "NotReady",
                };
                for key in hit {
                    changes.extend(self.stop(&key, evicted(&format!("node {node}: {why}")), now));
                }
            }
        }
        Ok((uids, changes))
    }

    /// The node is repaired and schedulable again (unless cordoned).
    pub fn heal(&mut self, node: &str) -> Result<(), SimError> {
        let i = self.node_idx(node)?;
        self.nodes[i].healthy = true;
        Ok(())
    }

    /// No new pods on the node; running ones stay, as with `kubectl cordon`.
    pub fn cordon(&mut self, node: &str) -> Result<(), SimError> {
        let i = self.node_idx(node)?;
        self.nodes[i].cordoned = true;
        Ok(())
    }

    pub fn uncordon(&mut self, node: &str) -> Result<(), SimError> {
        let i = self.node_idx(node)?;
        self.nodes[i].cordoned = false;
        Ok(())
    }

    /// Every workload's status, by (uid, attempt).
    pub fn statuses(&self) -> Vec<LocalStatus> {
        self.workloads
            .values()
            .map(|w| w.status(&self.nodes))
            .collect()
    }

    /// Checks the bookkeeping: every node's allocation is the sum of the placements of running
    /// workloads on it and within its GPUs; only running workloads hold GPUs. For tests and
    /// debug assertions; `Err` describes the first violation.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut held = vec![0u64; self.nodes.len()];
        for w in self.workloads.values() {
            let running = w.phase == LocalPhase::Running;
            let holds = !w.placement.is_empty();
            if holds != (running && w.workload.spec.total_gpus() > 0) {
                return Err(format!(
                    "{}/{} is {:?} with placement {:?}",
                    w.uid, w.attempt, w.phase, w.placement
                ));
            }
            for (&node, &gpus) in &w.placement {
                let Some(h) = held.get_mut(node) else {
                    return Err(format!(
                        "{}/{} placed on missing node {node}",
                        w.uid, w.attempt
                    ));
                };
                *h += u64::from(gpus);
            }
        }
        for (n, h) in self.nodes.iter().zip(held) {
            if u64::from(n.allocated) != h {
                return Err(format!(
                    "{} has {} allocated but {h} placed",
                    n.name, n.allocated
                ));
            }
            if n.allocated > n.gpus {
                return Err(format!(
                    "{} has {} of {} GPUs allocated",
                    n.name, n.allocated, n.gpus
                ));
            }
        }
        Ok(())
    }

    /// The FIFO scheduling pass; see [`SimCluster::tick`].
    fn schedule(&mut self, now: DateTime<Utc>) -> Vec<PhaseChange> {
        let mut pending: Vec<(u64, Key)> = self
            .workloads
            .iter()
            .filter(|(_, w)| w.phase == LocalPhase::Pending)
            .map(|(k, w)| (w.seq, k.clone()))
            .collect();
        if pending.is_empty() {
            return Vec::new();
        }
        pending.sort();

        // Decide on a capacity view first, then apply: the view borrows the nodes.
        let mut decisions = Vec::new();
        {
            let mut view: Vec<NodeCapacity<'_>> = self
                .nodes
                .iter()
                .map(|n| NodeCapacity {
                    zone: &n.zone,
                    rack: &n.rack,
                    pool: &n.pool,
                    flavor: &n.model,
                    free: n.free(),
                    schedulable: n.schedulable(),
                })
                .collect();
            for (_, key) in pending {
                let Some(w) = self.workloads.get(&key) else {
                    continue;
                };
                let spec = &w.workload.spec;
                let request = GangRequest {
                    pod_groups: spec
                        .pod_sets
                        .iter()
                        .map(|p| PodGroup {
                            count: p.count,
                            gpus_per_pod: p.gpus_per_pod,
                            flavor: &p.flavor,
                        })
                        .collect(),
                    pool: w.pool.as_deref(),
                    topology: spec.topology,
                };
                let outcome = place_gang(&view, &request).map(|p| p.gpus_by_node());
                if let Ok(by_node) = &outcome {
                    for (&node, &gpus) in by_node {
                        view[node].free = view[node].free.saturating_sub(gpus);
                    }
                }
                decisions.push((key, outcome));
            }
        }

        let mut changes = Vec::new();
        for (key, outcome) in decisions {
            match outcome {
                Ok(by_node) => {
                    for (&node, &gpus) in &by_node {
                        self.nodes[node].allocated =
                            self.nodes[node].allocated.saturating_add(gpus);
                    }
                    if let Some(w) = self.workloads.get_mut(&key) {
                        w.placement = by_node;
                        w.phase = LocalPhase::Running;
                        w.since = now;
                        w.started_at = Some(now);
                        w.pending_reason = None;
                        changes.push(change(w));
                    }
                }
                Err(reason) => {
                    if let Some(w) = self.workloads.get_mut(&key) {
                        w.pending_reason = Some(reason);
                    }
                }
            }
        }
        changes
    }

    /// Moves an active workload to a terminal phase at `at`, releasing its GPUs.
    fn stop(&mut self, key: &Key, phase: LocalPhase, at: DateTime<Utc>) -> Option<PhaseChange> {
        let w = self.workloads.get_mut(key).filter(|w| w.is_active())?;
        let placement = std::mem::take(&mut w.placement);
        w.phase = phase;
        w.since = at;
        w.stop_at = None;
        let c = change(w);
        self.release(&placement);
        Some(c)
    }

    fn release(&mut self, placement: &BTreeMap<usize, u32>) {
        for (&node, &gpus) in placement {
            if let Some(n) = self.nodes.get_mut(node) {
                n.allocated = n.allocated.saturating_sub(gpus);
            }
        }
    }

    fn attempts<'a>(&'a self, uid: &str) -> impl Iterator<Item = (&'a Key, &'a SimWorkload)> {
        self.workloads
            .range((uid.to_owned(), 0)..=(uid.to_owned(), u32::MAX))
    }

    fn node_idx(&self, name: &str) -> Result<usize, SimError> {
        self.node_index
            .get(name)
            .copied()
            .ok_or_else(|| SimError::UnknownNode(name.to_owned()))
    }

    /// Rejects what could never be scheduled here, whatever the load.
    fn check_runnable(&self, assignment: &Assignment, uid: &str) -> Result<(), SimError> {
        let spec = &assignment.workload.spec;
        if spec.total_pods() == 0 {
            return Err(SimError::NoPods {
                uid: uid.to_owned(),
            });
        }
        if let Some(pool) = &assignment.pool
            && !self.pools.contains_key(pool)
        {
            return Err(SimError::UnknownPool {
                uid: uid.to_owned(),
                pool: pool.clone(),
            });
        }
        let pool = assignment.pool.as_deref();
        for (index, set) in spec.pod_sets.iter().enumerate() {
            if set.gpus_per_pod == 0 || set.count == 0 {
                continue;
            }
            let exists = self
                .nodes
                .iter()
                .any(|n| n.model == set.flavor && pool.is_none_or(|p| p == n.pool));
            if !exists {
                return Err(SimError::NoSuchFlavor {
                    uid: uid.to_owned(),
                    index,
                    flavor: set.flavor.to_string(),
                    scope: pool
                        .map_or_else(|| format!("cluster {}", self.name), |p| format!("pool {p}")),
                });
            }
        }
        Ok(())
    }
}

fn evicted(reason: &str) -> LocalPhase {
    LocalPhase::Evicted {
        reason: reason.to_owned(),
    }
}

fn change(w: &SimWorkload) -> PhaseChange {
    PhaseChange {
        uid: w.uid.clone(),
        attempt: w.attempt,
        phase: w.phase.clone(),
        at: w.since,
    }
}

/// The simulated run time: the annotation if present, else the spec's estimate; `None` (run
/// until removed) when neither is given or the value is beyond representable time.
fn runtime_of(w: &Workload, uid: &str) -> Result<Option<TimeDelta>, SimError> {
    let seconds = match w.metadata.annotations.get(RUNTIME_ANNOTATION) {
        Some(value) => {
            Some(
                value
                    .trim()
                    .parse::<u64>()
                    .map_err(|_| SimError::InvalidAnnotation {
                        uid: uid.to_owned(),
                        key: RUNTIME_ANNOTATION.to_owned(),
                        value: value.clone(),
                    })?,
            )
        }
        None => w.spec.runtime_estimate_seconds,
    };
    Ok(seconds
        .and_then(|s| i64::try_from(s).ok())
        .and_then(TimeDelta::try_seconds))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::sim::inventory::{ClusterConfig, UniformLayout};
    use proptest::prelude::*;
    use tideway_api::{
        Gang, PodSet, TopologyLevel, TopologyRequirement, WorkloadClass, WorkloadSpec,
    };

    pub(crate) fn t(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_770_000_000 + secs, 0).unwrap_or_default()
    }

    /// 2 zones x 2 racks x 2 nodes x 8 H100.
    pub(crate) fn small() -> SimCluster {
        let inv = ClusterConfig::uniform(&UniformLayout {
            cluster: "sim".into(),
            region: "r".into(),
            zones: 2,
            racks_per_zone: 2,
            nodes_per_rack: 2,
            gpus_per_node: 8,
            model: "H100".into(),
            pool: "train".into(),
            pool_kind: PoolKind::Training,
        })
        .into_inventory()
        .unwrap();
        SimCluster::new(&inv)
    }

    pub(crate) fn assignment(uid: &str, pods: u32, gpus: u32, runtime: Option<u64>) -> Assignment {
        let mut spec = WorkloadSpec::new(
            "q",
            WorkloadClass::Training,
            vec![PodSet::new("w", pods, gpus, "H100")],
        );
        spec.runtime_estimate_seconds = runtime;
        let mut workload = Workload::new(uid, spec);
        workload.metadata.uid = Some(uid.to_owned());
        Assignment {
            workload,
            pool: Some("train".into()),
            attempt: 1,
        }
    }

    fn phase(c: &SimCluster, uid: &str) -> LocalPhase {
        c.workload(uid, 1).map(|w| w.phase.clone()).unwrap()
    }

    #[test]
    fn ensure_is_idempotent() {
        let mut c = small();
        let a = assignment("a", 2, 8, Some(100));
        assert_eq!(c.ensure(&a, t(0)).unwrap(), Ensured::Created);
        c.tick(t(1));
        for s in 0..3 {
            assert_eq!(c.ensure(&a, t(2 + s)).unwrap(), Ensured::AlreadyPresent);
        }
        assert_eq!(c.workloads().count(), 1);
        assert_eq!(c.nodes().iter().map(|n| n.allocated).sum::<u32>(), 16);
        c.check_invariants().unwrap();
    }

    #[test]
    fn a_new_attempt_supersedes_and_a_stale_one_is_ignored() {
        let mut c = small();
        let mut a = assignment("a", 1, 8, None);
        c.ensure(&a, t(0)).unwrap();
        c.tick(t(0));
        a.attempt = 2;
        assert_eq!(c.ensure(&a, t(5)).unwrap(), Ensured::Created);
        assert!(matches!(phase(&c, "a"), LocalPhase::Aborted { .. }));
        a.attempt = 1;
        assert_eq!(c.ensure(&a, t(6)).unwrap(), Ensured::AlreadyPresent);
        c.remove("a");
        a.attempt = 2;
        c.ensure(&a, t(7)).unwrap();
        a.attempt = 1;
        assert_eq!(c.ensure(&a, t(8)).unwrap(), Ensured::Stale { current: 2 });
        c.check_invariants().unwrap();
    }

    #[test]
    fn runs_for_its_runtime_and_frees_gpus() {
        let mut c = small();
        c.ensure(&assignment("a", 2, 8, Some(100)), t(0)).unwrap();
        let started = c.tick(t(10));
        assert_eq!(started.len(), 1);
        assert_eq!(started[0].phase, LocalPhase::Running);
        assert_eq!(c.next_event(), Some(t(110)));
        assert!(c.tick(t(109)).is_empty());
        let done = c.tick(t(500));
        assert_eq!(done[0].phase, LocalPhase::Succeeded);
        assert_eq!(done[0].at, t(110), "finishes at its own event time");
        assert_eq!(c.nodes().iter().map(|n| n.allocated).sum::<u32>(), 0);
        c.check_invariants().unwrap();
    }

    #[test]
    fn stops_at_its_runtime_limit() {
        let mut c = small();
        let mut a = assignment("a", 1, 8, Some(100));
        a.workload.spec.runtime_limit_seconds = Some(60);
        c.ensure(&a, t(0)).unwrap();
        c.tick(t(0));
        assert_eq!(c.next_event(), Some(t(60)));
        let done = c.tick(t(500));
        assert_eq!(
            done[0].phase,
            LocalPhase::Failed {
                reason: RUNTIME_LIMIT_REASON.into()
            }
        );
        assert_eq!(done[0].at, t(60));
        assert_eq!(c.nodes().iter().map(|n| n.allocated).sum::<u32>(), 0);
        // Work that ends by its limit succeeds.
        let mut b = assignment("b", 1, 8, Some(60));
        b.workload.spec.runtime_limit_seconds = Some(60);
        c.ensure(&b, t(500)).unwrap();
        c.tick(t(500));
        assert_eq!(c.tick(t(600))[0].phase, LocalPhase::Succeeded);
        c.check_invariants().unwrap();
    }

    #[test]
    fn annotation_overrides_the_estimate() {
        let mut c = small();
        let mut a = assignment("a", 1, 1, Some(100));
        a.workload
            .metadata
            .annotations
            .insert(RUNTIME_ANNOTATION.into(), "5".into());
        c.ensure(&a, t(0)).unwrap();
        c.tick(t(0));
        c.tick(t(5));
        assert_eq!(phase(&c, "a"), LocalPhase::Succeeded);

        let mut bad = assignment("b", 1, 1, None);
        bad.workload
            .metadata
            .annotations
            .insert(RUNTIME_ANNOTATION.into(), "soon".into());
        assert!(matches!(
            c.ensure(&bad, t(0)),
            Err(SimError::InvalidAnnotation { .. })
        ));
    }

    #[test]
    fn without_runtime_it_runs_until_removed() {
        let mut c = small();
        c.ensure(&assignment("a", 1, 8, None), t(0)).unwrap();
        c.tick(t(0));
        c.tick(t(10_000_000));
        assert_eq!(phase(&c, "a"), LocalPhase::Running);
        assert_eq!(c.next_event(), None);
        assert!(c.remove("a"));
        assert!(!c.remove("a"));
        assert_eq!(c.statuses(), vec![]);
        assert_eq!(c.nodes().iter().map(|n| n.allocated).sum::<u32>(), 0);
    }

    #[test]
    fn fifo_without_head_of_line_blocking() {
        let mut c = small(); // 8 nodes x 8 GPUs
        c.ensure(&assignment("big", 7, 8, None), t(0)).unwrap();
        c.ensure(&assignment("huge", 4, 8, None), t(1)).unwrap();
        c.ensure(&assignment("small", 1, 8, None), t(2)).unwrap();
        c.tick(t(3));
        assert_eq!(phase(&c, "big"), LocalPhase::Running);
        assert_eq!(phase(&c, "huge"), LocalPhase::Pending);
        assert_eq!(phase(&c, "small"), LocalPhase::Running);
        assert_eq!(
            c.workload("huge", 1).and_then(|w| w.pending_reason.clone()),
            // as of its turn: after "big", before "small"
            Some(PlacementError::InsufficientCapacity {
                flavor: "H100".into(),
                requested: 32,
                free: 8
            })
        );
    }

    #[test]
    fn node_faults_cordon_the_node_and_notify_or_stop_its_work() {
        let mut c = small();
        c.ensure(&assignment("a", 1, 8, None), t(0)).unwrap();
        c.ensure(&assignment("b", 1, 8, None), t(0)).unwrap();
        c.tick(t(0));
        let node_of = |c: &SimCluster, uid: &str| {
            let w = &c.workloads[&(uid.to_string(), 1)];
            let i = *w.placement.keys().next().unwrap();
            c.nodes[i].name.clone()
        };
        let (na, nb) = (node_of(&c, "a"), node_of(&c, "b"));
        assert_ne!(na, nb);

        // ECC warning: a checkpoint notice, the node cordoned, the work stops at the deadline.
        let (uids, now) = c
            .node_fault(&na, NodeFaultKind::Ecc, Duration::from_secs(60), t(10))
            .unwrap();
        assert_eq!(uids, vec!["a".to_string()]);
        assert!(now.is_empty(), "a notice, not a stop");
        assert_eq!(phase(&c, "a"), LocalPhase::Running);
        let ia = c.node_idx(&na).unwrap();
        assert!(c.nodes[ia].cordoned && c.nodes[ia].healthy);
        c.tick(t(71));
        assert_eq!(phase(&c, "a"), evicted(PREEMPTED_REASON));

        // GPU fault: out of service, work evicted now.
        let (uids, now) = c
            .node_fault(&nb, NodeFaultKind::Gpu, Duration::from_secs(60), t(80))
            .unwrap();
        assert_eq!(uids, vec!["b".to_string()]);
        assert_eq!(now.len(), 1);
        assert!(
            matches!(phase(&c, "b"), LocalPhase::Evicted { reason } if reason.contains("GPU fault"))
        );
        let ib = c.node_idx(&nb).unwrap();
        assert!(!c.nodes[ib].healthy && c.nodes[ib].cordoned);
        assert!(
            c.node_fault("ghost", NodeFaultKind::NotReady, Duration::ZERO, t(81))
                .is_err()
        );
        c.check_invariants().unwrap();
    }

    #[test]
    fn a_checkpoint_is_reported_while_its_attempt_runs() {
        let mut c = small();
        c.ensure(&assignment("a", 1, 1, Some(600)), t(0))
            .expect("fits");
        c.tick(t(0));
        assert!(c.reported_checkpoints().is_empty(), "none written yet");
        assert_eq!(c.checkpoint("a", t(300), t(100)), 1);
        assert_eq!(
            c.reported_checkpoints(),
            vec![tideway_api::agent::ReportedCheckpoint {
                uid: "a".into(),
                attempt: 1,
                at: t(100),
            }]
        );
        c.tick(t(600));
        assert!(
            c.reported_checkpoints().is_empty(),
            "finished work has nothing to report"
        );
    }

    #[test]
    fn preemption_stops_at_the_deadline_unless_it_finishes_first() {
        let mut c = small();
        c.ensure(&assignment("a", 1, 8, None), t(0)).unwrap();
        c.ensure(&assignment("b", 1, 8, Some(20)), t(0)).unwrap();
        c.tick(t(0));
        assert!(c.preempt("a", Duration::from_secs(60), t(10)).is_empty());
        c.preempt("b", Duration::from_secs(60), t(10));
        assert_eq!(phase(&c, "a"), LocalPhase::Running);
        // a longer second notice does not push the deadline out
        c.preempt("a", Duration::from_secs(600), t(11));
        let changes = c.tick(t(100));
        assert_eq!(
            changes,
            vec![
                PhaseChange {
                    uid: "b".into(),
                    attempt: 1,
                    phase: LocalPhase::Succeeded,
                    at: t(20)
                },
                PhaseChange {
                    uid: "a".into(),
                    attempt: 1,
                    phase: evicted(PREEMPTED_REASON),
                    at: t(70)
                },
            ]
        );
        // pending work stops at once; unknown uids are fine
        c.ensure(&assignment("p", 100, 8, None), t(100)).unwrap();
        c.tick(t(100));
        assert_eq!(c.preempt("p", Duration::from_secs(60), t(101)).len(), 1);
        assert!(c.preempt("nope", Duration::ZERO, t(101)).is_empty());
        c.check_invariants().unwrap();
    }

    #[test]
    fn ecc_fault_stops_whole_gangs() {
        for policy in [FaultPolicy::Fail, FaultPolicy::Evict] {
            let mut c = small();
            // 3 pods of 8: spans three nodes
            c.ensure(&assignment("gang", 3, 8, None), t(0)).unwrap();
            c.ensure(&assignment("other", 1, 8, None), t(0)).unwrap();
            c.tick(t(0));
            let gang_nodes: Vec<usize> = c
                .workload("gang", 1)
                .unwrap()
                .placement
                .keys()
                .copied()
                .collect();
            assert_eq!(gang_nodes.len(), 3);
            let victim = c.nodes()[gang_nodes[1]].name.clone();
            let changes = c.inject_ecc(&victim, t(5), policy).unwrap();
            assert_eq!(changes.len(), 1);
            match (policy, phase(&c, "gang")) {
                (FaultPolicy::Fail, LocalPhase::Failed { reason })
                | (FaultPolicy::Evict, LocalPhase::Evicted { reason }) => {
                    assert!(reason.contains(&victim), "{reason}")
                }
                (p, got) => panic!("{p:?} gave {got:?}"),
            }
            assert_eq!(phase(&c, "other"), LocalPhase::Running);
            // the whole gang released its GPUs, on every node
            for n in gang_nodes {
                assert_eq!(c.nodes()[n].allocated, 0);
            }
            assert!(!c.node(&victim).unwrap().healthy);
            c.check_invariants().unwrap();
            // the unhealthy node takes no new work until healed
            c.ensure(&assignment("fill", 7, 8, None), t(6)).unwrap();
            c.tick(t(6));
            assert_eq!(phase(&c, "fill"), LocalPhase::Pending);
            c.heal(&victim).unwrap();
            c.tick(t(7));
            assert_eq!(phase(&c, "fill"), LocalPhase::Running);
        }
    }

    #[test]
    fn cordon_keeps_running_work_and_blocks_new() {
        let mut c = small();
        c.ensure(&assignment("a", 1, 8, None), t(0)).unwrap();
        c.tick(t(0));
        let node = c
            .workload("a", 1)
            .and_then(|w| w.placement.keys().next().copied())
            .unwrap();
        let name = c.nodes()[node].name.clone();
        c.cordon(&name).unwrap();
        c.tick(t(1));
        assert_eq!(phase(&c, "a"), LocalPhase::Running);
        c.ensure(&assignment("b", 8, 8, None), t(2)).unwrap();
        c.remove("a");
        c.tick(t(3));
        assert_eq!(phase(&c, "b"), LocalPhase::Pending);
        c.uncordon(&name).unwrap();
        c.tick(t(4));
        assert_eq!(phase(&c, "b"), LocalPhase::Running);
        assert_eq!(
            c.cordon("ghost"),
            Err(SimError::UnknownNode("ghost".into()))
        );
    }

    #[test]
    fn rejects_what_can_never_run_here() {
        let mut c = small();
        let mut a = assignment("a", 1, 8, None);
        a.workload.metadata.uid = None;
        assert!(matches!(
            c.ensure(&a, t(0)),
            Err(SimError::MissingUid { .. })
        ));
        let mut a = assignment("a", 1, 8, None);
        a.pool = Some("infer".into());
        assert!(matches!(
            c.ensure(&a, t(0)),
            Err(SimError::UnknownPool { .. })
        ));
        let mut a = assignment("a", 1, 8, None);
        a.workload.spec.pod_sets[0].flavor = "B200".into();
        assert!(matches!(
            c.ensure(&a, t(0)),
            Err(SimError::NoSuchFlavor { index: 0, .. })
        ));
        let a = assignment("a", 0, 8, None);
        assert!(matches!(c.ensure(&a, t(0)), Err(SimError::NoPods { .. })));
        assert_eq!(c.workloads().count(), 0);
    }

    #[test]
    fn required_topology_from_the_spec_is_honoured() {
        let mut c = small(); // racks of 2 nodes x 8
        let mut a = assignment("a", 3, 8, None);
        a.workload.spec.topology = Some(TopologyRequirement::Required(TopologyLevel::Rack));
        a.workload.spec.gang = Some(Gang { min_count: 1 });
        c.ensure(&a, t(0)).unwrap();
        c.tick(t(0));
        assert_eq!(
            phase(&c, "a"),
            LocalPhase::Pending,
            "min_count does not shrink the gang"
        );
        assert_eq!(
            c.workload("a", 1).and_then(|w| w.pending_reason.clone()),
            Some(PlacementError::TopologyUnsatisfied {
                level: TopologyLevel::Rack
            })
        );
    }

    // ---- properties ----

    #[derive(Debug, Clone)]
    enum Op {
        Ensure {
            uid: u8,
            attempt: u32,
            pods: u32,
            gpus: u32,
            runtime: Option<u64>,
        },
        Tick(u32),
        Preempt {
            uid: u8,
            grace: u64,
        },
        Remove(u8),
        Ecc {
            node: usize,
            evict: bool,
        },
        Heal(usize),
        Cordon(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..12u8, 1..3u32, 1..6u32, prop::sample::select(vec![1u32, 2, 4, 8]), prop::option::of(1..200u64))
                .prop_map(|(uid, attempt, pods, gpus, runtime)| Op::Ensure { uid, attempt, pods, gpus, runtime }),
            4 => (0..100u32).prop_map(Op::Tick),
            1 => (0..12u8, 0..100u64).prop_map(|(uid, grace)| Op::Preempt { uid, grace }),
            1 => (0..12u8).prop_map(Op::Remove),
            1 => (0..8usize, any::<bool>()).prop_map(|(node, evict)| Op::Ecc { node, evict }),
            1 => (0..8usize).prop_map(Op::Heal),
            1 => (0..8usize).prop_map(Op::Cordon),
        ]
    }

    fn run(ops: &[Op]) -> Result<SimCluster, TestCaseError> {
        let mut c = small();
        let mut now = 0i64;
        for op in ops {
            match op {
                Op::Ensure {
                    uid,
                    attempt,
                    pods,
                    gpus,
                    runtime,
                } => {
                    let mut a = assignment(&format!("w{uid}"), *pods, *gpus, *runtime);
                    a.attempt = *attempt;
                    let created = c
                        .ensure(&a, t(now))
                        .map_err(|e| TestCaseError::fail(e.to_string()))?;
                    let copies = c
                        .workloads()
                        .filter(|w| w.uid == a.uid() && w.attempt == *attempt)
                        .count();
                    prop_assert!(copies <= 1);
                    if created == Ensured::Created {
                        let active = c
                            .workloads()
                            .filter(|w| w.uid == a.uid() && !w.phase.is_terminal())
                            .count();
                        prop_assert_eq!(active, 1, "one active copy per uid");
                    }
                }
                Op::Tick(dt) => {
                    now += i64::from(*dt);
                    c.tick(t(now));
                }
                Op::Preempt { uid, grace } => {
                    c.preempt(&format!("w{uid}"), Duration::from_secs(*grace), t(now));
                }
                Op::Remove(uid) => {
                    c.remove(&format!("w{uid}"));
                }
                Op::Ecc { node, evict } => {
                    let name = c.nodes()[*node].name.clone();
                    let policy = if *evict {
                        FaultPolicy::Evict
                    } else {
                        FaultPolicy::Fail
                    };
                    c.inject_ecc(&name, t(now), policy)
                        .map_err(|e| TestCaseError::fail(e.to_string()))?;
                    for w in c.workloads() {
                        prop_assert!(w.phase.is_terminal() || !w.placement.contains_key(node));
                    }
                }
                Op::Heal(node) => c
                    .heal(&c.nodes()[*node].name.clone())
                    .map_err(|e| TestCaseError::fail(e.to_string()))?,
                Op::Cordon(node) => c
                    .cordon(&c.nodes()[*node].name.clone())
                    .map_err(|e| TestCaseError::fail(e.to_string()))?,
            }
            c.check_invariants().map_err(TestCaseError::fail)?;
            for w in c.workloads().filter(|w| w.phase == LocalPhase::Running) {
                // whole gangs only
                let gpus: u32 = w.placement.values().sum();
                prop_assert_eq!(u64::from(gpus), w.workload.spec.total_gpus());
            }
        }
        Ok(c)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn random_operations_keep_the_books_straight(ops in prop::collection::vec(op(), 1..60)) {
            let a = run(&ops)?;
            // Deterministic: the same calls give the same cluster.
            prop_assert_eq!(a, run(&ops)?);
        }
    }
}
