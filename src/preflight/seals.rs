//! The `credential_seals` check: stored credentials still sealed under a key other than the
//! active one. A key kept only for them cannot be retired yet (a warning: run `credentials
//! reseal`); a key no longer configured at all means those credentials cannot be used (a
//! failure).

use crate::config::Config;
use crate::health::{Check, CHECK_TIMEOUT};
use crate::outbound::credential::CredentialKeys;
use crate::store::outbound::PgOutboundStore;
use crate::store::PgTaskStore;

pub const FIX: &str = "run `q-a2a-gateway credentials reseal` (with every key still configured) before removing a key from Q_A2A_CREDENTIAL_KEYS; a credential under a key no longer configured needs that key back, or its tenant sets the credential again";

/// The check, and whether its failure is fatal (credentials under a key nobody has).
pub async fn check(config: &Config, store: &PgTaskStore) -> (Check, bool) {
    let outbound = &config.outbound;
    let Ok(keys) = CredentialKeys::parse(
        outbound.credential_keys.expose(),
        &outbound.credential_active_key,
    ) else {
        return (
            Check {
                ok: false,
                detail: "not checked: the credential keys do not parse".into(),
            },
            false,
        );
    };
    let counts = tokio::time::timeout(
        CHECK_TIMEOUT * 3,
        PgOutboundStore::new(store.pool().clone()).seals_by_key(),
    )
    .await;
    let counts = match counts {
        Ok(Ok(counts)) => counts,
        Ok(Err(e)) => return (not_read(format!("{e}")), false),
        Err(_) => return (not_read("no answer in time".into()), false),
    };
    judge(&keys, &counts)
}

fn not_read(why: String) -> Check {
    Check {
        ok: false,
        detail: format!("cannot count sealed credentials: {why}"),
    }
}

/// `counts`: credentials per key id.
fn judge(keys: &CredentialKeys, counts: &[(String, i64)]) -> (Check, bool) {
    let active = keys.active_key_id().unwrap_or_default();
    let mut old = Vec::new();
    let mut missing = Vec::new();
    for (key, n) in counts {
        if key == active {
            continue;
        }
        if keys.has_key(key) {
            old.push(format!("{n} under {key:?}"));
        } else {
            missing.push(format!("{n} under {key:?}"));
        }
    }
    let on_active = counts
        .iter()
        .find(|(k, _)| k == active)
        .map_or(0, |(_, n)| *n);
    if !missing.is_empty() {
        return (
            Check {
                ok: false,
                detail: format!(
                    "credentials sealed under keys not configured, unusable: {}",
                    missing.join(", ")
                ),
            },
            true,
        );
    }
    if !old.is_empty() {
        return (
            Check {
                ok: false,
                detail: format!(
                    "{on_active} under the active key {active:?}; still needing an old key: {}",
                    old.join(", ")
                ),
            },
            false,
        );
    }
    (
        Check {
            ok: true,
            detail: format!("{on_active} credential(s), all under the active key {active:?}"),
        },
        false,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const K1: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

    #[test]
    fn old_keys_warn_and_missing_keys_fail() {
        let keys = CredentialKeys::parse(&format!("k1:{K1},k2:{K1}"), "k2").unwrap();
        let (check, fatal) = judge(&keys, &[("k2".into(), 3)]);
        assert!(check.ok && !fatal, "{}", check.detail);
        let (check, fatal) = judge(&keys, &[("k1".into(), 2), ("k2".into(), 3)]);
        assert!(!check.ok && !fatal);
        assert!(check.detail.contains("2 under \"k1\""), "{}", check.detail);
        let (check, fatal) = judge(&keys, &[("k0".into(), 1), ("k2".into(), 3)]);
        assert!(!check.ok && fatal, "{}", check.detail);
    }
}
