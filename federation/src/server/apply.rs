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
    let actor = principal.map(|axum::Extension(p)| p.subject);
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
        AnyResource::Policy(p) => super::policy::put_policy_command(p, actor.clone(), at),
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
    match st
        .proposer
        .propose(Command::by(actor.as_deref(), cmd))
        .await?
    {
        // Existing: the same rules were in force already; no new version was made.
        CommandResult::Created { object } | CommandResult::Existing { object } => match object {
            StoredObject::Queue(q) => Ok(Json(AnyResource::Queue(*q))),
            StoredObject::PriorityClass(p) => Ok(Json(AnyResource::PriorityClass(*p))),
            StoredObject::QuotaSchedule(s) => Ok(Json(AnyResource::QuotaSchedule(*s))),
            StoredObject::Policy(p) => Ok(Json(AnyResource::Policy(*p))),
            StoredObject::Webhook(w) => Ok(Json(AnyResource::Webhook(*w))),
            other => Err(ApiError::Internal(format!(
                "unexpected stored object {other:?}"
            ))),
        },
        CommandResult::Rejected {
            rejection: Rejection::Invalid { errors },
        } => Err(ApiError::Invalid(errors)),
        CommandResult::Rejected {
            rejection: Rejection::Busy { reason },
        } => Err(ApiError::Conflict(reason)),
        other => Err(ApiError::unexpected(other)),
    }
}
