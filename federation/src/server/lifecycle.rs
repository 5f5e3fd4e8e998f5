//! Member lifecycle by an operator: cordon (no new work), drain (checkpoint notices to its
//! work, which is then moved), uncordon, and remove. Each is one command in the log; a request
//! that would change nothing is answered from this node's state without writing.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use tideway_api::MemberCluster;

use super::AppState;
use super::error::ApiError;
use super::members::member_name;
use crate::state::command::{Command, CommandResult, StoredObject};
use crate::state::members::MemberIntent;

fn member_of(res: CommandResult) -> Result<MemberCluster, ApiError> {
    match res {
        CommandResult::Created {
            object: StoredObject::MemberCluster(m),
        } => Ok(*m),
        other => Err(ApiError::unexpected(other)),
    }
}

fn not_registered(name: &str) -> ApiError {
    ApiError::NotFound(format!("member cluster '{name}' is not registered"))
}

async fn set_intent(
    st: &AppState,
    name: String,
    intent: MemberIntent,
) -> Result<Json<MemberCluster>, ApiError> {
    member_name(&name)?;
    st.read_barrier(false).await?;
    let unchanged = st.read(|d| match d.state.intent_changes(&name, intent) {
        None => Err(not_registered(&name)),
        Some(true) => Ok(None),
        Some(false) => Ok(d.state.members.get(&name).map(|m| m.cluster.clone())),
    })??;
    if let Some(m) = unchanged {
        return Ok(Json(m));
    }
    let res = st
        .proposer
        .propose(Command::SetMemberIntent {
            name,
            intent,
            at: st.clock.now(),
        })
        .await?;
    Ok(Json(member_of(res)?))
}

pub async fn cordon(
    State(st): State<AppState>,
    Path(name): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<MemberCluster>, ApiError> {
    super::cluster::no_body(body)?;
    set_intent(&st, name, MemberIntent::Cordoned).await
}

pub async fn uncordon(
    State(st): State<AppState>,
    Path(name): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<MemberCluster>, ApiError> {
    super::cluster::no_body(body)?;
    set_intent(&st, name, MemberIntent::Schedulable).await
}

pub async fn drain(
    State(st): State<AppState>,
    Path(name): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<MemberCluster>, ApiError> {
    super::cluster::no_body(body)?;
    set_intent(&st, name, MemberIntent::Draining).await
}

/// Removes a member that holds no active work. Its agent should be stopped first: a running
/// agent registers again on its next heartbeat.
pub async fn remove(
    State(st): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<MemberCluster>, ApiError> {
    member_name(&name)?;
    st.read_barrier(false).await?;
    st.read(|d| {
        if !d.state.members.contains_key(&name) {
            return Err(not_registered(&name));
        }
        match d.state.removal_blocked(&name) {
            Some(why) => Err(ApiError::Conflict(why)),
            None => Ok(()),
        }
    })??;
    let res = st
        .proposer
        .propose(Command::RemoveMember {
            name,
            at: st.clock.now(),
        })
        .await?;
    Ok(Json(member_of(res)?))
}

/// Lets a removed member's agent register it again. Answers how many members that changed (0
/// when it was not removed: nothing is written then).
pub async fn readmit(
    State(st): State<AppState>,
    Path(name): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<tideway_api::agent::StatusAck>, ApiError> {
    super::cluster::no_body(body)?;
    member_name(&name)?;
    st.read_barrier(false).await?;
    if !st.read(|d| d.state.removed_members.contains(&name))? {
        return Ok(Json(tideway_api::agent::StatusAck { updated: 0 }));
    }
    let res = st
        .proposer
        .propose(Command::ReadmitMember {
            name,
            at: st.clock.now(),
        })
        .await?;
    match res {
        CommandResult::Updated { count } => {
            Ok(Json(tideway_api::agent::StatusAck { updated: count }))
        }
        other => Err(ApiError::unexpected(other)),
    }
}
