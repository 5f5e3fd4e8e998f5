//! `POST /v1/apply`: create or replace queues, priority classes and quota schedules from a
//! document, apply a whole policy bundle, create or replace a webhook; create, replace, list
//! and delete role bindings.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use tideway_api::list::{Applied, AppliedList, RoleBindingList};
use tideway_api::{AnyResource, FieldError, RoleBinding, Validate};

use super::AppState;
use super::error::ApiError;
use crate::state::command::{Command, CommandResult, Rejection, StoredObject};

pub async fn apply(
    State(st): State<AppState>,
    principal: Option<axum::Extension<tideway_api::auth::Principal>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(|e| ApiError::BadBody(e.body_text()))?;
    let ct = super::workloads::content_type(&headers)?;
    let actor = principal.map(|axum::Extension(p)| p.subject);
    let yaml =
        ct.and_then(tideway_api::Format::from_content_type) != Some(tideway_api::Format::Json);
    if yaml {
        let docs = tideway_api::split_documents(&body);
        if docs.len() > 1 {
            return apply_many(&st, actor, ct, &docs)
                .await
                .map(|l| Json(l).into_response());
        }
    }
    let res = tideway_api::decode_resource(&body, ct).map_err(ApiError::from)?;
    res.validate()
        .map_err(|e| ApiError::Invalid(e.into_inner()))?;
    // What this apply does to the current state, for `kubectl apply`-like output; read after
    // a barrier, so a follower does not answer from a stale copy.
    st.read_barrier(false).await?;
    let outcome = st.read(|d| outcome(&d.state, &res))?;
    let at = st.clock.now();
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
        other => match lone_command(other, at) {
            Ok(cmd) => cmd,
            Err(reason) => return Err(ApiError::field("kind", reason)),
        },
    };
    let (object, created) = propose(&st, actor.as_deref(), cmd).await?;
    // Existing: the same rules were in force already; no new version was made.
    let outcome = if created { outcome } else { "unchanged" };
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
    Ok(([(OUTCOME_HEADER, outcome)], Json(doc)).into_response())
}

/// The command for a Webhook or RoleBinding, which are not policy objects; for any other
/// kind, the sentence that says which verb takes it.
fn lone_command(res: AnyResource, at: chrono::DateTime<chrono::Utc>) -> Result<Command, String> {
    match res {
        AnyResource::Webhook(w) => Ok(Command::PutWebhook {
            webhook: Box::new(w),
            at,
        }),
        AnyResource::RoleBinding(b) => Ok(Command::PutRoleBinding {
            binding: Box::new(b),
            at,
        }),
        AnyResource::Workload(_) => Err(
            "apply takes Queue, PriorityClass, QuotaSchedule, Policy, Webhook and RoleBinding; \
             submit a Workload with `tideway submit -f` (POST /v1/workloads)"
                .to_owned(),
        ),
        other => Err(format!(
            "apply takes Queue, PriorityClass, QuotaSchedule, Policy, Webhook and RoleBinding, \
             not {}; a member cluster's agent registers it",
            other.kind()
        )),
    }
}

/// Proposes `cmd` for `actor`: the stored object, and whether the command changed anything.
async fn propose(
    st: &AppState,
    actor: Option<&str>,
    cmd: Command,
) -> Result<(StoredObject, bool), ApiError> {
    match st.proposer.propose(Command::by(actor, cmd)).await? {
        CommandResult::Created { object } => Ok((object, true)),
        CommandResult::Existing { object } => Ok((object, false)),
        CommandResult::Rejected {
            rejection: Rejection::Invalid { errors },
        } => Err(ApiError::Invalid(errors)),
        CommandResult::Rejected {
            rejection: Rejection::Busy { reason },
        } => Err(ApiError::Conflict(reason)),
        other => Err(ApiError::unexpected(other)),
    }
}

