//! The Raft transport's client side: one HTTP POST per RPC, MessagePack bodies.
//!
//! A [`PeerFilter`] lets tests cut this node off from chosen peers (a network partition that
//! real processes can feel); it is only switched on when fault injection is enabled.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::{Arc, RwLock};

use openraft::OptionalSend;
use openraft::errors::{
    NetworkError, RPCError, RaftError, ReplicationClosed, StreamingError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetworkFactory, v2::RaftNetworkV2};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::node_info::NodeInfo;
use super::peer_plane::PeerPlane;
use super::types::{NodeId, Snapshot, SnapshotData, TypeConfig, Vote};

pub const MSGPACK: &str = "application/msgpack";

/// The least time an append that carries entries is given to answer. openraft hands every
/// replication append the heartbeat interval (50 ms) as its time to live, which a follower
/// writing and fsyncing a full batch on a loaded machine often exceeds: a follower catching up
/// after a restart took longer on most appends, each was abandoned and sent again whole, and
/// a new leader that needed that follower's ack for its first commit waited through several
/// such rounds (0.5-1 s in the failover bench). An append that reached the follower's Raft
/// before the timeout is written all the same, so cutting it short saves the follower
/// nothing. Heartbeats (no entries) keep openraft's bound, as they carry the lease.
pub const APPEND_TTL_FLOOR: std::time::Duration = std::time::Duration::from_secs(2);

/// How long an append RPC may take: openraft's bound, raised to [`APPEND_TTL_FLOOR`] when it
/// carries entries.
pub fn append_ttl(carries_entries: bool, option: &RPCOption) -> std::time::Duration {
    if carries_entries {
        option.hard_ttl().max(APPEND_TTL_FLOOR)
    } else {
        option.hard_ttl()
    }
}

/// Peers this node pretends it cannot reach (fault injection for partition tests).
#[derive(Clone, Default, Debug)]
pub struct PeerFilter {
    blocked: Arc<RwLock<BTreeSet<NodeId>>>,
    blocked_addrs: Arc<RwLock<BTreeSet<String>>>,
}

impl PeerFilter {
    pub fn set(&self, ids: BTreeSet<NodeId>, addrs: BTreeSet<String>) {
        if let Ok(mut b) = self.blocked.write() {
            *b = ids;
        }
        if let Ok(mut b) = self.blocked_addrs.write() {
            *b = addrs;
        }
    }

    pub fn blocked(&self) -> BTreeSet<NodeId> {
        self.blocked.read().map(|b| b.clone()).unwrap_or_default()
    }

    pub fn is_blocked(&self, id: NodeId) -> bool {
        self.blocked
            .read()
            .map(|b| b.contains(&id))
            .unwrap_or(false)
    }

    pub fn is_addr_blocked(&self, addr: &str) -> bool {
        self.blocked_addrs
            .read()
            .map(|b| b.contains(addr))
            .unwrap_or(false)
    }
}

#[derive(Clone)]
pub struct NetworkFactory {
    http: reqwest::Client,
    filter: PeerFilter,
    plane: PeerPlane,
}

impl NetworkFactory {
    pub fn new(http: reqwest::Client, filter: PeerFilter, plane: PeerPlane) -> Self {
        Self {
            http,
            filter,
            plane,
        }
    }
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &NodeInfo) -> Self::Network {
        PeerClient {
            target,
            addr: node.peer().to_string(),
            http: self.http.clone(),
            filter: self.filter.clone(),
            plane: self.plane.clone(),
        }
    }
}

pub struct PeerClient {
    target: NodeId,
    addr: String,
    http: reqwest::Client,
    filter: PeerFilter,
    plane: PeerPlane,
}

impl PeerClient {
    async fn call<Req, Resp>(
        &self,
        path: &str,
        req: &Req,
        ttl: std::time::Duration,
    ) -> Result<Resp, RPCError<TypeConfig>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
    {
        if self.filter.is_blocked(self.target) {
            return Err(RPCError::Unreachable(Unreachable::from_string(format!(
                "node {} is partitioned away (fault injection)",
                self.target
            ))));
        }
        let body = rmp_serde::to_vec_named(req)
            .map_err(|e| RPCError::Network(NetworkError::from_string(e)))?;
        let url = self.plane.url(&self.addr, &format!("/raft/{path}"));
        let resp = self
            .plane
            .authorize(self.http.post(&url))
            .header(reqwest::header::CONTENT_TYPE, MSGPACK)
            .body(body)
            .timeout(ttl)
            .send()
            .await
            .map_err(|e| {
                if e.is_connect() {
                    RPCError::Unreachable(Unreachable::new(&e))
                } else {
                    RPCError::Network(NetworkError::new(&e))
                }
            })?;
        let status = resp.status();
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        if !status.is_success() {
            return Err(RPCError::Network(NetworkError::from_string(format!(
                "HTTP {status} from {url}: {}",
                String::from_utf8_lossy(&bytes)
            ))));
        }
        let res: Result<Resp, RaftError<TypeConfig>> = rmp_serde::from_slice(&bytes)
            .map_err(|e| RPCError::Network(NetworkError::from_string(e)))?;
        res.map_err(|e| RPCError::Unreachable(Unreachable::new(&e)))
    }
}

impl RaftNetworkV2<TypeConfig> for PeerClient {
    type SnapshotData = SnapshotData;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        let ttl = append_ttl(!rpc.entries.is_empty(), &option);
        self.call("append", &rpc, ttl).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call("vote", &rpc, option.hard_ttl()).await
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call("pre-vote", &rpc, option.hard_ttl()).await
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        let body = snapshot.snapshot;
        let data = tokio::task::spawn_blocking(move || body.into_bytes())
            .await
            .map_err(|e| StreamingError::Network(NetworkError::new(&e)))?
            .map_err(|e| StreamingError::Network(NetworkError::new(&e)))?;
        let req = (vote, snapshot.meta, data);
        tokio::pin!(cancel);
        tokio::select! {
            closed = &mut cancel => Err(StreamingError::Closed(closed)),
            res = self.call("snapshot", &req, option.hard_ttl()) => Ok(res?),
        }
    }

    async fn transfer_leader(
        &mut self,
        req: TransferLeaderRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call("transfer-leader", &req, option.hard_ttl()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn appends_with_entries_outlive_the_heartbeat_bound_and_heartbeats_keep_it() {
        let heartbeat = RPCOption::new(Duration::from_millis(50));
        assert_eq!(append_ttl(false, &heartbeat), Duration::from_millis(50));
        assert_eq!(append_ttl(true, &heartbeat), APPEND_TTL_FLOOR);
        // A longer bound from openraft is kept as it is.
        let long = RPCOption::new(APPEND_TTL_FLOOR * 3);
        assert_eq!(append_ttl(true, &long), APPEND_TTL_FLOOR * 3);
    }
}
