//! Delegation to registered remote agents: completion, credentials reaching only their origin,
//! repeats answered from the record, redirects not followed, and ambiguous outcomes (a lost
//! send, a lost answer after a task id, an uncorrelated answer) never sent twice.

use reqwest::Method;
use serde_json::{json, Value};

use crate::support::outbound::{id_of, OutboundGateway, ADMIN};
use crate::support::python::Remote;
use crate::support::PUBLIC_BASE;

/// A gateway and a remote agent in fault `mode`, registered as `name` without a credential.
async fn with_remote(name: &str, mode: &str) -> (OutboundGateway, Remote, String) {
    let gw = OutboundGateway::start(&[]).await;
    let remote = Remote::start(&["--mode", mode]).await;
    let reg = id_of(&gw.register(name, &remote.rpc_url(), None).await);
    (gw, remote, reg)
}

#[tokio::test]
async fn delegation_completes_and_credentials_reach_only_their_origin() {
    let gw = OutboundGateway::start(&[]).await;
    let secret_a = "secret-for-A-only";
    let a = Remote::start(&["--require-token", secret_a]).await;
    let b = Remote::start(&[]).await;
    let reg_a = id_of(&gw.register("A", &a.rpc_url(), Some(secret_a)).await);
    let reg_b = id_of(&gw.register("B", &b.rpc_url(), None).await);

    let (status, v) = gw
        .delegate("task-a-1", &reg_a, "Summarise the profile")
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["status"], "completed", "{v}");
    assert_eq!(v["taskId"], "task-a-1");
    assert_eq!(v["agentId"], json!(reg_a));
    let task = &v["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(v["remoteTaskId"], task["id"]);
    let part = &task["artifacts"][0]["parts"][0];
    assert_eq!(part["mediaType"], "text/markdown");
    assert!(part["text"]
        .as_str()
        .unwrap()
        .contains("Summarise the profile"));
    // The caller's taskId is the outbound messageId.
    assert!(task["history"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["messageId"] == "task-a-1"));

    let remote_a_task = v["remoteTaskId"].clone();
    let (_, v) = gw.delegate("task-b-1", &reg_b, "Hello B").await;
    assert_eq!(v["status"], "completed", "{v}");

    // A saw its credential on every call; B never saw it (nor any credential).
    let seen_a = a.seen().await;
    assert!(seen_a.iter().filter(|r| r["path"] == "/a2a/rpc").count() >= 1);
    for r in seen_a.iter().filter(|r| r["path"] == "/a2a/rpc") {
        assert_eq!(r["authorization"], format!("Bearer {secret_a}"));
    }
    for r in b.seen().await {
        assert_eq!(r["authorization"], Value::Null, "{r}");
    }

    // A repeat answers from the record; the message is not sent again.
    let (_, again) = gw
        .delegate("task-a-1", &reg_a, "Summarise the profile")
        .await;
    assert_eq!(again["status"], "completed");
    assert_eq!(again["remoteTaskId"], remote_a_task);
    assert_eq!(a.count("SendMessage").await, 1);

    // The same taskId with other content is a conflict; nothing is sent.
    let (status, v) = gw.delegate("task-a-1", &reg_a, "Something else").await;
    assert_eq!(status, 409, "{v}");
    assert_eq!(v["error"], "task_id_conflict");
    assert_eq!(a.count("SendMessage").await, 1);

    // A redirect is not followed: C (with its own credential) points at B.
    let c = Remote::start(&["--mode", "redirect", "--redirect-to", &b.rpc_url()]).await;
    let reg_c = id_of(&gw.register("C", &c.rpc_url(), Some("secret-for-C")).await);
    let before = b.seen().await.len();
    let (status, v) = gw.delegate("task-c-1", &reg_c, "Follow me").await;
    assert_eq!(status, 200);
    assert_eq!(v["status"], "unknown", "{v}");
    assert_eq!(v["error"]["reason"], "redirect");
    assert_eq!(
        b.seen().await.len(),
        before,
        "B saw nothing from the redirect"
    );
    for r in b.seen().await {
        assert_eq!(r["authorization"], Value::Null);
    }

    // Local q.* targets are retired.
    let (status, v) = gw.delegate("task-q-1", "q.writer", "hi").await;
    assert_eq!(status, 410, "{v}");
    assert_eq!(v["error"], "local_target_retired");
    assert_eq!(
        v["a2a"]["rpcUrl"],
        format!("{}/v1/a2a/agents/writer/rpc", PUBLIC_BASE)
    );

    // Request errors.
    let (status, v) = gw
        .call(
            Method::POST,
            "/v1/a2a/tasks",
            Some(ADMIN),
            Some(json!({"agentId": reg_b, "text": "x"})),
        )
        .await;
    assert_eq!((status, v["field"].clone()), (400, json!("taskId")));
    let (status, _) = gw.delegate_as("tok-alice-read", "t", &reg_b, "x").await;
    assert_eq!(status, 403, "a2a:delegate is required");
    let (status, _) = gw.delegate_as("tok-carol", "t", &reg_b, "x").await;
    assert_eq!(
        status, 404,
        "another tenant's registration does not exist for carol"
    );
    let (status, _) = gw.delegate("task-x", "ag-writer", "x").await;
    assert_eq!(status, 404, "only registered agents are targets");
}

