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
) -> Result<([(&'static str, &'static str); 1], Json<AnyResource>), ApiError> {
    let body = body.map_err(|e| ApiError::BadBody(e.body_text()))?;
    let ct = super::workloads::content_type(&headers)?;
    let res = tideway_api::decode_resource(&body, ct).map_err(ApiError::from)?;
    res.validate()
        .map_err(|e| ApiError::Invalid(e.into_inner()))?;
    // What this apply does to the current state, for `kubectl apply`-like output; read after
    // a barrier, so a follower does not answer from a stale copy.
    st.read_barrier(false).await?;
    let outcome = st.read(|d| outcome(&d.state, &res))?;
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
        AnyResource::Policy(p) => super::policy::put_policy_command(*p, actor.clone(), at),
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
        res @ (CommandResult::Created { .. } | CommandResult::Existing { .. }) => {
            let (object, outcome) = match res {
                CommandResult::Existing { object } => (object, "unchanged"),
                CommandResult::Created { object } => (object, outcome),
                _ => return Err(ApiError::Internal("unreachable apply result".into())),
            };
            let doc = match object {
                StoredObject::Queue(q) => AnyResource::Queue(*q),
                StoredObject::PriorityClass(p) => AnyResource::PriorityClass(*p),
                StoredObject::QuotaSchedule(s) => AnyResource::QuotaSchedule(*s),
                StoredObject::Policy(p) => AnyResource::Policy(p),
                StoredObject::Webhook(w) => AnyResource::Webhook(*w),
                StoredObject::RoleBinding(b) => AnyResource::RoleBinding(*b),
                other => {
                    return Err(ApiError::Internal(format!(
                        "unexpected stored object {other:?}"
                    )));
                }
            };
            Ok(([(OUTCOME_HEADER, outcome)], Json(doc)))
        }
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
    let deleted = st
        .delete_named(
            principal,
            "role binding",
            &name,
            |d| d.state.role_bindings.contains_key(&name),
            |at| Command::DeleteRoleBinding {
                name: name.clone(),
                at,
            },
        )
        .await?;
    match deleted {
        StoredObject::RoleBinding(b) => Ok(Json(*b)),
        other => Err(ApiError::Internal(format!(
            "unexpected stored object {other:?}"
        ))),
    }
}

/// The response header that says what an apply did: `created`, `configured` or `unchanged`.
pub const OUTCOME_HEADER: &str = tideway_api::client::APPLY_OUTCOME_HEADER;

/// `created` when no object of that kind and name exists, `unchanged` when its spec and
/// labels are the same, `configured` otherwise (a policy bundle is always `configured`).
fn outcome(state: &crate::state::FederationState, res: &AnyResource) -> &'static str {
    fn compare<S: PartialEq>(
        old: Option<(&S, &std::collections::BTreeMap<String, String>)>,
        new: (&S, &std::collections::BTreeMap<String, String>),
    ) -> &'static str {
        match old {
            None => "created",
            Some(o) if o == new => "unchanged",
            Some(_) => "configured",
        }
    }
    match res {
        AnyResource::Queue(q) => compare(
            state
                .queues
                .get(&q.metadata.name)
                .map(|o| (&o.spec, &o.metadata.labels)),
            (&q.spec, &q.metadata.labels),
        ),
        AnyResource::PriorityClass(p) => compare(
            state
                .priority_classes
                .get(&p.metadata.name)
                .map(|o| (&o.spec, &o.metadata.labels)),
            (&p.spec, &p.metadata.labels),
        ),
        AnyResource::QuotaSchedule(s) => compare(
            state
                .tidal
                .schedules
                .get(&s.metadata.name)
                .map(|o| (&o.spec, &o.metadata.labels)),
            (&s.spec, &s.metadata.labels),
        ),
        _ => "configured",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tideway_api::{Queue, QueueSpec};

    #[test]
    fn apply_outcome_is_created_then_unchanged_then_configured() {
        let mut state = crate::state::FederationState::default();
        let q = Queue::new("team-a", QueueSpec::new("a"));
        assert_eq!(outcome(&state, &AnyResource::Queue(q.clone())), "created");
        state.queues.insert("team-a".into(), q.clone());
        assert_eq!(outcome(&state, &AnyResource::Queue(q.clone())), "unchanged");
        let mut changed = q;
        changed.spec.fair_share_weight = 3.0;
        assert_eq!(outcome(&state, &AnyResource::Queue(changed)), "configured");
    }
}
