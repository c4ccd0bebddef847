//! The outbound policy at connect time: literal and resolved addresses, oversized and slow
//! answers, and redirects.

use std::time::Duration;

use serde_json::json;

use crate::support::outbound::{id_of, OutboundGateway};
use crate::support::python::Remote;

/// The policy at connect time, through the real gateway: every bypass attempt is refused and
/// the reason logged as the structured field `reason`.
#[tokio::test]
async fn outbound_policy_refuses_bypass_attempts() {
    let gw = OutboundGateway::start(&[("Q_A2A_OUTBOUND_REQUEST_TIMEOUT_MS", "1500")]).await;
    let normal = Remote::start(&[]).await;
    let port = normal.url.rsplit(':').next().unwrap().to_string();

    // Literal addresses (127.0.0.1/32 is allowlisted, nothing else is).
    let literals = [
        (format!("http://2130706434:{port}/a2a/rpc"), "loopback"),
        (format!("http://0x7f.0.0.2:{port}/a2a/rpc"), "loopback"),
        (format!("http://0177.0.0.2:{port}/a2a/rpc"), "loopback"),
        (format!("http://127.2:{port}/a2a/rpc"), "loopback"),
        (format!("http://[::1]:{port}/a2a/rpc"), "loopback"),
        (
            format!("http://[::ffff:127.0.0.2]:{port}/a2a/rpc"),
            "loopback",
        ),
        (format!("http://0.0.0.0:{port}/a2a/rpc"), "unspecified"),
        (
            "http://169.254.169.254/latest/meta-data/".to_string(),
            "link_local",
        ),
        ("http://[fd00::1]/rpc".to_string(), "unique_local"),
        ("http://192.168.0.10/rpc".to_string(), "private"),
    ];
    for (endpoint, reason) in &literals {
        let (status, v) = gw
            .post_registration(json!({"name": "bad", "endpoint": endpoint}))
            .await;
        assert_eq!(status, 400, "{endpoint}: {v}");
        assert!(
            v["message"].as_str().unwrap().contains(reason),
            "{endpoint}: {v}"
        );
        assert!(gw.logged_reason(reason).await, "{reason} logged");
    }

    // Oversized answers: the read stops at the cap.
    let big = Remote::start(&["--mode", "oversize"]).await;
    let reg = id_of(&gw.register("Big", &big.rpc_url(), None).await);
    let (_, v) = gw.delegate("task-big", &reg, "x").await;
    assert_eq!(
        (v["status"].clone(), v["error"]["reason"].clone()),
        (json!("unknown"), json!("response_too_large")),
        "{v}"
    );
    let (status, v) = gw.discover(&reg).await;
    assert_eq!(
        (status, v["reason"].clone()),
        (502, json!("response_too_large"))
    );

    // Slow answers: the total time limit ends the call.
    let slow = Remote::start(&["--mode", "slow", "--delay", "5"]).await;
    let reg = id_of(&gw.register("Slow", &slow.rpc_url(), None).await);
    let started = std::time::Instant::now();
    let (_, v) = gw.delegate("task-slow", &reg, "x").await;
    assert_eq!(
        (v["status"].clone(), v["error"]["reason"].clone()),
        (json!("unknown"), json!("timeout")),
        "{v}"
    );
    assert!(started.elapsed() < Duration::from_secs(4));

    // A redirect to the metadata service is not followed.
    let redirector = Remote::start(&[
        "--mode",
        "redirect",
        "--redirect-to",
        "http://169.254.169.254/latest/meta-data/",
    ])
    .await;
    let reg = id_of(&gw.register("Redirector", &redirector.rpc_url(), None).await);
    let (_, v) = gw.delegate("task-redirect", &reg, "x").await;
    assert_eq!(v["error"]["reason"], "redirect", "{v}");

    for reason in ["response_too_large", "timeout", "redirect"] {
        assert!(gw.logged_reason(reason).await, "{reason} logged");
    }

    // A name that resolves to loopback, with no allowlist: refused when connecting, for
    // delegation and discovery alike; nothing reaches the remote.
    let strict = OutboundGateway::start(&[("Q_A2A_OUTBOUND_ALLOW_CIDRS", "")]).await;
    let by_name = format!("http://localhost:{port}/a2a/rpc");
    let reg = id_of(
        &strict
            .register("By name", &by_name, Some("never-sent"))
            .await,
    );
    let before = normal.seen().await.len();
    let (status, v) = strict.delegate("task-name", &reg, "x").await;
    assert_eq!(status, 200);
    assert_eq!(v["status"], "failed", "certainly not sent: {v}");
    assert_eq!(v["error"]["reason"], "loopback", "{v}");
    assert_eq!(v["error"]["mayHaveReachedRemote"], false);
    let (status, v) = strict.discover(&reg).await;
    assert_eq!((status, v["reason"].clone()), (502, json!("loopback")));
    assert_eq!(
        normal.seen().await.len(),
        before,
        "nothing reached the remote"
    );
    assert!(strict.logged_reason("loopback").await);
    // The literal allowlisted address is refused too without the allowlist.
    let (status, _) = strict
        .post_registration(json!({"name": "lit", "endpoint": normal.rpc_url()}))
        .await;
    assert_eq!(status, 400);
}

