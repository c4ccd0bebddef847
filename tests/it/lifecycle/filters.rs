//! ListTasks filters (context, status, status timestamp, artifacts, history) and the
//! validation of every parameter.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{new_id, Gateway};

#[tokio::test]
async fn filters_and_parameter_validation() {
    let gw = Gateway::start().await;
    let alice = gw.caller("tok-alice");
    let writer = alice.agent("ag-writer");
    let approver = alice.agent("ag-approver");
    let done = writer.send_text(&new_id(), "first").await.task();
    let marker = chrono::Utc::now();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let waiting = approver.send_text(&new_id(), "needs approval").await.task();
    assert_eq!(waiting["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
    let later = writer.send_text(&new_id(), "second").await.task();

    let by_context = writer
        .list_tasks(json!({"contextId": done["contextId"]}))
        .await;
    let tasks = by_context.result()["tasks"].as_array().unwrap().clone();
    assert_eq!(tasks.len(), 1);
    assert_eq!(tasks[0]["id"], done["id"]);
    let garbage_context = writer
        .list_tasks(json!({"contextId": "not-a-context"}))
        .await;
    assert_eq!(garbage_context.result()["totalSize"], 0);

    let completed = writer
        .list_tasks(json!({"status": "TASK_STATE_COMPLETED"}))
        .await;
    assert_eq!(completed.result()["totalSize"], 2);
    let input = approver
        .list_tasks(json!({"status": "TASK_STATE_INPUT_REQUIRED"}))
        .await;
    assert_eq!(input.result()["tasks"][0]["id"], waiting["id"]);
    assert!(input.result()["tasks"][0]["status"]["message"]["parts"][0]["text"].is_string());
    let none = writer
        .list_tasks(json!({"status": "TASK_STATE_CANCELED"}))
        .await;
    assert_eq!(none.result()["totalSize"], 0);

    let after = writer
        .list_tasks(json!({"statusTimestampAfter": marker.to_rfc3339()}))
        .await;
    let after_ids: Vec<&Value> = after.result()["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| &t["id"])
        .collect();
    assert_eq!(after_ids, vec![&later["id"]]);

    let with_artifacts = writer
        .list_tasks(json!({"includeArtifacts": true, "historyLength": 0}))
        .await;
    for task in with_artifacts.result()["tasks"].as_array().unwrap() {
        assert_eq!(
            task["artifacts"][0]["parts"][0]["mediaType"],
            "text/markdown"
        );
        assert!(task.get("history").is_none());
    }

    let bad: Vec<Value> = vec![
        json!({"pageSize": 0}),
        json!({"pageSize": 101}),
        json!({"pageSize": "ten"}),
        json!({"status": "TASK_STATE_RUNNING"}),
        json!({"statusTimestampAfter": "yesterday"}),
        json!({"includeArtifacts": "yes"}),
        json!({"historyLength": -1}),
        json!({"pageToken": "not-a-token"}),
    ];
    for params in bad {
        let reply = writer.list_tasks(params.clone()).await;
        assert_eq!(reply.error_code(), Some(-32602), "{params}: {}", reply.body);
    }
    assert_eq!(
        writer
            .list_tasks(json!({"tenant": "t-globex"}))
            .await
            .error_code(),
        Some(-32004)
    );
}
