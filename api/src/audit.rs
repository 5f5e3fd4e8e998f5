//! The audit trail: one record per change of the replicated state, with who did it.

use chrono::{DateTime, Utc};
use compact_str::CompactString;
use serde::{Deserialize, Serialize};

/// What changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum AuditKind {
    /// A workload was accepted.
    Submitted,
    /// A workload was placed on a member cluster.
    Assigned,
    /// A running workload was told to checkpoint and stop for another.
    Preempted,
    /// A member reported the workload running.
    Running,
    /// A member reported the workload finished.
    Succeeded,
    /// A member reported the workload failed, with its retries spent.
    Failed,
    /// A failed or evicted attempt went back to the queue.
    Requeued,
    /// A workload was cancelled.
    Cancelled,
    /// A terminal workload past retention left the live state.
    Compacted,
    /// A queue or priority class was created or replaced.
    PolicyChanged,
    /// A member cluster registered.
    MemberRegistered,
    /// A member cluster turned Ready or NotReady.
    MemberHealth,
    /// A quota schedule moved from one window to the next.
    TidalTransition,
    /// A policy version was replaced by an earlier one, by hand or by a rollout trigger.
    PolicyRolledBack,
    /// A role binding was created, replaced or deleted.
    AccessChanged,
    /// A running workload was asked to checkpoint by a coming quota boundary, and keep running.
    CheckpointRequested,
    /// A member reported a checkpoint of a running workload: a preemption now loses only the
    /// work since then.
    Checkpointed,
}

impl AuditKind {
    /// Every kind.
    pub const ALL: [AuditKind; 17] = [
        Self::Submitted,
        Self::Assigned,
        Self::Preempted,
        Self::Running,
        Self::Succeeded,
        Self::Failed,
        Self::Requeued,
        Self::Cancelled,
        Self::Compacted,
        Self::PolicyChanged,
        Self::MemberRegistered,
        Self::MemberHealth,
        Self::TidalTransition,
        Self::PolicyRolledBack,
        Self::AccessChanged,
        Self::CheckpointRequested,
        Self::Checkpointed,
    ];

    /// The name as serialized (`Cancelled`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Submitted => "Submitted",
            Self::Assigned => "Assigned",
            Self::Preempted => "Preempted",
            Self::Running => "Running",
            Self::Succeeded => "Succeeded",
            Self::Failed => "Failed",
            Self::Requeued => "Requeued",
            Self::Cancelled => "Cancelled",
            Self::Compacted => "Compacted",
            Self::PolicyChanged => "PolicyChanged",
            Self::MemberRegistered => "MemberRegistered",
            Self::MemberHealth => "MemberHealth",
            Self::TidalTransition => "TidalTransition",
            Self::PolicyRolledBack => "PolicyRolledBack",
            Self::AccessChanged => "AccessChanged",
            Self::CheckpointRequested => "CheckpointRequested",
            Self::Checkpointed => "Checkpointed",
        }
    }
}

impl std::str::FromStr for AuditKind {
    type Err = String;
    /// Any case: `cancelled`, `Cancelled`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|k| k.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                let all: Vec<&str> = Self::ALL.iter().map(|k| k.as_str()).collect();
                format!("unknown kind '{s}'; one of {}", all.join(", "))
            })
    }
}

/// One audit record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct AuditEvent {
    /// Position in the trail; strictly increasing, the same on every node.
    pub seq: u64,
    /// The log index of the change.
    pub index: u64,
    /// When, as the change's log entry says.
    pub at: DateTime<Utc>,
    /// What changed.
    pub kind: AuditKind,
    /// The authenticated subject, `agent:CLUSTER` for a member's report, or `system:leader`
    /// for the leader's own decisions (scheduling, health, compaction).
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub actor: CompactString,
    /// The log index of the last policy change (queue or priority class) in force.
    pub policy_version: u64,
    /// The workload it concerns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub workload: Option<CompactString>,
    /// The queue it concerns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub queue: Option<CompactString>,
    /// The member cluster it concerns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub cluster: Option<CompactString>,
    /// What happened, in words, with the numbers that justify it.
    pub evidence: String,
}

/// `GET /v1/events`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct AuditEventList {
    /// Oldest first.
    pub items: Vec<AuditEvent>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_parse_from_any_case_and_name_the_choices() {
        assert_eq!("cancelled".parse::<AuditKind>(), Ok(AuditKind::Cancelled));
        for k in AuditKind::ALL {
            assert_eq!(k.as_str().parse::<AuditKind>(), Ok(k));
        }
        let e = "nope".parse::<AuditKind>().expect_err("unknown");
        assert!(e.contains("Submitted"), "{e}");
    }
}
