//! The agent's own small HTTP endpoint (`tideway agent --listen`): `/healthz`, and
//! `/v1/local`, what its cluster holds as the agent sees it. Tests read it to check that an
//! assignment was created exactly once; operators read it to compare with the federation.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use tideway_api::Problem;
use tideway_api::agent::{FaultAck, FaultRequest, LocalView};

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
        .route("/v1/faults", axum::routing::post(inject_fault))
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

/// `POST /v1/faults`: injects a node fault into the sim cluster (tests and demos).
async fn inject_fault(
    State(v): State<ViewState>,
    Json(req): Json<FaultRequest>,
) -> Result<Json<FaultAck>, (StatusCode, Json<Problem>)> {
    match v.backend.node_fault(&req.node, req.kind) {
        Ok(affected) => Ok(Json(FaultAck {
            node: req.node,
            kind: req.kind,
            affected,
        })),
        Err(e) => Err((
            StatusCode::BAD_REQUEST,
            Json(
                Problem::new("invalid", "The fault cannot be injected", 400)
                    .with_detail(e.to_string()),
            ),
        )),
    }
}
