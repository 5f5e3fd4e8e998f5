//! Job object -> `LocalStatus`.
//!
//! The mapping reads only the few status fields that carry the phase, by path, instead of
//! deserializing whole objects: a Volcano or Kubernetes upgrade that adds or reshapes other
//! fields must not make the agent blind to its jobs. Anything missing reads as "not there
//! yet", which is `Pending`.

use chrono::{DateTime, Utc};
use kube::core::DynamicObject;
use serde_json::Value;

use super::config::SchedulerMode;
use super::labels;
use crate::backend::{LocalPhase, LocalStatus};

/// The workload UID and attempt of one of our objects; `None` for objects whose labels were
/// edited into something we cannot read (they are skipped, not guessed at).
pub fn identity(obj: &DynamicObject) -> Option<(String, u32)> {
    let labels = obj.metadata.labels.as_ref()?;
    let uid = labels.get(labels::WORKLOAD_UID).filter(|u| !u.is_empty())?;
    let attempt = labels.get(labels::ATTEMPT)?.parse().ok()?;
    Some((uid.clone(), attempt))
}

/// The status of a listed or watched job.
pub fn local_status(
    mode: SchedulerMode,
    obj: &DynamicObject,
    now: DateTime<Utc>,
) -> Option<LocalStatus> {
    let (uid, attempt) = identity(obj)?;
    let (mut phase, since) = match mode {
        SchedulerMode::Volcano => volcano_phase(&obj.data),
        SchedulerMode::Kueue => batch_phase(&obj.data),
    };
    let mut since = since.or_else(|| created_at(obj)).unwrap_or(now);
    // A job being deleted is on its way out whatever its status still says.
    if obj.metadata.deletion_timestamp.is_some() && !phase.is_terminal() {
        phase = gone_phase(obj);
        since = obj
            .metadata
            .deletion_timestamp
            .as_ref()
            .and_then(|t| to_chrono(t.0))
            .unwrap_or(since);
    }
    Some(LocalStatus {
        uid,
        attempt,
        phase,
        since,
        nodes: Vec::new(),
    })
}

/// The status of a job that disappeared (a watch `DELETED` event, or absent from a re-list).
pub fn deleted_status(obj: &DynamicObject, now: DateTime<Utc>) -> Option<LocalStatus> {
    let (uid, attempt) = identity(obj)?;
    Some(LocalStatus {
        uid,
        attempt,
        phase: gone_phase(obj),
        since: now,
        nodes: Vec::new(),
    })
}

/// The reason of a job that disappeared, or that we deleted, after our preemption notice.
pub const PREEMPTED_REASON: &str = "PreemptedByFederation";

/// A job that vanished before finishing: evicted if we preempted it, else aborted by
/// someone (an operator's `kubectl delete`, a namespace deletion).
fn gone_phase(obj: &DynamicObject) -> LocalPhase {
    if preempt_at(obj).is_some() {
        LocalPhase::Evicted {
            reason: PREEMPTED_REASON.to_owned(),
        }
    } else {
        LocalPhase::Aborted {
            reason: "Deleted".to_owned(),
        }
    }
}

