use super::*;
use crate::config::UpstreamConfig;
use crate::upstream::contract::{Agent, WorkspaceAccess};

fn settings(feed_trust_ms: u64, direct_ttl_ms: u64, outage_grace: Duration) -> AccessSettings {
    AccessSettings {
        feed_trust: Duration::from_millis(feed_trust_ms),
        direct_ttl: Duration::from_millis(direct_ttl_ms),
        max_age: Duration::from_secs(60),
        outage_grace,
        capacity: 100,
    }
}

fn cache(settings: AccessSettings) -> Arc<AccessCache> {
    // Nothing listens on port 9 here: a lookup that reaches Q fails without an answer.
    let upstream = UpstreamRunApi::new(&UpstreamConfig {
        url: "http://127.0.0.1:9".into(),
        connect_timeout_ms: 200,
        request_timeout_ms: 200,
        ..UpstreamConfig::default()
    })
    .unwrap();
    AccessCache::new(upstream, settings)
}

fn access(workspace: &str) -> Option<AgentAccess> {
    Some(AgentAccess {
        agent: Agent {
            id: "ag".into(),
            tenant_id: "t".into(),
            name: "n".into(),
            description: "d".into(),
            version: "1".into(),
            workspace_id: workspace.into(),
        },
        workspace_access: WorkspaceAccess::Granted,
    })
}

fn who<'a>(t: &'a str, a: &'a str, p: &'a str) -> Who<'a> {
    Who {
        tenant_id: t,
        agent_id: a,
        principal_id: p,
        last_known: false,
    }
}

fn key(t: &str, a: &str, p: &str) -> AgentKey {
    Key::new(&[t, a, p])
}

/// Puts Q's answers in the caches as a fetch that starts now would.
fn seed(c: &AccessCache, agents: &[(&str, &str, &str)], grants: &[(&str, &str)]) {
    for (t, a, p) in agents {
        c.agents.insert(
            key(t, a, p),
            access("ws-1").map(Into::into),
            c.invalidations.begin(),
        );
    }
    for (run, p) in grants {
        c.grants
            .insert(Key::new(&[run, p]), true, c.invalidations.begin());
    }
}

fn change(kind: AccessChangeKind) -> AccessChange {
    AccessChange {
        cursor: 1,
        kind,
        tenant_id: None,
        workspace_id: None,
        principal_id: None,
        agent_id: None,
        run_id: None,
        at: chrono::Utc::now(),
    }
}

/// Whether the agent access of (t, a, p) is served from the cache (Q cannot answer here).
async fn agent_cached(c: &AccessCache, t: &str, a: &str, p: &str) -> bool {
    c.agent_access(who(t, a, p), Purpose::Current).await.is_ok()
}

async fn grant_cached(c: &AccessCache, run: &str, p: &str) -> bool {
    c.evidence(run, p).await.is_ok()
}

#[test]
fn the_feed_vouches_only_within_the_window_after_a_caught_up_poll_was_sent() {
    let c = cache(settings(200, 100, Duration::ZERO));
    assert!(!c.trusted(), "trusted before the feed ever answered");
    c.confirm(Instant::now());
    assert!(c.trusted());
    // A poll sent 300 ms ago vouches for nothing now, whenever its answer arrived.
    c.confirm(Instant::now() - Duration::from_millis(300));
    std::thread::sleep(Duration::from_millis(250));
    assert!(!c.trusted(), "still trusted past the window");
    // An older confirmation never moves the stamp back.
    c.confirm(Instant::now());
    c.confirm(Instant::now() - Duration::from_secs(10));
    assert!(c.trusted());
}

#[tokio::test]
async fn each_change_invalidates_exactly_what_it_names() {
    let c = cache(settings(5_000, 1_000, Duration::ZERO));
    c.confirm(Instant::now());
    seed(
        &c,
        &[
            ("t", "ag", "alice"),
            ("t", "ag", "bob"),
            ("t", "ag2", "alice"),
            ("t2", "ag", "carol"),
        ],
        &[("run-1", "alice"), ("run-1", "bob"), ("run-2", "alice")],
    );

    let mut membership = change(AccessChangeKind::WorkspaceMembership);
    membership.workspace_id = Some("ws-1".into());
    membership.principal_id = Some("alice".into());
    c.apply(&membership);
    // Every agent entry of alice, whatever workspace it was cached under.
    assert!(!agent_cached(&c, "t", "ag", "alice").await);
    assert!(!agent_cached(&c, "t", "ag2", "alice").await);
    assert!(agent_cached(&c, "t", "ag", "bob").await);

    let mut grant = change(AccessChangeKind::EvidenceGrant);
    grant.run_id = Some("run-1".into());
    grant.principal_id = Some("bob".into());
    c.apply(&grant);
    assert!(!grant_cached(&c, "run-1", "bob").await);
    assert!(grant_cached(&c, "run-1", "alice").await);

    let mut agent = change(AccessChangeKind::Agent);
    agent.tenant_id = Some("t2".into());
    agent.agent_id = Some("ag".into());
    c.apply(&agent);
    assert!(!agent_cached(&c, "t2", "ag", "carol").await);
    assert!(agent_cached(&c, "t", "ag", "bob").await);

    c.apply(&change(AccessChangeKind::Unknown));
    assert!(!agent_cached(&c, "t", "ag", "bob").await);
    assert!(!grant_cached(&c, "run-2", "alice").await);
}

