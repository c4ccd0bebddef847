//! The keys this gateway signs its cards with: several by `kid`, so a rotation can publish the
//! next key before it signs anything, and one active, the one that signs.
//!
//! They are read once, at start, from a directory: one file per key, named `<kid>.pem`
//! (PKCS#8) or `<kid>.jwk` / `<kid>.json` (a private JWK), which is how a Kubernetes Secret
//! mounted as a volume lays out its entries. Hidden entries (the Secret's `..data` links) and
//! subdirectories are skipped. The active key may be left unnamed only when there is exactly
//! one key.

use std::path::Path;

use serde_json::{json, Value};

use super::keys::{check_kid, KeyError, SigningKey};

/// Largest key file read: a key is well under 1 KiB; anything bigger is not one.
const MAX_KEY_FILE_BYTES: u64 = 64 * 1024;

/// The card signing keys, the active one first.
#[derive(Debug)]
pub struct CardKeys {
    /// `keys[0]` is the active key; the others follow by `kid`.
    keys: Vec<SigningKey>,
}

impl CardKeys {
    /// Every key in `dir`; `active` names the signing one (may be empty with one key).
    pub fn load(dir: &Path, active: &str) -> Result<CardKeys, KeyError> {
        let entries = std::fs::read_dir(dir)
            .map_err(|e| KeyError(format!("cannot read {}: {e}", dir.display())))?;
        let mut keys = Vec::new();
        for entry in entries {
            let entry =
                entry.map_err(|e| KeyError(format!("cannot read {}: {e}", dir.display())))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            if name.starts_with('.') || path.is_dir() {
                continue;
            }
            let Some((kid, extension)) = name.rsplit_once('.') else {
                return Err(KeyError(format!(
                    "{}: card signing key files are named <kid>.pem, <kid>.jwk or <kid>.json",
                    path.display()
                )));
            };
            if !matches!(extension, "pem" | "jwk" | "json") {
                return Err(KeyError(format!(
                    "{}: card signing key files are named <kid>.pem, <kid>.jwk or <kid>.json",
                    path.display()
                )));
            }
            check_kid(kid).map_err(|e| KeyError(format!("{}: {e}", path.display())))?;
            let size = std::fs::metadata(&path)
                .map_err(|e| KeyError(format!("cannot read {}: {e}", path.display())))?
                .len();
            if size > MAX_KEY_FILE_BYTES {
                return Err(KeyError(format!(
                    "{}: {size} bytes is not a key",
                    path.display()
                )));
            }
            let text = std::fs::read_to_string(&path)
                .map_err(|e| KeyError(format!("cannot read {}: {e}", path.display())))?;
            let key = SigningKey::parse(kid, &text)
                .map_err(|e| KeyError(format!("{}: {e}", path.display())))?;
            keys.push(key);
        }
        CardKeys::new(keys, active)
            .map_err(|e| KeyError(format!("card signing keys in {}: {e}", dir.display())))
    }