/// A remote registered by name is reached through the gateway's resolver: `localhost` answers
/// without a DNS query, and its allowlisted address (127.0.0.1) is the one dialled, for
/// discovery and delegation alike.
#[tokio::test]
async fn a_remote_registered_by_name_is_reached_through_the_resolver() {
    let gw = OutboundGateway::start(&[("Q_A2A_OUTBOUND_DNS_TIMEOUT_MS", "1000")]).await;
    let remote = Remote::start(&[]).await;
    let port = remote.url.rsplit(':').next().unwrap().to_string();
    let by_name = format!("http://localhost:{port}/a2a/rpc");
    let reg = id_of(&gw.register("By name", &by_name, None).await);
    let (status, v) = gw.discover(&reg).await;
    assert_eq!(status, 200, "{v}");
    let (status, v) = gw.delegate("task-by-name", &reg, "hello by name").await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["status"], "completed", "{v}");
    assert!(remote.seen().await.iter().any(|r| r["path"] == "/a2a/rpc"));
}

/// A remote whose card and answers fit the byte caps but are as dense as JSON gets (`{"":0}`
/// repeated in a valid card's extension params and in a task's metadata): the card is refused
/// before it is parsed, with `response_too_complex`, and nothing of it is stored; a delegation
/// that may have reached the remote is `unknown` with the same reason, and no result or remote
/// task is recorded from the answer.
#[tokio::test]
async fn answers_too_complex_to_parse_are_refused_and_nothing_is_stored() {
    let gw = OutboundGateway::start(&[]).await;
    let dense = Remote::start(&["--mode", "dense"]).await;
    let reg = id_of(&gw.register("Dense", &dense.rpc_url(), None).await);

    let (status, v) = gw.discover(&reg).await;
    assert_eq!(
        (status, v["error"].clone(), v["reason"].clone()),
        (
            502,
            json!("remote_agent_failed"),
            json!("response_too_complex")
        ),
        "{}",
        shown(&v)
    );
    assert!(
        v["message"].as_str().unwrap().contains("more than"),
        "the bound is named: {v}"
    );
    // The card was served (under the agent's path, the first place looked), and not stored.
    assert!(dense
        .seen()
        .await
        .iter()
        .any(|r| r["path"] == "/a2a/.well-known/agent-card.json"));
    let (_, stored) = gw.registration(&reg).await;
    assert_eq!(
        (
            stored["discoveredCard"].clone(),
            stored["discoveredAt"].clone()
        ),
        (json!(null), json!(null)),
        "{}",
        shown(&stored)
    );
    assert_eq!(
        gw.db
            .count(
                "SELECT count(*) FROM a2a_remote_agents
                 WHERE discovered_card IS NOT NULL OR discovered_at IS NOT NULL"
            )
            .await,
        0
    );

    let (status, v) = gw.delegate("task-dense", &reg, "x").await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (
            v["status"].clone(),
            v["error"]["reason"].clone(),
            v["error"]["mayHaveReachedRemote"].clone()
        ),
        (json!("unknown"), json!("response_too_complex"), json!(true)),
        "{}",
        shown(&v)
    );
    assert_eq!(dense.count("SendMessage").await, 1);
    assert_eq!(
        gw.db
            .count(
                "SELECT count(*) FROM a2a_delegations
                 WHERE result IS NULL AND remote_task_id IS NULL AND outcome = 'unknown'
                   AND error->>'reason' = 'response_too_complex'"
            )
            .await,
        1
    );
    assert!(gw.logged_reason("response_too_complex").await);
}

/// At most the first 400 characters of `v`: a dense card or answer runs to a megabyte.
fn shown(v: &serde_json::Value) -> String {
    v.to_string().chars().take(400).collect()
}