/// The `tideway.dev/preempt-at` deadline, if the job carries a readable one.
pub fn preempt_at(obj: &DynamicObject) -> Option<DateTime<Utc>> {
    let v = obj.metadata.annotations.as_ref()?.get(labels::PREEMPT_AT)?;
    DateTime::parse_from_rfc3339(v)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// When the workload last wrote a checkpoint, from the job's `tideway.dev/checkpointed-at`
/// annotation (RFC 3339; the workload or its checkpoint hook sets it). Unreadable is absent.
pub fn checkpointed_at(obj: &DynamicObject) -> Option<DateTime<Utc>> {
    let v = obj
        .metadata
        .annotations
        .as_ref()?
        .get(labels::CHECKPOINTED_AT)?;
    DateTime::parse_from_rfc3339(v)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// Volcano's `status.state`:
/// Pending/Inqueue -> Pending; Running/Completing -> Running; Completed -> Succeeded;
/// Failed -> Failed; Aborting/Aborted/Terminating/Terminated -> Aborted; Restarting, or any
/// stop whose reason names an eviction -> Evicted.
pub fn volcano_phase(data: &Value) -> (LocalPhase, Option<DateTime<Utc>>) {
    let state = &data["status"]["state"];
    let phase = state["phase"].as_str().unwrap_or("Pending");
    let reason = state["reason"]
        .as_str()
        .filter(|r| !r.is_empty())
        .or_else(|| state["message"].as_str().filter(|m| !m.is_empty()));
    let since = timestamp(&state["lastTransitionTime"]);
    let reason_or = |default: &str| reason.unwrap_or(default).to_owned();
    let evicted = reason.is_some_and(|r| r.to_ascii_lowercase().contains("evict"));
    let local = match phase {
        "Running" | "Completing" => LocalPhase::Running,
        "Completed" => LocalPhase::Succeeded,
        "Restarting" => LocalPhase::Evicted {
            reason: reason_or("Restarting"),
        },
        "Failed" | "Aborting" | "Aborted" | "Terminating" | "Terminated" if evicted => {
            LocalPhase::Evicted {
                reason: reason_or(phase),
            }
        }
        "Failed" => LocalPhase::Failed {
            reason: reason_or("Failed"),
        },
        "Aborting" | "Aborted" | "Terminating" | "Terminated" => LocalPhase::Aborted {
            reason: reason_or(phase),
        },
        // Pending, Inqueue, and phases a newer Volcano may add: waiting is the safe reading.
        _ => LocalPhase::Pending,
    };
    (local, since)
}

/// A Kueue-managed batch Job: conditions Complete -> Succeeded, Failed -> Failed (with the
/// Job controller's reason, e.g. BackoffLimitExceeded or DeadlineExceeded), Evicted ->
/// Evicted; otherwise suspended (waiting for Kueue admission) -> Pending, active pods ->
/// Running, and neither (admitted, pods not created yet) -> Pending.
pub fn batch_phase(data: &Value) -> (LocalPhase, Option<DateTime<Utc>>) {
    let status = &data["status"];
    let conditions = status["conditions"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    let true_condition = |kind: &str| {
        conditions
            .iter()
            .find(|c| c["type"].as_str() == Some(kind) && c["status"].as_str() == Some("True"))
    };
    let reason_of = |c: &Value, default: &str| {
        c["reason"]
            .as_str()
            .filter(|r| !r.is_empty())
            .unwrap_or(default)
            .to_owned()
    };
    if let Some(c) = true_condition("Complete") {
        let since =
            timestamp(&status["completionTime"]).or_else(|| timestamp(&c["lastTransitionTime"]));
        return (LocalPhase::Succeeded, since);
    }
    if let Some(c) = true_condition("Failed") {
        return (
            LocalPhase::Failed {
                reason: reason_of(c, "Failed"),
            },
            timestamp(&c["lastTransitionTime"]),
        );
    }
    if let Some(c) = true_condition("Evicted") {
        return (
            LocalPhase::Evicted {
                reason: reason_of(c, "Evicted"),
            },
            timestamp(&c["lastTransitionTime"]),
        );
    }
    if data["spec"]["suspend"].as_bool() == Some(true) {
        let since = true_condition("Suspended").and_then(|c| timestamp(&c["lastTransitionTime"]));
        return (LocalPhase::Pending, since);
    }
    if status["active"].as_u64().unwrap_or(0) > 0 {
        return (LocalPhase::Running, timestamp(&status["startTime"]));
    }
    (LocalPhase::Pending, None)
}

fn timestamp(v: &Value) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(v.as_str()?)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

fn created_at(obj: &DynamicObject) -> Option<DateTime<Utc>> {
    obj.metadata
        .creation_timestamp
        .as_ref()
        .and_then(|t| to_chrono(t.0))
}

fn to_chrono(t: k8s_openapi::jiff::Timestamp) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(t.as_second(), u32::try_from(t.subsec_nanosecond()).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn volcano(phase: &str, reason: &str) -> LocalPhase {
        volcano_phase(&json!({"status": {"state": {"phase": phase, "reason": reason}}})).0
    }

    #[test]
    fn volcano_unknown_and_missing_phases_are_pending() {
        assert_eq!(volcano_phase(&json!({})).0, LocalPhase::Pending);
        assert_eq!(volcano("Hibernating", ""), LocalPhase::Pending);
        assert_eq!(volcano_phase(&json!({"status": 7})).0, LocalPhase::Pending);
    }

    #[test]
    fn volcano_eviction_reason_wins_over_phase() {
        assert_eq!(
            volcano("Aborted", "PodEvicted"),
            LocalPhase::Evicted {
                reason: "PodEvicted".into()
            }
        );
        assert_eq!(
            volcano("Aborted", ""),
            LocalPhase::Aborted {
                reason: "Aborted".into()
            }
        );
    }

    #[test]
    fn batch_job_without_status_is_pending() {
        assert_eq!(batch_phase(&json!({"spec": {}})).0, LocalPhase::Pending);
        assert_eq!(
            batch_phase(&json!({"spec": {"suspend": false}, "status": {"conditions": "x"}})).0,
            LocalPhase::Pending
        );
    }
}
