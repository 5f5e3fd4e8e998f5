//! `GET /v1/events`: the audit trail, filtered.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use tideway_api::audit::{AuditEventList, AuditKind};

use super::AppState;
use super::error::ApiError;
use super::workloads::query_error;

/// At most this many records per answer; page on with `after`.
pub const MAX_EVENTS_PAGE: usize = 10_000;

#[derive(Debug, Deserialize, Default)]
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

pub async fn list(
    State(st): State<AppState>,
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
    st.read_barrier(p.stale).await?;
    let items = st.read(|d| {
        d.state
            .audit
            .events
            .iter()
            .filter(|e| p.after.is_none_or(|a| e.seq > a))
            .filter(|e| since.is_none_or(|t| e.at >= t))
            .filter(|e| kind.is_none_or(|k| e.kind == k))
            .filter(|e| p.workload.is_none() || e.workload == p.workload)
            .filter(|e| p.queue.is_none() || e.queue == p.queue)
            .take(limit)
            .cloned()
            .collect()
    })?;
    Ok(Json(AuditEventList { items }))
}
