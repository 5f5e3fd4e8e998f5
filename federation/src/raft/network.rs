//! The Raft transport's client side: appends as frames of an append stream
//! (`super::append_stream`), every other RPC as an HTTP POST; MessagePack bodies.
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

use super::append_stream::{self, AppendStream, Opened, StreamError};
use super::heartbeat_relay::Relay;
use super::log_tail::LogTail;
use super::node_info::NodeInfo;
use super::peer_plane::PeerPlane;
use super::peer_report::PeerReports;
use super::rtt::RttTable;
use super::types::{Entry, NodeId, Snapshot, SnapshotData, TypeConfig, Vote};

/// The log's tail, shared with the transport so that appends reuse the entries' bytes.
pub type SharedTail = Arc<std::sync::Mutex<LogTail<Entry>>>;

pub const MSGPACK: &str = "application/msgpack";

/// The least time an append that carries entries is given to answer. openraft hands every
/// replication append the heartbeat interval (50 ms) as its time to live, which a follower
/// writing and fsyncing a full batch on a loaded machine often exceeds: a follower catching up
/// after a restart took longer on most appends, each was abandoned and sent again whole, and
/// a new leader that needed that follower's ack for its first commit waited through several
/// such rounds (measured: docs/benchmarks/failover.md). An append that reached the
/// follower's Raft before the timeout is written all the same, so cutting it short saves the
/// follower nothing. Heartbeats (no entries) keep openraft's bound, as they carry the lease.
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
    tail: SharedTail,
    reports: PeerReports,
    rtt: RttTable,
}

impl NetworkFactory {
    pub fn new(
        http: reqwest::Client,
        filter: PeerFilter,
        plane: PeerPlane,
        tail: SharedTail,
    ) -> Self {
        Self {
            http,
            filter,
            plane,
            tail,
            reports: PeerReports::default(),
            rtt: RttTable::default(),
        }
    }

    /// Measures round trips into `rtt` (shared with `cluster status`), whose deadlines the
    /// heartbeats and votes then get.
    pub fn with_rtt(mut self, rtt: RttTable) -> Self {
        self.rtt = rtt;
        self
    }

    /// Where this node's peer failures are counted, for the other sites that talk to peers
    /// (the leader watch) to report into the same per-peer state.
    pub fn reports(&self) -> PeerReports {
        self.reports.clone()
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
            tail: self.tail.clone(),
            reports: self.reports.clone(),
            rtt: self.rtt.clone(),
            stream: std::sync::Mutex::new(None),
            posts_only: false,
            relay: None,
        }
    }
}

/// A heartbeat as the relay carries it, and its answer.
type HeartbeatCall = (AppendEntriesRequest<TypeConfig>, RPCOption);
type HeartbeatAnswer = Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>>;

pub struct PeerClient {
    target: NodeId,
    addr: String,
    http: reqwest::Client,
    filter: PeerFilter,
    plane: PeerPlane,
    tail: SharedTail,
    /// Failed RPCs are logged through this, a line per peer per interval (see `peer_report`).
    reports: PeerReports,
    /// Round trips to the peer, measured from heartbeats, and the deadlines they give.
    rtt: RttTable,
    /// The append stream to the peer, once open. Taken out for each call and put back only
    /// when the call completed, so a call that failed or was abandoned (its time ran out)
    /// leaves no half-read answer behind for the next. In a mutex only because openraft
    /// wants its clients `Sync`; a call has `&mut self` and reaches it with `get_mut`, never
    /// locking.
    stream: std::sync::Mutex<Option<AppendStream>>,
    /// The peer does not serve append streams (a node from before them): POST appends.
    posts_only: bool,
    /// Heartbeats go through this task with a client of its own, so that openraft's cut-off
    /// at the heartbeat interval does not cut the call (see `heartbeat_relay`).
    relay: Option<Relay<HeartbeatCall, HeartbeatAnswer>>,
}

