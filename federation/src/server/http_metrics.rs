//! The HTTP latency metric: every request's duration by method, matched route template and
//! status, recorded by [`super::gate`] around every route (handlers, the Raft transport, the
//! fallback), so no handler carries metrics code.
//!
//! The route is the template axum matched (`/v1/workloads/{id}`), never the raw path: a label
//! per workload name would grow without bound. Unrouted requests share one `unmatched` label.

/// The label of requests no route matched.
pub const UNMATCHED: &str = "unmatched";

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use axum::Router;
    use axum::body::Body;
    use axum::extract::Request;
    use axum::http::StatusCode;
    use axum::routing::get;
    use tower::ServiceExt;

    use crate::metrics::{Metrics, NodeGauges};
    use crate::server::gate::{Gate, gate};

    fn app(metrics: Arc<Metrics>) -> Router {
        let g = Gate {
            clock: tideway_api::clock::RealClock::shared(),
            metrics,
            request_timeout: Duration::from_secs(5),
            auth: None,
            limiter: None,
            data: Arc::default(),
            removal: Arc::new(crate::raft::removal::Removal::in_memory()),
        };
        Router::new()
            .route("/v1/workloads/{id}", get(|| async { "one" }))
            .fallback(|| async { StatusCode::NOT_FOUND })
            .layer(axum::middleware::from_fn_with_state(g, gate))
    }

    #[tokio::test]
    async fn requests_are_labelled_by_route_template_and_status_never_the_raw_path() {
        let metrics = Arc::new(Metrics::default());
        for path in ["/v1/workloads/a", "/v1/workloads/b", "/nowhere/xyz"] {
            let req = Request::get(path).body(Body::empty()).unwrap();
            app(metrics.clone()).oneshot(req).await.unwrap();
        }
        let out = metrics.encode(&NodeGauges::default()).unwrap();
        let line = r#"tideway_http_request_duration_seconds_count{method="GET",route="/v1/workloads/{id}",status="200"} 2"#;
        assert!(out.contains(line), "{line} not in {out}");
        let line = r#"tideway_http_request_duration_seconds_count{method="GET",route="unmatched",status="404"} 1"#;
        assert!(out.contains(line), "{line} not in {out}");
        assert!(
            !out.contains("/v1/workloads/a"),
            "a raw path is a label: {out}"
        );
        assert!(!out.contains("xyz"), "a raw path is a label: {out}");
    }
}
