//! Forwarding from a follower to the leader. One file, so it is plain which requests may travel
//! between nodes and how: each is a typed message on its own `/internal` route, encoded as
//! MessagePack, and its answer is a [`Forwarded`]. Nothing a client sent is formatted into a
//! URL: the leader's address comes from the membership, the route is a constant.

use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tideway_api::agent::Heartbeat;
use tideway_api::digest_delta::DigestVersion;

use super::ProposeError;
use super::membership::{JoinRequest, PromoteRequest, RemoveRequest};
use crate::raft::network::{MSGPACK, PeerFilter};
use crate::raft::peer_plane::PeerPlane;
use crate::raft::types::{NodeId, Raft};
use crate::state::command::{Command, CommandResult, Rejection};

/// The routes the leader serves to its followers.
pub mod routes {
    pub const PROPOSE: &str = "/internal/propose";
    pub const READ_INDEX: &str = "/internal/read-index";
    pub const JOIN: &str = "/internal/join";
    pub const REMOVE: &str = "/internal/remove";
    pub const HEARTBEAT: &str = "/internal/heartbeat";
    pub const EXPLAIN: &str = "/internal/explain";
    pub const PROMOTE: &str = "/internal/promote";
    /// A heartbeat, answered with the leader's whole outcome (`HEARTBEAT` answers only
    /// whether the digest was replicated, for followers of older releases).
    pub const HEARTBEAT_OUTCOME: &str = "/internal/heartbeat-outcome";
    /// The leader tells a node it removed that it is no longer a member (leader to the
    /// removed node, the one route that goes that way).
    pub const REMOVED: &str = "/internal/removed";
}

/// What the leader answers to a forwarded request.
#[derive(Debug, Serialize, Deserialize)]
pub enum Forwarded<T> {
    Ok(T),
    /// The receiver is not the leader (any more); the sender looks the leader up again.
    NotLeader,
    Unavailable(String),
    NotFound(String),
    Rejected(Rejection),
}

impl<T> Forwarded<T> {
    /// The reply for a request that failed on the leader.
    pub fn refused(e: ProposeError) -> Self {
        match e {
            ProposeError::NoLeader => Forwarded::NotLeader,
            ProposeError::NotFound(m) => Forwarded::NotFound(m),
            ProposeError::Rejected(r) => Forwarded::Rejected(r),
            e @ (ProposeError::Unavailable(_) | ProposeError::ShuttingDown) => {
                Forwarded::Unavailable(e.to_string())
            }
        }
    }
}

/// A heartbeat a follower received, on its way to the leader. `member` was checked to be a
/// valid name and to match the full digest, if any, before it left the follower.
#[derive(Debug, Serialize, Deserialize)]
pub struct HeartbeatForward {
    pub member: String,
    pub heartbeat: Heartbeat,
}

/// What the leader made of a heartbeat, on its way back to the follower that passed it on:
/// the agent's answer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BeatOutcome {
    /// Whether the heartbeat's digest was replicated.
    pub replicated: bool,
    /// The version of the digest the leader holds now.
    #[serde(default)]
    pub version: Option<DigestVersion>,
    /// The heartbeat's delta named a base the leader does not hold: nothing was applied.
    #[serde(default)]
    pub base_unknown: bool,
}

/// An explain request on its way to the leader, which alone holds the last cycle.
#[derive(Debug, Serialize, Deserialize)]
pub struct ExplainForward {
    /// A workload name or UID.
    pub workload: String,
}

#[derive(Clone)]
pub struct Forwarder {
    raft: Raft,
    http: reqwest::Client,
    filter: PeerFilter,
    plane: PeerPlane,
}

impl Forwarder {
    pub fn new(raft: Raft, http: reqwest::Client, filter: PeerFilter, plane: PeerPlane) -> Self {
        Self {
            raft,
            http,
            filter,
            plane,
        }
    }

    /// The API address of a member, from the current membership.
    pub fn addr_of(&self, id: NodeId) -> Option<String> {
        self.node_of(id).map(|n| n.addr)
    }

    fn node_of(&self, id: NodeId) -> Option<crate::raft::node_info::NodeInfo> {
        let m = crate::raft::metrics(&self.raft).membership_config;
        m.membership()
            .nodes()
            .find(|(nid, _)| **nid == id)
            .map(|(_, n)| n.clone())
    }

    /// The leader this node knows of, unless it is this node.
    pub async fn remote_leader(&self) -> Result<Option<NodeId>, ProposeError> {
        match self.raft.current_leader().await {
            Some(l) if l == *self.raft.node_id() => Ok(None),
            Some(l) => Ok(Some(l)),
            None => Err(ProposeError::NoLeader),
        }
    }

