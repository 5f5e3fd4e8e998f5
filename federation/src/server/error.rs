//! The API's error type and its problem+json form (RFC 9457).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tideway_api::{FieldError, Problem};

use crate::propose::ProposeError;
use crate::state::command::{CommandResult, Rejection};

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("the request body could not be read: {0}")]
    BadBody(String),
    #[error("invalid request")]
    Invalid(Vec<FieldError>),
    #[error("the request body is larger than {limit} bytes")]
    TooLarge { limit: usize },
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("unsupported media type {0}")]
    UnsupportedMediaType(String),
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("this route does not answer that method")]
    MethodNotAllowed,
    #[error("{0}")]
    Unauthenticated(String),
    /// The Idempotency-Key was used before for a different submission.
    #[error(
        "Idempotency-Key '{key}' was used for workload '{workload}' with other content; use a new key"
    )]
    KeyReused { key: String, workload: String },
    #[error("internal error: {0}")]
    Internal(String),
    /// The caller's request budget is spent; it may retry after this many seconds.
    #[error("'{subject}' sent more requests than its rate limit allows; retry in {retry_after} s")]
    TooManyRequests { subject: String, retry_after: u64 },
    /// The request did not finish within the server's bound.
    #[error("the request did not finish within {0} ms")]
    Timeout(u64),
    /// A watch resumed from a resource version whose changes were compacted away.
    #[error(
        "resource version {requested} is too old: changes before {oldest} were compacted; \
         list again (resourceVersion 0) and watch from the list's version"
    )]
    Gone { requested: u64, oldest: u64 },
    /// This node was removed from the federation; the text names the members to use.
    #[error("{0}")]
    NodeRemoved(String),
}

/// The one mapping from a request body that could not be decoded to an HTTP error: a problem
/// with the document as a whole (not an object, empty, malformed at the top) names the body.
impl From<tideway_api::DecodeError> for ApiError {
    fn from(e: tideway_api::DecodeError) -> Self {
        let mut field = e.to_field_error();
        if field.field.is_empty() {
            field.field = "body".to_owned();
        }
        ApiError::Invalid(vec![field])
    }
}

/// The one mapping from what the leader answered to an HTTP error.
impl From<ProposeError> for ApiError {
    fn from(e: ProposeError) -> Self {
        match e {
            ProposeError::NotFound(m) => ApiError::NotFound(m),
            ProposeError::Rejected(r) => r.into(),
            e @ (ProposeError::NoLeader
            | ProposeError::Unavailable(_)
            | ProposeError::ShuttingDown) => ApiError::Unavailable(e.to_string()),
        }
    }
}

impl From<Rejection> for ApiError {
    fn from(r: Rejection) -> Self {
        match r {
            Rejection::Invalid { errors } => ApiError::Invalid(errors),
            Rejection::Conflict { name } => ApiError::Conflict(format!(
                "'{name}' exists, submitted with another idempotency key"
            )),
            Rejection::IdempotencyKeyReused { key, workload } => {
                ApiError::KeyReused { key, workload }
            }
            Rejection::NotFound { what } => ApiError::NotFound(format!("{what} not found")),
            Rejection::Terminal { name, phase } => ApiError::Conflict(format!(
                "workload '{name}' already {}; it can no longer be cancelled",
                phase.as_str()
            )),
            Rejection::Busy { reason } => ApiError::Conflict(reason),
        }
    }
}

impl ApiError {
    /// This error as the leader's answer to a forwarded request, so the follower that asked
    /// answers its client alike.
    pub fn into_forwardable(self) -> ProposeError {
        match self {
            ApiError::NotFound(m) => ProposeError::NotFound(m),
            ApiError::Invalid(errors) => ProposeError::Rejected(Rejection::Invalid { errors }),
            other => ProposeError::Unavailable(other.to_string()),
        }
    }

    /// A command's result other than the ones a handler expects.
    pub fn unexpected(res: CommandResult) -> Self {
        match res {
            CommandResult::Rejected { rejection } => rejection.into(),
            other => ApiError::Internal(format!("unexpected state machine answer {other:?}")),
        }
    }
}

