//! `POST /v1/apply`: create or replace queues, priority classes and quota schedules from a
//! document, apply a whole policy bundle, create or replace a webhook; create, replace, list
//! and delete role bindings.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use tideway_api::list::RoleBindingList;
use tideway_api::{AnyResource, RoleBinding, Validate};

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
        AnyResource::RoleBinding(b) => Command::PutRoleBinding {
            binding: Box::new(b),
            at,
        },
        other => {
            return Err(ApiError::field(
                "kind",
                format!(
                    "apply takes Queue, PriorityClass, QuotaSchedule, Policy, Webhook and RoleBinding; submit a Workload with `submit`, not {}",
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
            StoredObject::RoleBinding(b) => Ok(Json(AnyResource::RoleBinding(*b))),
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

/// `GET /v1/rolebindings`: every binding, by name.
pub async fn list_role_bindings(
    State(st): State<AppState>,
    params: Result<Query<super::workloads::ReadParams>, QueryRejection>,
) -> Result<Json<RoleBindingList>, ApiError> {
    let Query(params) = params.map_err(super::workloads::query_error)?;
    st.read_barrier(params.stale).await?;
    let items = st.read(|d| d.state.role_bindings.values().cloned().collect())?;
    Ok(Json(RoleBindingList::new(items)))
}

/// `DELETE /v1/rolebindings/{name}`: revoke a binding. An unknown name is a 404 that writes
/// nothing.
pub async fn delete_role_binding(
    State(st): State<AppState>,
    principal: Option<axum::Extension<tideway_api::auth::Principal>>,
    Path(name): Path<String>,
) -> Result<Json<RoleBinding>, ApiError> {
    st.read_barrier(false).await?;
    if !st.read(|d| d.state.role_bindings.contains_key(&name))? {
        return Err(ApiError::NotFound(format!(
            "role binding '{name}' not found"
        )));
    }
    let actor = principal.map(|axum::Extension(p)| p.subject);
    let cmd = Command::DeleteRoleBinding {
        name,
        at: st.clock.now(),
    };
    match st
        .proposer
        .propose(Command::by(actor.as_deref(), cmd))
        .await?
    {
        CommandResult::Created {
            object: StoredObject::RoleBinding(b),
        } => Ok(Json(*b)),
        CommandResult::Rejected { rejection } => Err(rejection.into()),
        other => Err(ApiError::unexpected(other)),
    }
}
