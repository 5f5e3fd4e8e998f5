//! The one middleware every route passes: the answer's clock stamp, the latency metric,
//! the time bound, authentication, the rate limit and authorization, in that order (outside
//! in), each a plain check in its own module.
//!
//! They were six `from_fn` layers. Each such layer clones its inner service (a boxed clone
//! on the heap) and boxes its future on every request, and a submission passed all six, as
//! did every Raft append between peers: about a tenth of the leader's CPU under a stream of
//! submissions went to that plumbing and its allocations. One layer pays it once.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderValue, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tideway_api::client::NOW_HEADER;
use tideway_api::clock::SharedClock;

use super::auth::{self, Authenticator};
use super::rate_limit::{self, RateLimiter};
use super::{authz, http_metrics};
use crate::metrics::Metrics;
use crate::raft::state_machine::StateMachineData;

/// What the checks need.
#[derive(Clone)]
pub struct Gate {
    pub clock: SharedClock,
    pub metrics: Arc<Metrics>,
    /// The bound on a request's time (zero: none).
    pub request_timeout: Duration,
    pub auth: Option<Arc<Authenticator>>,
    pub limiter: Option<Arc<RateLimiter>>,
    pub data: Arc<RwLock<StateMachineData>>,
    /// This node's removal from the federation, once known.
    pub removal: Arc<crate::raft::removal::Removal>,
}

pub async fn gate(State(g): State<Gate>, req: Request, next: Next) -> Response {
    let started = g.clock.instant();
    // Both cheap to clone (a standard method is a tag; the template an `Arc<str>`), where
    // their strings would be allocated.
    let method = req.method().clone();
    let route = req.extensions().get::<MatchedPath>().cloned();
    let mut resp = checked(&g, &method, req, next).await;
    let took = g.clock.instant().saturating_duration_since(started);
    g.metrics.observe_http(
        method.as_str(),
        route
            .as_ref()
            .map_or(http_metrics::UNMATCHED, MatchedPath::as_str),
        resp.status().as_u16(),
        took,
    );
    stamp(&g.clock, &mut resp);
    resp
}

/// The bounded part: refusals by authentication, the rate limit and authorization are
/// answered within the bound too.
async fn checked(g: &Gate, method: &Method, req: Request, next: Next) -> Response {
    if !rate_limit::is_bounded(g.request_timeout, &req) {
        return admitted(g, req, next).await;
    }
    // Kept for the time-out's log line: a clone shares the request's bytes.
    let uri = req.uri().clone();
    match tokio::time::timeout(g.request_timeout, admitted(g, req, next)).await {
        Ok(resp) => resp,
        Err(_) => rate_limit::timed_out(method, uri.path(), g.request_timeout),
    }
}

async fn admitted(g: &Gate, mut req: Request, next: Next) -> Response {
    if let Some(refused) = auth::authenticate(g.auth.as_deref(), &mut req) {
        return refused;
    }
    if let Some(refused) = removed(&g.removal, req.uri().path()) {
        return refused;
    }
    if let Some(refused) = rate_limit::limit(g.limiter.as_deref(), &req) {
        return refused;
    }
    if let Some(refused) = authz::authorize(&g.data, &mut req) {
        return refused;
    }
    next.run(req).await
}

/// A removed node answers only its status, its liveness and its metrics (and the peer plane,
/// where a leader may still reach it); everything else is refused with the members to use
/// instead, so that it neither forwards writes nor serves a copy that no longer advances.
/// After authentication: the member list is not for anonymous callers.
fn removed(removal: &crate::raft::removal::Removal, path: &str) -> Option<Response> {
    let why = removal.refusal()?;
    let open = matches!(path, "/healthz" | "/v1/cluster/status" | "/metrics")
        || path.starts_with("/raft/")
        || path.starts_with("/internal/");
    (!open).then(|| super::error::ApiError::NodeRemoved(why).into_response())
}

