//! The promises about grants, checked by having the operator hook revoke, then restore, the
//! kit principal's membership of the agent's workspace and its evidence grant on one of its
//! runs:
//!
//! - `access-reflects`: once the hook made a change, the access API (`/access`), the grant
//!   APIs (`/grants`, `/evidence-grants/query`) and the create's own check answer it;
//! - `access-feed-complete`: each change has its entry in the access feed;
//! - `access-feed-after-api`: when the feed delivers that entry, the APIs already answer what
//!   they answer once the change is made (the feed never runs ahead of them).
//!
//! The revocations are made while the follower reads, so an entry is judged the moment it
//! arrives; the restorations while it is paused, so both arrive in one answer (which the order
//! check needs). Without a hook none of this can be exercised: each is "not checked".

use std::time::Instant;

use crate::upstream::contract::{
    AccessChange, AccessChangeKind, ErrorCode, EvidenceGrant, EvidenceGrants, EvidenceQuery, Run,
    RunGrant, WorkspaceAccess,
};

use super::client::{describe, encode};
use super::feed_rules::Mark;
use super::hook::{Action, Change, Hook};
use super::report::Promise;
use super::Kit;

/// The promises only a hook can exercise.
const NEED_A_HOOK: [Promise; 4] = [
    Promise::AccessReflects,
    Promise::AccessFeedComplete,
    Promise::AccessFeedAfterApi,
    Promise::AccessFeedHead,
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Grant {
    /// The principal's membership of the agent's workspace.
    Membership,
    /// The principal's evidence grant on the kit's run.
    Evidence,
}

/// What the APIs answered about one grant: `granted` when they agree it stands (or agree it
/// does not), and the answers in a line.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Answered {
    granted: Option<bool>,
    text: String,
}

impl Grant {
    fn action(self, revoke: bool) -> Action {
        match (self, revoke) {
            (Grant::Membership, true) => Action::RevokeMembership,
            (Grant::Membership, false) => Action::RestoreMembership,
            (Grant::Evidence, true) => Action::RevokeEvidence,
            (Grant::Evidence, false) => Action::RestoreEvidence,
        }
    }

    fn change(self, kit: &Kit, ids: &Ids, revoke: bool) -> Change {
        Change {
            action: self.action(revoke),
            tenant_id: kit.options.tenant_id.clone(),
            principal_id: ids.principal_id.clone(),
            workspace_id: (self == Grant::Membership).then(|| ids.workspace_id.clone()),
            run_id: (self == Grant::Evidence).then(|| ids.run_id.clone()),
        }
    }

    /// Whether an access feed entry announces this grant's change: its kind with the ids it
    /// names (an id Q leaves out matches), or a kind the contract does not define, which means
    /// "something about access changed".
    fn announced_by(self, ids: &Ids, c: &AccessChange) -> bool {
        let is = |id: &Option<String>, wanted: &str| id.as_deref().is_none_or(|id| id == wanted);
        let principal = is(&c.principal_id, &ids.principal_id);
        match self {
            _ if c.kind == AccessChangeKind::Unknown => true,
            Grant::Membership => {
                c.kind == AccessChangeKind::WorkspaceMembership
                    && principal
                    && is(&c.workspace_id, &ids.workspace_id)
            }
            Grant::Evidence => {
                c.kind == AccessChangeKind::EvidenceGrant && principal && is(&c.run_id, &ids.run_id)
            }
        }
    }

    /// What Q's APIs answer about this grant now.
    async fn answered(self, kit: &Kit, run_id: &str) -> Answered {
        match self {
            Grant::Membership => match kit.workspace_access().await {
                Ok(access) => Answered {
                    granted: match access {
                        WorkspaceAccess::Granted => Some(true),
                        WorkspaceAccess::Revoked | WorkspaceAccess::None => Some(false),
                        WorkspaceAccess::Unknown => None,
                    },
                    text: format!("workspace_access {access:?}"),
                },
                Err(e) => Answered {
                    granted: None,
                    text: e,
                },
            },
            Grant::Evidence => {
                let (one, many) = evidence(kit, run_id).await;
                let both = |g: EvidenceGrant| one == Ok(g) && many == Ok(g);
                Answered {
                    granted: if both(EvidenceGrant::Granted) {
                        Some(true)
                    } else if both(EvidenceGrant::Revoked) {
                        Some(false)
                    } else {
                        None
                    },
                    text: format!(
                        "/grants {}, /evidence-grants/query {}",
                        show(&one),
                        show(&many)
                    ),
                }
            }
        }
    }
}

