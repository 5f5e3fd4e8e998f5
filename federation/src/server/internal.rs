//! Endpoints that only other federation nodes call.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use openraft::ReadPolicy;
use serde::Serialize;

use super::AppState;
use crate::dispatcher::liveness;
use crate::propose::forward::{ExplainForward, HeartbeatForward};
use crate::propose::membership::{self, JoinRequest, PromoteRequest, RemoveRequest};
use crate::propose::{Forwarded, ProposeError, commit_local};
use crate::raft::network::MSGPACK;
use crate::state::command::Command;

fn reply<T: Serialize>(v: &Forwarded<T>) -> Response {
    match rmp_serde::to_vec_named(v) {
        Ok(body) => ([(header::CONTENT_TYPE, MSGPACK)], body).into_response(),
        Err(e) => (
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding the reply: {e}"),
        )
            .into_response(),
    }
}

fn outcome<T: Serialize>(r: Result<T, ProposeError>) -> Response {
    match r {
        Ok(v) => reply(&Forwarded::Ok(v)),
        Err(e) => reply::<()>(&Forwarded::refused(e)),
    }
}

/// Decodes a forwarded request, or says why it could not be.
fn decode<T: serde::de::DeserializeOwned>(body: &Bytes) -> Result<T, Forwarded<()>> {
    rmp_serde::from_slice(body)
        .map_err(|e| Forwarded::Unavailable(format!("undecodable forwarded request: {e}")))
}

/// A follower's batch of proposals. Proposed here only if this node leads: forwarding never
/// chains, so a stale view of the leader costs one retry, not a loop.
pub async fn propose(State(st): State<AppState>, body: Bytes) -> Response {
    let cmds: Vec<Command> = match decode(&body) {
        Ok(c) => c,
        Err(r) => return reply(&r),
    };
    if !st.raft.is_leader() {
        return reply::<()>(&Forwarded::NotLeader);
    }
    outcome(commit_local(&st.raft, cmds).await)
}

pub async fn read_index(State(st): State<AppState>) -> Response {
    if !st.raft.is_leader() {
        return reply::<()>(&Forwarded::NotLeader);
    }
    match st.raft.get_read_log_id(ReadPolicy::ReadIndex).await {
        Ok((read_log_id, _applied)) => reply(&Forwarded::Ok(read_log_id.index())),
        Err(e) => reply::<()>(&Forwarded::Unavailable(e.to_string())),
    }
}

pub async fn join(State(st): State<AppState>, body: Bytes) -> Response {
    match decode::<JoinRequest>(&body) {
        Ok(req) => outcome(membership::join_here(&st.raft, &req).await),
        Err(r) => reply(&r),
    }
}

pub async fn promote(State(st): State<AppState>, body: Bytes) -> Response {
    match decode::<PromoteRequest>(&body) {
        Ok(req) => {
            outcome(membership::promote_here(&st.raft, req.id, membership::PROMOTE_WAIT).await)
        }
        Err(r) => reply(&r),
    }
}

pub async fn remove(State(st): State<AppState>, body: Bytes) -> Response {
    match decode::<RemoveRequest>(&body) {
        Ok(req) => outcome(membership::remove_here(&st.raft, &req).await),
        Err(r) => reply(&r),
    }
}

/// A heartbeat a follower passed on. Checked again here: the leader trusts no peer's input.
pub async fn heartbeat(State(st): State<AppState>, body: Bytes) -> Response {
    let req: HeartbeatForward = match decode(&body) {
        Ok(r) => r,
        Err(r) => return reply(&r),
    };
    if !st.raft.is_leader() {
        return reply::<()>(&Forwarded::NotLeader);
    }
    if let Err(e) = tideway_api::meta::validate_name(&req.member) {
        return reply::<()>(&Forwarded::refused(ProposeError::field(
            "name",
            e.to_string(),
        )));
    }
    if req.heartbeat.digest.cluster != req.member {
        return reply::<()>(&Forwarded::refused(ProposeError::field(
            "digest.cluster",
            "does not match the member the heartbeat is for",
        )));
    }
    outcome(
        liveness::heartbeat(
            &st.raft,
            &st.liveness,
            &st.data,
            &st.proposer,
            &st.dispatch,
            &req.member,
            req.heartbeat.digest,
        )
        .await,
    )
}

pub async fn explain(State(st): State<AppState>, body: Bytes) -> Response {
    let req: ExplainForward = match decode(&body) {
        Ok(r) => r,
        Err(r) => return reply(&r),
    };
    if !st.raft.is_leader() {
        return reply::<()>(&Forwarded::NotLeader);
    }
    match super::explain::explain_here(&st, &req.workload).await {
        Ok(v) => reply(&Forwarded::Ok(v)),
        Err(e) => reply::<()>(&Forwarded::refused(e.into_forwardable())),
    }
}
