//! Adding and removing federation nodes. Membership changes are the leader's to make; a
//! follower forwards them through [`Forwarder`].

use std::collections::BTreeSet;

use openraft::{BasicNode, ChangeMembers};

use super::{Forwarder, ProposeError};
use crate::raft::types::Raft;

pub use tideway_api::cluster::{JoinRequest, RemoveRequest};

/// A join's address must be one other nodes can dial: `HOST:PORT`, and nothing that could
/// turn into another URL when the leader dials it.
fn validate(req: &JoinRequest) -> Result<(), ProposeError> {
    let port_ok = req
        .addr
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
    if port_ok && !req.addr.contains(['/', '#', '?', '@']) {
        Ok(())
    } else {
        Err(ProposeError::field("addr", "must be HOST:PORT"))
    }
}

/// Adds a node (first as a learner that catches up, then as a voter), on the leader or
/// through it.
pub async fn join(raft: &Raft, fwd: &Forwarder, req: &JoinRequest) -> Result<(), ProposeError> {
    validate(req)?;
    match fwd.remote_leader().await? {
        Some(leader) => fwd.join(leader, req).await,
        None => join_here(raft, req).await,
    }
}

/// Removes a node, on the leader or through it.
pub async fn remove(raft: &Raft, fwd: &Forwarder, req: &RemoveRequest) -> Result<(), ProposeError> {
    match fwd.remote_leader().await? {
        Some(leader) => fwd.remove(leader, req).await,
        None => remove_here(raft, req).await,
    }
}

/// The leader's half of [`join`].
pub async fn join_here(raft: &Raft, req: &JoinRequest) -> Result<(), ProposeError> {
    validate(req)?;
    if !raft.is_leader() {
        return Err(ProposeError::NoLeader);
    }
    let m = crate::raft::metrics(raft);
    let is_voter = m
        .membership_config
        .membership()
        .voter_ids()
        .any(|v| v == req.id);
    if is_voter {
        return Ok(());
    }
    raft.add_learner(
        req.id,
        BasicNode {
            addr: req.addr.clone(),
        },
        true,
    )
    .await
    .map_err(|e| ProposeError::Unavailable(format!("adding learner {}: {e}", req.id)))?;
    raft.change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([req.id])), false)
        .await
        .map_err(|e| ProposeError::Unavailable(format!("promoting {} to voter: {e}", req.id)))?;
    Ok(())
}

/// The leader's half of [`remove`].
pub async fn remove_here(raft: &Raft, req: &RemoveRequest) -> Result<(), ProposeError> {
    if !raft.is_leader() {
        return Err(ProposeError::NoLeader);
    }
    let m = crate::raft::metrics(raft);
    let mem = m.membership_config.membership();
    if !mem.nodes().any(|(id, _)| *id == req.id) {
        return Err(ProposeError::NotFound(format!(
            "node {} is not a member",
            req.id
        )));
    }
    let change = if mem.voter_ids().any(|v| v == req.id) {
        ChangeMembers::RemoveVoters(BTreeSet::from([req.id]))
    } else {
        ChangeMembers::RemoveNodes(BTreeSet::from([req.id]))
    };
    raft.change_membership(change, false)
        .await
        .map_err(|e| ProposeError::Unavailable(format!("removing {}: {e}", req.id)))?;
    Ok(())
}
