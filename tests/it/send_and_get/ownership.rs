//! A task another principal owns, another agent's, an unknown one and a revoked one all answer
//! the same -32001, with no hint which it is.

use crate::support::{new_id, within_revocation_bound, Gateway};

#[tokio::test]
async fn foreign_and_revoked_tasks_are_indistinguishable_from_unknown_ones() {
    let gw = Gateway::start().await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    let id = writer.send_text(&new_id(), "mine").await.task_id();
    let id = id.as_str();

    let unknown = writer.get_task(&new_id()).await;
    let not_uuid = writer.get_task("not-a-uuid").await;
    let bobs = gw.caller("tok-bob").agent("ag-writer").get_task(id).await;
    let other_agent = gw
        .caller("tok-alice")
        .agent("ag-private")
        .get_task(id)
        .await;
    for reply in [&unknown, &not_uuid, &bobs, &other_agent] {
        assert_eq!(reply.status, 200);
        assert_eq!(
            reply.body["error"], unknown.body["error"],
            "same error object, no hint"
        );
    }
    assert_eq!(unknown.error_code(), Some(-32001));
    // Another tenant cannot even reach the agent.
    assert_eq!(
        gw.caller("tok-carol")
            .agent("ag-writer")
            .get_task(id)
            .await
            .status,
        404
    );

    // Evidence grant revoked: the content is hidden, the caller's own task is not.
    let run_id: String = gw.db.one("SELECT run_id FROM a2a_tasks").await;
    gw.upstream.grant_evidence(&run_id, "p-alice", false).await;
    within_revocation_bound("the content is hidden", async || {
        writer
            .get_task(id)
            .await
            .result()
            .get("artifacts")
            .is_none()
    })
    .await;
    let receipt = writer.get_task(id).await;
    assert_eq!(receipt.result()["id"], id);
    assert!(receipt.result().get("history").is_none());
    assert!(receipt.result().get("artifacts").is_none());
    gw.upstream.grant_evidence(&run_id, "p-alice", true).await;
    assert!(writer.get_task(id).await.is_result());

    // Workspace grant revoked: hidden, and new sends are refused with nothing written.
    gw.upstream
        .grant_workspace("ws-acme-main", "p-alice", false)
        .await;
    within_revocation_bound("the task is hidden", async || {
        writer.get_task(id).await.error_code().is_some()
    })
    .await;
    assert_eq!(
        writer.get_task(id).await.body["error"],
        unknown.body["error"]
    );
    let refused = writer.send_text_immediately(&new_id(), "more").await;
    assert_eq!(refused.status, 403);
    assert_eq!(gw.db.task_count().await, 1);
}
