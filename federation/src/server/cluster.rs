//! `/v1/cluster/*`: membership, status, snapshots, and fault injection for tests.

use std::collections::BTreeSet;
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use openraft::{BasicNode, ChangeMembers};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::AppState;
use super::error::ApiError;
use crate::raft::state_machine::state_digest;
use crate::raft::types::NodeId;
use tideway_api::Problem;
use tideway_api::cluster::{
    JoinAck, JoinRequest, NodeStatus, PartitionAck, PartitionRequest, RemoveAck, RemoveRequest,
    SnapshotAck,
};

pub async fn status(State(st): State<AppState>) -> Result<Json<NodeStatus>, ApiError> {
    let m = crate::raft::metrics(&st.raft);
    let (digest, workloads, applied) = st.read(|d| {
        (
            state_digest(&d.state),
            d.state.workloads.len(),
            d.last_applied.map(|l| l.index()),
        )
    })?;
    let mem = m.membership_config.membership();
    Ok(Json(NodeStatus {
        id: m.id,
        state: format!("{:?}", m.state),
        term: m.current_term,
        leader: m.current_leader,
        last_log_index: m.last_log_index,
        committed: m.local_committed.map(|l| l.index()),
        last_applied: applied,
        snapshot: m.snapshot.map(|l| l.index()),
        purged: m.purged.map(|l| l.index()),
        voters: mem.voter_ids().collect(),
        learners: mem.learner_ids().collect(),
        members: mem.nodes().map(|(id, n)| (*id, n.addr.clone())).collect(),
        state_digest: digest,
        workloads,
        log_syncs: st
            .log_stats
            .syncs
            .load(std::sync::atomic::Ordering::Relaxed),
        log_entries: st
            .log_stats
            .entries
            .load(std::sync::atomic::Ordering::Relaxed),
    }))
}

pub(crate) fn json_body<T: for<'de> Deserialize<'de>>(
    body: Result<Bytes, BytesRejection>,
) -> Result<T, ApiError> {
    let body = body.map_err(|e| ApiError::BadBody(e.body_text()))?;
    tideway_api::decode_json(&body).map_err(|e| ApiError::Invalid(vec![e.to_field_error()]))
}

/// Sends a request on to the leader and relays its typed answer; a 404 stays a 404 (a member
/// that must register again needs to hear exactly that), anything else refused is a 503.
async fn relay<B: Serialize, T: DeserializeOwned>(
    st: &AppState,
    method: reqwest::Method,
    path: &str,
    body: Option<&B>,
    timeout: Duration,
) -> Result<T, ApiError> {
    let leader = st
        .raft
        .current_leader()
        .await
        .ok_or_else(|| ApiError::Unavailable("no leader is known".into()))?;
    let addr = st
        .forwarder
        .addr_of(leader)
        .ok_or_else(|| ApiError::Unavailable(format!("no address for leader {leader}")))?;
    let mut req = st
        .forwarder
        .http()
        .request(method, format!("http://{addr}{path}"))
        .timeout(timeout);
    if let Some(b) = body {
        req = req.json(b);
    }
    let resp = req
        .send()
        .await
        .map_err(|e| ApiError::Unavailable(format!("forwarding to leader {leader}: {e}")))?;
    let status = resp.status();
    let bytes = resp
        .bytes()
        .await
        .map_err(|e| ApiError::Unavailable(format!("reply from leader {leader}: {e}")))?;
    if status.is_success() {
        return serde_json::from_slice(&bytes)
            .map_err(|e| ApiError::Unavailable(format!("reply from leader {leader}: {e}")));
    }
    let problem = serde_json::from_slice::<Problem>(&bytes).ok();
    if status.as_u16() == 404 {
        Err(ApiError::NotFound(
            problem
                .and_then(|p| p.detail)
                .unwrap_or_else(|| "not found".to_string()),
        ))
    } else {
        Err(ApiError::Unavailable(format!(
            "leader {leader} answered {status}: {}",
            String::from_utf8_lossy(&bytes)
        )))
    }
}

/// Sends a write on to the leader when this node does not lead (None: handle it here).
pub(crate) async fn to_leader<Req: Serialize, Resp: DeserializeOwned>(
    st: &AppState,
    path: &str,
    req: &Req,
) -> Result<Option<Resp>, ApiError> {
    if st.raft.is_leader() {
        return Ok(None);
    }
    relay(
        st,
        reqwest::Method::POST,
        path,
        Some(req),
        Duration::from_secs(120),
    )
    .await
    .map(Some)
}

