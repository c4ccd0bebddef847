//! The state's check-and-update rules, its feeds and its reset.

use std::collections::HashSet;

use super::*;
use crate::contract::RunStatus;
use crate::testing::{fixtures, req, wait_for};

#[test]
fn workspace_access_granted_revoked_none() {
    let f = fixtures();
    let mut inner = Inner::default();
    assert_eq!(
        inner.workspace_access(&f, "ws-acme-main", "p-bob"),
        WorkspaceAccess::Granted
    );
    assert_eq!(
        inner.workspace_access(&f, "ws-acme-private", "p-bob"),
        WorkspaceAccess::None
    );
    inner
        .workspace_grants
        .insert(("ws-acme-main".into(), "p-bob".into()), false);
    assert_eq!(
        inner.workspace_access(&f, "ws-acme-main", "p-bob"),
        WorkspaceAccess::Revoked
    );
}

#[tokio::test]
async fn concurrent_creates_make_one_run() {
    let state = AppState::new(fixtures(), 0.01);
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let state = state.clone();
        tasks.push(tokio::spawn(async move {
            state
                .create_run(req("wf-race", "ag-writer", &["hi"]))
                .await
                .unwrap()
        }));
    }
    let mut created = 0;
    let mut ids = HashSet::new();
    for t in tasks {
        let (c, run) = t.await.unwrap();
        created += usize::from(c);
        ids.insert(run.id);
    }
    assert_eq!(created, 1);
    assert_eq!(ids.len(), 1);
    assert_eq!(state.lock().await.stats.runs_created, 1);
}

#[tokio::test]
async fn reset_starts_the_change_feed_over_and_wakes_its_long_polls() {
    let state = AppState::new(fixtures(), 0.01);
    let (_, run) = state
        .create_run(req("wf-feed", "ag-writer", &["hi"]))
        .await
        .unwrap();
    wait_for(&state, &run.id, RunStatus::Succeeded).await;
    let (mut waiting, mut waiting_on_access) = {
        let inner = state.lock().await;
        assert_eq!(inner.feed.head(), 3, "queued, running, succeeded");
        inner.access_changed(AccessChangeKind::Agent, Named::default());
        (inner.feed.subscribe(), inner.access_feed.subscribe())
    };
    state.lock().await.reset();
    // The old feeds are gone, so a long poll waiting on either looks again at once.
    for rx in [&mut waiting, &mut waiting_on_access] {
        let woken = tokio::time::timeout(Duration::from_secs(1), rx.changed()).await;
        assert!(woken.expect("woken at reset").is_err());
    }
    let mut inner = state.lock().await;
    assert_eq!(inner.feed.head(), 0);
    assert_eq!(inner.access_feed.head(), 0);
    assert!(inner.run_changes_after(0, 10).entries.is_empty());
    drop(inner);
    let (_, run) = state
        .create_run(req("wf-feed", "ag-writer", &["hi"]))
        .await
        .unwrap();
    let mut inner = state.lock().await;
    let changes = inner.run_changes_after(0, 10).entries;
    assert_eq!(changes[0].cursor, 1);
    assert_eq!(changes[0].run_id, run.id);
}

#[tokio::test]
async fn an_unavailable_agent_refuses_creates_as_an_unknown_one_until_available() {
    let state = AppState::new(fixtures(), 0.01);
    let unknown = state
        .create_run(req("wf-ghost", "ag-nobody", &["hi"]))
        .await
        .unwrap_err();
    state
        .lock()
        .await
        .unavailable_agents
        .insert("ag-writer".into());
    let refused = state
        .create_run(req("wf-off", "ag-writer", &["hi"]))
        .await
        .unwrap_err();
    assert_eq!(
        (refused.status, &refused.body.error),
        (unknown.status, &unknown.body.error)
    );
    assert_eq!(refused.body.error, "agent_not_found");
    assert_eq!(state.lock().await.stats.runs_created, 0);
    state.lock().await.reset();
    let (created, _) = state
        .create_run(req("wf-off", "ag-writer", &["hi"]))
        .await
        .unwrap();
    assert!(created, "the reset made it available again");
}

