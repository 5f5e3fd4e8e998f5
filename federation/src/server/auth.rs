//! Authentication of API requests: bearer tokens checked against the token file's SHA-256
//! digests, or JWTs verified with configured keys ([`super::jwt`]).
//!
//! A token is looked up by its digest, so the server never holds a token in memory longer
//! than the request and never compares secrets byte by byte: the map lookup compares
//! digests, which tell an attacker nothing about any token. Without a token file the server
//! is anonymous (every caller is allowed), which `tideway server` permits only on loopback
//! unless told `--insecure-allow-anonymous`.
//!
//! The peer plane (`/raft/`, `/internal/`) is not covered here: it is meant for its own
//! listener and credential.

use std::collections::HashMap;
use std::path::Path;

use axum::extract::Request;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use tideway_api::auth::{Principal, TokenFile, TokenFileError};

use super::error::ApiError;

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("reading the token file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("the token file {path}: {source}")]
    Invalid {
        path: String,
        source: TokenFileError,
    },
}

/// SHA-256 of a token, as the token file stores it.
pub fn hash_token(token: &str) -> String {
    crate::hex::lower(ring::digest::digest(&ring::digest::SHA256, token.as_bytes()).as_ref())
}

/// A new random token: 32 bytes from the OS's generator, hex, with a recognizable prefix so
/// a leaked one is easy to find in logs and repositories.
pub fn generate_token() -> Result<String, ring::error::Unspecified> {
    let bytes: [u8; 32] = ring::rand::generate(&ring::rand::SystemRandom::new())?.expose();
    Ok(format!("tw_{}", crate::hex::lower(&bytes)))
}

/// The known tokens, by digest.
pub struct Authenticator {
    by_digest: HashMap<String, Principal>,
    /// Verifies bearer tokens shaped like a JWT, when configured.
    jwt: Option<super::jwt::JwtVerifier>,
    /// Let requests without a token read (GET/HEAD) as anonymous viewers: `tideway dev` on
    /// loopback, so its dashboard needs no token while every change does.
    anonymous_reads: bool,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Authenticator({} tokens)", self.by_digest.len())
    }
}

impl Authenticator {
    pub fn new(file: TokenFile) -> Self {
        let by_digest = file
            .tokens
            .into_iter()
            .map(|t| {
                (
                    t.sha256.to_ascii_lowercase(),
                    Principal {
                        subject: t.subject,
                        groups: t.groups,
                    },
                )
            })
            .collect();
        Self {
            by_digest,
            jwt: None,
            anonymous_reads: false,
        }
    }

    /// As [`Authenticator::new`], also accepting JWTs that `jwt` verifies.
    pub fn with_jwt(mut self, jwt: super::jwt::JwtVerifier) -> Self {
        self.jwt = Some(jwt);
        self
    }

    /// As [`Authenticator::new`], letting requests without a token read.
    pub fn with_anonymous_reads(mut self) -> Self {
        self.anonymous_reads = true;
        self
    }

    pub fn from_file(path: &Path) -> Result<Self, AuthError> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| AuthError::Read {
            path: p.clone(),
            source,
        })?;
        let file =
            TokenFile::parse(&text).map_err(|source| AuthError::Invalid { path: p, source })?;
        Ok(Self::new(file))
    }

    /// The principal a bearer token belongs to; `Err` says why there is none.
    pub fn authenticate(&self, token: &str) -> Result<Principal, String> {
        if let Some(p) = self.by_digest.get(&hash_token(token)) {
            return Ok(p.clone());
        }
        match &self.jwt {
            Some(v) if super::jwt::looks_like_jwt(token) => v
                .verify(token)
                .map_err(|e| format!("the bearer token is not valid: {e}")),
            _ => Err("the bearer token is not valid".into()),
        }
    }
}

/// Whether a path is outside the authenticated API: liveness, the dashboard's static files
/// (its API calls are authenticated like any other), and the peer plane.
fn exempt(path: &str) -> bool {
    path == "/healthz"
        || path == "/ui"
        || path.starts_with("/ui/")
        || path.starts_with("/raft/")
        || path.starts_with("/internal/")
}

