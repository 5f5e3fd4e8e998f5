//! Endpoints that only other federation nodes call.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use openraft::ReadPolicy;
use serde::Serialize;

use super::AppState;
use crate::dispatcher::liveness;
use crate::propose::forward::{BeatOutcome, ExplainForward, HeartbeatForward};
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
    outcome(commit_local(&st.raft, std::sync::Arc::new(cmds)).await)
}

pub async fn read_index(State(st): State<AppState>) -> Response {
    if !st.raft.is_leader() {
        return reply::<()>(&Forwarded::NotLeader);
    }
    match st.raft.get_read_log_id(ReadPolicy::ReadIndex).await {
        Ok((read_log_id, _applied)) => reply(&Forwarded::Ok(read_log_id.index())),
        // Raft's error names peers and quorums, and the asking node passes the message on
        // to its client: logged here, answered in general terms.
        Err(e) => {
            tracing::debug!(error = %e, "read index");
            reply::<()>(&Forwarded::Unavailable(
                "the leader could not confirm it still leads".into(),
            ))
        }
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
        Ok(req) => outcome(membership::remove_here(&st.raft, &st.forwarder, &req).await),
        Err(r) => reply(&r),
    }
}

/// The leader that removed this node says so. Only a notice for this node's own id counts.
pub async fn removed(State(st): State<AppState>, body: Bytes) -> Response {
    let notice = match decode::<tideway_api::cluster::RemovedNotice>(&body) {
        Ok(n) => n,
        Err(r) => return reply(&r),
    };
    if notice.id != *st.raft.node_id() {
        return reply::<()>(&Forwarded::NotFound(format!(
            "this is node {}, not node {}",
            st.raft.node_id(),
            notice.id
        )));
    }
    match st.removal.mark(notice) {
        Ok(_) => reply(&Forwarded::Ok(())),
        Err(e) => reply::<()>(&Forwarded::Unavailable(e.to_string())),
    }
}

/// A heartbeat a follower passed on, from a follower of an older release: answered with
/// whether the digest was replicated only.
pub async fn heartbeat(st: State<AppState>, body: Bytes) -> Response {
    match leader_heartbeat(st, body).await {
        Ok(Ok(o)) => reply(&Forwarded::Ok(o.replicated)),
        Ok(Err(e)) => reply::<()>(&Forwarded::refused(e)),
        Err(r) => reply(&r),
    }
}

/// A heartbeat a follower passed on, answered with the whole outcome (digest version, base
/// unknown), which the agent needs for digest deltas.
pub async fn heartbeat_outcome(st: State<AppState>, body: Bytes) -> Response {
    match leader_heartbeat(st, body).await {
        Ok(r) => outcome(r),
        Err(r) => reply(&r),
    }
}

/// Checked again here: the leader trusts no peer's input.
async fn leader_heartbeat(
    State(st): State<AppState>,
    body: Bytes,
) -> Result<Result<BeatOutcome, ProposeError>, Forwarded<()>> {
    let req: HeartbeatForward = decode(&body)?;
    if !st.raft.is_leader() {
        return Err(Forwarded::NotLeader);
    }
    if let Err(e) = tideway_api::meta::validate_name(&req.member) {
        return Ok(Err(ProposeError::field("name", e.to_string())));
    }
    if let Err((field, why)) = super::members::heartbeat_fits(&req.member, &req.heartbeat) {
        return Ok(Err(ProposeError::field(field, why)));
    }
    Ok(liveness::heartbeat(
        &st.raft,
        &st.liveness,
        &st.data,
        &st.proposer,
        &st.dispatch,
        &req.member,
        &req.heartbeat,
    )
    .await)
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