fn show(answer: &Result<EvidenceGrant, String>) -> String {
    match answer {
        Ok(grant) => format!("{grant:?}"),
        Err(e) => e.clone(),
    }
}

/// The principal's evidence grant on the run, as `/grants` and `/evidence-grants/query` answer.
async fn evidence(
    kit: &Kit,
    run_id: &str,
) -> (Result<EvidenceGrant, String>, Result<EvidenceGrant, String>) {
    let principal = &kit.options.principal_id;
    let one = kit
        .q
        .get(&format!(
            "/runs/{}/grants/{}",
            encode(run_id),
            encode(principal)
        ))
        .await
        .and_then(|a| a.json::<RunGrant>())
        .map(|g| g.evidence);
    let query = EvidenceQuery {
        principal_id: principal.clone(),
        run_ids: vec![run_id.to_owned()],
    };
    let many = kit
        .q
        .post("/evidence-grants/query", &query)
        .await
        .and_then(|a| a.json::<EvidenceGrants>())
        .and_then(|g| {
            g.grants
                .first()
                .map(|g| g.evidence)
                .ok_or_else(|| "no grant answered".to_owned())
        });
    (one, many)
}

/// Runs the grant checks; returns the changes made, for the access feed's head check.
pub async fn check(kit: &Kit) -> Vec<Mark<AccessChange>> {
    let f = &kit.findings;
    let Some(hook) = &kit.options.hook else {
        for p in NEED_A_HOOK {
            f.not_checked(p, "no hook given (--hook-url or --hook-command)");
        }
        return Vec::new();
    };
    let workflow_id = kit.workflow("evidence");
    let reply = kit
        .ledger
        .create(&kit.q, &kit.request(&workflow_id, "contract check: grants"))
        .await;
    let Some(run) = reply.as_ref().ok().and_then(|a| a.json::<Run>().ok()) else {
        for p in NEED_A_HOOK {
            f.not_checked(
                p,
                format!("the create of {workflow_id} answered {}", describe(&reply)),
            );
        }
        return Vec::new();
    };
    let own = Grant::Evidence.answered(kit, &run.id).await;
    // The create's own answer of the grant is optional; when given, it agrees.
    let created = run.principal_evidence;
    f.judge(
        Promise::AccessReflects,
        own.granted == Some(true) && created.is_none_or(|e| e == EvidenceGrant::Granted),
        format!(
            "before any change, the principal's own run {}: evidence granted (the create's \
             principal_evidence {created:?})",
            run.id
        ),
        format!(
            "the principal's own run {}: {}, the create's principal_evidence {created:?}",
            run.id, own.text
        ),
    );
    let ids = Ids {
        principal_id: kit.options.principal_id.clone(),
        workspace_id: kit.workspace_id.clone(),
        run_id: run.id.clone(),
    };
    let (membership, evidence) = tokio::join!(
        revoke(kit, hook, Grant::Membership, &ids),
        revoke(kit, hook, Grant::Evidence, &ids),
    );
    let mut marks: Vec<Mark<AccessChange>> = [membership, evidence].into_iter().flatten().collect();
    // Both were asked for, so both are restored, whatever the hook answered.
    marks.extend(restore(kit, hook, &[Grant::Membership, Grant::Evidence], &ids).await);
    marks
}

/// The ids the kit's changes are about.
#[derive(Debug, Clone)]
struct Ids {
    principal_id: String,
    workspace_id: String,
    run_id: String,
}

/// A change made through the hook at `at`, as the head check looks for it in the access feed
/// from read `from` on.
fn mark(grant: Grant, revoke: bool, ids: &Ids, at: Instant, from: usize) -> Mark<AccessChange> {
    let ids = ids.clone();
    Mark {
        what: grant.action(revoke).name().to_owned(),
        at,
        from,
        is: Box::new(move |c| grant.announced_by(&ids, c)),
    }
}