/// Several documents (a YAML stream with `---`), applied in order: their queues, priority
/// classes and quota schedules together as one policy version (all or nothing), at the
/// place of the first of them; webhooks and role bindings one by one. Every document is
/// decoded and validated before anything is applied, and refusals name the document
/// (`documents[1].spec.weight`, counting from 0).
async fn apply_many(
    st: &AppState,
    actor: Option<String>,
    ct: Option<&str>,
    docs: &[&[u8]],
) -> Result<AppliedList, ApiError> {
    let mut resources = Vec::with_capacity(docs.len());
    let mut errors = Vec::new();
    for (i, doc) in docs.iter().enumerate() {
        let at = |f: &str| {
            if f.is_empty() {
                format!("documents[{i}]")
            } else {
                format!("documents[{i}].{f}")
            }
        };
        let res = match tideway_api::decode_resource(doc, ct) {
            Ok(res) => res,
            Err(e) => {
                let mut fe = e.to_field_error();
                fe.field = at(&fe.field);
                errors.push(fe);
                continue;
            }
        };
        if let Err(v) = res.validate() {
            errors.extend(v.into_inner().into_iter().map(|mut fe| {
                fe.field = at(&fe.field);
                fe
            }));
            continue;
        }
        match &res {
            AnyResource::Queue(_)
            | AnyResource::PriorityClass(_)
            | AnyResource::QuotaSchedule(_)
            | AnyResource::Webhook(_)
            | AnyResource::RoleBinding(_) => resources.push(res),
            AnyResource::Policy(_) => errors.push(FieldError::new(
                at("kind"),
                "a Policy bundle replaces the queues, priority classes and quota schedules as \
                 a set: apply it alone (`tideway policy apply -f`)",
            )),
            other => {
                let reason = lone_command(other.clone(), st.clock.now())
                    .err()
                    .unwrap_or_default();
                errors.push(FieldError::new(at("kind"), reason));
            }
        }
    }
    if !errors.is_empty() {
        return Err(ApiError::Invalid(errors));
    }
    st.read_barrier(false).await?;
    let outcomes: Vec<&'static str> = st.read(|d| {
        resources
            .iter()
            .map(|r| outcome(&d.state, r))
            .collect::<Vec<_>>()
    })?;
    let at = st.clock.now();
    let (mut queues, mut priority_classes, mut quota_schedules) = (vec![], vec![], vec![]);
    for r in &resources {
        match r {
            AnyResource::Queue(q) => queues.push(q.clone()),
            AnyResource::PriorityClass(p) => priority_classes.push(p.clone()),
            AnyResource::QuotaSchedule(s) => quota_schedules.push(s.clone()),
            _ => {}
        }
    }
    let mut batch = Some(Command::PutPolicyObjects {
        queues,
        priority_classes,
        quota_schedules,
        at,
    });
    let mut policy = None;
    let mut items = Vec::with_capacity(resources.len());
    for (res, outcome) in resources.into_iter().zip(outcomes) {
        let kind = res.kind().to_owned();
        let name = res.metadata().name.clone();
        let changed = match res {
            AnyResource::Queue(_)
            | AnyResource::PriorityClass(_)
            | AnyResource::QuotaSchedule(_) => {
                if let Some(cmd) = batch.take() {
                    let (object, created) = propose(st, actor.as_deref(), cmd).await?;
                    if let StoredObject::Policy(p) = object {
                        policy = Some((p.version(), created));
                    }
                }
                policy.is_some_and(|(_, created)| created)
            }
            other => {
                let cmd = lone_command(other, at).map_err(|r| ApiError::field("kind", r))?;
                propose(st, actor.as_deref(), cmd).await?.1
            }
        };
        let outcome = if changed { outcome } else { "unchanged" };
        items.push(Applied {
            kind,
            name,
            outcome: outcome.to_owned(),
        });
    }
    Ok(AppliedList::new(items, policy.and_then(|(v, _)| v)))
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
/// labels are the same, `configured` otherwise (a policy bundle is always `configured`; the
/// command says `unchanged` when it makes no new version).
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
        AnyResource::Webhook(w) => compare(
            state
                .webhooks
                .get(&w.metadata.name)
                .map(|o| (&o.spec, &o.metadata.labels)),
            (&w.spec, &w.metadata.labels),
        ),
        AnyResource::RoleBinding(b) => compare(
            state
                .role_bindings
                .get(&b.metadata.name)
                .map(|o| (&o.spec, &o.metadata.labels)),
            (&b.spec, &b.metadata.labels),
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
