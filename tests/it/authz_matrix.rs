//! Authorisation matrix: every method and the card, for every way a caller may lack the right
//! to do something (wrong tenant, another principal's task, a missing scope, a revoked
//! workspace or evidence grant, an expired, unknown or absent token, a tenant without
//! `agent_api`), plus the wildcard scope that must work. Each refusal must be the documented
//! answer, must write nothing (task rows, their state and cancellation marks, and runs in Q are
//! compared before and after every call), and a task the caller may not see must answer exactly
//! what an unknown task answers (whole error objects compared).

use std::time::Duration;

use serde_json::{json, Value};

use q_a2a_gateway::a2a::method::Method;

use crate::support::report::report;
use crate::support::sse::is_event_stream;
use crate::support::{new_id, Gateway, Reply};

/// Waits at INPUT_REQUIRED until approved: a task that stays put while the matrix runs.
const AGENT: &str = "ag-approver";

/// Every JSON-RPC method the gateway knows.
fn methods() -> impl Iterator<Item = &'static str> {
    Method::ALL.iter().map(|m| m.name())
}
const CARD: &str = "card";

/// Push notification configuration: not supported (-32003) for anyone allowed to ask.
const PUSH_CONFIG: [&str; 4] = [
    "CreateTaskPushNotificationConfig",
    "GetTaskPushNotificationConfig",
    "ListTaskPushNotificationConfigs",
    "DeleteTaskPushNotificationConfig",
];

fn is_delegate(method: &str) -> bool {
    matches!(
        method,
        "SendMessage"
            | "SendStreamingMessage"
            | "CancelTask"
            | "CreateTaskPushNotificationConfig"
            | "DeleteTaskPushNotificationConfig"
    )
}

/// What the gateway must answer.
#[derive(Debug, Clone)]
enum Expect {
    /// An HTTP refusal with `{"error": code}` (and for scopes, the missing ones).
    Http(u16, &'static str, Option<Value>),
    /// A JSON-RPC error with this code.
    Rpc(i64),
    /// Exactly what the same caller gets for an unknown task id.
    SameAsUnknown,
    /// A ListTasks answer that does not show the task.
    ListWithout,
    /// A ListTasks answer that shows the task as a control entry only.
    ListControlEntry,
    /// The task as a control receipt: id and status only, no history, artifacts or Q text.
    ControlReceipt,
    /// The call is allowed: a result, or an SSE stream.
    Allowed,
}

/// The answer, and whether it is an SSE stream (whose body is not read).
struct Answer {
    reply: Reply,
    sse: bool,
}

impl std::ops::Deref for Answer {
    type Target = Reply;
    fn deref(&self) -> &Reply {
        &self.reply
    }
}

async fn call(
    gw: &Gateway,
    token: Option<&str>,
    agent: &str,
    method: &str,
    task_id: &str,
) -> Answer {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let request = if method == CARD {
        http.get(format!(
            "{}/.well-known/agent-card.json",
            gw.agent_url(agent)
        ))
    } else {
        let params = match method {
            "SendMessage" | "SendStreamingMessage" => json!({
                "message": {"messageId": new_id(), "role": "ROLE_USER", "parts": [{"text": "matrix"}]},
                "configuration": {"returnImmediately": true}
            }),
            "ListTasks" => json!({}),
            "GetExtendedAgentCard" => json!({}),
            "CreateTaskPushNotificationConfig" => json!({
                "taskId": task_id, "pushNotificationConfig": {"url": "https://hooks.example/x"}
            }),
            "GetTaskPushNotificationConfig" | "DeleteTaskPushNotificationConfig" => {
                json!({"taskId": task_id, "id": "cfg-1"})
            }
            "ListTaskPushNotificationConfigs" => json!({"taskId": task_id}),
            _ => json!({"id": task_id}),
        };
        http.post(format!("{}/rpc", gw.agent_url(agent)))
            .header("a2a-version", "1.0")
            .header("accept", "application/json, text/event-stream")
            .json(&json!({"jsonrpc": "2.0", "id": "m-1", "method": method, "params": params}))
    };
    let request = match token {
        Some(t) => request.bearer_auth(t),
        None => request,
    };
    let response = request.send().await.expect("gateway answers");
    if is_event_stream(response.headers()) {
        // Allowed streams are not read: the client goes away at once.
        let reply = Reply {
            status: response.status().as_u16(),
            headers: response.headers().clone(),
            body: Value::Null,
        };
        return Answer { reply, sse: true };
    }
    Answer {
        reply: Reply::read(response).await,
        sse: false,
    }
}

/// Everything a refused call must leave as it was.
async fn snapshot(gw: &Gateway) -> (i64, String, usize) {
    let client = gw.db.client().await;
    let row = client
        .query_one(
            "SELECT count(*), coalesce(md5(string_agg(
                 task_id::text || state || dispatch || coalesce(run_id, '') ||
                 coalesce(cancel_requested_at::text, ''), ',' ORDER BY task_id)), '')
             FROM a2a_tasks",
            &[],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1), gw.upstream.runs(None).await.len())
}

