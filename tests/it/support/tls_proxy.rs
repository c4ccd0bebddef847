//! A TLS-terminating forwarder on 127.0.0.1: TLS in, with the server certificate a test CA
//! signed, plain TCP out to a target. It stands for Q behind `https://`.

use std::net::SocketAddr;
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_rustls::rustls::{self, ServerConfig};
use tokio_rustls::TlsAcceptor;

use super::certs::ServerCerts;

pub struct TlsProxy {
    /// `https://127.0.0.1:PORT`.
    pub url: String,
    task: JoinHandle<()>,
}

impl TlsProxy {
    pub async fn start(certs: &ServerCerts, target: SocketAddr) -> TlsProxy {
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(certs.cert())
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_file(certs.key()).unwrap();
        let config =
            ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(chain, key)
                .unwrap();
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    // A handshake the client refuses (an untrusted CA) just ends here.
                    let Ok(mut tls) = acceptor.accept(stream).await else {
                        return;
                    };
                    let Ok(mut plain) = TcpStream::connect(target).await else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                });
            }
        });
        TlsProxy { url, task }
    }
}

impl Drop for TlsProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
