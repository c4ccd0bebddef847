//! Revoked grants on every method: a revoked evidence grant hides the content but never the
//! caller's own task (GetTask, ListTasks, counted in totalSize, SubscribeToTask, a repeat and
//! CancelTask all answer with a control entry); a lost workspace hides everything.

use serde_json::json;

use crate::support::{new_id, within_revocation_bound, GatewayOptions, InProcessGateway};

#[tokio::test]
async fn revocation_hides_content_on_every_method() {
    // Inside the test process: nothing here is about a process dying.
    let gw = InProcessGateway::start_with(GatewayOptions::default()).await;
    let alice = gw.caller("tok-alice");
    let writer = alice.agent("ag-writer");
    let slow = alice.agent("ag-slow");
    let task = writer.send_text(&new_id(), "secret words").await.task();
    let id = task["id"].as_str().unwrap();
    let running_id = slow
        .send_text_immediately(&new_id(), "secret too")
        .await
        .task_id();
    for tid in [id, running_id.as_str()] {
        let run_id = gw.db.run_id(tid).await;
        gw.upstream.grant_evidence(&run_id, "p-alice", false).await;
    }
    within_revocation_bound("the content is hidden", async || {
        writer
            .get_task(id)
            .await
            .result()
            .get("artifacts")
            .is_none()
    })
    .await;
    // GetTask: the same control entry as ListTasks, never the content.
    let got = writer.get_task(id).await;
    let receipt = got.result();
    assert_eq!(receipt["id"], id);
    assert_eq!(receipt["status"]["state"], "TASK_STATE_COMPLETED");
    assert!(receipt.get("history").is_none() && receipt.get("artifacts").is_none());
    assert!(receipt["status"].get("message").is_none());
    assert!(!got.body.to_string().contains("secret words"));
    // ListTasks: a control entry only, counted like any other task.
    let listed = writer.list_tasks(json!({"includeArtifacts": true})).await;
    let entry = &listed.result()["tasks"][0];
    assert_eq!(entry["id"], id);
    assert!(entry.get("history").is_none() && entry.get("artifacts").is_none());
    assert!(!listed.body.to_string().contains("secret words"));
    assert_eq!(listed.result()["totalSize"], 1);
    assert_eq!(listed.result()["tasks"].as_array().unwrap().len(), 1);
    // SubscribeToTask on the running one: control snapshots only.
    let mut stream = slow.subscribe(&running_id).await;
    let first = stream.next_result().await.expect("a first event");
    assert_eq!(first["task"]["id"], running_id.as_str());
    assert!(first["task"].get("history").is_none());
    assert!(!first.to_string().contains("secret too"), "{first}");
    drop(stream);
    // SendMessage repeat: a control receipt.
    let repeat = writer
        .send_text_immediately(
            task["history"][0]["messageId"].as_str().unwrap(),
            "secret words",
        )
        .await;
    assert!(
        !repeat.body.to_string().contains("secret words"),
        "{}",
        repeat.body
    );
    // CancelTask: works, returns only id and state.
    let canceled = slow.cancel(&running_id).await;
    let receipt = canceled.result();
    assert_eq!(receipt["status"]["state"], "TASK_STATE_CANCELED");
    assert!(receipt.get("history").is_none() && receipt.get("artifacts").is_none());
    assert!(receipt["status"].get("message").is_none());
    assert!(!canceled.body.to_string().contains("secret too"));

    // Workspace revoked: reads hide everything, cancel still answers with a receipt.
    let open_id = slow
        .send_text_immediately(&new_id(), "still running")
        .await
        .task_id();
    gw.upstream
        .grant_workspace("ws-acme-main", "p-alice", false)
        .await;
    within_revocation_bound("the workspace is lost", async || {
        writer.list_tasks(json!({})).await.result()["totalSize"] == 0
    })
    .await;
    assert_eq!(slow.get_task(&open_id).await.error_code(), Some(-32001));
    let receipt = slow.cancel(&open_id).await;
    assert_eq!(receipt.result()["status"]["state"], "TASK_STATE_CANCELED");
    assert!(!receipt.body.to_string().contains("still running"));
}
