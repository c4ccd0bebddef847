//! A test certificate authority and a server certificate it signed (for 127.0.0.1 and
//! localhost), written as PEM files into a directory of their own, removed on drop.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};

use super::rpc::new_id;

pub struct ServerCerts {
    pub dir: PathBuf,
    /// PEM of the CA certificate, also in `ca.pem`.
    pub ca_pem: String,
}

impl ServerCerts {
    /// A fresh CA and a server certificate signed by it: `ca.pem`, `server.crt`, `server.key`.
    pub fn generate() -> ServerCerts {
        let dir = std::env::temp_dir().join(format!("q-a2a-certs-{}", new_id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (ca_pem, server_pem, server_key) = issue("Q A2A test CA");
        std::fs::write(dir.join("ca.pem"), &ca_pem).unwrap();
        std::fs::write(dir.join("server.crt"), server_pem).unwrap();
        write_private(&dir.join("server.key"), &server_key);
        ServerCerts { dir, ca_pem }
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

    /// Another CA's certificate, which signed nothing here: trusting only it must fail.
    pub fn foreign_ca(&self) -> PathBuf {
        let path = self.dir.join("foreign-ca.pem");
        std::fs::write(&path, issue("Some other CA").0).unwrap();
        path
    }
}

impl Drop for ServerCerts {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// (CA PEM, server certificate PEM, server key PEM).
fn issue(ca_name: &str) -> (String, String, String) {
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
    (ca.pem(), server.pem(), server_key.serialize_pem())
}

/// A private key file readable by its owner only (PostgreSQL refuses anything looser).
fn write_private(path: &Path, pem: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, pem).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}
