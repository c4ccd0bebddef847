//! `q-a2a-gateway credentials reseal`: every stored credential sealed under a key other than the
//! active one is opened and sealed again under the active key, in batches by registration id.
//!
//! Safe while replicas serve: each row is replaced in one statement that compares the old
//! ciphertext, so a reader sees the old seal or the new one, and both open as long as every
//! replica has both keys (the rotation order in docs/operations.md). A credential a tenant
//! set meanwhile is left as it is (it was sealed under the active key). Rows that cannot be
//! opened (their key is no longer configured, or the row does not open for its binding) are
//! reported, never changed.

use reqwest::Url;

use crate::outbound::credential::{Binding, CredentialKeys};
use crate::outbound::delegation::target_hash;
use crate::outbound::policy::origin;
use crate::store::outbound::{PgOutboundStore, Registration};

/// Tries on one row whose seal keeps changing under the re-sealer.
const TRIES: usize = 3;

/// What a run did, and what still needs an old key.
#[derive(Debug, Default)]
pub struct ResealReport {
    /// Re-sealed under the active key (or, in a dry run, that would be).
    pub resealed: u64,
    /// Rows another writer changed meanwhile (their new seal is the active key's).
    pub changed_meanwhile: u64,
    /// `(registration, key id, why)` of the rows that cannot be opened.
    pub unusable: Vec<(String, String, String)>,
    /// Credentials still sealed under each key other than the active one, after the run.
    pub remaining: Vec<(String, i64)>,
}

/// Re-seals every credential under the active key, `batch` rows at a time.
pub async fn reseal(
    store: &PgOutboundStore,
    keys: &CredentialKeys,
    batch: i64,
    dry_run: bool,
) -> anyhow::Result<ResealReport> {
    let active = keys
        .active_key_id()
        .ok_or_else(|| anyhow::anyhow!("no credential key is configured"))?
        .to_string();
    let mut report = ResealReport::default();
    let mut after: Option<String> = None;
    loop {
        let rows = store
            .sealed_elsewhere_after(&active, after.as_deref(), batch)
            .await?;
        for row in &rows {
            one(store, keys, row, dry_run, &mut report).await?;
        }
        match rows.last() {
            Some(last) if rows.len() as i64 == batch => after = Some(last.id.clone()),
            _ => break,
        }
    }
    report.remaining = store
        .seals_by_key()
        .await?
        .into_iter()
        .filter(|(key, _)| *key != active)
        .collect();
    Ok(report)
}

async fn one(
    store: &PgOutboundStore,
    keys: &CredentialKeys,
    row: &Registration,
    dry_run: bool,
    report: &mut ResealReport,
) -> anyhow::Result<()> {
    let mut current = row.clone();
    for _ in 0..TRIES {
        let Some(sealed) = current.credential.clone() else {
            return Ok(()); // removed meanwhile
        };
        if Some(sealed.key_id.as_str()) == keys.active_key_id() {
            report.changed_meanwhile += 1;
            return Ok(());
        }
        let origin = match Url::parse(&current.endpoint) {
            Ok(url) => origin(&url),
            Err(e) => {
                report
                    .unusable
                    .push((current.id, sealed.key_id, format!("endpoint: {e}")));
                return Ok(());
            }
        };
        let binding = Binding {
            tenant_id: &current.tenant_id,
            registration_id: &current.id,
            origin: &origin,
        };
        let clear = match keys.open(&sealed, binding) {
            Ok(clear) => clear,
            Err(e) => {
                report
                    .unusable
                    .push((current.id.clone(), sealed.key_id, e.to_string()));
                return Ok(());
            }
        };
        if dry_run {
            report.resealed += 1;
            return Ok(());
        }
        let new = keys.seal(&clear, binding)?;
        let old_target = target_hash(&current);
        let mut resealed = current.clone();
        resealed.credential = Some(new.clone());
        let new_target = target_hash(&resealed);
        if store
            .replace_seal(&current, &sealed, &new, &old_target, &new_target)
            .await?
        {
            report.resealed += 1;
            return Ok(());
        }
        // Changed meanwhile: look again.
        match store.registration_by_id(&current.id).await? {
            Some(again) => current = again,
            None => return Ok(()),
        }
    }
    report.unusable.push((
        current.id.clone(),
        current.credential.map(|c| c.key_id).unwrap_or_default(),
        "changed on every try; run again".into(),
    ));
    Ok(())
}
