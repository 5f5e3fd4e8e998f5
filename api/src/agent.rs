//! The agent protocol: what the federation and a member-cluster agent say to each other.
//!
//! An agent registers its cluster, heartbeats with a capacity digest, long-polls its
//! assignments from a revision (so a reconnect resumes where it left off), and reports local
//! status transitions. Every message is idempotent: replays change nothing.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::digest::CapacityDigest;
use crate::digest_delta::{DigestDelta, DigestVersion};
use crate::member_cluster::MemberCluster;
use crate::names::ClusterName;
use crate::workload::{NodeGpus, Workload};

/// A workload the federation placed on this member cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Assignment {
    /// The workload as stored, uid included; the agent keys its local objects on the uid.
    pub workload: Workload,
    /// The pool of this cluster the federation chose.
    pub pool: Option<String>,
    /// Dispatch attempt, starting at 1; part of the local object's identity so a retry after
    /// a failure is a new object, while a replay of the same attempt is not.
    pub attempt: u32,
}

impl Assignment {
    /// The workload's uid, empty if it has none (the federation always sets one).
    pub fn uid(&self) -> &str {
        self.workload.metadata.uid.as_deref().unwrap_or_default()
    }
}

/// Where a workload stands in its member cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "phase", rename_all = "camelCase")]
pub enum LocalPhase {
    /// Created, waiting for the local gang scheduler.
    Pending,
    /// Its pods are running.
    Running,
    /// Every pod finished successfully.
    Succeeded,
    /// The workload failed in the member cluster.
    Failed {
        /// What the member cluster said went wrong.
        reason: String,
    },
    /// Stopped by the cluster: node failure, local preemption, or our preemption notice.
    Evicted {
        /// What stopped it.
        reason: String,
    },
    /// Deleted or aborted before completion.
    Aborted {
        /// Who or what stopped it.
        reason: String,
    },
}

impl LocalPhase {
    /// Whether the phase is final: succeeded, failed, evicted or aborted.
    pub fn is_terminal(&self) -> bool {
        !matches!(self, LocalPhase::Pending | LocalPhase::Running)
    }
}

/// One workload's phase in its member cluster, as the agent reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct LocalStatus {
    /// The workload's uid.
    pub uid: String,
    /// The dispatch attempt this status is about; statuses of older attempts are ignored.
    pub attempt: u32,
    /// The phase, flattened: `phase` plus `reason` where the phase has one.
    #[serde(flatten)]
    pub phase: LocalPhase,
    /// When the workload entered this phase (wall clock).
    pub since: DateTime<Utc>,
    /// While running: the nodes its pods occupy (see `WorkloadStatus::nodes`). Empty when
    /// the backend does not know (yet).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<NodeGpus>,
}

/// What the federation wants done with an assignment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "action", rename_all = "camelCase")]
pub enum Desired {
    /// Run it (create if absent).
    Run,
    /// Checkpoint and stop within the grace period.
    Preempt {
        /// How long the workload has to checkpoint before it is stopped, in seconds.
        grace_seconds: u64,
    },
    /// Delete it.
    Cancel,
}

/// One assignment as the federation replicates it, with the revision of its last change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct AssignmentRecord {
    /// The log index of the last change; agents resume from the highest one they saw.
    pub revision: u64,
    /// The workload and where it goes.
    pub assignment: Assignment,
    /// What the agent should do with it now.
    pub desired: Desired,
    /// A hand-over notice: checkpoint by then and keep running (a quota boundary that lowers
    /// this workload's side is coming). Absent from older servers, and ignored by older
    /// agents, so the assignment list decodes either way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_by: Option<DateTime<Utc>>,
}

/// `POST /v1/members/register`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RegisterRequest {
    /// The member to register or update, with its spec.
    pub member: MemberCluster,
    /// Agent build, for the member's status.
    #[serde(default)]
    pub agent_version: Option<String>,
}

/// `POST /v1/members/{name}/heartbeat`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Heartbeat {
    /// The member's capacity now; replaces the previous digest whole. Every federation reads
    /// it; an agent sends it until an answer names a `digestVersion`, and whenever the
    /// federation does not hold the base of a delta.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<CapacityDigest>,
    /// Instead of `digest`: only what changed since the version the federation's last
    /// answer named (`digestVersion`). Sent only to federations that name versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest_delta: Option<DigestDelta>,
}

impl Heartbeat {
    /// A heartbeat with the full digest.
    pub fn full(digest: CapacityDigest) -> Self {
        Self {
            digest: Some(digest),
            digest_delta: None,
        }
    }

    /// A heartbeat with a delta against an acknowledged digest.
    pub fn delta(delta: DigestDelta) -> Self {
        Self {
            digest: None,
            digest_delta: Some(delta),
        }
    }
}