/// How an append went over the stream.
enum StreamCall {
    Answer(Vec<u8>),
    /// The peer does not serve streams.
    Unsupported,
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
        let body = rmp_serde::to_vec_named(req)
            .map_err(|e| RPCError::Network(NetworkError::from_string(e)))?;
        self.call_encoded(path, body, ttl).await
    }

    async fn call_encoded<Resp>(
        &self,
        path: &str,
        body: Vec<u8>,
        ttl: std::time::Duration,
    ) -> Result<Resp, RPCError<TypeConfig>>
    where
        Resp: DeserializeOwned,
    {
        if let Some(e) = self.partitioned() {
            return Err(e);
        }
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
        decode_answer(&bytes)
    }

    fn keep(&mut self, stream: AppendStream) {
        if let Ok(slot) = self.stream.get_mut() {
            *slot = Some(stream);
        }
    }

    fn partitioned(&self) -> Option<RPCError<TypeConfig>> {
        self.filter.is_blocked(self.target).then(|| {
            RPCError::Unreachable(Unreachable::from_string(format!(
                "node {} is partitioned away (fault injection)",
                self.target
            )))
        })
    }

    /// One append over the stream, opening it first if need be. A kept stream that fails
    /// (the peer restarted, or closed an idle connection) is replaced once and the frame
    /// sent again: appending entries a follower already holds changes nothing, so a resend
    /// is safe even if the first copy arrived.
    async fn stream_call(&mut self, frame: &[u8]) -> Result<StreamCall, StreamError> {
        if let Some(mut kept) = self.stream.get_mut().ok().and_then(Option::take) {
            match kept.call(frame).await {
                Ok(answer) => {
                    self.keep(kept);
                    return Ok(StreamCall::Answer(answer));
                }
                Err(e) => tracing::debug!("{e} (to node {}); opening a new stream", self.target),
            }
        }
        match append_stream::open(&self.http, &self.plane, &self.addr).await? {
            Opened::Stream(mut s) => {
                let answer = s.call(frame).await?;
                self.keep(s);
                Ok(StreamCall::Answer(answer))
            }
            Opened::Unsupported => Ok(StreamCall::Unsupported),
        }
    }
}

/// An RPC's answer: the peer's `Result` as MessagePack. The peer's Raft refusing is reported
/// as unreachable, as it always was.
fn decode_answer<Resp: DeserializeOwned>(bytes: &[u8]) -> Result<Resp, RPCError<TypeConfig>> {
    let res: Result<Resp, RaftError<TypeConfig>> = rmp_serde::from_slice(bytes)
        .map_err(|e| RPCError::Network(NetworkError::from_string(e)))?;
    res.map_err(|e| RPCError::Unreachable(Unreachable::new(&e)))
}

impl RaftNetworkV2<TypeConfig> for PeerClient {
    type SnapshotData = SnapshotData;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        let res = if rpc.entries.is_empty() {
            self.heartbeat(rpc, option).await
        } else {
            self.append(rpc, option).await
        };
        self.reports.outcome(self.target, &self.addr, "append", res)
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        let ttl = self.rtt.deadline(self.target, option.hard_ttl());
        let res = self.call("vote", &rpc, ttl).await;
        self.reports.outcome(self.target, &self.addr, "vote", res)
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        let ttl = self.rtt.deadline(self.target, option.hard_ttl());
        let res = self.call("pre-vote", &rpc, ttl).await;
        self.reports
            .outcome(self.target, &self.addr, "pre-vote", res)
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
            res = self.call("snapshot", &req, option.hard_ttl()) => {
                Ok(self.reports.outcome(self.target, &self.addr, "snapshot", res)?)
            }
        }
    }

    async fn transfer_leader(
        &mut self,
        req: TransferLeaderRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<TypeConfig>, RPCError<TypeConfig>> {
        let res = self.call("transfer-leader", &req, option.hard_ttl()).await;
        self.reports
            .outcome(self.target, &self.addr, "transfer-leader", res)
    }
}

impl PeerClient {
    /// A client of the same peer with its own connection, for the heartbeat relay.
    fn detached(&self) -> PeerClient {
        PeerClient {
            target: self.target,
            addr: self.addr.clone(),
            http: self.http.clone(),
            filter: self.filter.clone(),
            plane: self.plane.clone(),
            tail: self.tail.clone(),
            reports: self.reports.clone(),
            rtt: self.rtt.clone(),
            stream: std::sync::Mutex::new(None),
            posts_only: self.posts_only,
            relay: None,
        }
    }

