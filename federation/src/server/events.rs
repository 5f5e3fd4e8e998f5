//! `GET /v1/events`: the audit trail, filtered.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::{Extension, Json};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use tideway_api::audit::{AuditEventList, AuditKind};

use super::AppState;
use super::authz::Access;
use super::error::ApiError;
use super::workloads::query_error;
use crate::state::tenancy;

/// At most this many records per answer; page on with `after`.
pub const MAX_EVENTS_PAGE: usize = 10_000;

#[derive(Debug, Deserialize, Default, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct EventParams {
    pub workload: Option<String>,
    pub queue: Option<String>,
    pub kind: Option<String>,
    /// Only records at or after this time (RFC 3339).
    pub since: Option<String>,
    /// Only records after this sequence number (resume from the last one seen).
    pub after: Option<u64>,
    pub limit: Option<usize>,
    #[serde(default)]
    pub stale: bool,
}

/// A scoped submitter sees the records of its own queues' workloads and the records that
/// concern no workload (policy, members); a record about a workload whose queue it may not
/// read, or whose queue the record does not name, is left out.
fn tenant_may_see(access: Option<&Access>, e: &tideway_api::audit::AuditEvent) -> bool {
    match access {
        None => true,
        Some(a) if a.reads_all() => true,
        Some(a) => match (&e.workload, &e.queue) {
            (None, _) => true,
            (Some(_), Some(q)) => a.may_read_queue(q),
            (Some(_), None) => false,
        },
    }
}

pub async fn list(
    State(st): State<AppState>,
    access: Option<Extension<Access>>,
    params: Result<Query<EventParams>, QueryRejection>,
) -> Result<Json<AuditEventList>, ApiError> {
    let Query(p) = params.map_err(query_error)?;
    let kind = p
        .kind
        .as_deref()
        .map(|k| {
            k.parse::<AuditKind>()
                .map_err(|e| ApiError::field("query:kind", e))
        })
        .transpose()?;
    let since = p
        .since
        .as_deref()
        .map(|s| {
            DateTime::parse_from_rfc3339(s)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|e| ApiError::field("query:since", format!("not an RFC 3339 time: {e}")))
        })
        .transpose()?;
    let limit = p.limit.unwrap_or(MAX_EVENTS_PAGE);
    if limit == 0 || limit > MAX_EVENTS_PAGE {
        return Err(ApiError::field(
            "query:limit",
            format!("must be between 1 and {MAX_EVENTS_PAGE}"),
        ));
    }
    let access = access.map(|Extension(a)| a);
    st.read_barrier(p.stale).await?;
    let items = st.read(|d| {
        d.state
            .audit
            .events
            .iter()
            .filter(|e| p.after.is_none_or(|a| e.seq > a))
            .filter(|e| since.is_none_or(|t| e.at >= t))
            .filter(|e| kind.is_none_or(|k| e.kind == k))
            .filter(|e| {
                p.workload.is_none()
                    || e.workload.as_deref().map(tenancy::plain_name) == p.workload.as_deref()
            })
            .filter(|e| p.queue.is_none() || e.queue.as_deref() == p.queue.as_deref())
            .filter(|e| tenant_may_see(access.as_ref(), e))
            .take(limit)
            .cloned()
            .map(|mut e| {
                // Names as clients gave them; the queue says whose.
                if let Some(n) = &e.workload
                    && n.contains('/')
                {
                    e.workload = Some(tenancy::plain_name(n).into());
                }
                e
            })
            .collect()
    })?;
    Ok(Json(AuditEventList { items }))
}