#[tokio::test]
async fn a_change_missing_an_id_its_kind_names_forgets_everything() {
    for (kind, named) in [
        (AccessChangeKind::EvidenceGrant, "run only"),
        (AccessChangeKind::WorkspaceMembership, "workspace only"),
        (AccessChangeKind::Agent, "agent only"),
    ] {
        let c = cache(settings(5_000, 1_000, Duration::ZERO));
        c.confirm(Instant::now());
        seed(&c, &[("t", "ag", "bob")], &[("run-2", "alice")]);
        let mut partial = change(kind);
        partial.run_id = Some("run-1".into());
        partial.workspace_id = Some("ws-1".into());
        partial.agent_id = Some("ag-9".into());
        c.apply(&partial);
        assert!(!agent_cached(&c, "t", "ag", "bob").await, "{named}");
        assert!(!grant_cached(&c, "run-2", "alice").await, "{named}");
    }
}

#[tokio::test]
async fn without_the_feed_an_answer_serves_only_within_its_direct_bound() {
    let c = cache(settings(1_000, 150, Duration::ZERO));
    seed(&c, &[("t", "ag", "alice")], &[("run-1", "alice")]);
    // Never confirmed: fresh answers still serve, within the direct bound.
    assert!(agent_cached(&c, "t", "ag", "alice").await);
    assert!(grant_cached(&c, "run-1", "alice").await);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!agent_cached(&c, "t", "ag", "alice").await);
    assert!(!grant_cached(&c, "run-1", "alice").await);
    // The feed caught up: the same entries serve again (no change named them).
    c.confirm(Instant::now());
    assert!(agent_cached(&c, "t", "ag", "alice").await);
    assert!(grant_cached(&c, "run-1", "alice").await);
}

#[tokio::test]
async fn every_answer_has_a_hard_time_to_live() {
    let mut s = settings(1_000, 100, Duration::ZERO);
    s.max_age = Duration::from_millis(150);
    let c = cache(s);
    seed(&c, &[("t", "ag", "alice")], &[]);
    c.confirm(Instant::now());
    assert!(agent_cached(&c, "t", "ag", "alice").await);
    tokio::time::sleep(Duration::from_millis(200)).await;
    c.confirm(Instant::now());
    assert!(
        !agent_cached(&c, "t", "ag", "alice").await,
        "served past max_age"
    );
}

#[tokio::test]
async fn no_outage_means_no_last_known_answer_and_never_content() {
    // Q unreachable, but not down (no consecutive failures recorded): fail closed.
    let c = cache(settings(50, 50, Duration::from_secs(60)));
    seed(&c, &[("t", "ag", "alice")], &[("run-1", "alice")]);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(c
        .agent_access(who("t", "ag", "alice"), Purpose::Read)
        .await
        .is_err());
    assert!(c
        .clearance(who("t", "ag", "alice"), Some("run-1"), Purpose::Read)
        .await
        .is_err());
}

#[tokio::test]
async fn within_an_outage_grace_reads_get_receipts_and_nothing_else_does() {
    let c = cache(settings(50, 50, Duration::from_secs(60)));
    seed(&c, &[("t", "ag", "alice")], &[("run-1", "alice")]);
    c.reachability.answered();
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Three lookups that reach no Q, and no answer for over a second: Q is down.
    for _ in 0..3 {
        let _ = c
            .agent_access(who("t", "ag", "nobody"), Purpose::Current)
            .await;
    }
    tokio::time::sleep(crate::upstream::reachability::DOWN_AFTER_SILENCE).await;
    assert!(c.reachability.is_down());
    // The last known agent access decides whether the caller sees its tasks at all...
    assert!(c
        .agent_access(who("t", "ag", "alice"), Purpose::Read)
        .await
        .unwrap()
        .is_some());
    // ...but no read is cleared for content, and nothing else is answered.
    assert!(c
        .clearance(who("t", "ag", "alice"), Some("run-1"), Purpose::Read)
        .await
        .unwrap()
        .is_none());
    assert!(c
        .agent_access(who("t", "ag", "alice"), Purpose::Current)
        .await
        .is_err());
    assert!(c
        .clearance(who("t", "ag", "alice"), Some("run-1"), Purpose::Current)
        .await
        .is_err());
}

#[tokio::test]
async fn a_last_known_caller_is_never_cleared_for_content() {
    let c = cache(settings(5_000, 1_000, Duration::ZERO));
    c.confirm(Instant::now());
    seed(&c, &[("t", "ag", "alice")], &[("run-1", "alice")]);
    let mut last_known = who("t", "ag", "alice");
    assert!(c
        .clearance(last_known, Some("run-1"), Purpose::Read)
        .await
        .unwrap()
        .is_some());
    last_known.last_known = true;
    assert!(c
        .clearance(last_known, Some("run-1"), Purpose::Read)
        .await
        .unwrap()
        .is_none());
}
