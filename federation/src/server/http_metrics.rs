//! The HTTP latency layer: every request's duration by method, matched route template and
//! status, recorded around the whole router (handlers, the Raft transport, the fallback), so
//! no handler carries metrics code.
//!
//! The route is the template axum matched (`/v1/workloads/{id}`), never the raw path: a label
//! per workload name would grow without bound. Unrouted requests share one `unmatched` label.

use std::sync::Arc;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use tideway_api::clock::SharedClock;

use crate::metrics::Metrics;

/// What the layer needs: where to record and the clock to time with.
#[derive(Clone)]
pub struct HttpMetrics {
    pub metrics: Arc<Metrics>,
    pub clock: SharedClock,
}

/// The label of requests no route matched.
pub const UNMATCHED: &str = "unmatched";

pub async fn record(State(m): State<HttpMetrics>, req: Request, next: Next) -> Response {
    let started = m.clock.instant();
    let method = req.method().as_str().to_owned();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| UNMATCHED.to_owned(), |p| p.as_str().to_owned());
    let resp = next.run(req).await;
    let took = m.clock.instant().saturating_duration_since(started);
    m.metrics
        .observe_http(&method, &route, resp.status().as_u16(), took);
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::Router;
    use axum::body::Body;
    use axum::http::StatusCode;
    use axum::routing::get;
    use tower::ServiceExt;

    use crate::metrics::NodeGauges;

    fn app(metrics: Arc<Metrics>) -> Router {
        let clock = tideway_api::clock::RealClock::shared();
        Router::new()
            .route("/v1/workloads/{id}", get(|| async { "one" }))
            .fallback(|| async { StatusCode::NOT_FOUND })
            .layer(axum::middleware::from_fn_with_state(
                HttpMetrics { metrics, clock },
                record,
            ))
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
