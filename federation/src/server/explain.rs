//! `GET /v1/workloads/{id}/explain`: why a workload is where it is.
//!
//! The leader keeps the last scheduling cycle's output; the explanation is that cycle's
//! decision for the workload (per-cluster breakdown and what would unblock it) next to the
//! replicated pending reason. A follower asks the leader.

use axum::Json;
use axum::extract::{Path, State};
use serde::{Deserialize, Serialize};
use tideway_api::{PendingReason, WorkloadPhase};

use super::AppState;
use super::error::ApiError;
use crate::propose::forward::ExplainForward;
use tideway_scheduler::{Decision, Explanation};

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExplainResponse {
    pub workload: String,
    pub uid: String,
    pub phase: WorkloadPhase,
    pub cluster: Option<String>,
    pub message: Option<String>,
    /// The replicated reason (what `get` shows).
    pub pending_reason: Option<PendingReason>,
    /// What the last cycle decided for it and why, if it was pending then.
    pub decision: Option<String>,
    pub explanation: Option<Explanation>,
    /// Human-readable summary, for the CLI.
    pub summary: String,
    pub cycle_at: Option<chrono::DateTime<chrono::Utc>>,
}

pub async fn explain(
    State(st): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let resp = match st.forwarder.remote_leader().await? {
        Some(leader) => {
            let req = ExplainForward { workload: id };
            st.forwarder
                .explain::<ExplainResponse>(leader, &req)
                .await?
        }
        None => explain_here(&st, &id).await?,
    };
    serde_json::to_value(resp)
        .map(Json)
        .map_err(|e| ApiError::Internal(e.to_string()))
}

/// The explanation on the leader, which holds the last cycle.
pub async fn explain_here(st: &AppState, id: &str) -> Result<ExplainResponse, ApiError> {
    st.read_barrier(false).await?;
    let w = st
        .read(|d| d.state.workload(id).cloned())?
        .ok_or_else(|| ApiError::NotFound(format!("workload '{id}' not found")))?;
    let uid = w.metadata.uid.clone().unwrap_or_default();
    let status = w.status.clone().unwrap_or_default();
    let last = st.last_cycle.read().ok().and_then(|s| s.clone());
    let (decision, explanation, cycle_at) = match &last {
        Some(l) => match l.by_uid.get(&uid).and_then(|i| l.output.decisions.get(*i)) {
            Some(d) => {
                let (kind, ex) = match d {
                    Decision::Assign { cluster, .. } => (format!("assign to {cluster}"), None),
                    Decision::Preempt {
                        victims, cluster, ..
                    } => (
                        format!("preempt {} workload(s) on {cluster}", victims.len()),
                        None,
                    ),
                    Decision::Reserve {
                        cluster,
                        expected_start,
                        explanation,
                        ..
                    } => (
                        format!("reserve {cluster} from {expected_start}"),
                        Some((**explanation).clone()),
                    ),
                    Decision::Pending { explanation, .. } => {
                        ("keep pending".to_string(), Some((**explanation).clone()))
                    }
                };
                (Some(kind), ex, Some(l.at))
            }
            None => (None, None, Some(l.at)),
        },
        None => (None, None, None),
    };
    let no_member_ready = st.read(|d| {
        !d.state.members.values().any(|m| {
            m.cluster
                .status
                .as_ref()
                .is_some_and(|s| s.phase.accepts_work())
        })
    })?;
    let summary = match (&status.phase, &status.pending_reason, &explanation) {
        (WorkloadPhase::Pending, _, None) if no_member_ready => {
            "no member cluster is Ready: nothing can run until an agent registers".to_string()
        }
        (WorkloadPhase::Pending, Some(r), Some(e)) => format!("{r}. {}", e.hint),
        (WorkloadPhase::Pending, Some(r), None) => r.to_string(),
        (phase, _, _) => match &status.cluster {
            Some(c) => format!("{phase:?} on {c}"),
            None => format!("{phase:?}"),
        },
    };
    let resp = ExplainResponse {
        workload: w.metadata.name.clone(),
        uid,
        phase: status.phase,
        cluster: status.cluster.clone(),
        message: status.message.clone(),
        pending_reason: status.pending_reason.clone(),
        decision,
        explanation,
        summary,
        cycle_at,
    };
    Ok(resp)
}
