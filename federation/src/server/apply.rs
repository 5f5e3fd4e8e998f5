//! `POST /v1/apply`: create or replace queues, priority classes and quota schedules from a
//! document, or apply a whole policy bundle.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::HeaderMap;
use chrono::Utc;
use tideway_api::{AnyResource, Validate};

use super::AppState;
use super::error::ApiError;
use crate::state::command::{Command, CommandResult, Rejection, StoredObject};

pub async fn apply(
    State(st): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let body = body.map_err(|e| ApiError::BadBody(e.body_text()))?;
    let ct = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    let res = tideway_api::decode_resource(&body, ct)
        .map_err(|e| ApiError::Invalid(vec![e.to_field_error()]))?;
    res.validate()
        .map_err(|e| ApiError::Invalid(e.into_inner()))?;
    let at = Utc::now();
    let (kind, name) = (res.kind(), res.metadata().name.clone());
    let cmd = match res {
        AnyResource::Queue(q) => Command::PutQueue {
            queue: Box::new(q),
            at,
        },
        AnyResource::PriorityClass(pc) => Command::PutPriorityClass {
            priority_class: Box::new(pc),
            at,
        },
        AnyResource::QuotaSchedule(s) => Command::PutQuotaSchedule {
            schedule: Box::new(s),
            at,
        },
        AnyResource::Policy(p) => Command::PutPolicy {
            policy: Box::new(p),
            at,
        },
        other => {
            return Err(ApiError::field(
                "kind",
                format!(
                    "apply takes Queue, PriorityClass, QuotaSchedule and Policy; submit a Workload with `submit`, not {}",
                    other.kind()
                ),
            ));
        }
    };
    match st.proposer.propose(cmd).await? {
        CommandResult::Created {
            object: StoredObject::Queue(q),
        } => Ok(Json(serde_json::to_value(*q).unwrap_or_default())),
        CommandResult::Created {
            object: StoredObject::PriorityClass(p),
        } => Ok(Json(serde_json::to_value(*p).unwrap_or_default())),
        CommandResult::Created {
            object: StoredObject::QuotaSchedule(s),
        } => Ok(Json(serde_json::to_value(*s).unwrap_or_default())),
        CommandResult::Updated { count } => Ok(Json(serde_json::json!({
            "kind": kind,
            "metadata": { "name": name },
            "applied": count,
        }))),
        CommandResult::Rejected {
            rejection: Rejection::Invalid { errors },
        } => Err(ApiError::Invalid(errors)),
        other => Err(ApiError::unexpected(other)),
    }
}
