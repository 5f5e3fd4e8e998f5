//! One place that builds HTTP clients, so TLS is set up the same way everywhere.
//!
//! reqwest is built with rustls and no bundled crypto provider (the ring provider is chosen
//! for build time; see the README's dependency notes), so the provider is installed once,
//! before the first client is built.

use std::sync::Once;

static PROVIDER: Once = Once::new();

/// Installs rustls' ring crypto provider as the process default (idempotent).
pub fn install_crypto_provider() {
    PROVIDER.call_once(|| {
        // Err means another provider is already installed, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// A reqwest client builder with the crypto provider in place and no proxy: federation
/// traffic goes straight to the node it names.
pub fn client_builder() -> reqwest::ClientBuilder {
    install_crypto_provider();
    reqwest::Client::builder().no_proxy()
}