impl ApiError {
    pub fn field(field: &str, reason: impl Into<String>) -> Self {
        ApiError::Invalid(vec![FieldError::new(field, reason)])
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadBody(_) | ApiError::Invalid(_) => StatusCode::BAD_REQUEST,
            ApiError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            ApiError::KeyReused { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::TooManyRequests { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Timeout(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::Gone { .. } => StatusCode::GONE,
            ApiError::NodeRemoved(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    pub fn to_problem(&self) -> Problem {
        let status = self.status();
        let (slug, title, errors) = match self {
            ApiError::BadBody(_) => (
                "bad-body",
                "The request body is not a valid document",
                vec![],
            ),
            ApiError::Invalid(errs) => ("invalid", "The request is invalid", errs.clone()),
            ApiError::TooLarge { .. } => ("too-large", "The request body is too large", vec![]),
            ApiError::NotFound(_) => ("not-found", "Not found", vec![]),
            ApiError::Conflict(_) => ("conflict", "Conflict", vec![]),
            ApiError::UnsupportedMediaType(_) => {
                ("unsupported-media-type", "Unsupported media type", vec![])
            }
            ApiError::Unavailable(_) => (
                "unavailable",
                "The federation cannot serve this now",
                vec![],
            ),
            ApiError::Forbidden(_) => ("forbidden", "Forbidden", vec![]),
            ApiError::MethodNotAllowed => ("method-not-allowed", "Method not allowed", vec![]),
            ApiError::Unauthenticated(_) => (
                "unauthenticated",
                "No valid credentials",
                vec![FieldError::new(
                    "header:Authorization",
                    "a valid bearer token is required",
                )],
            ),
            ApiError::KeyReused { workload, .. } => (
                "idempotency-key-reused",
                "The idempotency key was used for another submission",
                vec![FieldError::new(
                    "header:Idempotency-Key",
                    format!("already used for workload '{workload}' with other content"),
                )],
            ),
            ApiError::Internal(_) => ("internal", "Internal error", vec![]),
            ApiError::TooManyRequests { .. } => ("rate-limited", "Too many requests", vec![]),
            ApiError::Timeout(_) => ("timeout", "The request took too long", vec![]),
            ApiError::NodeRemoved(_) => (
                "node-removed",
                "This node is no longer a member of the federation",
                vec![],
            ),
            ApiError::Gone { requested, oldest } => (
                "expired",
                "The resource version is too old",
                vec![FieldError::new(
                    "query:resourceVersion",
                    format!(
                        "version {requested} was compacted away; the oldest version a watch \
                         can resume from is {oldest}"
                    ),
                )],
            ),
        };
        let detail = match self {
            ApiError::Invalid(errs) => errs
                .iter()
                .map(|e| format!("{}: {}", e.field, e.reason))
                .collect::<Vec<_>>()
                .join("; "),
            other => other.to_string(),
        };
        Problem {
            type_: format!("https://tideway.dev/problems/{slug}"),
            title: title.to_string(),
            status: status.as_u16(),
            detail: Some(detail),
            instance: None,
            errors,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let problem = self.to_problem();
        let mut resp = match serde_json::to_vec(&problem) {
            Ok(body) => (self.status(), body).into_response(),
            // A problem is plain strings and numbers; should its encoding still fail, the
            // client gets the status and a body that says so, never an empty 200-looking one.
            Err(e) => {
                tracing::error!(error = %e, "encoding a problem+json body");
                (
                    self.status(),
                    format!("{{\"status\":{}}}", self.status().as_u16()),
                )
                    .into_response()
            }
        };
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if matches!(self, ApiError::Unavailable(_)) {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if let ApiError::TooManyRequests { retry_after, .. } = &self
            && let Ok(v) = HeaderValue::from_str(&retry_after.to_string())
        {
            resp.headers_mut().insert(header::RETRY_AFTER, v);
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_compacted_resource_version_is_410_naming_it_and_the_oldest() {
        let e = ApiError::Gone {
            requested: 7,
            oldest: 42,
        };
        assert_eq!(e.status(), StatusCode::GONE);
        let p = e.to_problem();
        assert_eq!(p.status, 410);
        assert!(p.type_.ends_with("/expired"), "{p:?}");
        assert_eq!(p.errors.len(), 1);
        assert_eq!(p.errors[0].field, "query:resourceVersion");
        assert!(
            p.errors[0].reason.contains("version 7 ") && p.errors[0].reason.contains("42"),
            "{p:?}"
        );
        assert!(p.detail.is_some_and(|d| d.contains("list again")));
    }
}
