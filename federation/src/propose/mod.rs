//! Getting requests to the leader: batching proposals into entries, and forwarding every kind
//! of leader-only request (proposals, ReadIndex, joins, removals, heartbeats, explanations)
//! from a follower.
//!
//! This layer sits on `raft` and `state` and knows nothing of HTTP handlers or leader loops:
//! what travels between nodes is built here from typed, validated values, never from a URL a
//! client wrote.

pub mod batcher;
pub mod forward;
pub mod membership;

use crate::state::command::{CommandResult, Rejection};

pub use batcher::{MAX_BATCH, Proposer, commit_local};
pub use forward::{Forwarded, Forwarder};

/// Why a request did not get an answer from the leader, or the leader's refusal of it.
#[derive(Debug, thiserror::Error, Clone)]
pub enum ProposeError {
    #[error("no leader is known; the cluster may be electing one")]
    NoLeader,
    #[error("the leader did not commit in time: {0}")]
    Unavailable(String),
    #[error("this node is shutting down")]
    ShuttingDown,
    /// The leader does not know what the request names (a member that must register again
    /// needs to hear exactly that, wherever it asked).
    #[error("{0}")]
    NotFound(String),
    /// The leader refused the request; nothing changed.
    #[error("the request was refused: {0:?}")]
    Rejected(Rejection),
}

impl ProposeError {
    /// A refusal naming one field.
    pub fn field(field: &str, reason: impl Into<String>) -> Self {
        ProposeError::Rejected(Rejection::Invalid {
            errors: vec![tideway_api::FieldError::new(field, reason)],
        })
    }
}

/// A command's result, with a refusal turned into the error it is.
pub fn accepted(res: CommandResult) -> Result<CommandResult, ProposeError> {
    match res {
        CommandResult::Rejected { rejection } => Err(ProposeError::Rejected(rejection)),
        ok => Ok(ok),
    }
}
