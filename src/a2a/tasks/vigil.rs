//! What an observation (a stream, a blocking SendMessage's wait) keeps checking while it
//! lasts, so that it never outlives the caller's right to it:
//!
//! | what | when | if it fails |
//! |---|---|---|
//! | the token, through the introspection cache, and the `agent_api` tenant feature | before a stream's first frame, then every half token bound (`auth.cache_ttl_ms / 2`), accepting only an introspection sent within that half: a revoked token ends the observation within the token bound | the observation ends (a wait answers the HTTP refusal) |
//! | the caller's access to the agent's workspace | at every access change this replica applies, and, while the access feed is not trusted, as soon as the answer it last relied on is `auth.access_direct_ttl_ms` old (timed from when its fetch was sent), so that with the feed down a revocation still ends it within the bound | the observation ends |
//!
//! Content (Q's status text, the artifact) is not decided here: every content frame and every
//! wait result takes its own clearance under the freshness rule (`crate::access`).

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::TaskService;
use crate::a2a::caller::Caller;
use crate::access::Purpose;
use crate::error::HttpError;
use crate::upstream::contract::WorkspaceAccess;

/// Why an observation must end.
#[derive(Debug)]
pub(crate) enum Lapse {
    /// The token is no longer active, or lost the tenant feature, or Q cannot say.
    Refused(HttpError),
    /// The caller lost access to the agent's workspace (or Q cannot confirm it).
    AccessLost,
}

/// One observation's checks of its caller (see the module doc).
pub(crate) struct Vigil {
    caller: Caller,
    token_every: Duration,
    token_checked: Instant,
    access_changes: watch::Receiver<u64>,
    access_trusted: watch::Receiver<bool>,
    /// While the access feed is not trusted, the access answer last relied on serves until
    /// then (its fetch was sent `auth.access_direct_ttl_ms` before); it is checked again then.
    access_until: Instant,
    /// An access change was seen while waiting and not checked yet.
    access_pending: bool,
}

/// Access is never re-checked sooner than this after a check, so that nothing can spin.
const ACCESS_RECHECK_FLOOR: Duration = Duration::from_millis(50);

impl TaskService {
    /// The checks of `caller` for an observation that starts now (the request just checked
    /// both).
    pub(crate) fn vigil(&self, caller: &Caller) -> Vigil {
        let mut access_changes = self.followers.access_changes();
        access_changes.mark_unchanged();
        Vigil {
            caller: caller.clone(),
            token_every: self.settings.token_recheck,
            token_checked: Instant::now(),
            access_changes,
            access_trusted: self.followers.access_trusted(),
            // The request's own check may have relied on an answer nearly at its bound.
            access_until: Instant::now(),
            access_pending: false,
        }
    }

    /// The checks of `caller` for a stream about to send its first frame: the token checked
    /// now, against an introspection sent within the re-check's half. The request's own check
    /// may have relied on one up to the token bound old, and the snapshot is content: a
    /// token revoked meanwhile (say while the dispatch waited on Q) refuses the stream instead
    /// of sending it past the bound. Costs Q a call only when the token's last introspection
    /// is older than that half (one for all the streams of the token).
    pub(crate) async fn vigil_checked(&self, caller: &Caller) -> Result<Vigil, Lapse> {
        let vigil = self.vigil(caller);
        self.check_token(caller, vigil.token_every).await?;
        Ok(vigil)
    }

    /// Runs whatever check of `vigil` is due; `Err` when the observation must end.
    pub(crate) async fn keep_vigil(&self, vigil: &mut Vigil) -> Result<(), Lapse> {
        let now = Instant::now();
        if now >= vigil.token_checked + vigil.token_every {
            vigil.token_checked = now;
            self.check_token(&vigil.caller, vigil.token_every).await?;
        }
        let access_changed = std::mem::take(&mut vigil.access_pending)
            || vigil.access_changes.has_changed().unwrap_or(false);
        let untrusted = !*vigil.access_trusted.borrow_and_update();
        let timer = untrusted && now >= vigil.access_until;
        if access_changed || timer {
            vigil.access_changes.mark_unchanged();
            let access = self
                .access()
                .agent_access_dated(vigil.caller.who(), Purpose::Current)
                .await;
            let granted = match access {
                Ok((Some(a), sent)) if a.workspace_access == WorkspaceAccess::Granted => {
                    let until = Instant::from_std(sent) + self.access().direct_ttl();
                    vigil.access_until = until.max(Instant::now() + ACCESS_RECHECK_FLOOR);
                    true
                }
                _ => false,
            };
            if !granted {
                return Err(Lapse::AccessLost);
            }
        }
        Ok(())
    }

    async fn check_token(&self, caller: &Caller, within: Duration) -> Result<(), Lapse> {
        let Some(credential) = &caller.credential else {
            return Ok(());
        };
        let principal = self
            .authenticator
            .recheck(credential, within)
            .await
            .map_err(Lapse::Refused)?;
        if principal.tenant_id != caller.principal.tenant_id
            || principal.principal_id != caller.principal.principal_id
        {
            return Err(Lapse::Refused(HttpError::InvalidCredential));
        }
        principal.require_feature().map_err(Lapse::Refused)
    }
}

impl Vigil {
    /// The caller this vigil keeps checking.
    pub(crate) fn caller(&self) -> &Caller {
        &self.caller
    }

    /// Resolves when a check is due: an access change was applied, the token's re-check is
    /// due, the access feed's trust changed, or (without it) the access answer relied on
    /// reached its bound.
    pub(crate) async fn due(&mut self) {
        let token = self.token_checked + self.token_every;
        let untrusted = !*self.access_trusted.borrow();
        // One timer for both deadlines (the token's re-check, and without a trusted feed the
        // access answer's bound): every open stream holds this future while it waits.
        let timer = if untrusted {
            token.min(self.access_until)
        } else {
            token
        };
        tokio::select! {
            changed = self.access_changes.changed() => {
                // The followers outlive every observation; if not, nothing more will change.
                if changed.is_err() { std::future::pending::<()>().await }
                self.access_pending = true;
            }
            changed = self.access_trusted.changed() => {
                if changed.is_err() { std::future::pending::<()>().await }
            }
            _ = tokio::time::sleep_until(timer) => {}
        }
    }
}
