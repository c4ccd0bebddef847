//! CancelTask on a running, a terminal, a foreign and an unknown task, and the scope it needs.

use crate::support::{new_id, Gateway};

#[tokio::test]
async fn cancel_running_terminal_foreign_and_unknown() {
    let gw = Gateway::start().await;
    let alice = gw.caller("tok-alice");
    let slow = alice.agent("ag-slow");
    let id = slow.new_task("cancel me").await;
    let canceled = slow.cancel(&id).await;
    assert_eq!(
        canceled.result()["status"]["state"],
        "TASK_STATE_CANCELED",
        "{}",
        canceled.body
    );
    assert_eq!(canceled.result()["id"], id.as_str());
    let run_id = gw.db.run_id(&id).await;
    let runs = gw.upstream.runs(None).await;
    let run = runs.iter().find(|r| r["id"] == run_id.as_str()).unwrap();
    assert_eq!(run["status"], "canceled", "Q's run was notified");
    assert_eq!(gw.db.task_state(&id).await, "TASK_STATE_CANCELED");
    let cancel_requested: bool = gw
        .db
        .task_field(&id, "cancel_requested_at IS NOT NULL")
        .await;
    assert!(cancel_requested, "cancellation persisted");

    // Again: terminal → -32002, state recoverable with GetTask.
    let again = slow.cancel(&id).await;
    assert_eq!(again.error_code(), Some(-32002));
    assert_eq!(
        again.body["error"]["data"][0]["reason"],
        "TASK_NOT_CANCELABLE"
    );
    assert_eq!(
        slow.get_task(&id).await.result()["status"]["state"],
        "TASK_STATE_CANCELED"
    );

    // Completed → -32002, and it stays COMPLETED.
    let writer = alice.agent("ag-writer");
    let done_id = writer.send_text(&new_id(), "done").await.task_id();
    assert_eq!(writer.cancel(&done_id).await.error_code(), Some(-32002));
    assert_eq!(
        writer.get_task(&done_id).await.result()["status"]["state"],
        "TASK_STATE_COMPLETED"
    );

    // Foreign and unknown: the same -32001, nothing changes.
    let other_id = slow.new_task("not bob's").await;
    let foreign = gw
        .caller("tok-bob")
        .agent("ag-slow")
        .cancel(&other_id)
        .await;
    let unknown = slow.cancel(&new_id()).await;
    assert_eq!(foreign.error_code(), Some(-32001));
    assert_eq!(foreign.body["error"], unknown.body["error"]);
    assert_ne!(gw.db.task_state(&other_id).await, "TASK_STATE_CANCELED");
    // Read scope is not enough to cancel.
    assert_eq!(
        gw.caller("tok-alice-read")
            .agent("ag-slow")
            .cancel(&other_id)
            .await
            .status,
        403
    );
}
