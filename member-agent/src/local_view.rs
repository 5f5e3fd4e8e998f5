//! The agent's own small HTTP endpoint (`tideway agent --listen`): `/healthz`, and
//! `/v1/local`, what its cluster holds as the agent sees it. Tests read it to check that an
//! assignment was created exactly once; operators read it to compare with the federation.
//!
//! `POST /v1/faults` breaks nodes of the simulated cluster, so it answers only callers on the
//! loopback interface (403 problem+json otherwise): serve the router with
//! `into_make_service_with_connect_info::<SocketAddr>()` so the peer address is known.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use tideway_api::Problem;
use tideway_api::agent::{FaultAck, FaultRequest, LocalView};

use crate::agent::Lease;
use crate::backend::Backend;
use crate::sim::SimBackend;

#[derive(Clone)]
struct ViewState {
    backend: SimBackend,
    cluster: String,
    shown: tokio::sync::watch::Receiver<bool>,
    lease: Lease,
}

/// The endpoint's routes over a sim backend. `/v1/local` answers 503 until `shown` turns
/// true: before the agent has fenced, the cluster may still hold work the federation moved
/// elsewhere, and nothing should read that as what the member runs. After that each answer
/// is read with the agent's `lease` held ([`Lease::hold`]): an agent resumed after a pause
/// longer than its lease stops its work before it shows anything, so the view never lists as
/// running work the federation may already run elsewhere.
pub fn router(
    backend: SimBackend,
    cluster: String,
    shown: tokio::sync::watch::Receiver<bool>,
    lease: Lease,
) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/v1/local", get(local))
        .route("/v1/faults", axum::routing::post(inject_fault))
        .with_state(ViewState {
            backend,
            cluster,
            shown,
            lease,
        })
}

async fn local(State(v): State<ViewState>) -> Result<Json<LocalView>, (StatusCode, String)> {
    if !*v.shown.borrow() {
        return Err((
            StatusCode::SERVICE_UNAVAILABLE,
            "the agent has not fenced its cluster yet".into(),
        ));
    }
    let _held = v
        .lease
        .hold(&v.backend)
        .await
        .map_err(|e| (StatusCode::SERVICE_UNAVAILABLE, e.to_string()))?;
    let workloads = v
        .backend
        .statuses()
        .await
        .map_err(|e| (StatusCode::SERVICE_UNAVAILABLE, e.to_string()))?;
    let (creations, checkpoints) = v
        .backend
        .cluster()
        .lock()
        .map(|c| (c.creations(), c.checkpoints()))
        .unwrap_or_default();
    Ok(Json(LocalView {
        cluster: v.cluster.as_str().into(),
        creations,
        workloads,
        checkpoints,
    }))
}

/// `POST /v1/faults`: injects a node fault into the sim cluster (tests and demos), for a
/// caller on loopback only.
async fn inject_fault(
    State(v): State<ViewState>,
    peer: Option<axum::Extension<axum::extract::ConnectInfo<std::net::SocketAddr>>>,
    Json(req): Json<FaultRequest>,
) -> Result<Json<FaultAck>, (StatusCode, Json<Problem>)> {
    if let Some(axum::Extension(axum::extract::ConnectInfo(addr))) = peer
        && !addr.ip().is_loopback()
    {
        tracing::warn!(peer = %addr, "fault injection refused: not a loopback caller");
        return Err((
            StatusCode::FORBIDDEN,
            Json(
                Problem::new("forbidden", "Forbidden", 403)
                    .with_detail("fault injection answers loopback callers only"),
            ),
        ));
    }
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

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::sync::Arc;

    use axum::body::Body;
    use axum::extract::ConnectInfo;
    use axum::http::Request;
    use tideway_api::clock::ManualClock;
    use tower::ServiceExt;

    use super::*;
    use crate::sim::cluster::tests::{small, t};

    async fn fault_from(peer: &str) -> StatusCode {
        let backend = SimBackend::new(small(), Arc::new(ManualClock::new(t(0))));
        let addr: SocketAddr = peer.parse().expect("addr");
        let req = Request::post("/v1/faults")
            .header("content-type", "application/json")
            .extension(ConnectInfo(addr))
            .body(Body::from(r#"{"node":"no-such-node","kind":"gpu"}"#))
            .expect("request");
        router(
            backend,
            "sim".into(),
            tokio::sync::watch::channel(true).1,
            Lease::default(),
        )
        .oneshot(req)
        .await
        .expect("response")
        .status()
    }

    /// The process was paused past its lease and resumed: the clock jumped, no timer fired,
    /// the guard has not run. The first request served must not list the work as running
    /// (the federation may already run it elsewhere).
    #[tokio::test(start_paused = true)]
    async fn after_a_pause_past_the_lease_the_view_shows_nothing_running() {
        use crate::sim::cluster::tests::assignment;
        use tideway_api::agent::LocalPhase;
        let backend = SimBackend::new(small(), Arc::new(ManualClock::new(t(0))));
        for uid in ["u1", "u2"] {
            backend
                .ensure(&assignment(uid, 1, 8, None))
                .await
                .expect("ensure");
        }
        let lease = Lease::default();
        lease
            .renew(
                &backend,
                tokio::time::Instant::now(),
                Some(std::time::Duration::from_secs(3)),
            )
            .await;
        let app = router(
            backend,
            "sim".into(),
            tokio::sync::watch::channel(true).1,
            lease,
        );
        let view = |app: Router| async move {
            let resp = app
                .oneshot(
                    Request::get("/v1/local")
                        .body(Body::empty())
                        .expect("request"),
                )
                .await
                .expect("response");
            assert_eq!(resp.status(), StatusCode::OK);
            let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
                .await
                .expect("body");
            let v: LocalView = serde_json::from_slice(&bytes).expect("a local view");
            v.workloads
                .iter()
                .filter(|w| matches!(w.phase, LocalPhase::Running | LocalPhase::Pending))
                .count()
        };
        assert_eq!(view(app.clone()).await, 2, "within the lease both run");
        tokio::time::advance(std::time::Duration::from_secs(10)).await;
        assert_eq!(view(app).await, 0, "served after the pause: nothing runs");
    }

    #[tokio::test]
    async fn faults_answer_loopback_callers_only() {
        assert_eq!(fault_from("10.1.2.3:5000").await, StatusCode::FORBIDDEN);
        // From loopback the request is heard (and refused for its unknown node).
        assert_eq!(fault_from("127.0.0.1:5000").await, StatusCode::BAD_REQUEST);
    }
}