#[tokio::test]
async fn ambiguous_send_is_unknown_and_never_sent_again() {
    let (gw, remote, reg) = with_remote("Dropper", "drop-send").await;

    let (status, v) = gw.delegate("task-drop-1", &reg, "Do it once").await;
    assert_eq!(status, 200, "ambiguity is not a failure: {v}");
    assert_eq!(v["status"], "unknown", "{v}");
    assert_eq!(v["remoteTaskId"], Value::Null);
    assert_eq!(v["result"], Value::Null);
    assert_eq!(v["error"]["mayHaveReachedRemote"], true);
    assert!(
        gw.logged_reason(v["error"]["reason"].as_str().unwrap())
            .await
    );

    // No remote task id was received: the repeat answers unknown without contacting the remote.
    let (_, again) = gw.delegate("task-drop-1", &reg, "Do it once").await;
    assert_eq!(again["status"], "unknown", "{again}");
    assert_eq!(remote.count("SendMessage").await, 1);
    assert_eq!(remote.count("GetTask").await, 0);
}

#[tokio::test]
async fn lost_answer_after_a_task_id_reconciles_through_get_task() {
    let (gw, remote, reg) = with_remote("Flaky", "drop-get").await;

    let (status, v) = gw.delegate("task-flaky-1", &reg, "Take your time").await;
    assert_eq!(status, 200);
    assert_eq!(v["status"], "unknown", "{v}");
    let remote_task_id = v["remoteTaskId"]
        .as_str()
        .expect("task id was received")
        .to_string();

    let (_, again) = gw.delegate("task-flaky-1", &reg, "Take your time").await;
    assert_eq!(again["status"], "completed", "{again}");
    assert_eq!(again["remoteTaskId"], json!(remote_task_id));
    assert_eq!(again["result"]["task"]["id"], json!(remote_task_id));
    assert_eq!(remote.count("SendMessage").await, 1, "never sent twice");
    assert!(remote.count("GetTask").await >= 2);
}

#[tokio::test]
async fn answer_with_another_json_rpc_id_is_not_used() {
    let (gw, remote, reg) = with_remote("Confused", "mismatched-id").await;

    let (status, v) = gw
        .delegate("task-mm-1", &reg, "Who are you answering?")
        .await;
    assert_eq!(status, 200);
    // The request was delivered and may have been acted on, so the outcome is unknown; the
    // uncorrelated answer (and its task id) is discarded, not used.
    assert_eq!(v["status"], "unknown", "{v}");
    assert_eq!(v["error"]["reason"], "uncorrelated");
    assert_eq!(v["result"], Value::Null);
    assert_eq!(v["remoteTaskId"], Value::Null);
    assert!(gw.logged_reason("uncorrelated").await);
    let (_, again) = gw
        .delegate("task-mm-1", &reg, "Who are you answering?")
        .await;
    assert_eq!(again["status"], "unknown");
    assert_eq!(remote.count("SendMessage").await, 1);
}

