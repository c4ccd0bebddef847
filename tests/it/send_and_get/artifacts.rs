//! Artifact verification: a checksum or byte-count mismatch, a media type other than
//! `text/markdown`, or a result over 1 MiB, is an error, never an empty or truncated success. Each output is corrupted before its run is
//! created, so no reader (the feed follower commits an output as soon as its run succeeds) can
//! have seen it whole: once read and verified, an artifact is committed and Q is not asked
//! again (`tests/it/projection.rs`).

use crate::support::{new_id, Gateway};

#[tokio::test]
async fn artifact_verification_failure_is_an_error_not_an_empty_success() {
    let gw = Gateway::start().await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    for mode in ["checksum", "byte_count", "media_type"] {
        let id = gw.completed_with_corrupt_output(mode).await;
        // Read twice (the second after the reconciler's pass for artifacts has had its turn):
        // refused each time, and what was refused is never stored.
        for _ in 0..2 {
            let reply = writer.get_task(&id).await;
            assert_eq!(reply.error_code(), Some(-32006), "{mode}: {}", reply.body);
            assert!(reply.body.get("result").is_none());
            if mode == "media_type" {
                assert!(
                    reply.body["error"]["message"]
                        .as_str()
                        .unwrap()
                        .contains("not text/markdown"),
                    "{}",
                    reply.body
                );
            }
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
        let stored = gw
            .db
            .count(&format!(
                "SELECT count(*) FROM a2a_task_artifacts WHERE task_id = '{id}'"
            ))
            .await;
        assert_eq!(stored, 0, "{mode}: a refused output was stored");
    }
    // An output Q declares as Markdown, beside them, is answered and stored.
    let id = writer
        .send_text_immediately(&new_id(), "verify me")
        .await
        .task_id();
    gw.db.wait_task_state(&id, "TASK_STATE_COMPLETED").await;
    let reply = writer.get_task(&id).await;
    let part = &reply.result()["artifacts"][0]["parts"][0];
    assert_eq!(part["mediaType"], "text/markdown", "{}", reply.body);
    let stored = gw
        .db
        .count(&format!(
            "SELECT count(*) FROM a2a_task_artifacts WHERE task_id = '{id}'"
        ))
        .await;
    assert_eq!(stored, 1);
}

#[tokio::test]
async fn results_over_one_mib_are_refused_not_truncated() {
    let gw = Gateway::start().await;
    let writer = gw.caller("tok-alice").agent("ag-writer");
    let id = gw.completed_with_corrupt_output("oversize").await;
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
