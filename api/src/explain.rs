//! Explanations: why a workload waits, cluster by cluster, and what would unblock it.
//!
//! `PendingReason` is the one structured reason a dashboard switches on; the explanation
//! adds what Nomad's placement failures taught users to expect (a per-cluster breakdown)
//! and the step that would change the outcome, both as a sentence and as data. The scheduler
//! core produces these and the server returns them in [`ExplainResponse`]: they live here, at
//! the bottom of the layers, so that the wire and the core share one definition. Decisions
//! hold explanations behind an `Arc`: all workloads of one shape blocked by the same capacity
//! share one, which is what keeps 100,000 explanations cheap.

use std::fmt;

use crate::names::{ClusterName, Uid, WorkloadName};
use crate::workload::{PendingReason, TopologyLevel, WorkloadPhase};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Why a workload was not placed this cycle, and what would change that.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// What would unblock it, as data.
    pub unblock: Unblock,
    /// The same, as one sentence for `tideway explain`.
    pub hint: String,
    /// One entry per member cluster when clusters were considered; empty when the workload
    /// was stopped before routing (quota, limits).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<ClusterVerdict>,
}

impl Explanation {
    /// An explanation decided before any cluster was looked at (quota, limits).
    pub fn new(unblock: Unblock) -> Self {
        Self::with_clusters(unblock, Vec::new())
    }

    /// An explanation with the per-cluster breakdown; the hint is the unblock's sentence.
    pub fn with_clusters(unblock: Unblock, clusters: Vec<ClusterVerdict>) -> Self {
        Self {
            hint: unblock.to_string(),
            unblock,
            clusters,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
/// One member cluster's part of an [`Explanation`].
pub struct ClusterVerdict {
    /// The member cluster.
    pub cluster: String,
    /// Why it did not take the workload.
    pub verdict: Verdict,
}

/// Why one cluster did not take the workload (or that it would have).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all_fields = "camelCase")]
pub enum Verdict {
    /// Not Ready: it would otherwise have been considered.
    NotReady,
    /// Excluded by the workload's placement (`clusters` or `regions`).
    PlacementExcluded {
        /// The constraint, as written (`regions: [eu-west]`).
        constraint: String,
    },
    /// No pool of the flavor (that the workload's class may use).
    FlavorAbsent {
        /// The flavor asked for.
        flavor: String,
    },
    /// The member reports no domain of the required topology level for the flavor.
    TopologyUnsupported {
        /// The level the workload requires.
        level: TopologyLevel,
    },
    /// Fits nowhere in the cluster right now.
    TooSmall {
        /// The flavor asked for.
        flavor: String,
        /// GPUs the gang needs.
        needed_gpus: u64,
        /// Largest gang of the workload's pod size that fits in one domain of the level.
        largest_fit_gpus: u64,
        /// GPUs free in the cluster's pools of the flavor, in total.
        free_gpus: u64,
    },
    /// Capacity is held for a waiting gang and this workload would not end before it starts.
    Reserved {
        /// The UID of the gang the capacity is held for.
        for_uid: String,
        /// When that gang is expected to start.
        expected_start: DateTime<Utc>,
    },
}

/// What would change the outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all_fields = "camelCase")]
pub enum Unblock {
    /// The queue's own work finishing, a cohort peer returning quota, or a higher limit.
    QuotaFreed {
        /// The queue whose quota is exhausted.
        queue: String,
        /// The flavor.
        flavor: String,
        /// GPUs of quota missing.
        gpus: u64,
    },
    /// A quota window that admits it opens.
    WindowOpens {
        /// When.
        at: DateTime<Utc>,
    },
    /// This many GPUs must become free in one domain of `level` (anywhere in a pool when
    /// `None`) of a matching cluster.
    CapacityFreed {
        /// The flavor.
        flavor: String,
        /// GPUs that must be free together.
        gpus: u64,
        /// The topology level they must be free in.
        level: Option<TopologyLevel>,
    },
    /// Enough is free, but scattered: work must finish or move within one domain.
    Defragmentation {
        /// The flavor.
        flavor: String,
        /// GPUs that must be free together.
        gpus: u64,
        /// The topology level they must be free in.
        level: Option<TopologyLevel>,
    },
    /// No ready cluster satisfies the workload's placement.
    RelaxPlacement {
        /// The constraint to relax.
        constraint: String,
    },
    /// Only clusters that are not Ready could take it.
    MemberReady {
        /// Those clusters.
        clusters: Vec<String>,
    },
    /// Victims were chosen and must exit first.
    PreemptionCompletes {
        /// The victims' UIDs.
        victims: Vec<String>,
    },
    /// Preemption would help, but its budget is spent.
    PreemptionBudgetRefills {
        /// When it refills, if known.
        at: Option<DateTime<Utc>>,
    },
    /// The submitting user is at the queue's per-user limit.
    UserWorkloadFinishes {
        /// The user.
        user: String,
        /// The limit.
        limit: u32,
    },
    /// Capacity is reserved for it on a cluster.
    ReservationStarts {
        /// The cluster.
        cluster: String,
        /// When the reserved capacity is expected to be free.
        expected_start: DateTime<Utc>,
    },
    /// Not looked at this cycle (admission cap); the next cycle will.
    NextCycle,
    /// The workload refers to something the policy does not define.
    FixWorkload {
        /// What is undefined.
        problem: String,
    },
    /// Its side of the fleet loses quota at `boundary` (a tidal window closes) and its
    /// runtime estimate would outlast it: it starts once the boundary has passed, or at
    /// once if it can checkpoint.
    WindowClosing {
        /// When the window closes and the side's quota drops.
        boundary: DateTime<Utc>,
        /// The runtime estimate that would outlast it.
        estimate_seconds: u64,
    },
    /// Its last attempt failed; the retry backoff ends at `at`.
    RetryBackoffEnds {
        /// When it may be dispatched again.
        at: DateTime<Utc>,
    },
}

impl fmt::Display for Unblock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::QuotaFreed {
                queue,
                flavor,
                gpus,
            } => write!(
                f,
                "queue {queue} needs {gpus} more {flavor} GPUs of quota: its running work must \
                 finish, a cohort peer must return borrowed quota, or its limit be raised"
            ),
            Self::WindowOpens { at } => {
                write!(f, "the next quota window opens at {}", at.to_rfc3339())
            }
            Self::CapacityFreed {
                flavor,
                gpus,
                level,
            } => match level {
                Some(l) => write!(
                    f,
                    "{gpus} {flavor} GPUs must become free in one {} of a matching cluster",
                    l.as_str()
                ),
                None => write!(
                    f,
                    "{gpus} {flavor} GPUs must become free in one pool of a matching cluster"
                ),
            },
            Self::Defragmentation {
                flavor,
                gpus,
                level,
            } => write!(
                f,
                "enough {flavor} GPUs are free but scattered; {gpus} must be free together{}",
                level.map_or(String::new(), |l| format!(" in one {}", l.as_str()))
            ),
            Self::RelaxPlacement { constraint } => {
                write!(f, "no ready cluster satisfies {constraint}; relax it")
            }
            Self::MemberReady { clusters } => write!(
                f,
                "one of these member clusters must become ready: {}",
                clusters.join(", ")
            ),
            Self::PreemptionCompletes { victims } => write!(
                f,
                "{} preempted workload(s) must finish their checkpoint grace and exit",
                victims.len()
            ),
            Self::PreemptionBudgetRefills { at } => match at {
                Some(at) => write!(
                    f,
                    "the preemption budget refills at {}; preemption resumes then",
                    at.to_rfc3339()
                ),
                None => f.write_str("the preemption budget must refill"),
            },
            Self::UserWorkloadFinishes { user, limit } => write!(
                f,
                "user {user} has {limit} active workload(s), the queue's limit; one must finish"
            ),
            Self::ReservationStarts {
                cluster,
                expected_start,
            } => write!(
                f,
                "capacity on {cluster} is held for it, expected free by {}",
                expected_start.to_rfc3339()
            ),
            Self::NextCycle => f.write_str("the next scheduling cycle will consider it"),
            Self::FixWorkload { problem } => write!(f, "fix the workload: {problem}"),
            Self::WindowClosing {
                boundary,
                estimate_seconds,
            } => write!(
                f,
                "its quota window closes at {} and its estimate ({estimate_seconds} s) would \
                 outlast it; it starts after the boundary, or now if it can checkpoint",
                boundary.to_rfc3339()
            ),
            Self::RetryBackoffEnds { at } => write!(
                f,
                "its last attempt failed; it is retried after its backoff, at {}",
                at.to_rfc3339()
            ),
        }
    }
}

