//! `GET /metrics`: renders the node's registry (kept in [`crate::metrics`]).

use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::AppState;
use crate::metrics::NodeGauges;

pub async fn render(State(st): State<AppState>) -> Response {
    let m = crate::raft::metrics(&st.raft);
    let node = NodeGauges {
        term: m.current_term,
        is_leader: m.current_leader == Some(m.id),
        last_applied: m.last_applied.map(|l| l.index()).unwrap_or(0),
        log_syncs: st.log_stats.syncs.load(Ordering::Relaxed),
        log_entries: st.log_stats.entries.load(Ordering::Relaxed),
    };
    // Member health comes from the replicated state, so every node reports it.
    if let Ok(members) = st.read(|d| {
        d.state
            .members
            .iter()
            .map(|(n, m)| {
                let phase = m.cluster.status.as_ref().map(|s| s.phase);
                (n.clone(), phase.unwrap_or_default())
            })
            .collect::<Vec<_>>()
    }) {
        st.metrics.set_member_phases(&members);
    }
    match st.metrics.encode(&node) {
        Ok(out) => (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            out,
        )
            .into_response(),
        Err(_) => (
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            "encode failed",
        )
            .into_response(),
    }
}
