//! Endpoints that only other federation nodes call.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use openraft::ReadPolicy;
use serde::Serialize;

use super::AppState;
use crate::forward::Forwarded;
use crate::proposer::ProposeError;
use crate::raft::network::MSGPACK;
use crate::state::command::Command;

fn reply<T: Serialize>(v: &Forwarded<T>) -> Response {
    let body = rmp_serde::to_vec_named(v).unwrap_or_default();
    ([(header::CONTENT_TYPE, MSGPACK)], body).into_response()
}

/// A follower's batch of proposals. Proposed here only if this node leads: forwarding never
/// chains, so a stale view of the leader costs one retry, not a loop.
pub async fn propose(State(st): State<AppState>, body: Bytes) -> Response {
    let cmds: Vec<Command> = match rmp_serde::from_slice(&body) {
        Ok(c) => c,
        Err(e) => {
            return reply::<()>(&Forwarded::Unavailable(format!("undecodable batch: {e}")));
        }
    };
    if !st.raft.is_leader() {
        return reply::<()>(&Forwarded::NotLeader);
    }
    match crate::proposer::commit_local(&st.raft, cmds).await {
        Ok(r) => reply(&Forwarded::Ok(r)),
        Err(ProposeError::NoLeader) => reply::<()>(&Forwarded::NotLeader),
        Err(e) => reply::<()>(&Forwarded::Unavailable(e.to_string())),
    }
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
