//! The agent's own small HTTP endpoint (`tideway agent --listen`): `/healthz`, and
//! `/v1/local`, what its cluster holds as the agent sees it. Tests read it to check that an
//! assignment was created exactly once; operators read it to compare with the federation.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use tideway_api::agent::LocalView;

use crate::backend::Backend;
use crate::sim::SimBackend;

#[derive(Clone)]
struct ViewState {
    backend: SimBackend,
    cluster: String,
}

/// The endpoint's routes over a sim backend.
pub fn router(backend: SimBackend, cluster: String) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/v1/local", get(local))
        .with_state(ViewState { backend, cluster })
}

async fn local(State(v): State<ViewState>) -> Result<Json<LocalView>, (StatusCode, String)> {
    let workloads = v
        .backend
        .statuses()
        .await
        .map_err(|e| (StatusCode::SERVICE_UNAVAILABLE, e.to_string()))?;
    let creations = v
        .backend
        .cluster()
        .lock()
        .map(|c| c.creations())
        .unwrap_or(0);
    Ok(Json(LocalView {
        cluster: v.cluster.as_str().into(),
        creations,
        workloads,
    }))
}
