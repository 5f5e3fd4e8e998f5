//! RFC 9457 problem details: the one error body every Tideway endpoint returns.
//!
//! One shape for every failure lets the CLI, the agent and the dashboard show any error the
//! same way, and the `errors` extension carries field-level problems so a user sees every
//! bad field of a submission at once.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::decode::DecodeError;
use crate::validation::{FieldError, ValidationErrors};

/// The media type of every problem body (RFC 9457).
pub const CONTENT_TYPE: &str = "application/problem+json";

/// Problem types are stable identifiers clients may match on; they need not resolve.
pub const TYPE_BASE: &str = "https://tideway.dev/problems/";

/// Unknown members are tolerated here (unlike in resources): RFC 9457 requires consumers to
/// ignore extensions they do not understand, so an older client can read a newer server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Problem {
    /// A URI under [`TYPE_BASE`] that clients match on; `type` on the wire.
    #[serde(rename = "type")]
    pub type_: String,
    /// Short, fixed per type: the same for every occurrence.
    pub title: String,
    /// The HTTP status code, repeated in the body so a stored body stands alone.
    pub status: u16,
    /// What went wrong this time, for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Usually the request path, to correlate with server logs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// Every invalid field of a submission at once (Tideway's extension member).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<FieldError>,
}

impl Problem {
    /// A problem of type `{TYPE_BASE}{slug}`.
    pub fn new(slug: &str, title: impl Into<String>, status: u16) -> Self {
        Self {
            type_: format!("{TYPE_BASE}{slug}"),
            title: title.into(),
            status,
            detail: None,
            instance: None,
            errors: Vec::new(),
        }
    }

    /// Says what went wrong this time.
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    /// Usually the request path, so a report can be correlated with logs.
    pub fn with_instance(mut self, instance: impl Into<String>) -> Self {
        self.instance = Some(instance.into());
        self
    }

    /// 400 for a request that is wrong as a whole; field problems use [`Problem::bad_request_fields`].
    pub fn bad_request(detail: impl Into<String>) -> Self {
        Self::new("bad-request", "Bad Request", 400).with_detail(detail)
    }

    /// 400 with every field problem listed; `detail` summarises them for humans.
    pub fn bad_request_fields(errors: impl Into<Vec<FieldError>>) -> Self {
        let errors = errors.into();
        let detail = match errors.as_slice() {
            [one] => one.to_string(),
            many => format!("{} fields are invalid", many.len()),
        };
        Self {
            errors,
            ..Self::new("invalid-fields", "Invalid Fields", 400).with_detail(detail)
        }
    }

    /// 401: no or bad credentials.
    pub fn unauthorized(detail: impl Into<String>) -> Self {
        Self::new("unauthorized", "Unauthorized", 401).with_detail(detail)
    }

    /// 403: known caller, not allowed.
    pub fn forbidden(detail: impl Into<String>) -> Self {
        Self::new("forbidden", "Forbidden", 403).with_detail(detail)
    }

    /// 404 naming the kind and name that were looked up.
    pub fn not_found(kind: &str, name: &str) -> Self {
        Self::new("not-found", "Not Found", 404).with_detail(format!("{kind} {name:?} not found"))
    }

    /// Optimistic-concurrency failures and name clashes.
    pub fn conflict(detail: impl Into<String>) -> Self {
        Self::new("conflict", "Conflict", 409).with_detail(detail)
    }

    /// 413 naming the body limit, in bytes.
    pub fn payload_too_large(limit_bytes: usize) -> Self {
        Self::new("payload-too-large", "Payload Too Large", 413)
            .with_detail(format!("request body exceeds {limit_bytes} bytes"))
    }

    /// 415 naming the content type and the two that are accepted.
    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new("unsupported-media-type", "Unsupported Media Type", 415).with_detail(format!(
            "content type {content_type:?} is not supported; use application/json or application/yaml"
        ))
    }

    /// 429: the client should slow down.
    pub fn too_many_requests(detail: impl Into<String>) -> Self {
        Self::new("too-many-requests", "Too Many Requests", 429).with_detail(detail)
    }

    /// No Raft leader, no quorum, or shutting down: the client should retry.
    pub fn unavailable(detail: impl Into<String>) -> Self {
        Self::new("unavailable", "Service Unavailable", 503).with_detail(detail)
    }

    /// Details are for logs; callers should pass something safe to show.
    pub fn internal(detail: impl Into<String>) -> Self {
        Self::new("internal", "Internal Server Error", 500).with_detail(detail)
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.title, self.status)?;
        if let Some(detail) = &self.detail {
            write!(f, ": {detail}")?;
        }
        for e in &self.errors {
            write!(f, "\n  {e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Problem {}

impl From<ValidationErrors> for Problem {
    fn from(errors: ValidationErrors) -> Self {
        Self::bad_request_fields(errors)
    }
}

impl From<DecodeError> for Problem {
    fn from(error: DecodeError) -> Self {
        let mut problem = Self::bad_request_fields(vec![error.to_field_error()]);
        problem.detail = Some(error.to_string());
        problem
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serializes_as_rfc_9457() {
        let p = Problem::bad_request_fields(vec![FieldError::new(
            "spec.podSets[0].gpusPerPod",
            "must be at least 1 (got 0)",
        )])
        .with_instance("/v1/workloads");
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "type": "https://tideway.dev/problems/invalid-fields",
                "title": "Invalid Fields",
                "status": 400,
                "detail": "spec.podSets[0].gpusPerPod: must be at least 1 (got 0)",
                "instance": "/v1/workloads",
                "errors": [{"field": "spec.podSets[0].gpusPerPod", "reason": "must be at least 1 (got 0)"}]
            })
        );
        assert_eq!(serde_json::from_value::<Problem>(json).unwrap(), p);
    }

    #[test]
    fn tolerates_extensions_and_omits_empty_members() {
        let p: Problem = serde_json::from_str(
            r#"{"type":"about:blank","title":"Teapot","status":418,"retryAfter":3}"#,
        )
        .unwrap();
        assert_eq!(p.status, 418);
        assert_eq!(
            serde_json::to_string(&p).unwrap(),
            r#"{"type":"about:blank","title":"Teapot","status":418}"#
        );
    }

    #[test]
    fn constructors_use_the_right_status() {
        assert_eq!(Problem::not_found("Workload", "x").status, 404);
        assert_eq!(Problem::conflict("x").status, 409);
        assert_eq!(Problem::payload_too_large(1024).status, 413);
        assert_eq!(Problem::unavailable("no leader").status, 503);
        assert_eq!(Problem::internal("x").status, 500);
        assert_eq!(Problem::unsupported_media_type("text/csv").status, 415);
        let two =
            Problem::bad_request_fields(vec![FieldError::new("a", "x"), FieldError::new("b", "y")]);
        assert_eq!(two.detail.as_deref(), Some("2 fields are invalid"));
        assert!(two.to_string().contains("\n  b: y"));
    }
}