struct Case {
    label: &'static str,
    token: Option<&'static str>,
    agent: &'static str,
    method: &'static str,
    expect: Expect,
}

/// A case on [`AGENT`].
fn case(
    label: &'static str,
    token: Option<&'static str>,
    method: &'static str,
    expect: Expect,
) -> Case {
    Case {
        label,
        token,
        agent: AGENT,
        method,
        expect,
    }
}

fn check(answer: &Answer, expect: &Expect, unknown: Option<&Answer>, what: &str, task_id: &str) {
    match expect {
        Expect::Http(status, code, extra) => {
            assert_eq!(answer.status, *status, "{what}: {}", answer.body);
            assert_eq!(answer.body["error"], *code, "{what}: {}", answer.body);
            if let Some(scopes) = extra {
                assert_eq!(answer.body["requiredScopes"], *scopes, "{what}");
            }
            if *status == 401 {
                let challenge = answer.headers["www-authenticate"].to_str().unwrap();
                assert!(challenge.starts_with("Bearer"), "{what}: {challenge}");
            }
        }
        Expect::Rpc(code) => {
            assert_eq!(answer.status, 200, "{what}");
            assert_eq!(
                answer.body["error"]["code"].as_i64(),
                Some(*code),
                "{what}: {}",
                answer.body
            );
        }
        Expect::SameAsUnknown => {
            let unknown = unknown.expect("an unknown-task answer to compare with");
            assert_eq!(answer.status, 200, "{what}");
            assert_eq!(
                answer.body["error"]["code"], -32001,
                "{what}: {}",
                answer.body
            );
            assert_eq!(
                answer.body["error"], unknown.body["error"],
                "{what}: differs from an unknown task"
            );
            assert_eq!(answer.status, unknown.status);
            assert!(
                !answer.body.to_string().contains(task_id),
                "{what}: id echoed"
            );
        }
        Expect::ListWithout => {
            let tasks = answer.body["result"]["tasks"].as_array().expect("a list");
            assert!(
                tasks.iter().all(|t| t["id"] != task_id),
                "{what}: the task is listed: {}",
                answer.body
            );
        }
        Expect::ListControlEntry => {
            let tasks = answer.body["result"]["tasks"].as_array().expect("a list");
            let entry = tasks
                .iter()
                .find(|t| t["id"] == task_id)
                .unwrap_or_else(|| panic!("{what}: not listed: {}", answer.body));
            assert!(entry.get("history").is_none() && entry.get("artifacts").is_none());
            assert!(entry["status"].get("message").is_none(), "{what}: {entry}");
        }
        Expect::ControlReceipt => {
            assert_eq!(answer.status, 200, "{what}: {}", answer.body);
            let task = &answer.body["result"];
            assert_eq!(task["id"], task_id, "{what}: {}", answer.body);
            assert!(task.get("history").is_none() && task.get("artifacts").is_none());
            assert!(task["status"].get("message").is_none(), "{what}: {task}");
        }
        Expect::Allowed => {
            assert_eq!(answer.status, 200, "{what}: {}", answer.body);
            assert!(
                answer.sse
                    || answer.body.get("result").is_some()
                    || answer.body.get("supportedInterfaces").is_some(),
                "{what}: {}",
                answer.body
            );
        }
    }
}