/// `GET /v1/workloads/{id}/explain`: the replicated state of a workload next to what the
/// leader's last scheduling cycle decided for it and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ExplainResponse {
    /// The workload's name.
    pub workload: WorkloadName,
    /// Its UID (empty only for a workload stored before UIDs were assigned).
    pub uid: Uid,
    /// Its replicated phase.
    pub phase: WorkloadPhase,
    /// The member cluster it is assigned to, if any.
    pub cluster: Option<ClusterName>,
    /// The status message, if any.
    pub message: Option<String>,
    /// The replicated reason (what `get` shows).
    pub pending_reason: Option<PendingReason>,
    /// What the last cycle decided for it, as a phrase ("keep pending", "assign to sim-eu"),
    /// if it was pending then.
    pub decision: Option<String>,
    /// Why, cluster by cluster, and what would unblock it.
    pub explanation: Option<Explanation>,
    /// Human-readable summary, for the CLI.
    pub summary: String,
    /// When that cycle ran.
    pub cycle_at: Option<DateTime<Utc>>,
    /// Set while the workload's member is lost and its move to another member waits on the
    /// re-dispatch rate limit (the leader's token buckets, per member and for the fleet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redispatch: Option<RedispatchWait>,
}

/// A move off a lost member held back by the re-dispatch rate limit: a lost cluster with a
/// thousand workloads moves them a few at a time, and this says when this one's turn comes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct RedispatchWait {
    /// Always `RateLimited`: the reason a dashboard switches on.
    pub reason: PendingReason,
    /// The lost member the workload moves off.
    pub from: ClusterName,
    /// The bucket that holds it back.
    pub limit: RedispatchLimit,
    /// The earliest time its move may be proposed (an estimate: the leader's buckets refill
    /// at their configured rates, and earlier workloads take the first slots).
    pub next_slot: DateTime<Utc>,
}

/// Which re-dispatch rate limit holds a move back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub enum RedispatchLimit {
    /// `--redispatch-per-member-per-second`: moves off this one member.
    Member,
    /// `--redispatch-per-second`: moves in the whole fleet.
    Global,
}

impl fmt::Display for RedispatchWait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let limit = match self.limit {
            RedispatchLimit::Member => "per-member",
            RedispatchLimit::Global => "fleet-wide",
        };
        write!(
            f,
            "RateLimited: member {} is lost; moving this workload off it waits on the {limit} \
             re-dispatch rate limit; next slot at {}",
            self.from,
            self.next_slot.to_rfc3339()
        )
    }
}
