//! `GET /v1/workloads/{id}/explain`: why a workload is where it is.
//!
//! The leader keeps the last scheduling cycle's output; the explanation is that cycle's
//! decision for the workload (per-cluster breakdown and what would unblock it) next to the
//! replicated pending reason. A follower asks the leader.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::{Extension, Json};
use tideway_api::explain::ExplainResponse;
use tideway_api::{PendingReason, WorkloadPhase};

use super::AppState;
use super::authz::Access;
use super::error::ApiError;
use crate::propose::forward::ExplainForward;
use tideway_scheduler::Decision;

pub async fn explain(
    State(st): State<AppState>,
    access: Option<Extension<Access>>,
    Path(id): Path<String>,
    params: Result<Query<super::workloads::TenantParams>, QueryRejection>,
) -> Result<Json<ExplainResponse>, ApiError> {
    let Query(params) = params.map_err(super::workloads::query_error)?;
    // The name as the caller means it, to its stored name: another tenant's workload is not
    // found, here as in `get`. Resolved on this node after a linearizable read, since the
    // leader answering the forwarded request knows no caller.
    st.read_barrier(false).await?;
    let access = access.map(|Extension(a)| a);
    let id = st.read(|d| {
        super::workloads::resolve(
            &d.state,
            access.as_ref(),
            &id,
            params.tenant.as_deref(),
            |w| w.metadata.name.clone(),
        )
    })??;
    let resp = match st.forwarder.remote_leader().await? {
        Some(leader) => {
            let req = ExplainForward { workload: id };
            st.forwarder
                .explain::<ExplainResponse>(leader, &req)
                .await?
        }
        None => explain_here(&st, &id).await?,
    };
    Ok(Json(resp))
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
    // Workloads by name, not uid: a reader knows the names it submitted.
    let name_of = |uid: &str| -> String {
        st.read(|d| {
            d.state
                .by_uid(uid)
                .map(|v| crate::state::tenancy::plain_name(&v.metadata.name).to_string())
        })
        .ok()
        .flatten()
        .unwrap_or_else(|| uid.to_string())
    };
    let (decision, explanation, cycle_at) = match &last {
        Some(l) => match l.decision_for(&w) {
            Some(d) => {
                let (kind, ex) = match d {
                    Decision::Assign { cluster, .. } => (format!("assign to {cluster}"), None),
                    Decision::Preempt {
                        victims, cluster, ..
                    } => (
                        format!(
                            "preempt {} workload(s) on {cluster}: {}",
                            victims.len(),
                            victims
                                .iter()
                                .map(|v| name_of(v.as_str()))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
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
    let no_member_ready = st.read(|d| !d.state.any_member_ready())?;
    // A flavor no member offers is the reason whatever the cycle said of quota or capacity:
    // nothing the workload waits for would make it run.
    let absent = match status.phase {
        WorkloadPhase::Pending => st.read(|d| super::workloads::absent_flavors(&d.state, &w))?,
        _ => None,
    };
    let redispatch = st
        .redispatch_waits
        .read()
        .ok()
        .and_then(|w| w.get(&uid).cloned())
        .filter(|_| !status.phase.is_terminal());
    // A tidal window's quota, named with its schedule and end, says more than the core's
    // date-free `QuotaExhausted` or `InsufficientCapacity`.
    let now = st.clock.now();
    let window = st.read(|d| {
        let queues = crate::dispatcher::queue_view::with_status(&d.state, now);
        crate::dispatcher::window_reason::sentence(&queues, &w)
    })?;
    // The reason as people read it: victims by name, not uid.
    let reason = status.pending_reason.as_deref().map(|r| match r {
        PendingReason::WaitingForPreemption { victims } => PendingReason::WaitingForPreemption {
            victims: victims.iter().map(|v| name_of(v)).collect(),
        },
        r => r.clone(),
    });
    let summary = if let Some((absent, fleet)) = &absent {
        format!(
            "no member cluster offers {} GPUs; the fleet has {}. It cannot run until a member \
             with that flavor joins: resubmit it with one of the fleet's flavors",
            absent.join(", "),
            fleet.join(", ")
        )
    } else if let Some(r) = &redispatch {
        r.to_string()
    } else {
        match (&status.phase, &reason, &explanation) {
            (WorkloadPhase::Pending, _, ex) if window.is_some() => {
                let wq = window.clone().unwrap_or_default();
                match ex {
                    Some(e) => format!("{wq}. {}", e.hint),
                    None => wq,
                }
            }
            (WorkloadPhase::Pending, _, None) if no_member_ready => {
                "no member cluster is Ready: nothing can run until an agent registers".to_string()
            }
            (WorkloadPhase::Pending, Some(r), Some(e)) => format!("{r}. {}", e.hint),
            (WorkloadPhase::Pending, Some(r), None) => r.to_string(),
            (phase, _, _) => match &status.cluster {
                Some(c) => format!("{phase:?} on {c}"),
                None => format!("{phase:?}"),
            },
        }
    };
    let resp = ExplainResponse {
        workload: crate::state::tenancy::plain_name(&w.metadata.name).into(),
        uid: uid.into(),
        phase: status.phase,
        cluster: status.cluster.clone().map(Into::into),
        message: status.message.clone(),
        pending_reason: status.pending_reason.as_deref().cloned(),
        decision,
        explanation,
        summary,
        cycle_at,
        redispatch,
    };
    Ok(resp)
}
