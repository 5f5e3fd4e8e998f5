//! `POST /v1/apply`: create or replace queues, priority classes and quota schedules from a
//! document, apply a whole policy bundle, or create or replace a webhook.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::HeaderMap;
use tideway_api::{AnyResource, Validate};

use super::AppState;
use super::error::ApiError;
use crate::state::command::{Command, CommandResult, Rejection, StoredObject};

pub async fn apply(
    State(st): State<AppState>,
    principal: Option<axum::Extension<tideway_api::auth::Principal>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<AnyResource>, ApiError> {
    let body = body.map_err(|e| ApiError::BadBody(e.body_text()))?;
    let ct = super::workloads::content_type(&headers)?;
    let res = tideway_api::decode_resource(&body, ct)
        .map_err(|e| ApiError::Invalid(vec![e.to_field_error()]))?;
    res.validate()
        .map_err(|e| ApiError::Invalid(e.into_inner()))?;
    let at = st.clock.now();
    // A policy is answered with the bundle as applied.
    let policy = match &res {
        AnyResource::Policy(p) => Some(p.clone()),
        _ => None,
    };
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
        AnyResource::Webhook(w) => Command::PutWebhook {
            webhook: Box::new(w),
            at,
        },
        other => {
            return Err(ApiError::field(
                "kind",
                format!(
                    "apply takes Queue, PriorityClass, QuotaSchedule, Policy and Webhook; submit a Workload with `submit`, not {}",
                    other.kind()
                ),
            ));
        }
    };
    let actor = principal.map(|axum::Extension(p)| p.subject);
    match st
        .proposer
        .propose(Command::by(actor.as_deref(), cmd))
        .await?
    {
        CommandResult::Created {
            object: StoredObject::Queue(q),
        } => Ok(Json(AnyResource::Queue(*q))),
        CommandResult::Created {
            object: StoredObject::PriorityClass(p),
        } => Ok(Json(AnyResource::PriorityClass(*p))),
        CommandResult::Created {
            object: StoredObject::QuotaSchedule(s),
        } => Ok(Json(AnyResource::QuotaSchedule(*s))),
        CommandResult::Created {
            object: StoredObject::Webhook(w),
        } => Ok(Json(AnyResource::Webhook(*w))),
        CommandResult::Updated { .. } if policy.is_some() => match policy {
            Some(p) => Ok(Json(AnyResource::Policy(p))),
            None => Err(ApiError::Internal("policy lost".into())),
        },
        CommandResult::Rejected {
            rejection: Rejection::Invalid { errors },
        } => Err(ApiError::Invalid(errors)),
        other => Err(ApiError::unexpected(other)),
    }
}
