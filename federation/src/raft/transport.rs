//! The Raft transport's server side: axum routes that hand RPCs to the local Raft node.

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use std::sync::Arc;

use openraft::errors::RaftError;
use openraft::raft::AppendEntriesResponse;
use serde::Serialize;

use super::leader_watch::Contact;
use super::network::MSGPACK;
use super::received::Received;
use super::types::{LogId, Raft, Snapshot, SnapshotMeta, TypeConfig, Vote};

fn msgpack<T: Serialize>(v: &T) -> Response {
    match rmp_serde::to_vec_named(v) {
        Ok(b) => ([(header::CONTENT_TYPE, MSGPACK)], b).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

fn bad_request(e: impl std::fmt::Display) -> Response {
    (StatusCode::BAD_REQUEST, e.to_string()).into_response()
}

/// What the peer routes serve from: the Raft node, and where a follower notes its leader's
/// appends (the start of the lease it holds for that leader, see `leader_watch`).
#[derive(Clone)]
pub struct Peer {
    pub raft: Raft,
    pub contact: Arc<Contact>,
    /// Where the entries' bytes go for the log to write as they are.
    pub received: Arc<Received<LogId>>,
}

impl axum::extract::FromRef<Peer> for Raft {
    fn from_ref(p: &Peer) -> Raft {
        p.raft.clone()
    }
}

/// Why an append got no answer from Raft, or its answer could not be encoded.
#[derive(Debug, thiserror::Error)]
enum AppendError {
    /// The bytes are not an append request: the caller's fault (400).
    #[error("{0}")]
    Decode(String),
    /// Raft's answer could not be encoded: this node's (500).
    #[error("{0}")]
    Encode(String),
}

/// Decodes an append RPC, hands it to Raft and encodes the answer: the work of one append,
/// whether it came as a POST of its own or as a frame of an append stream.
async fn answer_append(peer: &Peer, body: &[u8]) -> Result<Vec<u8>, AppendError> {
    let req = match super::received::decode_append(body) {
        Some((req, spans)) => {
            if let Some(first) = spans.first().map(|(id, _)| id.index()) {
                peer.received.offer(first, spans);
            }
            req
        }
        None => rmp_serde::from_slice(body).map_err(|e| AppendError::Decode(e.to_string()))?,
    };
    let res = peer.raft.append_entries(req).await;
    if matches!(
        res,
        Ok(AppendEntriesResponse::Success
            | AppendEntriesResponse::PartialSuccess(_)
            | AppendEntriesResponse::Conflict)
    ) {
        peer.contact.heard();
    }
    rmp_serde::to_vec_named(&res).map_err(|e| AppendError::Encode(e.to_string()))
}

async fn append(State(peer): State<Peer>, body: Bytes) -> Response {
    match answer_append(&peer, &body).await {
        Ok(b) => ([(header::CONTENT_TYPE, MSGPACK)], b).into_response(),
        Err(AppendError::Decode(e)) => bad_request(e),
        Err(AppendError::Encode(e)) => (StatusCode::INTERNAL_SERVER_ERROR, e).into_response(),
    }
}

/// Opens an append stream (`super::append_stream`), whose frames are appends.
async fn append_stream(State(peer): State<Peer>, req: axum::extract::Request) -> Response {
    super::append_stream::accept(req, move |body| {
        let peer = peer.clone();
        async move { answer_append(&peer, &body).await.map_err(|e| e.to_string()) }
    })
}

/// A watch carries no body; one that does is not a follower's watch (a probe, a fuzzer, a
/// mistaken client) and is answered 400 at once rather than held for [`HOLD`]. The body is
/// judged by its announced length, never read, so a large one costs nothing either.
///
/// [`HOLD`]: super::leader_watch::HOLD
async fn watch(State(peer): State<Peer>, body: axum::body::Body) -> Response {
    use axum::body::HttpBody;
    if body.size_hint().exact() != Some(0) {
        return bad_request(format!(
            "{} takes no request body",
            super::leader_watch::WATCH_PATH
        ));
    }
    super::leader_watch::hold(&peer.raft).await.into_response()
}

async fn vote(State(raft): State<Raft>, body: Bytes) -> Response {
    match rmp_serde::from_slice(&body) {
        Ok(req) => msgpack(&raft.vote(req).await),
        Err(e) => bad_request(e),
    }
}

async fn pre_vote(State(raft): State<Raft>, body: Bytes) -> Response {
    match rmp_serde::from_slice(&body) {
        Ok(req) => msgpack(&raft.pre_vote(req).await),
        Err(e) => bad_request(e),
    }
}

async fn snapshot(State(raft): State<Raft>, body: Bytes) -> Response {
    let (vote, meta, data): (Vote, SnapshotMeta, Vec<u8>) = match rmp_serde::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return bad_request(e),
    };
    let snap = Snapshot {
        meta,
        snapshot: super::snapshot_file::Body::Bytes(data),
    };
    let res: Result<_, RaftError<TypeConfig>> = raft
        .install_full_snapshot(vote, snap)
        .await
        .map_err(RaftError::Fatal);
    msgpack(&res)
}

async fn transfer_leader(State(raft): State<Raft>, body: Bytes) -> Response {
    match rmp_serde::from_slice(&body) {
        Ok(req) => {
            let res: Result<_, RaftError<TypeConfig>> = raft
                .handle_transfer_leader(req)
                .await
                .map_err(RaftError::Fatal);
            msgpack(&res)
        }
        Err(e) => bad_request(e),
    }
}

/// Routes under `/raft/`. Snapshots arrive whole, so this router allows large bodies.
pub fn router(peer: Peer) -> Router {
    Router::new()
        .route("/raft/append", post(append))
        .route(
            super::append_stream::PATH,
            axum::routing::get(append_stream),
        )
        .route(super::leader_watch::WATCH_PATH, post(watch))
        .route("/raft/vote", post(vote))
        .route("/raft/pre-vote", post(pre_vote))
        .route("/raft/snapshot", post(snapshot))
        .route("/raft/transfer-leader", post(transfer_leader))
        .layer(axum::extract::DefaultBodyLimit::max(1 << 30))
        .with_state(peer)
}