/// The answer a caller gets for a task id that does not exist.
async fn unknown_answer(gw: &Gateway, token: &'static str, method: &str) -> Answer {
    call(gw, Some(token), AGENT, method, &new_id()).await
}

/// Runs each case, checking the answer and, for refusals, that nothing was written.
async fn run_cases(gw: &Gateway, cases: &[Case], task_id: &str) -> usize {
    for case in cases {
        let what = format!("{} / {} / {:?}", case.label, case.method, case.token);
        let unknown = match (&case.expect, case.token) {
            (Expect::SameAsUnknown, Some(token)) => {
                Some(unknown_answer(gw, token, case.method).await)
            }
            _ => None,
        };
        let before = snapshot(gw).await;
        let answer = call(gw, case.token, case.agent, case.method, task_id).await;
        check(&answer, &case.expect, unknown.as_ref(), &what, task_id);
        if !matches!(case.expect, Expect::Allowed) {
            assert_eq!(snapshot(gw).await, before, "{what}: something was written");
        }
    }
    cases.len()
}

#[tokio::test]
async fn every_refusal_is_documented_writes_nothing_and_hides_foreign_tasks() {
    let gw = Gateway::start().await;
    let alice = gw.caller("tok-alice").agent(AGENT);
    // Alice's task, waiting for approval.
    let task = alice
        .send_text_immediately(&new_id(), "matrix subject")
        .await
        .task();
    let task_id = task["id"].as_str().unwrap().to_string();
    alice
        .wait_for_state(
            &task_id,
            "TASK_STATE_INPUT_REQUIRED",
            Duration::from_secs(20),
        )
        .await;
    let run_id: String = gw.db.one("SELECT run_id FROM a2a_tasks").await;

    let mut cases: Vec<Case> = Vec::new();
    let all = || methods().chain([CARD]);
    // Wrong tenant: another tenant's agent is unknown to the caller.
    for method in all() {
        cases.push(case(
            "wrong tenant",
            Some("tok-carol"),
            method,
            Expect::Http(404, "agent_not_found", None),
        ));
    }
    // Expired, unknown and absent tokens.
    for (label, token) in [
        ("expired token", Some("tok-alice-expired")),
        ("unknown token", Some("tok-never-issued")),
        ("no token", None),
    ] {
        for method in all() {
            let code = if token.is_none() {
                "unauthorized"
            } else {
                "invalid_token"
            };
            cases.push(case(label, token, method, Expect::Http(401, code, None)));
        }
    }
    // A tenant without agent_api: on its own agent and on anyone else's.
    for agent in ["ag-legacy", AGENT] {
        for method in all() {
            let expect = Expect::Http(403, "tenant_feature_disabled", None);
            cases.push(Case {
                agent,
                ..case("tenant feature disabled", Some("tok-dave"), method, expect)
            });
        }
    }
    // Missing scopes.
    for method in all() {
        let (token, missing) = if method != CARD && is_delegate(method) {
            ("tok-alice-read", "a2a:delegate")
        } else {
            ("tok-alice-delegate", "a2a:read")
        };
        cases.push(case(
            "missing scope",
            Some(token),
            method,
            Expect::Http(403, "insufficient_scope", Some(json!([missing]))),
        ));
        cases.push(case(
            "missing ai:answer",
            Some("tok-alice-noai"),
            method,
            Expect::Http(403, "insufficient_scope", Some(json!(["ai:answer"]))),
        ));
    }
    // Another principal of the same tenant, on Alice's task.
    for method in all() {
        let expect = match method {
            "GetTask" | "CancelTask" | "SubscribeToTask" => Expect::SameAsUnknown,
            "ListTasks" => Expect::ListWithout,
            m if PUSH_CONFIG.contains(&m) => Expect::Rpc(-32003),
            "GetExtendedAgentCard" => Expect::Rpc(-32004),
            // Bob's own sends and the card are his to make.
            _ => continue,
        };
        cases.push(case("wrong principal", Some("tok-bob"), method, expect));
    }
    // Wildcard scopes work like the exact ones (sends and cancel are checked further down).
    for method in all() {
        let expect = match method {
            "GetTask" | "ListTasks" | CARD => Expect::Allowed,
            m if PUSH_CONFIG.contains(&m) => Expect::Rpc(-32003),
            "GetExtendedAgentCard" => Expect::Rpc(-32004),
            _ => continue,
        };
        cases.push(case(
            "wildcard scopes",
            Some("tok-alice-wild"),
            method,
            expect,
        ));
    }

    let mut checked = run_cases(&gw, &cases, &task_id).await;

    // Bob reusing Alice's messageId with other content gets his own task: the identity is per
    // principal, and there is no "different content" answer that would reveal Alice's message.
    let alice_message_id = task["history"][0]["messageId"].as_str().unwrap();
    let bob = gw
        .caller("tok-bob")
        .agent(AGENT)
        .send_text_immediately(alice_message_id, "bob's own words")
        .await;
    assert_ne!(bob.result()["task"]["id"], task_id.as_str());
    checked += 1;

    // Alice loses the agent's workspace.
    gw.upstream
        .grant_workspace("ws-acme-main", "p-alice", false)
        .await;
    // The introspection and access answers are cached briefly.
    tokio::time::sleep(Duration::from_millis(5_500)).await;
    let mut revoked = Vec::new();
    for method in methods() {
        let expect = match method {
            "SendMessage" | "SendStreamingMessage" => {
                Expect::Http(403, "workspace_access_denied", None)
            }
            "GetTask" | "SubscribeToTask" => Expect::SameAsUnknown,
            "ListTasks" => Expect::ListWithout,
            "GetExtendedAgentCard" => Expect::Rpc(-32004),
            "CancelTask" => continue, // checked last: it works on the caller's own task
            _ => Expect::Rpc(-32003),
        };
        revoked.push(case("revoked workspace", Some("tok-alice"), method, expect));
    }
    checked += run_cases(&gw, &revoked, &task_id).await;
    gw.upstream
        .grant_workspace("ws-acme-main", "p-alice", true)
        .await;

    // Alice keeps the workspace but loses the run's evidence grant.
    gw.upstream.grant_evidence(&run_id, "p-alice", false).await;
    tokio::time::sleep(Duration::from_millis(5_500)).await;
    let mut evidence = Vec::new();
    for method in ["GetTask", "SubscribeToTask", "ListTasks"] {
        // The content is hidden, never the caller's own task.
        let expect = match method {
            "ListTasks" => Expect::ListControlEntry,
            "GetTask" => Expect::ControlReceipt,
            _ => Expect::Allowed,
        };
        evidence.push(case(
            "revoked evidence grant",
            Some("tok-alice"),
            method,
            expect,
        ));
    }
    checked += run_cases(&gw, &evidence, &task_id).await;
    // The stream she may still open starts from a control snapshot.
    let mut stream = alice.subscribe(&task_id).await;
    let first = stream.next_result().await.expect("a first event");
    assert_eq!(first["task"]["id"], task_id, "{first}");
    assert!(first["task"].get("history").is_none() && first["task"].get("artifacts").is_none());
    assert!(!first.to_string().contains("matrix subject"), "{first}");
    drop(stream);
    // Cancel still works on her own task, and answers with a control receipt only.
    let receipt = alice.cancel(&task_id).await;
    let receipt = receipt.result();
    assert_eq!(receipt["status"]["state"], "TASK_STATE_CANCELED");
    assert!(receipt.get("history").is_none() && receipt.get("artifacts").is_none());
    assert!(!receipt.to_string().contains("matrix subject"));
    checked += 1;

    // Wildcard scopes can send and cancel.
    let wild = gw.caller("tok-alice-wild").agent("ag-writer");
    let wild_task = wild
        .send_text_immediately(&new_id(), "wild")
        .await
        .task_id();
    let canceled = wild.cancel(&wild_task).await;
    assert!(
        canceled.is_result() || canceled.error_code() == Some(-32002),
        "{}",
        canceled.body
    );
    checked += 2;

    report(
        "authz",
        &format!(
            "matrix_cells={checked} (methods={} + card)",
            methods().count()
        ),
    );
}
