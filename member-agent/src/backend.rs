//! What an agent needs from a member cluster, whatever runs it (Kubernetes or the simulator).
//!
//! Every call is idempotent and keyed by workload UID: an agent restarted at any point
//! re-lists, re-applies its assignments, and never creates a workload twice.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tideway_api::Workload;
use tideway_api::digest::CapacityDigest;

/// A workload the federation placed on this member cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Assignment {
    pub workload: Workload,
    /// The pool of this cluster the federation chose.
    pub pool: Option<String>,
    /// Dispatch attempt, starting at 1; part of the local object's identity so a retry after
    /// a failure is a new object, while a replay of the same attempt is not.
    pub attempt: u32,
}

impl Assignment {
    pub fn uid(&self) -> &str {
        self.workload.metadata.uid.as_deref().unwrap_or_default()
    }
}

/// Where a workload stands in its member cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "camelCase")]
pub enum LocalPhase {
    /// Created, waiting for the local gang scheduler.
    Pending,
    Running,
    Succeeded,
    Failed {
        reason: String,
    },
    /// Stopped by the cluster: node failure, local preemption, or our preemption notice.
    Evicted {
        reason: String,
    },
    /// Deleted or aborted before completion.
    Aborted {
        reason: String,
    },
}

impl LocalPhase {
    pub fn is_terminal(&self) -> bool {
        !matches!(self, LocalPhase::Pending | LocalPhase::Running)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalStatus {
    pub uid: String,
    pub attempt: u32,
    #[serde(flatten)]
    pub phase: LocalPhase,
    pub since: DateTime<Utc>,
}

#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The cluster API could not be reached or answered 5xx: retry later.
    #[error("member cluster unavailable: {0}")]
    Unavailable(String),
    /// The cluster refused the object for good (invalid template, forbidden): report it.
    #[error("rejected by the member cluster: {0}")]
    Rejected(String),
    #[error("{0}")]
    Other(String),
}

/// A member cluster as the agent drives it.
#[allow(async_fn_in_trait)]
pub trait Backend: Send + Sync + 'static {
    /// A fresh capacity digest of the cluster.
    async fn digest(&self) -> Result<CapacityDigest, BackendError>;

    /// Creates the workload if no object with its UID and attempt exists; otherwise does
    /// nothing. Never creates a second copy.
    async fn ensure(&self, assignment: &Assignment) -> Result<(), BackendError>;

    /// Asks the workload to checkpoint and stop within `grace`, then stops it.
    async fn preempt(&self, uid: &str, grace: Duration) -> Result<(), BackendError>;

    /// Deletes the workload's objects (cancelled upstream). Absent is fine.
    async fn remove(&self, uid: &str) -> Result<(), BackendError>;

    /// The status of every workload this agent manages in the cluster.
    async fn statuses(&self) -> Result<Vec<LocalStatus>, BackendError>;
}
