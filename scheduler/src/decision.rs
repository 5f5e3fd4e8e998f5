//! What a cycle decides. Each pending workload gets exactly one decision, and the list is in
//! the order the workloads were considered, so an audit record can be read top to bottom as
//! "who went first and why".

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tideway_api::{ClusterName, PendingReason, Uid};

use super::explain::Explanation;
use super::input::PoolPlacement;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all_fields = "camelCase")]
pub enum Decision {
    /// Dispatch to `cluster`; quota and capacity are taken in this cycle already.
    Assign {
        uid: Uid,
        cluster: ClusterName,
        /// The pool of the first (largest) placement; `placements` lists every flavor's.
        pool: String,
        placements: Vec<PoolPlacement>,
    },
    /// Evict `victims` (all on `cluster`) so that `preemptor` fits there once they are gone.
    /// The preemptor stays pending until then (`WaitingForPreemption`).
    Preempt {
        preemptor: Uid,
        victims: Vec<Uid>,
        cluster: ClusterName,
        /// The checkpoint notice: victims get this long before they are killed.
        grace_seconds: u64,
        cost: PreemptionCost,
    },
    /// Hold `cluster`'s capacity of the workload's flavors for it: only work that ends
    /// before `expected_start` is backfilled there meanwhile.
    Reserve {
        uid: Uid,
        cluster: ClusterName,
        expected_start: DateTime<Utc>,
        /// Why it still waits.
        reason: PendingReason,
        explanation: Arc<Explanation>,
    },
    /// Waits; `explanation` is shared by workloads blocked the same way.
    Pending {
        uid: Uid,
        reason: PendingReason,
        explanation: Arc<Explanation>,
    },
}

impl Decision {
    /// The pending workload this decision is about.
    pub fn uid(&self) -> &str {
        match self {
            Self::Assign { uid, .. } | Self::Reserve { uid, .. } | Self::Pending { uid, .. } => {
                uid.as_str()
            }
            Self::Preempt { preemptor, .. } => preemptor.as_str(),
        }
    }

    /// The reason a workload keeps waiting; `None` when it was assigned.
    pub fn pending_reason(&self) -> Option<PendingReason> {
        match self {
            Self::Assign { .. } => None,
            Self::Preempt { victims, .. } => Some(PendingReason::WaitingForPreemption {
                victims: victims.iter().map(|v| v.to_string()).collect(),
            }),
            Self::Reserve { reason, .. } | Self::Pending { reason, .. } => Some(reason.clone()),
        }
    }
}

/// Victim tiers in the order they are taken: cheapest disruption first.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default,
)]
#[serde(rename_all = "camelCase")]
pub enum VictimTier {
    /// Admitted or assigned but not started: nothing is lost.
    #[default]
    NotStarted,
    /// Checkpointing work: only the work since its last checkpoint is lost.
    Checkpointable,
    /// Everything else: all work so far is lost.
    Running,
}

/// How much a preemption disrupts; plans are compared on it, and audits record it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreemptionCost {
    pub worst_tier: VictimTier,
    /// Victims of `cautious` classes (only taken when nothing else frees enough).
    pub cautious: u32,
    pub victims: u32,
    pub gpus: u64,
    /// GPU-seconds of work lost (since last checkpoint or start).
    pub work_lost_gpu_seconds: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SchedulerStats {
    pub pending: u64,
    pub assigned: u64,
    pub preemptions: u64,
    pub victims: u64,
    pub reserved: u64,
    /// Pending (and reserved) workloads per reason code.
    pub pending_by_reason: BTreeMap<String, u64>,
    /// Distinct gang shapes (flavors, pods, topology, constraints) among pending work.
    pub shapes: u64,
    /// Per-cluster fit computations; the rest were answered from the in-cycle cache.
    pub fit_evaluations: u64,
    pub fit_cache_hits: u64,
    pub preemption_attempts: u64,
    /// Preemptions that moved small checkpointing work to give a gang whole nodes.
    #[serde(default)]
    pub defragmentations: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SchedulerOutput {
    pub decisions: Vec<Decision>,
    pub stats: SchedulerStats,
    /// Running work to checkpoint now and keep running: the losing side's work beyond its
    /// coming quota at a tidal hand-over (see `tidal::notice`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checkpoints: Vec<CheckpointNotice>,
}

/// "Checkpoint now, keep running": the work may be reclaimed soon, so what it has done
/// should be saved by `deadline`. Not a preemption: nothing stops unless the other side
/// needs the capacity, and then through an ordinary `Preempt` with its grace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointNotice {
    pub uid: Uid,
    pub cluster: ClusterName,
    /// Checkpoint by then: the boundary the hand-over belongs to.
    pub deadline: DateTime<Utc>,
}