    /// These keys, `active` (or the only one) signing.
    pub fn new(mut keys: Vec<SigningKey>, active: &str) -> Result<CardKeys, KeyError> {
        keys.sort_by(|a, b| a.kid().cmp(b.kid()));
        if let Some(pair) = keys.windows(2).find(|w| w[0].kid() == w[1].kid()) {
            return Err(KeyError(format!(
                "two keys with id {:?} (one file per key id)",
                pair[0].kid()
            )));
        }
        let position = match (active, keys.len()) {
            (_, 0) => return Err(KeyError("no key found".into())),
            ("", 1) => 0,
            ("", n) => {
                return Err(KeyError(format!(
                    "{n} keys and no active key: name the one that signs"
                )))
            }
            (active, _) => keys.iter().position(|k| k.kid() == active).ok_or_else(|| {
                KeyError(format!(
                    "the active key {active:?} is not among the keys ({})",
                    keys.iter()
                        .map(SigningKey::kid)
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })?,
        };
        let active = keys.remove(position);
        keys.insert(0, active);
        Ok(CardKeys { keys })
    }

    /// The key that signs served cards.
    pub fn active(&self) -> &SigningKey {
        &self.keys[0]
    }

    /// Every key id, the active one first.
    pub fn kids(&self) -> Vec<&str> {
        self.keys.iter().map(SigningKey::kid).collect()
    }

    /// The public keys as a JWK Set (RFC 7517 §5), the active key first: what partners
    /// configure as trusted keys.
    pub fn jwks(&self) -> Value {
        let keys: Vec<Value> = self.keys.iter().map(|k| k.public_key().to_jwk()).collect();
        json!({ "keys": keys })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ED: &str = r#"{"x": "Pm3d9z-FAsXWU-X8C0HSEaQnUWJkcMVTkmvT6Nj6raE", "d": "_MBttLFXPewhJ7CvER_loOKATtIC2rhhyAtFmjMh-q0", "kty": "OKP", "crv": "Ed25519"}"#;
    const EC: &str = r#"{"kty": "EC", "crv": "P-256", "x": "HgWKBChOcx0x1i9Qjj-9wch14faM_SI6XdVMz22b0zw", "y": "JylMNu_xggKolatLIdwHdVT5NZl4gc0X173pAPj3HfI", "d": "oF_JyI3fFHsngbC30-knqAc5m0bQ3uSk-e2ji3afXiw"}"#;

    fn dir(files: &[(&str, &str)]) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("card-keys-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(dir.join("..data")).unwrap();
        for (name, text) in files {
            std::fs::write(dir.join(name), text).unwrap();
        }
        dir
    }

    #[test]
    fn a_directory_of_keys_with_one_active() {
        let d = dir(&[("2026-a.jwk", ED), ("2026-b.json", EC), (".hidden", "x")]);
        let keys = CardKeys::load(&d, "2026-b").unwrap();
        assert_eq!(keys.kids(), ["2026-b", "2026-a"]);
        assert_eq!(keys.active().kid(), "2026-b");
        let jwks = keys.jwks();
        assert_eq!(jwks["keys"][0]["kid"], "2026-b");
        assert_eq!(jwks["keys"][0]["alg"], "ES256");
        assert_eq!(jwks["keys"][1]["alg"], "EdDSA");
        assert!(!jwks.to_string().contains("\"d\""));
        // Switching the active key changes only which one signs.
        let switched = CardKeys::load(&d, "2026-a").unwrap();
        assert_eq!(switched.active().kid(), "2026-a");
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn ambiguous_or_broken_key_directories_are_refused() {
        let one = dir(&[("only.jwk", ED)]);
        assert_eq!(CardKeys::load(&one, "").unwrap().active().kid(), "only");
        let two = dir(&[("a.jwk", ED), ("b.jwk", EC)]);
        assert!(CardKeys::load(&two, "")
            .unwrap_err()
            .0
            .contains("no active key"));
        assert!(CardKeys::load(&two, "c")
            .unwrap_err()
            .0
            .contains("not among"));
        let twice = dir(&[("a.jwk", ED), ("a.json", EC)]);
        assert!(CardKeys::load(&twice, "a")
            .unwrap_err()
            .0
            .contains("two keys"));
        let empty = dir(&[]);
        assert!(CardKeys::load(&empty, "").unwrap_err().0.contains("no key"));
        let odd = dir(&[("a.key", ED)]);
        assert!(CardKeys::load(&odd, "")
            .unwrap_err()
            .0
            .contains("<kid>.pem"));
        let broken = dir(&[("a.pem", "garbage")]);
        assert!(CardKeys::load(&broken, "").unwrap_err().0.contains("a.pem"));
        for d in [one, two, twice, empty, odd, broken] {
            std::fs::remove_dir_all(d).unwrap();
        }
    }
}
