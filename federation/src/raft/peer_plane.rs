//! How this node speaks to its peers: the scheme (TLS or not) and the cluster secret every
//! peer request carries. The receiving side's check is `server::peer_auth`.
//!
//! One value shared by the Raft network and the forwarder, so that both planes of
//! node-to-node traffic are secured the same way.

use std::sync::Arc;

/// The header that carries the cluster secret on every peer request.
pub const SECRET_HEADER: &str = "x-tideway-cluster-secret";

#[derive(Clone, Default)]
pub struct PeerPlane {
    /// Peers serve TLS: dial them with `https`.
    tls: bool,
    secret: Option<Arc<str>>,
}

impl std::fmt::Debug for PeerPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerPlane")
            .field("tls", &self.tls)
            .field("secret", &self.secret.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl PeerPlane {
    pub fn new(tls: bool, secret: Option<String>) -> Self {
        Self {
            tls,
            secret: secret.map(Arc::from),
        }
    }

    /// The URL of `path` on the peer at `addr` (`HOST:PORT`).
    pub fn url(&self, addr: &str, path: &str) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{addr}{path}")
    }

    /// Adds the cluster secret, when there is one, to a request to a peer.
    pub fn authorize(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.secret {
            Some(s) => req.header(SECRET_HEADER, s.as_ref()),
            None => req,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scheme_follows_tls_and_the_secret_stays_out_of_debug() {
        let p = PeerPlane::new(true, Some("s3cret".into()));
        assert_eq!(
            p.url("10.0.0.1:7500", "/raft/vote"),
            "https://10.0.0.1:7500/raft/vote"
        );
        assert!(!format!("{p:?}").contains("s3cret"));
        let p = PeerPlane::new(false, None);
        assert_eq!(p.url("h:1", "/internal/join"), "http://h:1/internal/join");
    }
}