/// A remote answer with NUL characters (valid JSON, which PostgreSQL's text and jsonb cannot
/// hold) is stored with each NUL replaced, and never leaves the delegation stuck.
#[tokio::test]
async fn nul_characters_in_a_remote_answer_do_not_wedge_the_delegation() {
    let gw = OutboundGateway::start(&[]).await;
    let remote = Remote::start(&["--mode", "nul-answer"]).await;
    let reg = id_of(&gw.register("nul", &remote.rpc_url(), None).await);
    let (status, v) = gw.delegate("task-nul-1", &reg, "Hello").await;
    assert_eq!(status, 200, "{v}");
    assert_ne!(v["status"], "sending", "{v}");
    assert!(!v.to_string().contains("\\u0000"), "{v}");
    let stored: String = gw
        .db
        .one("SELECT status FROM a2a_delegations WHERE task_id = 'task-nul-1'")
        .await;
    assert_ne!(stored, "sending");
    // A repeat answers from the record.
    let (status, again) = gw.delegate("task-nul-1", &reg, "Hello").await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["status"], v["status"]);
}

/// What one remote answer makes of a delegation: `unknown` unless the answer is a definite
/// refusal (docs/outbound.md, "Which remote answers are refusals").
#[tokio::test]
async fn only_definite_remote_refusals_are_rejected_the_rest_is_unknown() {
    let gw = OutboundGateway::start(&[]).await;
    // (HTTP status, JSON-RPC error code or none, expected status)
    let cases: &[(u16, Option<i64>, &str)] = &[
        (408, None, "unknown"),
        (429, None, "unknown"),
        (503, None, "unknown"),
        (429, Some(-32602), "unknown"),
        (502, Some(-32603), "unknown"),
        (200, Some(-32603), "unknown"),
        (400, Some(-32603), "unknown"),
        (200, Some(-32000), "unknown"),
        (200, Some(-32006), "unknown"),
        (200, Some(-32602), "rejected"),
        (200, Some(-32004), "rejected"),
        (200, Some(-32001), "rejected"),
        (400, Some(-32602), "rejected"),
        (404, Some(-32601), "rejected"),
        (404, None, "rejected"),
        (401, None, "rejected"),
    ];
    let mut starting = Vec::new();
    for (status, code, _) in cases {
        let mut args = vec![
            "--mode".to_string(),
            "answer".into(),
            "--status".into(),
            status.to_string(),
        ];
        if let Some(code) = code {
            args.extend(["--rpc-code".to_string(), code.to_string()]);
        }
        starting.push(tokio::spawn(async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            Remote::start(&args).await
        }));
    }
    let mut remotes = Vec::new();
    for remote in starting {
        remotes.push(remote.await.unwrap());
    }
    for (i, ((status, code, expected), remote)) in cases.iter().zip(&remotes).enumerate() {
        let case = format!("HTTP {status}, JSON-RPC {code:?}");
        let reg = id_of(&gw.register(&format!("R{i}"), &remote.rpc_url(), None).await);
        let task_id = format!("task-answer-{i}");
        let (http, v) = gw.delegate(&task_id, &reg, "Answer me").await;
        assert_eq!(http, 200, "{case}: {v}");
        assert_eq!(v["status"], *expected, "{case}: {v}");
        assert_eq!(v["error"]["mayHaveReachedRemote"], true, "{case}: {v}");
        if *expected == "rejected" {
            assert_eq!(v["error"]["httpStatus"], *status, "{case}: {v}");
            assert_eq!(v["error"]["rpcCode"], json!(code), "{case}: {v}");
        }
        // Either way the repeat answers from the record and sends nothing again.
        let (_, again) = gw.delegate(&task_id, &reg, "Answer me").await;
        assert_eq!(again["status"], *expected, "{case}: {again}");
        assert_eq!(remote.count("SendMessage").await, 1, "{case}");
    }
}
