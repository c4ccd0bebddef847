//! Q's change feed keeps the status index current with nobody watching, and is followed again
//! from the start after Q rebuilt it.

use serde_json::json;

use crate::support::{new_id, Gateway};

#[tokio::test]
async fn change_feed_keeps_the_status_index_current_while_nobody_watches() {
    let gw = Gateway::start().await;
    let alice = gw.caller("tok-alice");
    let writer = alice.agent("ag-writer");
    let task = writer
        .send_text_immediately(&new_id(), "unobserved")
        .await
        .task();
    let id = task["id"].as_str().unwrap().to_string();
    assert_ne!(task["status"]["state"], "TASK_STATE_COMPLETED");
    // No GetTask: only the follower can move the projection.
    gw.db.wait_task_state(&id, "TASK_STATE_COMPLETED").await;
    let listed = writer
        .list_tasks(json!({"status": "TASK_STATE_COMPLETED"}))
        .await;
    assert_eq!(listed.result()["tasks"][0]["id"], id.as_str());
    // Q's approval state change is followed as well.
    let wid = alice.agent("ag-approver").new_task("approve later").await;
    gw.db
        .wait_task_state(&wid, "TASK_STATE_INPUT_REQUIRED")
        .await;
}

#[tokio::test]
async fn a_reset_change_feed_is_followed_again_from_the_start() {
    let gw = Gateway::start().await;
    // As if Q's feed had been rebuilt: our stored position is far beyond Q's newest cursor.
    gw.db
        .client()
        .await
        .execute("UPDATE a2a_feed_position SET cursor = 1000000", &[])
        .await
        .unwrap();
    let writer = gw.caller("tok-alice").agent("ag-writer");
    let id = writer.new_task("after a feed reset").await;
    // Only the follower can move the projection.
    gw.db.wait_task_state(&id, "TASK_STATE_COMPLETED").await;
    // The leader keeps the position it stored and meets the one written beside it when its
    // next batch stores its own (the greater): the feed is followed again from Q's start, and
    // the position saved after that is Q's again.
    gw.db
        .wait_count(
            "positions still past Q's feed",
            "SELECT count(*) FROM a2a_feed_position WHERE cursor >= 1000000",
            0,
            std::time::Duration::from_secs(15),
        )
        .await;
}