/// Every answer carries the node's calendar time (`tideway-now`, RFC 3339 with
/// milliseconds), so a client shows ages against the clock that stamped the objects: a dev
/// or demo fleet's clock runs faster than the wall clock (`--time-scale`) or starts
/// elsewhere (`--start-at`), and `AGE` measured on the client's wall clock would read `0s`
/// or months.
///
/// The value is made once per millisecond per worker thread and shared by the answers of that
/// millisecond: a loaded node answers many in one, and each formatted its own (a string and a
/// header value, a visible share of a loaded leader's profile; measured:
/// docs/benchmarks/submissions.md).
fn stamp(clock: &SharedClock, resp: &mut Response) {
    let now = clock.now();
    let millis = now.timestamp_millis();
    let value = LAST_STAMP.with(|last| {
        let mut last = last.borrow_mut();
        match &*last {
            Some((at, v)) if *at == millis => Some(v.clone()),
            _ => {
                let text = now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
                let v = HeaderValue::from_str(&text).ok()?;
                *last = Some((millis, v.clone()));
                Some(v)
            }
        }
    });
    if let Some(v) = value {
        resp.headers_mut().insert(NOW_HEADER, v);
    }
}

thread_local! {
    /// The last `tideway-now` value this thread made, with its millisecond.
    static LAST_STAMP: std::cell::RefCell<Option<(i64, HeaderValue)>> =
        const { std::cell::RefCell::new(None) };
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use axum::Router;
    use axum::body::Body;
    use axum::http::StatusCode;
    use axum::routing::get;
    use tower::ServiceExt;

    use super::*;

    fn app(bound: Duration) -> Router {
        let g = Gate {
            clock: tideway_api::clock::RealClock::shared(),
            metrics: Arc::default(),
            request_timeout: bound,
            auth: None,
            limiter: None,
            data: Arc::default(),
            removal: Arc::new(crate::raft::removal::Removal::in_memory()),
        };
        let slow = || async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            "late"
        };
        Router::new()
            .route("/v1/slow", get(slow))
            .layer(axum::middleware::from_fn_with_state(g, gate))
    }

    async fn call(app: Router, uri: &str) -> Response {
        let req = Request::get(uri).body(Body::empty()).expect("request");
        app.oneshot(req).await.expect("response")
    }

    /// A request over the bound is answered 408 (problem+json), stamped like any answer; a
    /// watch is left to its own bounded wait, and a zero bound means none.
    #[tokio::test]
    async fn the_time_bound_answers_408_but_spares_watches() {
        let resp = call(app(Duration::from_millis(50)), "/v1/slow").await;
        assert_eq!(resp.status(), StatusCode::REQUEST_TIMEOUT);
        assert!(resp.headers().contains_key(NOW_HEADER), "stamped");
        let ct = resp.headers().get(axum::http::header::CONTENT_TYPE);
        assert_eq!(
            ct.and_then(|v| v.to_str().ok()),
            Some("application/problem+json")
        );
        let resp = call(app(Duration::from_millis(50)), "/v1/slow?watch=true").await;
        assert_eq!(resp.status(), StatusCode::OK, "a watch is not bounded here");
        let resp = call(app(Duration::ZERO), "/v1/slow").await;
        assert_eq!(resp.status(), StatusCode::OK, "no bound");
    }
    /// The stamp shared within a millisecond is the one that millisecond would have made, and
    /// the next millisecond gets its own, whichever clock stamps.
    #[test]
    fn a_stamp_is_the_clocks_millisecond_shared_or_not() {
        let at = |s: &str| {
            chrono::DateTime::parse_from_rfc3339(s)
                .expect("time")
                .with_timezone(&chrono::Utc)
        };
        let manual = Arc::new(tideway_api::clock::ManualClock::new(at(
            "2026-12-06T10:00:00.123400Z",
        )));
        let clock: SharedClock = manual.clone();
        let stamped = |clock: &SharedClock| {
            let mut resp = Response::new(Body::empty());
            stamp(clock, &mut resp);
            resp.headers()
                .get(NOW_HEADER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        assert_eq!(stamped(&clock).as_deref(), Some("2026-12-06T10:00:00.123Z"));
        manual.set(at("2026-12-06T10:00:00.123900Z"));
        assert_eq!(stamped(&clock).as_deref(), Some("2026-12-06T10:00:00.123Z"));
        manual.set(at("2026-12-06T10:00:00.124000Z"));
        assert_eq!(stamped(&clock).as_deref(), Some("2026-12-06T10:00:00.124Z"));
        // Another clock on the same thread, a year earlier, is not answered from the cache.
        let other: SharedClock = Arc::new(tideway_api::clock::ManualClock::new(at(
            "2025-12-06T10:00:00.124000Z",
        )));
        assert_eq!(stamped(&other).as_deref(), Some("2025-12-06T10:00:00.124Z"));
        assert_eq!(stamped(&clock).as_deref(), Some("2026-12-06T10:00:00.124Z"));
    }
}