/// Revokes one grant through the hook and judges the three promises on it; returns the
/// change's mark when the hook made it.
async fn revoke(kit: &Kit, hook: &Hook, grant: Grant, ids: &Ids) -> Option<Mark<AccessChange>> {
    let f = &kit.findings;
    let what = grant.action(true).name();
    let from = kit.access_feed.position();
    let deadline = kit.deadline();
    // Judges the entry the moment it arrives, while the hook may still be making the change.
    let watcher = async {
        let (_, entry) = kit
            .access_feed
            .wait_for(from, deadline, |c| grant.announced_by(ids, c))
            .await?;
        Some((entry, grant.answered(kit, &ids.run_id).await))
    };
    let change = grant.change(kit, ids, true);
    let hooked = hook.call(kit.q.http(), &change);
    tokio::pin!(watcher, hooked);
    let mut watched = None;
    let outcome = loop {
        tokio::select! {
            outcome = &mut hooked => break outcome,
            seen = &mut watcher, if watched.is_none() => watched = Some(seen),
        }
    };
    let at = Instant::now();
    if let Err(e) = outcome {
        for p in NEED_A_HOOK {
            f.not_checked(p, e.clone());
        }
        return None;
    }
    let made = grant.answered(kit, &ids.run_id).await;
    f.judge(
        Promise::AccessReflects,
        made.granted == Some(false),
        format!("once {what} returned: {}", made.text),
        format!(
            "once {what} returned, the APIs still answered {}",
            made.text
        ),
    );
    if grant == Grant::Membership {
        let denied = kit.workflow("denied");
        let request = kit.request(&denied, "contract check: while revoked");
        let reply = kit.ledger.create(&kit.q, &request).await;
        f.judge_reply(
            Promise::AccessReflects,
            &reply,
            reply
                .as_ref()
                .is_ok_and(|a| a.is(ErrorCode::WorkspaceAccessDenied)),
            "a create while revoked: 403 workspace_access_denied".to_owned(),
            format!("a create while revoked answered {}", describe(&reply)),
        );
    }
    let watched = match watched {
        Some(seen) => seen,
        None => watcher.await,
    };
    match watched {
        Some((entry, then)) => {
            f.kept(
                Promise::AccessFeedComplete,
                format!("{what}: {} at cursor {}", entry_text(&entry), entry.cursor),
            );
            f.judge(
                Promise::AccessFeedAfterApi,
                then == made,
                format!(
                    "when {what}'s entry arrived the APIs already answered {}",
                    then.text
                ),
                format!(
                    "{what}'s entry (cursor {}) arrived while the APIs still answered {}; once \
                     made they answer {}",
                    entry.cursor, then.text, made.text
                ),
            );
        }
        None => {
            f.broken(
                Promise::AccessFeedComplete,
                format!(
                    "no access feed entry announced {what} within {} ms",
                    kit.options.wait.as_millis()
                ),
            );
            f.not_checked(
                Promise::AccessFeedAfterApi,
                format!("{what} never reached the feed"),
            );
        }
    }
    Some(mark(grant, true, ids, at, from))
}

/// Restores the grants, with the follower paused so that their entries arrive together.
async fn restore(kit: &Kit, hook: &Hook, grants: &[Grant], ids: &Ids) -> Vec<Mark<AccessChange>> {
    let f = &kit.findings;
    let from = kit.access_feed.pause().await;
    let restored = futures_util::future::join_all(grants.iter().map(|grant| async move {
        let outcome = hook
            .call(kit.q.http(), &grant.change(kit, ids, false))
            .await;
        (*grant, outcome, Instant::now())
    }))
    .await;
    let mut made = Vec::new();
    for (grant, outcome, at) in restored {
        let what = grant.action(false).name();
        match outcome {
            Ok(()) => {
                let now = grant.answered(kit, &ids.run_id).await;
                f.judge(
                    Promise::AccessReflects,
                    now.granted == Some(true),
                    format!("once {what} returned: {}", now.text),
                    format!("once {what} returned, the APIs answered {}", now.text),
                );
                made.push((grant, at));
            }
            Err(e) => {
                tracing::error!(error = %e, "the hook did not restore a grant the check revoked");
                f.not_checked(
                    Promise::AccessReflects,
                    format!("{e}: the principal's grant may still be revoked, restore it"),
                );
            }
        }
    }
    kit.access_feed.resume();
    let deadline = kit.deadline();
    let mut marks = Vec::new();
    for (grant, at) in made {
        let what = grant.action(false).name();
        let found = kit
            .access_feed
            .wait_for(from, deadline, |c| grant.announced_by(ids, c))
            .await;
        match found {
            Some((_, entry)) => f.kept(
                Promise::AccessFeedComplete,
                format!("{what}: {} at cursor {}", entry_text(&entry), entry.cursor),
            ),
            None => f.broken(
                Promise::AccessFeedComplete,
                format!(
                    "no access feed entry announced {what} within {} ms",
                    kit.options.wait.as_millis()
                ),
            ),
        }
        marks.push(mark(grant, false, ids, at, from));
    }
    marks
}

fn entry_text(entry: &AccessChange) -> String {
    use super::follower::Change as _;
    entry.describe()
}
