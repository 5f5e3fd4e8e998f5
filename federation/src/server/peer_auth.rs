//! The peer plane's door: Raft RPCs and forwarded requests are served only to callers that
//! present the cluster secret (`--cluster-secret-file`), in the `x-tideway-cluster-secret`
//! header. The sending side is `raft::peer_plane`.
//!
//! The secret is compared as SHA-256 digests with a comparison whose time does not depend on
//! where they differ, so neither the time nor the answer tells a caller how much of a guess
//! was right.

use std::path::Path;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use crate::raft::peer_plane::SECRET_HEADER;

/// The shortest secret accepted: a guessable secret would open the Raft log to anyone.
pub const MIN_SECRET_BYTES: usize = 16;

#[derive(Debug, thiserror::Error)]
pub enum PeerAuthError {
    #[error("reading the cluster secret {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("the cluster secret in {path} is shorter than {MIN_SECRET_BYTES} bytes")]
    TooShort { path: String },
}

/// The digest of the cluster secret; the secret itself is kept only by the client side.
pub struct ClusterSecret {
    digest: [u8; 32],
}

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterSecret(<redacted>)")
    }
}

fn sha256(b: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, b).as_ref());
    out
}

/// Reads a secret file: its content without surrounding whitespace.
pub fn read_secret(path: &Path) -> Result<String, PeerAuthError> {
    let p = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| PeerAuthError::Read {
        path: p.clone(),
        source,
    })?;
    let s = text.trim().to_string();
    if s.len() < MIN_SECRET_BYTES {
        return Err(PeerAuthError::TooShort { path: p });
    }
    Ok(s)
}

impl ClusterSecret {
    pub fn new(secret: &str) -> Self {
        Self {
            digest: sha256(secret.as_bytes()),
        }
    }

    /// Whether `presented` is the secret, in time independent of where it differs.
    pub fn matches(&self, presented: &[u8]) -> bool {
        let other = sha256(presented);
        self.digest
            .iter()
            .zip(other.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }
}

/// The middleware on every peer route: without a configured secret it lets everything through
/// (a loopback-only or explicitly insecure setup); with one, a request without the right
/// secret is refused with 403 problem+json before it reaches Raft.
pub async fn require_secret(
    State(secret): State<Option<Arc<ClusterSecret>>>,
    req: Request,
    next: Next,
) -> Response {
    let Some(secret) = secret else {
        return next.run(req).await;
    };
    let ok = req
        .headers()
        .get(SECRET_HEADER)
        .is_some_and(|v| secret.matches(v.as_bytes()));
    if ok {
        return next.run(req).await;
    }
    tracing::warn!(path = %req.uri().path(), "peer request refused: cluster secret missing or wrong");
    ApiError::Forbidden(format!(
        "peer-plane request without the cluster secret (header {SECRET_HEADER})"
    ))
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_secret_matches() {
        let s = ClusterSecret::new("correct horse battery staple");
        assert!(s.matches(b"correct horse battery staple"));
        assert!(!s.matches(b"correct horse battery stapl"));
        assert!(!s.matches(b""));
        assert!(!format!("{s:?}").contains("horse"));
    }

    #[test]
    fn short_or_missing_secret_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let short = dir.path().join("short");
        std::fs::write(&short, "abc\n").unwrap();
        assert!(matches!(
            read_secret(&short),
            Err(PeerAuthError::TooShort { .. })
        ));
        assert!(matches!(
            read_secret(&dir.path().join("none")),
            Err(PeerAuthError::Read { .. })
        ));
        let good = dir.path().join("good");
        std::fs::write(&good, "  0123456789abcdef0123\n").unwrap();
        assert_eq!(read_secret(&good).unwrap(), "0123456789abcdef0123");
    }
}
