//! The web dashboard at `/ui/`: static files compiled into the binary.
//!
//! Machines running a GPU fleet are often offline, so the dashboard loads nothing from a CDN
//! and needs no build step: plain HTML, CSS and JavaScript from `federation/ui/`, embedded with
//! `include_str!`. The page reads the same public API as the CLI (`/v1/capacity`,
//! `/v1/members`, `/v1/queues`, `/v1/workloads`, `explain`), so it shows nothing the API does
//! not, and it works wherever the API does.

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

use super::AppState;
use super::error::ApiError;

/// One embedded file: its name under `/ui/`, its media type and its content.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static str,
}

const ASSETS: [Asset; 3] = [
    Asset {
        name: "index.html",
        content_type: "text/html; charset=utf-8",
        body: include_str!("../../ui/index.html"),
    },
    Asset {
        name: "app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("../../ui/app.js"),
    },
    Asset {
        name: "style.css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("../../ui/style.css"),
    },
];

/// `/` and `/ui` send the browser to `/ui/`; `/ui/{file}` serves an embedded file.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(|| async { Redirect::to("/ui/") }))
        .route("/ui", get(|| async { Redirect::to("/ui/") }))
        .route("/ui/", get(|| async { serve("index.html") }))
        .route(
            "/ui/{file}",
            get(|Path(file): Path<String>| async move { serve(&file) }),
        )
}

fn serve(name: &str) -> Response {
    match ASSETS.iter().find(|a| a.name == name) {
        Some(a) => {
            let mut resp = a.body.into_response();
            let h = resp.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(a.content_type),
            );
            // The files change only with the binary; revalidating on each load is cheap and
            // keeps an upgraded server from serving a page against a stale script.
            h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            h.insert(
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(
                    "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'",
                ),
            );
            resp
        }
        None => ApiError::NotFound(format!("no dashboard file '{name}'")).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_asset_the_page_links_is_embedded() {
        let index = ASSETS[0].body;
        for a in &ASSETS[1..] {
            assert!(
                index.contains(&format!("\"{}\"", a.name)),
                "index.html does not link {}",
                a.name
            );
        }
    }

    #[test]
    fn unknown_files_are_not_found_and_known_ones_have_their_type() {
        assert_eq!(serve("nope.js").status(), axum::http::StatusCode::NOT_FOUND);
        let r = serve("app.js");
        assert_eq!(r.status(), axum::http::StatusCode::OK);
        assert_eq!(
            r.headers()
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok()),
            Some("text/javascript; charset=utf-8")
        );
    }
}
