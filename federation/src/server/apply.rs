//! `POST /v1/apply`: create or replace queues, priority classes and quota schedules from a
//! document, or apply a whole policy bundle; create, replace, list and delete role bindings.

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
        AnyResource::RoleBinding(b) => Command::PutRoleBinding {
            binding: Box::new(b),
            at,
        },
        other => {
            return Err(ApiError::field(
                "kind",
                format!(
                    "apply takes Queue, PriorityClass, QuotaSchedule, Policy and RoleBinding; submit a Workload with `submit`, not {}",
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
            object: StoredObject::RoleBinding(b),
        } => Ok(Json(AnyResource::RoleBinding(*b))),
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
