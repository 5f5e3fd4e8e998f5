//! `/v1/policy/...`: policy versions (history, one version, apply, rollback, widen), the
//! field-level diff and the dry-run on live state. Every write is one log entry; reads are
//! linearizable unless `?stale=true`.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use tideway_api::auth::Principal;
use tideway_api::{
    AnyResource, DiffRequest, DryRunReport, Policy, PolicyDiff, PolicyHistory, PolicyStatus,
    PolicyVersionSummary, RollbackRequest, Validate, decode_json,
};

use super::AppState;
use super::error::ApiError;
use super::workloads::{content_type, query_error};
use crate::state::command::{Command, CommandResult, StoredObject};

/// `?stale=true` reads this node's copy without a read barrier.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ReadParams {
    #[serde(default)]
    pub stale: bool,
}

/// The command that applies `p` as the next version, on behalf of `actor`.
pub fn put_policy_command(mut p: Policy, actor: Option<String>, at: DateTime<Utc>) -> Command {
    // What a user sends as status is not trusted, except its message.
    let message = p.status.take().and_then(|s| s.message);
    p.status = Some(PolicyStatus {
        applied_by: actor.clone(),
        message,
        ..Default::default()
    });
    Command::by(
        actor.as_deref(),
        Command::PutPolicy {
            policy: Box::new(p),
            at,
        },
    )
}

fn actor(principal: Option<axum::Extension<Principal>>) -> Option<String> {
    principal.map(|axum::Extension(p)| p.subject)
}

