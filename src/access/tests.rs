use super::*;
use crate::config::UpstreamConfig;
use crate::upstream::contract::{Agent, WorkspaceAccess};

fn cache(feed_trust: Duration, outage_grace: Duration) -> Arc<AccessCache> {
    // Nothing listens on port 9 here: a lookup that reaches Q fails without an answer.
    let upstream = UpstreamRunApi::new(&UpstreamConfig {
        url: "http://127.0.0.1:9".into(),
        connect_timeout_ms: 200,
        request_timeout_ms: 200,
        ..UpstreamConfig::default()
    })
    .unwrap();
    AccessCache::new(
        upstream,
        AccessSettings {
            feed_trust,
            outage_grace,
            capacity: 100,
        },
    )
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

fn key(t: &str, a: &str, p: &str) -> AgentKey {
    (t.into(), a.into(), p.into())
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

#[test]
fn cached_answers_are_trusted_only_within_the_window_after_the_feed_answered() {
    let c = cache(Duration::from_millis(200), Duration::ZERO);
    assert!(!c.trusted(), "trusted before the feed ever answered");
    c.confirm();
    assert!(c.trusted());
    std::thread::sleep(Duration::from_millis(300));
    assert!(!c.trusted(), "still trusted past the window");
}

#[test]
fn each_change_forgets_exactly_what_it_may_affect() {
    let c = cache(Duration::from_secs(5), Duration::ZERO);
    c.agents.insert(key("t", "ag", "alice"), access("ws-1"));
    c.agents.insert(key("t", "ag", "bob"), access("ws-1"));
    c.agents.insert(key("t", "ag2", "alice"), access("ws-2"));
    c.agents.insert(key("t2", "ag", "alice"), None);
    c.grants.insert(("run-1".into(), "alice".into()), true);
    c.grants.insert(("run-1".into(), "bob".into()), true);
    c.grants.insert(("run-2".into(), "alice".into()), true);

    let mut membership = change(AccessChangeKind::WorkspaceMembership);
    membership.workspace_id = Some("ws-1".into());
    membership.principal_id = Some("alice".into());
    c.apply(&membership);
    assert!(c.agents.get(&key("t", "ag", "alice")).is_none());
    assert!(c.agents.get(&key("t", "ag", "bob")).is_some());
    assert!(c.agents.get(&key("t", "ag2", "alice")).is_some());

    let mut grant = change(AccessChangeKind::EvidenceGrant);
    grant.run_id = Some("run-1".into());
    grant.principal_id = Some("bob".into());
    c.apply(&grant);
    assert!(c.grants.get(&("run-1".into(), "bob".into())).is_none());
    assert!(c.grants.get(&("run-1".into(), "alice".into())).is_some());

    let mut agent = change(AccessChangeKind::Agent);
    agent.tenant_id = Some("t2".into());
    agent.agent_id = Some("ag".into());
    c.apply(&agent);
    assert!(c.agents.get(&key("t2", "ag", "alice")).is_none());
    assert!(c.agents.get(&key("t", "ag", "bob")).is_some());

    let generation = c.generation.load(Ordering::Acquire);
    c.apply(&change(AccessChangeKind::Unknown));
    assert!(c.agents.get(&key("t", "ag", "bob")).is_none());
    assert!(c.grants.get(&("run-2".into(), "alice".into())).is_none());
    assert!(c.generation.load(Ordering::Acquire) > generation);
}

#[tokio::test]
async fn without_a_trusted_feed_every_lookup_asks_q_and_nothing_is_served_from_the_cache() {
    let c = cache(Duration::from_secs(5), Duration::ZERO);
    c.agents.insert(key("t", "ag", "alice"), access("ws-1"));
    c.grants.insert(("run-1".into(), "alice".into()), true);
    // Never confirmed: the cached answers must not be used, and Q cannot answer.
    assert!(c
        .agent_access("t", "ag", "alice", Purpose::Read)
        .await
        .is_err());
    assert!(c.evidence("run-1", "alice", Purpose::Read).await.is_err());
    c.confirm();
    assert!(c
        .agent_access("t", "ag", "alice", Purpose::Write)
        .await
        .unwrap()
        .is_some());
    assert!(c.evidence("run-1", "alice", Purpose::Write).await.unwrap());
}

#[tokio::test]
async fn in_an_outage_only_reads_use_the_last_known_answer_and_only_within_the_grace() {
    let c = cache(Duration::from_millis(50), Duration::from_millis(400));
    c.grants.insert(("run-1".into(), "alice".into()), true);
    c.confirm();
    std::thread::sleep(Duration::from_millis(100));
    assert!(!c.trusted());
    assert!(c.evidence("run-1", "alice", Purpose::Read).await.unwrap());
    assert!(c.evidence("run-1", "alice", Purpose::Write).await.is_err());
    assert!(
        c.evidence_many("alice", &["run-1".into()], Purpose::Read)
            .await
            .unwrap()["run-1"]
    );
    assert!(c
        .evidence_many("alice", &["run-1".into(), "run-9".into()], Purpose::Read)
        .await
        .is_err());
    std::thread::sleep(Duration::from_millis(400));
    assert!(c.evidence("run-1", "alice", Purpose::Read).await.is_err());
}

#[tokio::test]
async fn no_outage_grace_means_no_stale_answer() {
    let c = cache(Duration::from_millis(1), Duration::ZERO);
    c.grants.insert(("run-1".into(), "alice".into()), true);
    c.confirm();
    std::thread::sleep(Duration::from_millis(20));
    assert!(c.evidence("run-1", "alice", Purpose::Read).await.is_err());
}
