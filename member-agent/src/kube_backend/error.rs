//! API server errors -> `BackendError`, by what the agent should do about them.
//!
//! The split that matters is retry versus report: a 5xx, a 429, a timeout or a broken
//! connection will likely pass (`Unavailable`), while 400/403/404/422 on a create mean the
//! object or our permissions are wrong and retrying the same request cannot help
//! (`Rejected`). Callers that treat a status as success (409 on create, 404 on delete) check
//! for it before classifying.

use kube::Error;

use crate::backend::BackendError;

/// The API status code of an error, if the API server answered.
pub fn api_code(e: &Error) -> Option<u16> {
    match e {
        Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// `409 AlreadyExists` (not a 409 update conflict, which is retryable).
pub fn is_already_exists(e: &Error) -> bool {
    matches!(e, Error::Api(s) if s.is_already_exists() || (s.code == 409 && s.reason.is_empty()))
}

pub fn is_not_found(e: &Error) -> bool {
    matches!(e, Error::Api(s) if s.is_not_found())
}

/// `410 Gone`: the resourceVersion we resume from was compacted away; only a re-list helps.
pub fn is_gone(e: &Error) -> bool {
    matches!(e, Error::Api(s) if is_gone_status(s))
}

pub fn is_gone_status(s: &kube::core::Status) -> bool {
    s.code == 410 || s.reason == "Expired" || s.reason == "Gone"
}

/// What the agent should do with an error from `what` (e.g. "create volcano job x").
pub fn classify(what: &str, e: Error) -> BackendError {
    match &e {
        Error::Api(s) => {
            let msg = format!("{what}: {} {} {}", s.code, s.reason, s.message);
            match s.code {
                400 | 403 | 404 | 405 | 422 => BackendError::Rejected(msg),
                // 401: credentials expired or rotated; the client refreshes them.
                401 | 408 | 409 | 429 | 500..=599 => BackendError::Unavailable(msg),
                _ => BackendError::Other(msg),
            }
        }
        Error::HyperError(_) | Error::Service(_) | Error::ReadEvents(_) | Error::Auth(_) => {
            BackendError::Unavailable(format!("{what}: {e}"))
        }
        _ => BackendError::Other(format!("{what}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn api(code: u16, reason: &str) -> Error {
        Error::Api(Status::failure("m", reason).with_code(code).boxed())
    }

    #[test]
    fn retry_versus_report() {
        assert!(matches!(
            classify("x", api(503, "ServiceUnavailable")),
            BackendError::Unavailable(_)
        ));
        assert!(matches!(
            classify("x", api(429, "TooManyRequests")),
            BackendError::Unavailable(_)
        ));
        assert!(matches!(
            classify("x", api(409, "Conflict")),
            BackendError::Unavailable(_)
        ));
        assert!(matches!(
            classify("x", api(422, "Invalid")),
            BackendError::Rejected(_)
        ));
        assert!(matches!(
            classify("x", api(403, "Forbidden")),
            BackendError::Rejected(_)
        ));
    }

    #[test]
    fn status_predicates() {
        assert!(is_already_exists(&api(409, "AlreadyExists")));
        assert!(!is_already_exists(&api(409, "Conflict")));
        assert!(is_not_found(&api(404, "NotFound")));
        assert!(is_gone(&api(410, "Expired")));
        assert!(!is_gone(&api(500, "InternalError")));
        assert_eq!(api_code(&api(410, "Gone")), Some(410));
    }
}
