//! `POST /v1/apply`: create or replace queues, priority classes and quota schedules from a
//! document, or apply a whole policy bundle.

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
) -> Result<([(&'static str, &'static str); 1], Json<AnyResource>), ApiError> {
    let body = body.map_err(|e| ApiError::BadBody(e.body_text()))?;
    let ct = super::workloads::content_type(&headers)?;
    let res = tideway_api::decode_resource(&body, ct)
        .map_err(|e| ApiError::Invalid(vec![e.to_field_error()]))?;
    res.validate()
        .map_err(|e| ApiError::Invalid(e.into_inner()))?;
    // What this apply does to the current state, for `kubectl apply`-like output; read after
    // a barrier, so a follower does not answer from a stale copy.
    st.read_barrier(false).await?;
    let outcome = st.read(|d| outcome(&d.state, &res))?;
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
    let actor = principal.map(|axum::Extension(p)| p.subject);
    match st
        .proposer
        .propose(Command::by(actor.as_deref(), cmd))
        .await?
    {
        CommandResult::Created {
            object: StoredObject::Queue(q),
        } => Ok(([(OUTCOME_HEADER, outcome)], Json(AnyResource::Queue(*q)))),
        CommandResult::Created {
            object: StoredObject::PriorityClass(p),
        } => Ok((
            [(OUTCOME_HEADER, outcome)],
            Json(AnyResource::PriorityClass(*p)),
        )),
        CommandResult::Created {
            object: StoredObject::QuotaSchedule(s),
        } => Ok((
            [(OUTCOME_HEADER, outcome)],
            Json(AnyResource::QuotaSchedule(*s)),
        )),
        CommandResult::Updated { .. } if policy.is_some() => match policy {
            Some(p) => Ok(([(OUTCOME_HEADER, outcome)], Json(AnyResource::Policy(p)))),
            None => Err(ApiError::Internal("policy lost".into())),
        },
        CommandResult::Rejected {
            rejection: Rejection::Invalid { errors },
        } => Err(ApiError::Invalid(errors)),
        other => Err(ApiError::unexpected(other)),
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