    async fn call<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        leader: NodeId,
        route: &'static str,
        req: &Req,
        timeout: Duration,
    ) -> Result<Resp, ProposeError> {
        if self.filter.is_blocked(leader) {
            return Err(ProposeError::Unavailable(format!(
                "leader {leader} is partitioned away (fault injection)"
            )));
        }
        let node = self.node_of(leader).ok_or(ProposeError::NoLeader)?;
        let body =
            rmp_serde::to_vec_named(req).map_err(|e| ProposeError::Unavailable(e.to_string()))?;
        let resp = self
            .plane
            .authorize(self.http.post(self.plane.url(node.peer(), route)))
            .header(reqwest::header::CONTENT_TYPE, MSGPACK)
            .body(body)
            .timeout(timeout)
            .send()
            .await
            .map_err(|e| {
                ProposeError::Unavailable(format!("forwarding to leader {leader}: {e}"))
            })?;
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| ProposeError::Unavailable(e.to_string()))?;
        match rmp_serde::from_slice::<Forwarded<Resp>>(&bytes) {
            Ok(Forwarded::Ok(v)) => Ok(v),
            Ok(Forwarded::NotLeader) => Err(ProposeError::NoLeader),
            Ok(Forwarded::Unavailable(m)) => Err(ProposeError::Unavailable(m)),
            Ok(Forwarded::NotFound(m)) => Err(ProposeError::NotFound(m)),
            Ok(Forwarded::Rejected(r)) => Err(ProposeError::Rejected(r)),
            Err(e) => Err(ProposeError::Unavailable(format!(
                "bad reply from leader {leader}: {e}"
            ))),
        }
    }

    pub async fn propose(
        &self,
        leader: NodeId,
        cmds: &[Command],
    ) -> Result<Vec<CommandResult>, ProposeError> {
        self.call(leader, routes::PROPOSE, &cmds, Duration::from_secs(5))
            .await
    }

    /// Asks the leader for a ReadIndex: a log index that, once applied here, makes a local
    /// read linearizable.
    pub async fn read_index(&self, leader: NodeId) -> Result<u64, ProposeError> {
        self.call(leader, routes::READ_INDEX, &(), Duration::from_secs(5))
            .await
    }

    /// Membership changes wait for a new node to catch up: allow them long.
    pub async fn join(&self, leader: NodeId, req: &JoinRequest) -> Result<(), ProposeError> {
        self.call(leader, routes::JOIN, req, Duration::from_secs(120))
            .await
    }

    /// A promotion waits (briefly) for the learner to catch up.
    pub async fn promote(&self, leader: NodeId, req: &PromoteRequest) -> Result<u64, ProposeError> {
        self.call(leader, routes::PROMOTE, req, Duration::from_secs(60))
            .await
    }

    pub async fn remove(&self, leader: NodeId, req: &RemoveRequest) -> Result<(), ProposeError> {
        self.call(leader, routes::REMOVE, req, Duration::from_secs(120))
            .await
    }

    /// Passes a heartbeat on; answers what the leader made of it.
    pub async fn heartbeat(
        &self,
        leader: NodeId,
        req: &HeartbeatForward,
    ) -> Result<BeatOutcome, ProposeError> {
        self.call(
            leader,
            routes::HEARTBEAT_OUTCOME,
            req,
            Duration::from_secs(30),
        )
        .await
    }

    /// Tells a node this leader removed that it is no longer a member, so that it stops
    /// serving a copy that will never advance again. Best effort, retried for about half a
    /// minute: a node that is down then learns it from its own membership, or stays refused
    /// by the others (it gets no appends and no votes).
    pub fn notify_removed(&self, peer: String, notice: tideway_api::cluster::RemovedNotice) {
        let http = self.http.clone();
        let plane = self.plane.clone();
        tokio::spawn(async move {
            let Ok(body) = rmp_serde::to_vec_named(&notice) else {
                return;
            };
            let send = || async {
                let r = plane
                    .authorize(http.post(plane.url(&peer, routes::REMOVED)))
                    .header(reqwest::header::CONTENT_TYPE, MSGPACK)
                    .body(body.clone())
                    .timeout(Duration::from_secs(5))
                    .send()
                    .await
                    .map_err(|e| e.to_string())?;
                if r.status().is_success() {
                    Ok(())
                } else {
                    Err(format!("answered {}", r.status()))
                }
            };
            let backoff = ExponentialBuilder::default()
                .with_min_delay(Duration::from_millis(200))
                .with_max_delay(Duration::from_secs(8))
                .with_max_times(8);
            match send
                .retry(backoff)
                .notify(|e, _| tracing::debug!(node = notice.id, error = %e, "removal notice not delivered"))
                .await
            {
                Ok(()) => tracing::info!(node = notice.id, "told the removed node of its removal"),
                Err(_) => tracing::info!(
                    node = notice.id,
                    "the removed node could not be told; it learns it from its own membership"
                ),
            }
        });
    }

    /// Asks the leader to explain a workload; the answer's type is the server's to define.
    pub async fn explain<R: DeserializeOwned>(
        &self,
        leader: NodeId,
        req: &ExplainForward,
    ) -> Result<R, ProposeError> {
        self.call(leader, routes::EXPLAIN, req, Duration::from_secs(30))
            .await
    }
}
