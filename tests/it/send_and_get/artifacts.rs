//! Artifact verification: a checksum or byte-count mismatch, or a result over 1 MiB, is an
//! error, never an empty or truncated success. Each output is corrupted before the gateway
//! first reads it: once read and verified, an artifact is committed and Q is not asked again
//! (`tests/it/projection.rs`).

use crate::support::{new_id, Gateway};

#[tokio::test]
async fn artifact_verification_failure_is_an_error_not_an_empty_success() {
    let gw = Gateway::start().await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    for mode in ["checksum", "byte_count"] {
        let id = writer
            .send_text_immediately(&new_id(), "verify me")
            .await
            .task_id();
        let run_id = gw.db.run_id(&id).await;
        gw.upstream.corrupt_output(&run_id, mode).await;
        gw.db.wait_task_state(&id, "TASK_STATE_COMPLETED").await;
        let reply = writer.get_task(&id).await;
        assert_eq!(reply.error_code(), Some(-32006), "{mode}: {}", reply.body);
        assert!(reply.body.get("result").is_none());
    }
}

#[tokio::test]
async fn results_over_one_mib_are_refused_not_truncated() {
    let gw = Gateway::start().await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    let id = writer
        .send_text_immediately(&new_id(), "big")
        .await
        .task_id();
    let run_id: String = gw.db.one("SELECT run_id FROM a2a_tasks").await;
    gw.upstream.corrupt_output(&run_id, "oversize").await;
    gw.db.wait_task_state(&id, "TASK_STATE_COMPLETED").await;
    let reply = writer.get_task(&id).await;
    assert_eq!(
        reply.error_code(),
        Some(-32006),
        "{}",
        reply.body.to_string().chars().take(300).collect::<String>()
    );
    assert!(reply.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("1048576"));
}
