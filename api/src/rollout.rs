//! Gradual rollout of a policy version: where it applies first, and what rolls it back.
//!
//! A version that carries a `rollout` with a non-empty scope is applied to the scoped queues
//! and pools only; the rest of the fleet keeps the previous version until the rollout is
//! widened. The triggers are watched by the leader while the rollout is scoped; the first
//! that fires restores the previous version, and the audit trail names it with its value.

use serde::{Deserialize, Serialize};

use crate::validation::{Checker, at};

/// How a policy version reaches the fleet.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Rollout {
    /// Where the version applies first; empty applies it everywhere at once.
    #[serde(default)]
    pub scope: RolloutScope,
    /// Conditions that roll the version back automatically while it is scoped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub triggers: Vec<RollbackTrigger>,
}

/// The part of the fleet a scoped version applies to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RolloutScope {
    /// Queues whose definition comes from the candidate.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queues: Vec<String>,
    /// Pools (`inference`, `training`): queues serving that side of the fleet, and quota
    /// schedule quotas naming that pool, come from the candidate.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<String>,
    /// Member clusters: the scoped queues' new work is placed only on these clusters, and
    /// the candidate's scoped pool quotas count only their capacity. Alone (no queues or
    /// pools), the scope takes the queues and pools the candidate changes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<String>,
}

impl RolloutScope {
    /// True when nothing is scoped, i.e. the version applies to the whole fleet.
    pub fn is_everything(&self) -> bool {
        self.queues.is_empty() && self.pools.is_empty() && self.clusters.is_empty()
    }
}

/// A condition measured by the leader over a sliding window while a rollout is scoped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub enum RollbackTrigger {
    /// The p95 wait of a protected queue is worse than under the previous version.
    P95WaitWorse {
        /// The protected queue.
        queue: String,
        /// Fires when the p95 wait exceeds the baseline by more than this percentage.
        percent: f64,
        /// The window waits are measured over, before (baseline) and since the rollout.
        window_seconds: u64,
    },
    /// Inference work has been waiting unserved for longer than this.
    UnservedInference {
        /// Longest tolerated wait of a pending inference workload.
        seconds: u64,
    },
    /// Preemptions since the rollout began, as a rate per hour.
    PreemptionsPerHour {
        /// Fires above this rate.
        max: u64,
    },
}

impl RollbackTrigger {
    /// A short name for audit records and tables.
    pub fn name(&self) -> &'static str {
        match self {
            Self::P95WaitWorse { .. } => "p95WaitWorse",
            Self::UnservedInference { .. } => "unservedInference",
            Self::PreemptionsPerHour { .. } => "preemptionsPerHour",
        }
    }
}

/// Pools a scope or a quota may name.
pub const POOLS: [&str; 2] = ["inference", "training"];

/// Checks a rollout against the bundle's queue names.
pub(crate) fn check(r: &Rollout, prefix: &str, queues: &[&str], c: &mut Checker) {
    let sp = at(prefix, "scope").path();
    for (i, q) in r.scope.queues.iter().enumerate() {
        if !queues.contains(&q.as_str()) {
            c.push(
                format!("{sp}.queues[{i}]"),
                format!("queue {q:?} is not defined in this policy"),
            );
        }
    }
    for (i, p) in r.scope.pools.iter().enumerate() {
        if !POOLS.contains(&p.as_str()) {
            c.push(
                format!("{sp}.pools[{i}]"),
                format!("pool {p:?} is not one of {}", POOLS.join(", ")),
            );
        }
    }
    for (i, name) in r.scope.clusters.iter().enumerate() {
        c.name(format!("{sp}.clusters[{i}]"), name);
    }
    let tp = at(prefix, "triggers").path();
    for (i, t) in r.triggers.iter().enumerate() {
        let p = format!("{tp}[{i}].{}", t.name());
        match t {
            RollbackTrigger::P95WaitWorse {
                queue,
                percent,
                window_seconds,
            } => {
                if !queues.contains(&queue.as_str()) {
                    c.push(
                        at(&p, "queue"),
                        format!("queue {queue:?} is not defined in this policy"),
                    );
                }
                if !(percent.is_finite() && *percent >= 0.0) {
                    c.push(at(&p, "percent"), "must be a non-negative number");
                }
                c.range(at(&p, "windowSeconds"), *window_seconds, 1, 7 * 24 * 3600);
            }
            RollbackTrigger::UnservedInference { seconds } => {
                c.range(at(&p, "seconds"), *seconds, 1, 7 * 24 * 3600);
            }
            RollbackTrigger::PreemptionsPerHour { max } => {
                c.range(at(&p, "max"), *max, 0, 1_000_000);
            }
        }
    }
    if !r.triggers.is_empty() && r.scope.is_everything() {
        c.push(
            sp,
            "triggers watch a scoped rollout: name the queues, pools or clusters it starts with",
        );
    }
}