/// The check: with an authenticator, every API request needs a known bearer token (401
/// otherwise, before any handler runs, so nothing is written); the principal travels in the
/// request's extensions for the handlers. Answers the refusal, or `None` to go on. Run by
/// [`super::gate`], the one middleware of the router, so that a request pays for one layer,
/// not one per concern.
pub fn authenticate(auth: Option<&Authenticator>, req: &mut Request) -> Option<Response> {
    // No authenticator (an anonymous server): nothing to refuse.
    let auth = auth?;
    if exempt(req.uri().path()) {
        return None;
    }
    let token = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let reading = matches!(
        *req.method(),
        axum::http::Method::GET | axum::http::Method::HEAD
    );
    if token.is_none() && reading && auth.anonymous_reads {
        return None;
    }
    let principal = match token {
        None => Err("this API needs a bearer token (Authorization: Bearer ...)".to_string()),
        Some(t) => auth.authenticate(t),
    };
    match principal {
        Ok(p) => {
            req.extensions_mut().insert(p);
            None
        }
        Err(why) => {
            tracing::warn!(
                method = %req.method(),
                path = %req.uri().path(),
                "request refused: {why}"
            );
            let mut resp = ApiError::Unauthenticated(why).into_response();
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"tideway\""),
            );
            Some(resp)
        }
    }
}

#[cfg(test)]
mod tests {
    use axum::Router;
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use axum::routing::get;
    use tideway_api::auth::TokenEntry;
    use tower::ServiceExt;

    use super::*;
    use axum::extract::State;
    use std::sync::Arc;

    fn app() -> Router {
        app_with(false)
    }

    fn app_with(anonymous_reads: bool) -> Router {
        let mut auth = Authenticator::new(TokenFile {
            tokens: vec![TokenEntry {
                subject: "alice".into(),
                groups: vec!["ml".into()],
                sha256: hash_token("secret-1"),
            }],
        });
        if anonymous_reads {
            auth = auth.with_anonymous_reads();
        }
        Router::new()
            .route(
                "/v1/whoami",
                get(|axum::Extension(p): axum::Extension<Principal>| async move { p.subject }),
            )
            .route("/healthz", get(|| async { "ok" }))
            .route(
                "/v1/open",
                get(|| async { "read" }).post(|| async { "wrote" }),
            )
            .layer(axum::middleware::from_fn_with_state(
                Some(Arc::new(auth)),
                layer,
            ))
    }

    async fn layer(
        State(auth): State<Option<Arc<Authenticator>>>,
        mut req: axum::extract::Request,
        next: axum::middleware::Next,
    ) -> Response {
        match authenticate(auth.as_deref(), &mut req) {
            None => next.run(req).await,
            Some(refused) => refused,
        }
    }

    async fn call(path: &str, token: Option<&str>) -> (StatusCode, String, Option<String>) {
        let mut req = Request::get(path);
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let resp = app()
            .oneshot(req.body(Body::empty()).expect("request"))
            .await
            .expect("response");
        let status = resp.status();
        let ct = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let body = axum::body::to_bytes(resp.into_body(), 1 << 16)
            .await
            .expect("body");
        (status, String::from_utf8_lossy(&body).into_owned(), ct)
    }

    #[tokio::test]
    async fn a_known_token_names_its_subject_and_anything_else_is_401() {
        let (s, body, _) = call("/v1/whoami", Some("secret-1")).await;
        assert_eq!((s, body.as_str()), (StatusCode::OK, "alice"));
        for token in [None, Some("secret-2"), Some("")] {
            let (s, body, ct) = call("/v1/whoami", token).await;
            assert_eq!(s, StatusCode::UNAUTHORIZED, "{token:?}");
            assert_eq!(ct.as_deref(), Some("application/problem+json"));
            assert!(body.contains("unauthenticated"), "{body}");
        }
        let (s, _, _) = call("/healthz", None).await;
        assert_eq!(s, StatusCode::OK, "liveness needs no token");
    }

    #[tokio::test]
    async fn anonymous_reads_let_reads_through_and_never_writes() {
        let send = |method: &str, anon: bool| {
            let req = Request::builder()
                .method(method)
                .uri("/v1/open")
                .body(Body::empty())
                .expect("request");
            async move {
                app_with(anon)
                    .oneshot(req)
                    .await
                    .expect("response")
                    .status()
            }
        };
        assert_eq!(send("GET", true).await, StatusCode::OK);
        assert_eq!(send("POST", true).await, StatusCode::UNAUTHORIZED);
        assert_eq!(send("GET", false).await, StatusCode::UNAUTHORIZED);
    }

    #[test]
    fn generated_tokens_are_distinct_and_hash_to_64_hex_digits() {
        let a = generate_token().expect("token");
        let b = generate_token().expect("token");
        assert_ne!(a, b);
        assert!(a.starts_with("tw_") && a.len() == 67, "{a}");
        let h = hash_token(&a);
        assert_eq!(h.len(), 64);
        assert_eq!(h, hash_token(&a));
    }
}
