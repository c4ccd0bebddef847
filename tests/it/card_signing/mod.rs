//! Signed agent cards against the official a2a-sdk 1.2.2, both ways: the SDK's verifier checks
//! the cards the gateway signs (`served`, `rotation`), and the gateway's discovery checks cards
//! the SDK signed and served from its own server (`discovery`), and Q's own (`q_to_q`). The
//! golden vectors of the signed form are checked against the SDK itself (`vectors`).
//!
//! Needs the repo's Python environment (`scripts/setup-python`: a2a-sdk with its `signing`
//! extra). Test keys below were made for these tests and sign nothing else.

mod discovery;
mod q_to_q;
mod rotation;
mod served;
mod vectors;

use std::path::PathBuf;

use serde_json::Value;

use crate::support::gateway::run_command;
use crate::support::Gateway;

/// ES256 (P-256), PKCS#8 as `openssl genpkey` writes it.
pub const ES256_PEM: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgoF/JyI3fFHsngbC3
0+knqAc5m0bQ3uSk+e2ji3afXiyhRANCAAQeBYoEKE5zHTHWL1COP73ByHXh9oz9
Ijpd1UzPbZvTPCcpTDbv8YICqJWrSyHcB3VU+TWZeIHNF9e96QD49x3y
-----END PRIVATE KEY-----
";
/// EdDSA (Ed25519), a private JWK.
pub const EDDSA_JWK: &str = r#"{"kty": "OKP", "crv": "Ed25519", "x": "Pm3d9z-FAsXWU-X8C0HSEaQnUWJkcMVTkmvT6Nj6raE", "d": "_MBttLFXPewhJ7CvER_loOKATtIC2rhhyAtFmjMh-q0"}"#;

/// A directory of card signing key files, removed on drop.
pub struct KeysDir(PathBuf);

impl KeysDir {
    /// `files`: (file name, contents), e.g. `("2026-12.pem", ES256_PEM)`.
    pub fn new(files: &[(&str, &str)]) -> KeysDir {
        let dir = std::env::temp_dir().join(format!("q-a2a-card-keys-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        for (name, text) in files {
            std::fs::write(dir.join(name), text).unwrap();
        }
        KeysDir(dir)
    }

    pub fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }

    /// A file beside the keys (JWK Sets and card bytes handed to the SDK), in a subdirectory,
    /// which the gateway skips when it loads the keys.
    pub fn write(&self, name: &str, bytes: &[u8]) -> String {
        let work = self.0.join("work");
        std::fs::create_dir_all(&work).unwrap();
        let path = work.join(name);
        std::fs::write(&path, bytes).unwrap();
        path.to_str().unwrap().to_string()
    }
}

impl Drop for KeysDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What `q-a2a-gateway card-keys` prints for `gw`'s database and upstream with `env`: the JWK
/// Set partners are handed.
pub async fn card_keys(gw: &Gateway, env: &[(&str, &str)]) -> Value {
    let out = run_command(&gw.db, &gw.upstream.url, env, &["card-keys"]).await;
    assert!(
        out.status.success(),
        "card-keys: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The agent's card as served: status, the exact body bytes and the `ETag`.
pub async fn raw_card(
    base: &str,
    agent: &str,
    token: &str,
    headers: &[(&str, &str)],
) -> (u16, Vec<u8>, String) {
    let mut request = reqwest::Client::new()
        .get(format!(
            "{base}/v1/a2a/agents/{agent}/.well-known/agent-card.json"
        ))
        .bearer_auth(token);
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let etag = response
        .headers()
        .get("etag")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (status, response.bytes().await.unwrap().to_vec(), etag)
}

/// The protected header of a card's first signature.
pub fn first_header(card: &Value) -> Value {
    use base64::Engine;
    let protected = card["signatures"][0]["protected"].as_str().unwrap();
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(protected)
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

/// The JWK Set `jwks` with only the keys whose `kid` is in `kids`.
pub fn only(jwks: &Value, kids: &[&str]) -> Value {
    let keys: Vec<Value> = jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|k| kids.contains(&k["kid"].as_str().unwrap()))
        .cloned()
        .collect();
    serde_json::json!({ "keys": keys })
}
