use super::*;

#[test]
fn dot_segments_are_not_path_segments() {
    for id in ["", ".", ".."] {
        assert!(!is_path_segment(id), "{id:?}");
    }
    for id in ["...", ".a", "a..b", "ag-writer"] {
        assert!(is_path_segment(id), "{id:?}");
    }
}

fn classify(definite: &[ErrorCode], status: u16, body: &str) -> UpstreamError {
    classify_error(
        "create_run",
        definite,
        StatusCode::from_u16(status).unwrap(),
        body.as_bytes(),
    )
}

#[test]
fn only_a_calls_own_contract_codes_under_their_status_are_refusals() {
    let refused = classify(
        definite::CREATE_RUN,
        403,
        r#"{"error":"workspace_access_denied"}"#,
    );
    assert!(refused.is(ErrorCode::WorkspaceAccessDenied), "{refused}");
    assert!(
        classify(definite::RUN_READ, 404, r#"{"error":"run_not_found"}"#)
            .is(ErrorCode::RunNotFound)
    );
    for (definite, status, body) in [
        // The service credential, not the request: fixed by rotating it, then retried.
        (definite::CREATE_RUN, 401, r#"{"error":"unauthorized"}"#),
        // A proxy's answers: no contract body, or a code Q does not define.
        (definite::RUN_READ, 404, "<html>404 Not Found</html>"),
        (definite::RUN_READ, 404, r#"{"error":"not_found"}"#),
        (definite::CREATE_RUN, 403, "Forbidden"),
        (definite::CREATE_RUN, 408, ""),
        (definite::CREATE_RUN, 429, r#"{"error":"rate_limited"}"#),
        // A contract code under another status, or one this call does not define.
        (definite::RUN_READ, 410, r#"{"error":"run_not_found"}"#),
        (definite::CREATE_RUN, 404, r#"{"error":"run_not_found"}"#),
    ] {
        let e = classify(definite, status, body);
        assert!(
            matches!(
                e,
                UpstreamError::Failed {
                    delivery: Delivery::MaybeSent,
                    ..
                }
            ),
            "{status} {body}: {e}"
        );
    }
}

/// A Q that streams an output without declaring its length: it is read only up to the
/// limit, then given up.
#[tokio::test]
async fn an_undeclared_output_is_read_only_up_to_its_limit() {
    let output = RunOutput {
        artifact_id: "a".into(),
        name: "answer.md".into(),
        media_type: "text/markdown".into(),
        text: "x".repeat(10_000),
        sha256: text_sha256(&"x".repeat(10_000)),
        byte_count: 10_000,
    };
    let body = serde_json::to_vec(&output).unwrap();
    let chunks: Vec<bytes::Bytes> = body
        .chunks(1000)
        .map(bytes::Bytes::copy_from_slice)
        .collect();
    let app = axum::Router::new().route(
        "/internal/v1/runs/{run_id}/output",
        axum::routing::get(move || {
            let chunks = chunks.clone();
            async move {
                axum::body::Body::from_stream(futures_util::stream::iter(
                    chunks.into_iter().map(Ok::<_, std::convert::Infallible>),
                ))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let api = UpstreamRunApi::new(&UpstreamConfig {
        url,
        service_token: "token".into(),
        ..UpstreamConfig::default()
    })
    .unwrap();

    let answer = api.run_output_answer("run-1").await.unwrap();
    assert_eq!(answer.declared_len(), None, "streamed without a length");
    assert!(answer.read_within(body.len() - 1).await.unwrap().is_none());
    let answer = api.run_output_answer("run-1").await.unwrap();
    assert_eq!(answer.read_within(body.len()).await.unwrap(), Some(output));
}

#[test]
fn encode_escapes_path_separators() {
    assert_eq!(encode("a/b?c"), "a%2Fb%3Fc");
    assert_eq!(encode("ag-writer_1.x~"), "ag-writer_1.x~");
}