#[tokio::test]
async fn the_run_feed_times_out_a_run_past_its_deadline_when_read() {
    // Slow progression, so only the read can move the run on.
    let state = AppState::new(fixtures(), 100.0);
    let (_, run) = state
        .create_run(req("wf-late", "ag-writer", &["hi"]))
        .await
        .unwrap();
    let mut inner = state.lock().await;
    let past = Utc::now() - TimeDelta::seconds(1);
    assert!(inner.deadlines.remove(&(run.deadline_at, run.id.clone())));
    inner.deadlines.insert((past, run.id.clone()));
    inner.runs.get_mut(&run.id).unwrap().run.deadline_at = past;
    let changes = inner.run_changes_after(0, 10).entries;
    let statuses: Vec<_> = changes
        .iter()
        .map(|c| (c.cursor, c.seq, c.status))
        .collect();
    assert_eq!(
        statuses,
        [(1, 1, RunStatus::Queued), (2, 2, RunStatus::TimedOut)]
    );
    assert!(inner.deadlines.is_empty(), "each deadline is enforced once");
}

#[test]
fn access_changes_name_what_changed_in_order() {
    let inner = Inner::default();
    let first = inner.access_changed(
        AccessChangeKind::Agent,
        Named {
            tenant_id: Some("t-acme".into()),
            agent_id: Some("ag-writer".into()),
            ..Named::default()
        },
    );
    let second = inner.access_changed(
        AccessChangeKind::EvidenceGrant,
        Named {
            run_id: Some("run-1".into()),
            principal_id: Some("p-bob".into()),
            ..Named::default()
        },
    );
    assert_eq!((first, second), (1, 2));
    let changes = inner.access_changes_after(0, 10).entries;
    assert_eq!(changes[0].agent_id.as_deref(), Some("ag-writer"));
    assert_eq!(changes[1].kind, AccessChangeKind::EvidenceGrant);
    assert_eq!(changes[1].run_id.as_deref(), Some("run-1"));
    assert_eq!(changes[1].workspace_id, None);
    assert_eq!(inner.access_feed.head(), 2);
}

#[tokio::test]
async fn a_broken_reference_breaks_what_it_was_started_to_and_keeps_it_through_a_reset() {
    use crate::breaks::{Break, Breaks};
    let breaks = Breaks::new(&[Break::CreateOnce, Break::AccessReflects]);
    let state = AppState::with_breaks(fixtures(), 0.01, breaks);
    // Two creates at once fall into the gap between the check and the insert: two runs.
    let (a, b) = tokio::join!(
        state.create_run(req("wf-race", "ag-writer", &["hi"])),
        state.create_run(req("wf-race", "ag-writer", &["hi"])),
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert!(a.0 && b.0);
    assert_ne!(a.1.id, b.1.id);
    // Only what was asked for: a changed request is still a conflict.
    let conflict = state
        .create_run(req("wf-race", "ag-writer", &["other"]))
        .await
        .unwrap_err();
    assert_eq!(conflict.body.error, "workflow_id_conflict");
    let mut inner = state.lock().await;
    inner
        .workspace_grants
        .insert(("ws-acme-main".into(), "p-bob".into()), false);
    inner
        .evidence_grants
        .insert((a.1.id.clone(), "p-alice".into()), false);
    assert_eq!(
        inner.workspace_access(&state.fixtures, "ws-acme-main", "p-bob"),
        WorkspaceAccess::Granted,
        "a revocation the access API does not reflect"
    );
    assert_eq!(inner.evidence_granted(&a.1.id, "p-alice"), Some(true));
    inner.reset();
    assert_eq!(inner.breaks, breaks);
}
