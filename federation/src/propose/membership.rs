//! Adding and removing federation nodes. Membership changes are the leader's to make; a
//! follower forwards them through [`Forwarder`].

use std::collections::BTreeSet;
use std::time::Duration;

use openraft::ChangeMembers;

use super::{Forwarder, ProposeError};
use crate::raft::node_info::NodeInfo;
use crate::raft::types::{NodeId, Raft};
use crate::state::command::Rejection;

pub use tideway_api::cluster::{JoinRequest, PromoteRequest, RemoveRequest};

/// A join's addresses must be ones other nodes can dial: `HOST:PORT`, and nothing that could
/// turn into another URL when the leader dials it.
fn validate(req: &JoinRequest) -> Result<(), ProposeError> {
    let ok = |a: &str| {
        a.rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok())
            && !a.contains(['/', '#', '?', '@'])
    };
    if !ok(&req.addr) {
        return Err(ProposeError::field("addr", "must be HOST:PORT"));
    }
    if req.peer_addr.as_deref().is_some_and(|a| !ok(a)) {
        return Err(ProposeError::field("peerAddr", "must be HOST:PORT"));
    }
    Ok(())
}

/// How long an explicit promotion waits for the learner to reach the leader's log.
pub const PROMOTE_WAIT: Duration = Duration::from_secs(5);
/// How long a join with `promote` waits for the new node to catch up before it answers that
/// the node stays a learner.
pub const JOIN_PROMOTE_WAIT: Duration = Duration::from_secs(100);

/// Adds a node as a learner (and, if the request asks, promotes it once it has caught up),
/// on the leader or through it.
pub async fn join(raft: &Raft, fwd: &Forwarder, req: &JoinRequest) -> Result<(), ProposeError> {
    validate(req)?;
    match fwd.remote_leader().await? {
        Some(leader) => fwd.join(leader, req).await,
        None => join_here(raft, req).await,
    }
}

/// Promotes a learner to voter, on the leader or through it; answers the log index the
/// learner had replicated.
pub async fn promote(
    raft: &Raft,
    fwd: &Forwarder,
    req: &PromoteRequest,
) -> Result<u64, ProposeError> {
    match fwd.remote_leader().await? {
        Some(leader) => fwd.promote(leader, req).await,
        None => promote_here(raft, req.id, PROMOTE_WAIT).await,
    }
}

/// Removes a node, on the leader or through it.
pub async fn remove(raft: &Raft, fwd: &Forwarder, req: &RemoveRequest) -> Result<(), ProposeError> {
    match fwd.remote_leader().await? {
        Some(leader) => fwd.remove(leader, req).await,
        None => remove_here(raft, fwd, req).await,
    }
}

/// The leader's half of [`join`]. The node becomes a learner: it receives the log but has
/// no vote, so a node that never answers cannot weaken the quorum.
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
        NodeInfo::new(req.addr.clone(), req.peer_addr.clone()),
        false,
    )
    .await
    .map_err(|e| ProposeError::Unavailable(format!("adding learner {}: {e}", req.id)))?;
    if req.promote {
        promote_here(raft, req.id, JOIN_PROMOTE_WAIT).await?;
    }
    Ok(())
}

/// The index `id` has replicated from this leader, if it has answered at all.
fn matched(m: &openraft::RaftMetrics<crate::raft::types::TypeConfig>, id: NodeId) -> Option<u64> {
    m.replication
        .as_ref()?
        .get(&id)
        .copied()
        .flatten()
        .map(|l| l.index())
}

/// The leader's half of [`promote`]: the learner must have replicated the leader's whole log
/// as it was when the request arrived (waiting at most `wait` for it); a learner that was
/// never reached has replicated nothing and stays a learner.
pub async fn promote_here(raft: &Raft, id: NodeId, wait: Duration) -> Result<u64, ProposeError> {
    if !raft.is_leader() {
        return Err(ProposeError::NoLeader);
    }
    let m = crate::raft::metrics(raft);
    let mem = m.membership_config.membership();
    let target = m.last_log_index.unwrap_or(0);
    if mem.voter_ids().any(|v| v == id) {
        return Ok(matched(&m, id).unwrap_or(target));
    }
    if !mem.learner_ids().any(|v| v == id) {
        return Err(ProposeError::NotFound(format!(
            "node {id} is not a learner of this cluster; it must join first"
        )));
    }
    let caught_up = raft
        .wait(Some(wait))
        .metrics(
            |m| matched(m, id).is_some_and(|i| i >= target),
            "learner caught up",
        )
        .await;
    let matched_now = match caught_up {
        Ok(m) => matched(&m, id).unwrap_or(target),
        Err(_) => {
            let have = matched(&crate::raft::metrics(raft), id);
            let have = have.map_or("nothing".to_string(), |i| format!("up to index {i}"));
            return Err(ProposeError::Rejected(Rejection::Busy {
                reason: format!(
                    "node {id} has not caught up: it has replicated {have} of the leader's \
                     {target}; it stays a learner (promote it once it has caught up, or \
                     remove it if it cannot be reached)"
                ),
            }));
        }
    };
    raft.change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([id])), false)
        .await
        .map_err(|e| ProposeError::Unavailable(format!("promoting {id} to voter: {e}")))?;
    tracing::info!(
        node = id,
        matched = matched_now,
        "learner promoted to voter"
    );
    Ok(matched_now)
}

/// The leader's half of [`remove`].
pub async fn remove_here(
    raft: &Raft,
    fwd: &Forwarder,
    req: &RemoveRequest,
) -> Result<(), ProposeError> {
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
    let removed_peer = mem
        .nodes()
        .find(|(id, _)| **id == req.id)
        .map(|(_, n)| n.peer().to_owned());
    let change = if mem.voter_ids().any(|v| v == req.id) {
        ChangeMembers::RemoveVoters(BTreeSet::from([req.id]))
    } else {
        ChangeMembers::RemoveNodes(BTreeSet::from([req.id]))
    };
    let done = raft
        .change_membership(change, false)
        .await
        .map_err(|e| ProposeError::Unavailable(format!("removing {}: {e}", req.id)))?;
    if let Some(peer) = removed_peer {
        let members = done
            .membership()
            .as_ref()
            .map(crate::raft::removal::api_addrs)
            .unwrap_or_default();
        fwd.notify_removed(
            peer,
            tideway_api::cluster::RemovedNotice {
                id: req.id,
                members,
                reason: format!("removed by the leader, node {}", raft.node_id()),
            },
        );
    }
    Ok(())
}
