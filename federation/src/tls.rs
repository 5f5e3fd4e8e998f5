//! TLS for the node's listeners (the public API and the peer plane), from PEM files, on
//! rustls with the ring provider (the one the clients use; no aws-lc, no OpenSSL).
//!
//! Handshakes run in the connections' tasks (`crate::listen`), off the accept loop, each
//! bounded in time: a client that opens a connection and never completes its handshake holds
//! only its own task.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// How long a client may take to complete its handshake.
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading the certificate chain {path}: {reason}")]
    Cert { path: String, reason: String },
    #[error("reading the private key {path}: {reason}")]
    Key { path: String, reason: String },
    #[error("the certificate and key do not make a TLS configuration: {0}")]
    Config(String),
}

/// The certificate chain and private key a node serves TLS with.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl TlsFiles {
    /// The rustls server configuration (HTTP/1.1 only: the server speaks nothing else).
    pub fn server_config(&self) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let certs = read_certs(&self.cert)?;
        let key = PrivateKeyDer::from_pem_file(&self.key).map_err(|e| TlsError::Key {
            path: self.key.display().to_string(),
            reason: e.to_string(),
        })?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| TlsError::Config(e.to_string()))?;
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(cfg))
    }
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let err = |reason: String| TlsError::Cert {
        path: path.display().to_string(),
        reason,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| err(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| err(e.to_string()))?;
    if certs.is_empty() {
        return Err(err("no certificate in the file".into()));
    }
    Ok(certs)
}
