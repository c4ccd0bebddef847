//! Revoked grants on every method: reads hide content (as if the task were unknown), ListTasks
//! keeps a control entry, a repeat gets a control receipt, and CancelTask still works.

use serde_json::json;

use crate::support::{new_id, Gateway};

#[tokio::test]
async fn revocation_hides_content_on_every_method() {
    let gw = Gateway::start().await;
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
    // GetTask: indistinguishable from unknown.
    assert_eq!(writer.get_task(id).await.error_code(), Some(-32001));
    // ListTasks: a control entry only.
    let listed = writer.list_tasks(json!({"includeArtifacts": true})).await;
    let entry = &listed.result()["tasks"][0];
    assert_eq!(entry["id"], id);
    assert!(entry.get("history").is_none() && entry.get("artifacts").is_none());
    assert!(!listed.body.to_string().contains("secret words"));
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
    assert_eq!(writer.list_tasks(json!({})).await.result()["totalSize"], 0);
    assert_eq!(slow.get_task(&open_id).await.error_code(), Some(-32001));
    let receipt = slow.cancel(&open_id).await;
    assert_eq!(receipt.result()["status"]["state"], "TASK_STATE_CANCELED");
    assert!(!receipt.body.to_string().contains("still running"));
}