/// `GET /v1/members/{name}/assignments?after=REV&waitSeconds=N`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct AssignmentPage {
    /// Every assignment changed after the requested revision.
    pub items: Vec<AssignmentRecord>,
    /// Pass as `after` next time.
    pub revision: u64,
}

/// `POST /v1/members/{name}/status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StatusReport {
    /// Phase changes since the last report; replays are harmless.
    pub statuses: Vec<LocalStatus>,
    /// Checkpoints written by running workloads since the last report, so preemption and
    /// reclaim know the work a stop would lose (the newest per attempt; replays are
    /// harmless). Absent from older agents.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checkpoints: Vec<ReportedCheckpoint>,
}

/// A checkpoint a running workload wrote, as its member reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReportedCheckpoint {
    /// The workload's uid.
    pub uid: String,
    /// The attempt that wrote it; checkpoints of older attempts are ignored.
    pub attempt: u32,
    /// When it was written (member clock, like a status's `since`).
    pub at: DateTime<Utc>,
}

/// The answer to a heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct HeartbeatAck {
    /// The member the heartbeat was for.
    pub member: ClusterName,
    /// Whether this heartbeat's digest was replicated (digests are coalesced: an unchanged
    /// or too-recent one is only kept in the leader's memory).
    pub digest_replicated: bool,
    /// The agent's lease, in milliseconds from when it sent this heartbeat: how long it may
    /// keep running its work without another acknowledged heartbeat. The federation moves a
    /// lost member's work only later than that, so an agent that stops its work when its
    /// lease runs out never runs a workload that also runs elsewhere. Absent from older
    /// federations (no lease: the agent keeps its work running).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_ms: Option<u64>,
    /// The version of the digest the federation now holds for the member: the agent's next
    /// heartbeat may carry a delta against it. Absent from older federations (they read full
    /// digests only) and while the federation holds no digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest_version: Option<DigestVersion>,
    /// The heartbeat's delta named a base the federation does not hold (a new leader, a
    /// restart, or it holds another digest): nothing of it was applied, the heartbeat counted
    /// for liveness only, and the agent should send its full digest now.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub digest_base_unknown: bool,
}

/// The answer to a status report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StatusAck {
    /// How many workloads' statuses changed (replays change nothing).
    pub updated: u32,
}

/// `GET /v1/local` of an agent started with `--listen`: what its cluster holds, as the agent
/// sees it. For tests and operators; the federation never reads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LocalView {
    /// The member cluster's name.
    pub cluster: ClusterName,
    /// Local objects created since the cluster's state began (a replayed assignment must not
    /// add one).
    pub creations: u64,
    /// Every workload the cluster holds, with its local phase.
    pub workloads: Vec<LocalStatus>,
    /// The checkpoints the cluster took on a hand-over notice, one per (workload, deadline).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checkpoints: Vec<LocalCheckpoint>,
}

/// A checkpoint a member cluster took on a hand-over notice (`checkpointBy`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct LocalCheckpoint {
    /// The workload's uid.
    pub uid: String,
    /// The attempt that checkpointed.
    pub attempt: u32,
    /// When it checkpointed: work since then is what a reclaim would lose.
    pub at: DateTime<Utc>,
    /// The notice's deadline it answered.
    pub deadline: DateTime<Utc>,
}

/// A node fault, as a sim agent injects it (`POST /v1/faults` on the agent) and as node health
/// reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub enum NodeFaultKind {
    /// Correctable ECC errors rising: the node is likely to fail soon. Its work gets a
    /// checkpoint notice and the node is cordoned.
    Ecc,
    /// A GPU fell off the bus: the node is out of service, its work is stopped now.
    Gpu,
    /// The node stopped answering: as a GPU fault.
    NotReady,
}

impl std::str::FromStr for NodeFaultKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "ecc" => Ok(Self::Ecc),
            "gpu" => Ok(Self::Gpu),
            "notready" | "not-ready" => Ok(Self::NotReady),
            other => Err(format!(
                "unknown fault kind '{other}'; use ecc, gpu or notready"
            )),
        }
    }
}

/// `POST /v1/faults` on a sim agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FaultRequest {
    /// The node, as the sim layout names it.
    pub node: String,
    /// What goes wrong with it.
    pub kind: NodeFaultKind,
}

/// What an injected fault did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct FaultAck {
    /// The node the fault was injected into.
    pub node: String,
    /// The fault injected.
    pub kind: NodeFaultKind,
    /// UIDs of the workloads with a pod on the node: given a checkpoint notice (ECC) or
    /// stopped (GPU fault, NotReady).
    pub affected: Vec<String>,
}
