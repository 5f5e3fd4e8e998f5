//! `/v1/cluster/*`: membership, status, snapshots, and fault injection for tests.

use std::collections::BTreeSet;
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use serde::Deserialize;

use super::AppState;
use super::error::ApiError;
use crate::propose::membership;
use crate::raft::types::NodeId;
use tideway_api::cluster::{
    JoinAck, JoinRequest, NodeStatus, PartitionAck, PartitionRequest, PromoteAck, PromoteRequest,
    RemoveAck, RemoveRequest, SnapshotAck,
};

/// `?digest=false`: answer without the state digest.
#[derive(Debug, Deserialize)]
pub struct StatusQuery {
    #[serde(default = "yes")]
    digest: bool,
}

fn yes() -> bool {
    true
}

pub async fn status(
    State(st): State<AppState>,
    query: Result<Query<StatusQuery>, QueryRejection>,
) -> Result<Json<NodeStatus>, ApiError> {
    let want_digest = query
        .map_err(|e| ApiError::field("digest", e.body_text()))?
        .digest;
    let m = crate::raft::metrics(&st.raft);
    // Under the lock only a cached digest or an O(1) copy of the state is taken. Encoding the
    // copy can take long on a large state; it runs off the async workers, so that heartbeats
    // and requests go on meanwhile, and off the lock, so that apply does.
    let (source, workloads, applied) = st.read(|d| {
        (
            want_digest.then(|| st.digest_cache.source(d)),
            d.state.workloads.len(),
            d.last_applied.map(|l| l.index()),
        )
    })?;
    let digest = match source {
        None => None,
        Some(source) => {
            let cache = st.digest_cache.clone();
            // A walk over a few entries is done here; a long one (the first after a start, or
            // after a quiet spell under load), or one behind another caller's, on a blocking
            // thread.
            let done = if source.is_small() {
                cache.try_resolve(source)
            } else {
                Err(source)
            };
            let (digest, timing) = match done {
                Ok(digest) => digest,
                Err(source) => tokio::task::spawn_blocking(move || cache.resolve_timed(source))
                    .await
                    .map_err(|e| ApiError::Internal(format!("reading the status: {e}")))?,
            }
            .map_err(|e| ApiError::Internal(format!("encoding the state for its digest: {e}")))?;
            if let Some(t) = timing {
                st.metrics.observe_digest(&t);
            }
            Some(digest)
        }
    };
    let mem = m.membership_config.membership();
    let removed = st.removal.get().cloned();
    Ok(Json(NodeStatus {
        id: m.id,
        state: if removed.is_some() {
            "Removed".to_owned()
        } else {
            format!("{:?}", m.state)
        },
        term: m.current_term,
        leader: m.current_leader,
        last_log_index: m.last_log_index,
        committed: m.local_committed.map(|l| l.index()),
        last_applied: applied,
        snapshot: m.snapshot.map(|l| l.index()),
        purged: m.purged.map(|l| l.index()),
        voters: mem.voter_ids().collect(),
        learners: mem.learner_ids().collect(),
        members: crate::raft::removal::api_addrs(mem),
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
        removed,
        peer_rtt: st.rtt.report(),
    }))
}

pub(crate) fn json_body<T: for<'de> Deserialize<'de>>(
    body: Result<Bytes, BytesRejection>,
) -> Result<T, ApiError> {
    let body = body.map_err(|e| ApiError::BadBody(e.body_text()))?;
    tideway_api::decode_json(&body).map_err(ApiError::from)
}

/// For a POST route that takes no parameters in its body: an empty body, `null` or an object
/// (clients send `{}`) is accepted; an array, a scalar or junk is refused, so that a body of the wrong
/// shape never goes on to perform the route's action.
pub(crate) fn no_body(body: Result<Bytes, BytesRejection>) -> Result<(), ApiError> {
    #[derive(Deserialize)]
    struct AnyObject {}
    let body = body.map_err(|e| ApiError::BadBody(e.body_text()))?;
    // `null` too: clients before this check sent it for "no parameters".
    let text = body.trim_ascii();
    if text.is_empty() || text == b"null" {
        return Ok(());
    }
    tideway_api::decode_json::<AnyObject>(&body)
        .map(|_| ())
        .map_err(ApiError::from)
}

/// Adds a node as a learner; with `promote`, it becomes a voter once it has caught up.
///
/// With a cluster secret configured, the request must also carry it (the joining node sends
/// it): an admin token alone does not let a node that lacks the secret into the group.
pub async fn join(
    State(st): State<AppState>,
    headers: axum::http::HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<JoinAck>, ApiError> {
    if let Some(secret) = &st.cluster_secret {
        let ok = headers
            .get(crate::raft::peer_plane::SECRET_HEADER)
            .is_some_and(|v| secret.matches(v.as_bytes()));
        if !ok {
            tracing::warn!("join refused: the cluster secret is missing or wrong");
            return Err(ApiError::Forbidden(format!(
                "joining needs the cluster secret (header {})",
                crate::raft::peer_plane::SECRET_HEADER
            )));
        }
    }
    let req: JoinRequest = json_body(body)?;
    membership::join(&st.raft, &st.forwarder, &req).await?;
    tracing::info!(node = req.id, addr = %req.addr, peer = ?req.peer_addr, promoted = req.promote, "federation node joined");
    Ok(Json(JoinAck {
        joined: req.id,
        addr: req.addr,
    }))
}

/// Makes a learner a voter, only once it has caught up with the leader's log (409
/// problem+json otherwise, and the node stays a learner).
pub async fn promote(
    State(st): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<PromoteAck>, ApiError> {
    let req: PromoteRequest = json_body(body)?;
    let matched = membership::promote(&st.raft, &st.forwarder, &req).await?;
    Ok(Json(PromoteAck {
        promoted: req.id,
        matched,
    }))
}

pub async fn remove(
    State(st): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<RemoveAck>, ApiError> {
    let req: RemoveRequest = json_body(body)?;
    membership::remove(&st.raft, &st.forwarder, &req).await?;
    Ok(Json(RemoveAck { removed: req.id }))
}

/// Builds a snapshot on this node now and purges the log it covers.
pub async fn snapshot(
    State(st): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<SnapshotAck>, ApiError> {
    no_body(body)?;
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
        .map_err(|e| super::wait_failed("waiting for the snapshot", &e))?;
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
        .map_err(|e| super::wait_failed("waiting for the purge", &e))?;
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