/// A `Policy` document from the body, validated as a whole.
fn policy_body(
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Policy, ApiError> {
    let body = body.map_err(|e| ApiError::BadBody(e.body_text()))?;
    let res =
        tideway_api::decode_resource(&body, content_type(headers)?).map_err(ApiError::from)?;
    let AnyResource::Policy(p) = res else {
        return Err(ApiError::field(
            "kind",
            format!("this route takes a Policy, not {}", res.kind()),
        ));
    };
    p.validate()
        .map_err(|e| ApiError::Invalid(e.into_inner()))?;
    Ok(*p)
}

fn json_body<T: serde::de::DeserializeOwned + Default>(
    body: Result<Bytes, BytesRejection>,
) -> Result<T, ApiError> {
    let body = body.map_err(|e| ApiError::BadBody(e.body_text()))?;
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    decode_json(&body).map_err(ApiError::from)
}

fn answer(res: CommandResult) -> Result<Json<Policy>, ApiError> {
    match res {
        CommandResult::Created {
            object: StoredObject::Policy(p),
        }
        | CommandResult::Existing {
            object: StoredObject::Policy(p),
        } => Ok(Json(*p)),
        other => Err(ApiError::unexpected(other)),
    }
}

/// `GET /v1/policy/versions`.
pub async fn history(
    State(st): State<AppState>,
    params: Result<Query<ReadParams>, QueryRejection>,
) -> Result<Json<PolicyHistory>, ApiError> {
    let Query(p) = params.map_err(query_error)?;
    st.read_barrier(p.stale).await?;
    st.read(|d| {
        let store = &d.state.policy;
        Json(PolicyHistory {
            current: store.current(),
            rollout_base: store.rollout.as_ref().map(|r| r.base),
            items: store
                .versions
                .iter()
                .map(|p| {
                    let s = p.status.clone().unwrap_or_default();
                    PolicyVersionSummary {
                        version: s.version,
                        name: p.metadata.name.clone(),
                        applied_at: s.applied_at,
                        applied_by: s.applied_by,
                        rolled_back_to: s.rolled_back_to,
                        message: s.message,
                        scoped: s.rollout_base.is_some(),
                    }
                })
                .collect(),
        })
    })
}

/// `GET /v1/policy/versions/{n}`; `current` names the version in force.
pub async fn version(
    State(st): State<AppState>,
    Path(n): Path<String>,
    params: Result<Query<ReadParams>, QueryRejection>,
) -> Result<Json<Policy>, ApiError> {
    let Query(p) = params.map_err(query_error)?;
    st.read_barrier(p.stale).await?;
    let store = st.read(|d| d.state.policy.clone())?;
    let v = if n == "current" {
        store.current()
    } else {
        n.parse::<u64>()
            .map_err(|_| ApiError::field("path:version", "a version number or `current`"))?
    };
    store
        .get(v)
        .cloned()
        .map(Json)
        .ok_or_else(|| ApiError::NotFound(format!("policy version {v} is not retained")))
}

/// `POST /v1/policy/apply`: the whole bundle as the next version.
pub async fn apply(
    State(st): State<AppState>,
    principal: Option<axum::Extension<Principal>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Policy>, ApiError> {
    let p = policy_body(&headers, body)?;
    let cmd = put_policy_command(p, actor(principal), st.clock.now());
    answer(st.proposer.propose(cmd).await?)
}

/// `POST /v1/policy/rollback`.
pub async fn rollback(
    State(st): State<AppState>,
    principal: Option<axum::Extension<Principal>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Policy>, ApiError> {
    let req: RollbackRequest = json_body(body)?;
    let who = actor(principal);
    let cmd = Command::RollbackPolicy {
        to: req.to,
        only_candidate: None,
        applied_by: who.clone(),
        message: req.message,
        at: st.clock.now(),
    };
    answer(
        st.proposer
            .propose(Command::by(who.as_deref(), cmd))
            .await?,
    )
}

/// `POST /v1/policy/widen`: the scoped candidate to the whole fleet.
pub async fn widen(
    State(st): State<AppState>,
    principal: Option<axum::Extension<Principal>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Policy>, ApiError> {
    super::cluster::no_body(body)?;
    let who = actor(principal);
    let cmd = Command::WidenPolicy {
        applied_by: who.clone(),
        message: None,
        at: st.clock.now(),
    };
    answer(
        st.proposer
            .propose(Command::by(who.as_deref(), cmd))
            .await?,
    )
}

/// `POST /v1/policy/diff`.
pub async fn diff(
    State(st): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<PolicyDiff>, ApiError> {
    let req: DiffRequest = json_body(body)?;
    if req.to.is_some() && req.candidate.is_some() {
        return Err(ApiError::field("to", "give `to` or `candidate`, not both"));
    }
    if let Some(c) = &req.candidate {
        c.validate().map_err(|e| {
            ApiError::Invalid(
                e.into_iter()
                    .map(|f| {
                        tideway_api::FieldError::new(format!("candidate.{}", f.field), f.reason)
                    })
                    .collect(),
            )
        })?;
    }
    st.read_barrier(false).await?;
    let store = st.read(|d| d.state.policy.clone())?;
    let from = req.from.unwrap_or(store.current());
    let old = store
        .get(from)
        .ok_or_else(|| ApiError::NotFound(format!("policy version {from} is not retained")))?;
    let (new, to) = match (req.candidate, req.to) {
        (Some(c), _) => (c, None),
        (None, to) => {
            let v = to.unwrap_or(store.current());
            let p = store
                .get(v)
                .ok_or_else(|| ApiError::NotFound(format!("policy version {v} is not retained")))?;
            (p.clone(), Some(v))
        }
    };
    Ok(Json(PolicyDiff {
        from,
        to,
        changes: tideway_api::policy_version::diff(old, &new),
    }))
}

/// `POST /v1/policy/dry-run`: what the candidate would change now. Nothing is written.
pub async fn dry_run(
    State(st): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<DryRunReport>, ApiError> {
    let p = policy_body(&headers, body)?;
    st.read_barrier(false).await?;
    let now = st.clock.now();
    let live = st.liveness.clone();
    let (state, index) = st.read(|d| (d.copy(), d.last_applied.map(|l| l.index).unwrap_or(0)))?;
    let report = tokio::task::spawn_blocking(move || {
        crate::dispatcher::dry_run::dry_run(&state, p, |n| live.latest_digest(n), now, index)
    })
    .await
    .map_err(|e| ApiError::Internal(format!("dry-run: {e}")))?
    .map_err(ApiError::from)?;
    Ok(Json(report))
}
