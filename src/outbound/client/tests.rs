//! Answer correlation, the message we send, where cards are looked for, and the delivery
//! meaning of outbound errors.

use super::*;
use serde_json::json;

fn task(v: Value) -> Task {
    serde_json::from_value(v).unwrap()
}

fn message(v: Value) -> Message {
    serde_json::from_value(v).unwrap()
}

#[test]
fn the_message_sent_carries_no_server_owned_ids() {
    let v = serde_json::to_value(send_request("order-4711", "Summarise")).unwrap();
    let m = &v["message"];
    assert_eq!(m["messageId"], "order-4711");
    assert_eq!(m["role"], "ROLE_USER");
    assert_eq!(m["parts"], json!([{"text": "Summarise"}]));
    for absent in [
        "contextId",
        "taskId",
        "referenceTaskIds",
        "metadata",
        "extensions",
    ] {
        assert!(m.get(absent).is_none(), "{absent} sent: {m}");
    }
    assert_eq!(v["configuration"]["returnImmediately"], true);
    assert!(v.get("tenant").is_none());
}

#[test]
fn a_task_in_the_remotes_own_context_correlates() {
    let t = task(
        json!({"id": "t1", "contextId": "remote-ctx", "status": {"state": "TASK_STATE_SUBMITTED"},
        "history": [{"messageId": "m", "role": "ROLE_USER", "taskId": "t1",
                     "contextId": "remote-ctx", "parts": [{"text": "x"}]}]}),
    );
    assert!(correlate_send(&SendMessageResponse::Task(t.clone()), "m").is_ok());
    // Without history there is nothing more to check than the JSON-RPC id.
    let bare =
        task(json!({"id": "t1", "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}}));
    assert!(correlate_send(&SendMessageResponse::Task(bare), "m").is_ok());
}

#[test]
fn a_task_made_from_other_messages_is_uncorrelated() {
    let t = task(
        json!({"id": "t1", "contextId": "ctx", "status": {"state": "TASK_STATE_SUBMITTED"},
        "history": [{"messageId": "someone-else", "role": "ROLE_USER", "taskId": "t1",
                     "contextId": "ctx", "parts": [{"text": "x"}]},
                    {"messageId": "r", "role": "ROLE_AGENT", "parts": [{"text": "y"}]}]}),
    );
    let e = correlate_send(&SendMessageResponse::Task(t), "m").unwrap_err();
    assert_eq!(e.reason(), "uncorrelated");
    assert_eq!(e.delivery(), Delivery::MaybeSent);
}

#[test]
fn a_task_carrying_another_task_or_context_is_uncorrelated() {
    let other_task = task(
        json!({"id": "t1", "contextId": "ctx", "status": {"state": "TASK_STATE_SUBMITTED"},
        "history": [{"messageId": "m", "role": "ROLE_USER", "taskId": "t2", "contextId": "ctx",
                      "parts": [{"text": "x"}]}]}),
    );
    assert!(correlate_send(&SendMessageResponse::Task(other_task), "m").is_err());
    let other_context = task(
        json!({"id": "t1", "contextId": "ctx", "status": {"state": "TASK_STATE_WORKING",
        "message": {"messageId": "s", "role": "ROLE_AGENT", "contextId": "elsewhere",
                    "parts": [{"text": "x"}]}}}),
    );
    assert!(correlate_send(&SendMessageResponse::Task(other_context), "m").is_err());
}

#[test]
fn a_message_answer_is_the_agents_and_not_ours() {
    let reply = message(
        json!({"messageId": "r", "role": "ROLE_AGENT", "contextId": "any",
                               "taskId": "remote-task", "parts": [{"text": "hi"}]}),
    );
    assert!(correlate_send(&SendMessageResponse::Message(reply), "m").is_ok());
    let user = message(json!({"messageId": "r", "role": "ROLE_USER", "parts": [{"text": "hi"}]}));
    assert!(correlate_send(&SendMessageResponse::Message(user), "m").is_err());
    let echo = message(json!({"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "x"}]}));
    let e = correlate_send(&SendMessageResponse::Message(echo), "m").unwrap_err();
    assert_eq!(e.reason(), "uncorrelated");
}

#[test]
fn a_read_is_the_task_asked_for_in_the_context_recorded() {
    let t =
        task(json!({"id": "t1", "contextId": "ctx", "status": {"state": "TASK_STATE_COMPLETED"}}));
    assert!(correlate_read(&t, "t1", Some("ctx")).is_ok());
    assert!(correlate_read(&t, "t1", None).is_ok());
    assert!(correlate_read(&t, "t2", Some("ctx")).is_err());
    assert!(correlate_read(&t, "t1", Some("other")).is_err());
}

fn urls(endpoint: &str) -> Vec<(String, bool)> {
    card_urls(&Url::parse(endpoint).unwrap())
        .into_iter()
        .map(|(u, c)| (u.to_string(), c))
        .collect()
}

#[test]
fn cards_are_looked_for_under_the_agent_then_at_the_origin() {
    assert_eq!(
        urls("https://q.example/v1/a2a/agents/ag-writer/rpc"),
        vec![
            (
                "https://q.example/v1/a2a/agents/ag-writer/.well-known/agent-card.json".into(),
                true
            ),
            (
                "https://q.example/.well-known/agent-card.json".into(),
                false
            ),
        ]
    );
    assert_eq!(
        urls("https://remote.example:8443/a2a/rpc?x=1"),
        vec![
            (
                "https://remote.example:8443/a2a/.well-known/agent-card.json".into(),
                true
            ),
            (
                "https://remote.example:8443/.well-known/agent-card.json".into(),
                false
            ),
        ]
    );
    // No agent path to derive: only the origin's public card.
    for endpoint in [
        "https://remote.example/rpc",
        "https://remote.example/a2a/jsonrpc",
    ] {
        assert_eq!(
            urls(endpoint),
            vec![(
                "https://remote.example/.well-known/agent-card.json".into(),
                false
            )],
            "{endpoint}"
        );
    }
}

#[test]
fn only_certain_non_delivery_allows_another_send() {
    let refused = OutboundError::Policy(PolicyRefusal {
        reason: "loopback",
        target: "127.0.0.1".into(),
    });
    assert_eq!(refused.delivery(), Delivery::NotSent);
    assert_eq!(
        OutboundError::ambiguous("timeout", "x").delivery(),
        Delivery::MaybeSent
    );
    let remote = OutboundError::Refused {
        reason: "remote_rpc_error",
        http_status: 200,
        rpc_code: Some(-32602),
        message: "bad".into(),
    };
    assert_eq!(remote.delivery(), Delivery::MaybeSent);
    assert_eq!(remote.to_json()["rpcCode"], -32602);
}

/// Remote calls by name through a DNS server on loopback (`agent.test` → 127.0.0.1,
/// allowlisted), or through one that never answers.
mod by_name {
    use std::net::Ipv4Addr;
    use std::time::Instant;

    use super::*;
    use crate::outbound::policy::test_dns::LoopbackDns;
    use crate::outbound::policy::{DnsSettings, PolicyResolver};

    fn client(dns: &LoopbackDns, timeout_ms: u64) -> RemoteAgentClient {
        let config = OutboundConfig {
            allow_http: true,
            ..OutboundConfig::default()
        };
        let policy = Arc::new(OutboundPolicy::new(
            true,
            vec!["127.0.0.1/32".parse().unwrap()],
        ));
        let settings = DnsSettings {
            timeout: Duration::from_millis(timeout_ms),
            attempts: 2,
        };
        let resolver = PolicyResolver::with_udp_name_servers(policy, &[dns.addr], settings);
        RemoteAgentClient::new(&config, Arc::new(resolver.unwrap())).unwrap()
    }

    /// A local HTTP server answering every request with a card.
    async fn card_server() -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let app = axum::Router::new()
            .fallback(|| async { axum::Json(json!({"name": "Remote by name"})) });
        tokio::spawn(async move { axum::serve(listener, app).await });
        port
    }

    /// A loopback port nobody listens on.
    async fn closed_port() -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        listener.local_addr().unwrap().port()
    }

    #[tokio::test]
    async fn a_name_the_dns_server_answers_reaches_the_remote() {
        let dns = LoopbackDns::answering(Ipv4Addr::LOCALHOST).await;
        let port = card_server().await;
        let endpoint = format!("http://agent.test:{port}/a2a/rpc");
        let target = Target {
            endpoint: &endpoint,
            credential: None,
        };
        let card = client(&dns, 2_000).fetch_card(&target).await.unwrap();
        assert_eq!(card["name"], "Remote by name");
        assert!(dns.queries() > 0);
    }

    #[tokio::test]
    async fn a_silent_dns_server_fails_the_call_with_dns_timeout_before_sending() {
        let dns = LoopbackDns::silent().await;
        let client = client(&dns, 300);
        let endpoint = format!("http://agent.test:{}/a2a/rpc", closed_port().await);
        let target = Target {
            endpoint: &endpoint,
            credential: None,
        };
        let started = Instant::now();
        let err = client.send_message(&target, "m-1", "hi").await.unwrap_err();
        assert_eq!(err.reason(), "dns_timeout", "{err}");
        assert_eq!(err.delivery(), Delivery::NotSent);
        assert!(err.to_string().contains("agent.test"), "{err}");
        assert!(started.elapsed() < Duration::from_millis(1_000));
        assert!(dns.queries() > 0);

        // A literal address is dialled without any query.
        let before = dns.queries();
        let endpoint = format!("http://127.0.0.1:{}/a2a/rpc", closed_port().await);
        let target = Target {
            endpoint: &endpoint,
            credential: None,
        };
        let err = client.send_message(&target, "m-2", "hi").await.unwrap_err();
        assert_eq!(err.reason(), "connect", "{err}");
        assert_eq!(dns.queries(), before);
    }
}

#[test]
fn only_definite_refusals_are_refusals() {
    use super::error::{refuses_definitely, rpc_refuses_definitely};
    // "Not now" answers leave the outcome open; the endpoint's other 4xx refuse the request.
    for status in [400, 401, 403, 404, 405, 413, 415] {
        assert!(refuses_definitely(status), "{status}");
    }
    for status in [200, 302, 408, 425, 429, 500, 502, 503, 504] {
        assert!(!refuses_definitely(status), "{status}");
    }
    for code in [
        -32700, -32600, -32601, -32602, -32001, -32002, -32004, -32009,
    ] {
        assert!(rpc_refuses_definitely(code), "{code}");
    }
    // Internal error, an invalid answer of the agent's own upstream, a server-defined code.
    for code in [-32603, -32006, -32000, -32099, 0, 42] {
        assert!(!rpc_refuses_definitely(code), "{code}");
    }
}
