//! Optional TLS on the A2A listener (rustls, ring provider): loads the configured PEM files
//! into an acceptor that offers HTTP/2 and HTTP/1.1 by ALPN.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{self, ServerConfig};
use tokio_rustls::TlsAcceptor;

use crate::config::TlsConfig;

/// The acceptor for the configured files, or `None` when TLS is not configured.
pub fn acceptor(config: &TlsConfig) -> anyhow::Result<Option<TlsAcceptor>> {
    let (Some(cert_file), Some(key_file)) = (&config.cert_file, &config.key_file) else {
        return Ok(None);
    };
    Ok(Some(TlsAcceptor::from(Arc::new(server_config(
        cert_file, key_file,
    )?))))
}

pub fn server_config(cert_file: &Path, key_file: &Path) -> anyhow::Result<ServerConfig> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert_file)
        .with_context(|| format!("reading tls.cert_file {}", cert_file.display()))?
        .collect::<Result<_, _>>()
        .with_context(|| format!("parsing tls.cert_file {}", cert_file.display()))?;
    if certs.is_empty() {
        anyhow::bail!("tls.cert_file {} holds no certificate", cert_file.display());
    }
    let key = PrivateKeyDer::from_pem_file(key_file)
        .with_context(|| format!("reading tls.key_file {}", key_file.display()))?;
    let mut config =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .context("TLS protocol versions")?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .context("tls.cert_file and tls.key_file do not form a usable pair")?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}
