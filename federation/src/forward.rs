//! Forwarding from a follower to the leader: proposals, ReadIndex requests and cluster
//! operations. One file, so it is plain which requests may travel between nodes and how.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::proposer::ProposeError;
use crate::raft::network::{MSGPACK, PeerFilter};
use crate::raft::types::{NodeId, Raft};
use crate::state::command::{Command, CommandResult};

/// What the leader answers to a forwarded request.
#[derive(Debug, Serialize, Deserialize)]
pub enum Forwarded<T> {
    Ok(T),
    /// The receiver is not the leader (any more); the sender looks the leader up again.
    NotLeader,
    Unavailable(String),
}

#[derive(Clone)]
pub struct Forwarder {
    raft: Raft,
    http: reqwest::Client,
    filter: PeerFilter,
}

impl Forwarder {
    pub fn new(raft: Raft, http: reqwest::Client, filter: PeerFilter) -> Self {
        Self { raft, http, filter }
    }

    /// The connection pool shared by everything this node sends to its peers.
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// The API address of a member, from the current membership.
    pub fn addr_of(&self, id: NodeId) -> Option<String> {
        let m = crate::raft::metrics(&self.raft).membership_config;
        m.membership()
            .nodes()
            .find(|(nid, _)| **nid == id)
            .map(|(_, n)| n.addr.clone())
    }

    async fn call<Req: Serialize, Resp: for<'de> Deserialize<'de>>(
        &self,
        leader: NodeId,
        path: &str,
        req: &Req,
        timeout: Duration,
    ) -> Result<Resp, ProposeError> {
        if self.filter.is_blocked(leader) {
            return Err(ProposeError::Unavailable(format!(
                "leader {leader} is partitioned away (fault injection)"
            )));
        }
        let addr = self.addr_of(leader).ok_or(ProposeError::NoLeader)?;
        let body =
            rmp_serde::to_vec_named(req).map_err(|e| ProposeError::Unavailable(e.to_string()))?;
        let resp = self
            .http
            .post(format!("http://{addr}{path}"))
            .header(reqwest::header::CONTENT_TYPE, MSGPACK)
            .body(body)
            .timeout(timeout)
            .send()
            .await
            .map_err(|e| ProposeError::Unavailable(e.to_string()))?;
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| ProposeError::Unavailable(e.to_string()))?;
        match rmp_serde::from_slice::<Forwarded<Resp>>(&bytes) {
            Ok(Forwarded::Ok(v)) => Ok(v),
            Ok(Forwarded::NotLeader) => Err(ProposeError::NoLeader),
            Ok(Forwarded::Unavailable(m)) => Err(ProposeError::Unavailable(m)),
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
        self.call(leader, "/internal/propose", &cmds, Duration::from_secs(5))
            .await
    }

    /// Asks the leader for a ReadIndex: a log index that, once applied here, makes a local
    /// read linearizable.
    pub async fn read_index(&self, leader: NodeId) -> Result<u64, ProposeError> {
        self.call(leader, "/internal/read-index", &(), Duration::from_secs(5))
            .await
    }
}
