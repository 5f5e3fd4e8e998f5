//! Every answer carries the node's calendar time (`tideway-now`), so a client shows ages
//! against the clock that stamped the objects: a dev or demo fleet's clock runs faster than
//! the wall clock (`--time-scale`) or starts elsewhere (`--start-at`), and `AGE` measured on
//! the client's wall clock would read `0s` or months.

use axum::extract::State;
use axum::http::HeaderValue;
use axum::response::Response;
use tideway_api::client::NOW_HEADER;
use tideway_api::clock::SharedClock;

/// The layer's function: stamps the response with the clock's present (RFC 3339, ms).
pub async fn stamp(State(clock): State<SharedClock>, mut resp: Response) -> Response {
    let now = clock
        .now()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    if let Ok(v) = HeaderValue::from_str(&now) {
        resp.headers_mut().insert(NOW_HEADER, v);
    }
    resp
}