/// Sends a read on to the leader (for answers only the leader has in memory).
pub(crate) async fn get_from_leader<Resp: DeserializeOwned>(
    st: &AppState,
    path: &str,
) -> Result<Resp, ApiError> {
    relay(
        st,
        reqwest::Method::GET,
        path,
        None::<&()>,
        Duration::from_secs(30),
    )
    .await
}

/// Adds a node: first as a learner that catches up, then as a voter.
pub async fn join(
    State(st): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<JoinAck>, ApiError> {
    let req: JoinRequest = json_body(body)?;
    if req.addr.parse::<std::net::SocketAddr>().is_err() && !req.addr.contains(':') {
        return Err(ApiError::field("addr", "must be HOST:PORT"));
    }
    if let Some(v) = to_leader(&st, "/v1/cluster/join", &req).await? {
        return Ok(Json(v));
    }
    let m = crate::raft::metrics(&st.raft);
    let is_voter = m
        .membership_config
        .membership()
        .voter_ids()
        .any(|v| v == req.id);
    if !is_voter {
        st.raft
            .add_learner(
                req.id,
                BasicNode {
                    addr: req.addr.clone(),
                },
                true,
            )
            .await
            .map_err(|e| ApiError::Unavailable(format!("adding learner {}: {e}", req.id)))?;
        st.raft
            .change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([req.id])), false)
            .await
            .map_err(|e| ApiError::Unavailable(format!("promoting {} to voter: {e}", req.id)))?;
    }
    Ok(Json(JoinAck {
        joined: req.id,
        addr: req.addr,
    }))
}

pub async fn remove(
    State(st): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<RemoveAck>, ApiError> {
    let req: RemoveRequest = json_body(body)?;
    if let Some(v) = to_leader(&st, "/v1/cluster/remove", &req).await? {
        return Ok(Json(v));
    }
    let m = crate::raft::metrics(&st.raft);
    let mem = m.membership_config.membership();
    if !mem.nodes().any(|(id, _)| *id == req.id) {
        return Err(ApiError::NotFound(format!(
            "node {} is not a member",
            req.id
        )));
    }
    if mem.voter_ids().any(|v| v == req.id) {
        st.raft
            .change_membership(ChangeMembers::RemoveVoters(BTreeSet::from([req.id])), false)
            .await
            .map_err(|e| ApiError::Unavailable(format!("removing {}: {e}", req.id)))?;
    } else {
        st.raft
            .change_membership(ChangeMembers::RemoveNodes(BTreeSet::from([req.id])), false)
            .await
            .map_err(|e| ApiError::Unavailable(format!("removing learner {}: {e}", req.id)))?;
    }
    Ok(Json(RemoveAck { removed: req.id }))
}

/// Builds a snapshot on this node now and purges the log it covers.
pub async fn snapshot(State(st): State<AppState>) -> Result<Json<SnapshotAck>, ApiError> {
    let applied = crate::raft::metrics(&st.raft)
        .last_applied
        .map(|l| l.index())
        .unwrap_or(0);
    st.raft
        .trigger()
        .snapshot()
        .await
        .map_err(|e| ApiError::Unavailable(e.to_string()))?;
    let m = st
        .raft
        .wait(Some(Duration::from_secs(60)))
        .metrics(
            |m| m.snapshot.map(|s| s.index()).unwrap_or(0) >= applied,
            "snapshot built",
        )
        .await
        .map_err(|e| ApiError::Unavailable(format!("waiting for the snapshot: {e}")))?;
    let snap = m.snapshot.map(|s| s.index()).unwrap_or(0);
    st.raft
        .trigger()
        .purge_log(snap)
        .await
        .map_err(|e| ApiError::Unavailable(e.to_string()))?;
    let m = st
        .raft
        .wait(Some(Duration::from_secs(30)))
        .metrics(
            |m| m.purged.map(|p| p.index()).unwrap_or(0) >= snap,
            "log purged",
        )
        .await
        .map_err(|e| ApiError::Unavailable(format!("waiting for the purge: {e}")))?;
    Ok(Json(SnapshotAck {
        snapshot: snap,
        purged: m.purged.map(|p| p.index()),
    }))
}

/// Fault injection: cut this node off from the given peers. Refused unless the server was
/// started with fault injection enabled.
pub async fn partition(
    State(st): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<PartitionAck>, ApiError> {
    if !st.fault_injection {
        return Err(ApiError::Forbidden(
            "fault injection is disabled; start the server with --fault-injection".into(),
        ));
    }
    let req: PartitionRequest = json_body(body)?;
    let ids: BTreeSet<NodeId> = req.blocked.iter().copied().collect();
    let addrs = ids
        .iter()
        .filter_map(|id| st.forwarder.addr_of(*id))
        .collect();
    st.filter.set(ids.clone(), addrs);
    Ok(Json(PartitionAck { blocked: ids }))
}
