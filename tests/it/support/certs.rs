//! A test certificate authority, a server certificate it signed (for 127.0.0.1 and localhost)
//! and a client certificate it signed (for the user `postgres`), written as PEM files into a
//! directory of their own, removed on drop.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};

use super::rpc::new_id;

pub struct ServerCerts {
    pub dir: PathBuf,
    /// PEM of the CA certificate, also in `ca.pem`.
    pub ca_pem: String,
}

impl ServerCerts {
    /// A fresh CA and the certificates it signed: `ca.pem`, `server.crt`, `server.key`,
    /// `client.crt`, `client.key`.
    pub fn generate() -> ServerCerts {
        let dir = std::env::temp_dir().join(format!("q-a2a-certs-{}", new_id()));
        std::fs::create_dir_all(&dir).unwrap();
        let issued = issue("Q A2A test CA");
        std::fs::write(dir.join("ca.pem"), &issued.ca).unwrap();
        std::fs::write(dir.join("server.crt"), issued.server.0).unwrap();
        write_private(&dir.join("server.key"), &issued.server.1);
        std::fs::write(dir.join("client.crt"), issued.client.0).unwrap();
        write_private(&dir.join("client.key"), &issued.client.1);
        ServerCerts {
            dir,
            ca_pem: issued.ca,
        }
    }

    pub fn ca(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    pub fn cert(&self) -> PathBuf {
        self.dir.join("server.crt")
    }

    pub fn key(&self) -> PathBuf {
        self.dir.join("server.key")
    }

    /// A client certificate for the user `postgres` and its key.
    pub fn client(&self) -> (PathBuf, PathBuf) {
        (self.dir.join("client.crt"), self.dir.join("client.key"))
    }

    /// Another CA's certificate, which signed nothing here: trusting only it must fail.
    pub fn foreign_ca(&self) -> PathBuf {
        let path = self.dir.join("foreign-ca.pem");
        std::fs::write(&path, issue("Some other CA").ca).unwrap();
        path
    }

    /// A client certificate for `postgres` that another CA signed, and its key.
    pub fn foreign_client(&self) -> (PathBuf, PathBuf) {
        let issued = issue("Some other CA");
        let (cert, key) = (
            self.dir.join("foreign-client.crt"),
            self.dir.join("foreign-client.key"),
        );
        std::fs::write(&cert, issued.client.0).unwrap();
        write_private(&key, &issued.client.1);
        (cert, key)
    }
}

impl Drop for ServerCerts {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// PEM of a CA and of the (certificate, key) pairs it signed.
struct Issued {
    ca: String,
    server: (String, String),
    client: (String, String),
}

fn issue(ca_name: &str) -> Issued {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params
        .distinguished_name
        .push(DnType::CommonName, ca_name);
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_key = KeyPair::generate().unwrap();
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();

    let mut server_params =
        CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).unwrap();
    server_params
        .distinguished_name
        .push(DnType::CommonName, "127.0.0.1");
    let server_key = KeyPair::generate().unwrap();
    let server = server_params.signed_by(&server_key, &ca).unwrap();

    // PostgreSQL's `cert` authentication maps the certificate's CN to the user.
    let mut client_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    client_params
        .distinguished_name
        .push(DnType::CommonName, "postgres");
    let client_key = KeyPair::generate().unwrap();
    let client = client_params.signed_by(&client_key, &ca).unwrap();
    Issued {
        ca: ca.pem(),
        server: (server.pem(), server_key.serialize_pem()),
        client: (client.pem(), client_key.serialize_pem()),
    }
}

/// A private key file readable by its owner only (PostgreSQL refuses anything looser).
fn write_private(path: &Path, pem: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, pem).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}