    /// A heartbeat, sent by the relay and measured there: its round trip is the network's
    /// and the peer's Raft's, without a log write.
    async fn heartbeat(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> HeartbeatAnswer {
        if self.relay.is_none() {
            let rtt = self.rtt.clone();
            let target = self.target;
            let relay = Relay::spawn(self.detached(), move |mut c: PeerClient, (rpc, option)| {
                let rtt = rtt.clone();
                async move {
                    // Raft's timers run on the machine's monotonic clock, never a scaled one.
                    let started =
                        tideway_api::clock::Clock::instant(&tideway_api::clock::RealClock);
                    let res = c.append(rpc, option).await;
                    match &res {
                        Ok(_) => rtt.heartbeat_answered(target, started.elapsed()),
                        Err(RPCError::Network(_)) => rtt.timed_out(target),
                        Err(_) => {}
                    }
                    (c, res)
                }
            });
            self.relay = Some(relay);
        }
        match &self.relay {
            Some(relay) => relay
                .call((rpc, option))
                .await
                .unwrap_or_else(|e| Err(RPCError::Network(NetworkError::new(&e)))),
            None => Err(RPCError::Network(NetworkError::from_string(
                "no heartbeat relay",
            ))),
        }
    }

    /// One append: over the stream when the peer serves one, else as a POST.
    async fn append(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        let ttl = append_ttl(!rpc.entries.is_empty(), &option)
            .max(self.rtt.deadline(self.target, option.hard_ttl()));
        if self.posts_only {
            let body = encode_append(&rpc, &self.tail)
                .map_err(|e| RPCError::Network(NetworkError::from_string(e)))?;
            return self.call_encoded("append", body, ttl).await;
        }
        if let Some(e) = self.partitioned() {
            return Err(e);
        }
        let frame = append_stream::frame(|buf| encode_append_into(&rpc, &self.tail, buf))
            .map_err(|e| RPCError::Network(NetworkError::from_string(e)))?;
        match tokio::time::timeout(ttl, self.stream_call(&frame)).await {
            Ok(Ok(StreamCall::Answer(bytes))) => decode_answer(&bytes),
            Ok(Ok(StreamCall::Unsupported)) => {
                tracing::info!(
                    "node {} does not serve append streams; sending it appends as POSTs",
                    self.target
                );
                self.posts_only = true;
                let body = append_stream::body(&frame).to_vec();
                self.call_encoded("append", body, ttl).await
            }
            Ok(Err(e)) if e.is_connect() => Err(RPCError::Unreachable(Unreachable::new(&e))),
            Ok(Err(e)) => Err(RPCError::Network(NetworkError::new(&e))),
            Err(_) => Err(RPCError::Network(NetworkError::from_string(format!(
                "append stream: no answer from node {} within {ttl:?}",
                self.target
            )))),
        }
    }
}

/// An append RPC as MessagePack, the bytes `rmp_serde::to_vec_named(rpc)` gives, with each
/// entry the tail holds copied from its log bytes instead of encoded again. The entries of a
/// batch are encoded once on the leader (for its log) rather than once more per follower;
/// any entry the tail lacks (a follower far behind) sends the whole request the usual way.
pub fn encode_append(
    rpc: &AppendEntriesRequest<TypeConfig>,
    tail: &SharedTail,
) -> Result<Vec<u8>, String> {
    let mut buf = Vec::new();
    encode_append_into(rpc, tail, &mut buf)?;
    Ok(buf)
}

/// [`encode_append`], appended to `buf` (after an append stream frame's length prefix).
pub fn encode_append_into(
    rpc: &AppendEntriesRequest<TypeConfig>,
    tail: &SharedTail,
    buf: &mut Vec<u8>,
) -> Result<(), String> {
    use openraft::entry::RaftEntry;
    let held: Option<Vec<Arc<[u8]>>> = match tail.lock() {
        Ok(t) => rpc
            .entries
            .iter()
            .map(|e| {
                let id = e.log_id();
                t.encoded(id.index(), |held| held.log_id() == id)
            })
            .collect(),
        Err(_) => None,
    };
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let Some(held) = held.filter(|h| !h.is_empty()) else {
        return rmp_serde::encode::write_named(buf, rpc).map_err(|e| err(&e));
    };
    buf.reserve(128 + held.iter().map(|b| b.len()).sum::<usize>());
    // The derived `Serialize` of the request with named fields: a map of its four fields in
    // declaration order.
    rmp::encode::write_map_len(buf, 4).map_err(|e| err(&e))?;
    rmp::encode::write_str(buf, "vote").map_err(|e| err(&e))?;
    rmp_serde::encode::write_named(buf, &rpc.vote).map_err(|e| err(&e))?;
    rmp::encode::write_str(buf, "prev_log_id").map_err(|e| err(&e))?;
    rmp_serde::encode::write_named(buf, &rpc.prev_log_id).map_err(|e| err(&e))?;
    rmp::encode::write_str(buf, "entries").map_err(|e| err(&e))?;
    let n = u32::try_from(held.len()).map_err(|e| err(&e))?;
    rmp::encode::write_array_len(buf, n).map_err(|e| err(&e))?;
    for bytes in &held {
        buf.extend_from_slice(bytes);
    }
    rmp::encode::write_str(buf, "leader_commit").map_err(|e| err(&e))?;
    rmp_serde::encode::write_named(buf, &rpc.leader_commit).map_err(|e| err(&e))?;
    Ok(())
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::time::Duration;

    /// An append of a blank entry and `n` submissions (also `received`'s tests' request).
    pub(in crate::raft) fn sample_request(n: u64) -> AppendEntriesRequest<TypeConfig> {
        use crate::state::command::{Command, Request};
        use openraft::entry::RaftEntry;
        let log_id = |i| openraft::testing::log_id::<TypeConfig>(3, 1, i);
        let mut entries = vec![Entry::new_blank(log_id(10))];
        for i in 0..n {
            let w = tideway_api::Workload::new(
                format!("w-{i}"),
                tideway_api::WorkloadSpec::new(
                    "default",
                    tideway_api::WorkloadClass::Training,
                    vec![tideway_api::PodSet::new("p", 2, 8, "H100")],
                ),
            );
            let cmd = Command::SubmitWorkload {
                workload: Box::new(w),
                idempotency_key: format!("k-{i}"),
                at: chrono::DateTime::from_timestamp(1_800_000_000, 0).expect("time"),
                digest: None,
            };
            entries.push(Entry::new_normal(log_id(11 + i), Request::new(vec![cmd])));
        }
        AppendEntriesRequest {
            vote: Vote::new_committed(3, 1),
            prev_log_id: Some(log_id(9)),
            entries,
            leader_commit: Some(log_id(8)),
        }
    }

    fn tail_of(entries: &[Entry]) -> SharedTail {
        use openraft::entry::RaftEntry;
        let tail = SharedTail::default();
        for e in entries {
            let bytes = rmp_serde::to_vec_named(e).expect("encode");
            tail.lock()
                .expect("lock")
                .appended(e.log_id().index(), e.clone(), bytes.into(), 0);
        }
        tail
    }

    #[test]
    fn an_append_from_the_tails_bytes_is_the_encoded_request_byte_for_byte() {
        let rpc = sample_request(20);
        let whole = rmp_serde::to_vec_named(&rpc).expect("encode");
        let tail = tail_of(&rpc.entries);
        assert_eq!(encode_append(&rpc, &tail).expect("encode"), whole);
        // Decodes back to the same request.
        let back: AppendEntriesRequest<TypeConfig> = rmp_serde::from_slice(&whole).expect("decode");
        assert_eq!(format!("{back:?}"), format!("{rpc:?}"));
        // A heartbeat, and a request whose entries the tail does not hold (or holds under
        // another term), are encoded whole, the same bytes.
        let heartbeat = AppendEntriesRequest::<TypeConfig> {
            entries: vec![],
            ..rpc.clone()
        };
        assert_eq!(
            encode_append(&heartbeat, &tail).expect("encode"),
            rmp_serde::to_vec_named(&heartbeat).expect("encode")
        );
        let partial = tail_of(&rpc.entries[..5]);
        assert_eq!(encode_append(&rpc, &partial).expect("encode"), whole);
        let mut other_term = sample_request(20);
        for e in other_term.entries.iter_mut() {
            e.log_id = openraft::testing::log_id::<TypeConfig>(2, 1, e.log_id.index());
        }
        let stale = tail_of(&other_term.entries);
        assert_eq!(encode_append(&rpc, &stale).expect("encode"), whole);
    }

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
