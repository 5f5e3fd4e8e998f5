//! One place that builds HTTP clients, so TLS is set up the same way everywhere.
//!
//! reqwest is built with rustls and no bundled crypto provider (the ring provider is chosen
//! for build time; see the README's dependency notes), so the provider is installed once,
//! before the first client is built.

use std::path::Path;
use std::sync::{Once, RwLock};

static PROVIDER: Once = Once::new();

/// Certificate authorities trusted beyond the defaults (`--ca-cert`): the process's clients
/// (CLI, agent, a node's peer and join clients) all dial the same federation, so they share
/// one trust store.
static EXTRA_ROOTS: RwLock<Vec<reqwest::Certificate>> = RwLock::new(Vec::new());

/// Why a CA file could not be trusted.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    /// The file could not be read.
    #[error("reading the CA certificate {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The file holds no PEM certificate.
    #[error("the CA file {path} holds no PEM certificate: {reason}")]
    Invalid {
        /// The file.
        path: String,
        /// The parser's reason.
        reason: String,
    },
}

/// Trusts the certificate authorities of a PEM file in every client built after this call.
pub fn trust_ca_file(path: &Path) -> Result<(), TrustError> {
    let p = path.display().to_string();
    let pem = std::fs::read(path).map_err(|source| TrustError::Read {
        path: p.clone(),
        source,
    })?;
    let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| TrustError::Invalid {
        path: p.clone(),
        reason: e.to_string(),
    })?;
    if certs.is_empty() {
        return Err(TrustError::Invalid {
            path: p,
            reason: "no certificate".into(),
        });
    }
    if let Ok(mut roots) = EXTRA_ROOTS.write() {
        roots.extend(certs);
    }
    Ok(())
}

/// Installs rustls' ring crypto provider as the process default (idempotent).
pub fn install_crypto_provider() {
    PROVIDER.call_once(|| {
        // Err means another provider is already installed, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// How long a pooled connection may sit idle before the client drops it: under the
/// servers' default header-read deadline (10 s, which also closes idle keep-alives), so a
/// client does not pick a connection the server is closing at that moment.
pub const POOL_IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// A reqwest client builder with the crypto provider in place, the CAs of [`trust_ca_file`]
/// trusted, and no proxy: federation traffic goes straight to the node it names.
pub fn client_builder() -> reqwest::ClientBuilder {
    install_crypto_provider();
    let mut b = reqwest::Client::builder()
        .no_proxy()
        .pool_idle_timeout(POOL_IDLE_TIMEOUT);
    if let Ok(roots) = EXTRA_ROOTS.read()
        && !roots.is_empty()
    {
        b = b.tls_certs_merge(roots.iter().cloned());
    }
    b
}
