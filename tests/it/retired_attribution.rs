//! Who still calls the retired routes: a call carrying a valid credential is attributed to its
//! tenant (a log line, a per-tenant, per-route, per-day counter in PostgreSQL, and the
//! `retired-report` command), while the answer stays the same 410 for everyone, also when Q
//! cannot identify the caller.

use std::time::Duration;

use crate::support::*;

async fn call(
    gw: &Gateway,
    method: reqwest::Method,
    path: &str,
    token: Option<&str>,
) -> (u16, String) {
    let mut request = reqwest::Client::new().request(method, format!("{}{}", gw.url, path));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

async fn rows(gw: &Gateway) -> Vec<(String, String, i64)> {
    gw.db
        .client()
        .await
        .query(
            "SELECT tenant_id, route, hits FROM a2a_retired_route_hits ORDER BY tenant_id, route",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

#[tokio::test]
async fn retired_route_calls_are_attributed_to_tenants_and_answered_410_alike() {
    let mut gw = Gateway::start().await;
    let get = reqwest::Method::GET;
    let post = reqwest::Method::POST;

    let (status, anonymous) = call(&gw, get.clone(), "/v1/a2a/tasks/old-1", None).await;
    assert_eq!(status, 410);
    for token in [Some("tok-alice"), Some("tok-alice"), Some("tok-nope")] {
        let (status, body) = call(&gw, get.clone(), "/v1/a2a/tasks/old-2", token).await;
        assert_eq!(status, 410);
        assert_eq!(body, anonymous, "the answer never depends on the caller");
    }
    let (status, _) = call(&gw, post.clone(), "/v1/a2a/tasks/send", Some("tok-carol")).await;
    assert_eq!(status, 410);

    let expected = vec![
        ("t-acme".to_string(), "/v1/a2a/tasks/{id}".to_string(), 2),
        ("t-globex".to_string(), "/v1/a2a/tasks/send".to_string(), 1),
    ];
    let mut seen = Vec::new();
    for _ in 0..50 {
        seen = rows(&gw).await;
        if seen == expected {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        seen, expected,
        "one counter per tenant and route; nothing for unknown callers"
    );

    let logs = gw.log_text();
    assert!(
        logs.lines()
            .any(|l| l.contains("retired route called") && l.contains("t-globex")),
        "the log names the tenant"
    );
    assert!(!logs.contains("tok-carol"), "never the credential");

    let metrics = gw.metrics().await;
    // Summed over routes.
    let hits = |attribution: &str| -> f64 {
        metrics
            .lines()
            .filter(|l| l.starts_with("a2a_retired_route_hits_total{"))
            .filter(|l| l.contains(&format!("attribution=\"{attribution}\"")))
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
            .sum()
    };
    assert_eq!(hits("anonymous"), 1.0);
    assert_eq!(hits("invalid_token"), 1.0);
    assert_eq!(hits("tenant"), 1.0 + 1.0 + 1.0);

    // The operator's report, from the same binary.
    let report = std::process::Command::new(GATEWAY_BIN)
        .env_clear()
        .env("Q_A2A_DATABASE_URL", &gw.db.url)
        .args(["retired-report", "--days", "7"])
        .output()
        .unwrap();
    assert!(
        report.status.success(),
        "{}",
        String::from_utf8_lossy(&report.stderr)
    );
    let report = String::from_utf8(report.stdout).unwrap();
    let line = |tenant: &str| {
        report
            .lines()
            .find(|l| l.starts_with(tenant))
            .unwrap_or_else(|| panic!("{tenant} missing from:\n{report}"))
            .split_whitespace()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    assert_eq!(line("t-acme")[1..3], ["/v1/a2a/tasks/{id}", "2"]);
    assert_eq!(line("t-globex")[1..3], ["/v1/a2a/tasks/send", "1"]);

    // Q gone: the caller cannot be identified, the answer is the same 410 and nothing is
    // counted for any tenant.
    gw.upstream.child.kill().await.unwrap();
    let (status, body) = call(&gw, get, "/v1/a2a/tasks/old-3", Some("tok-bob")).await;
    assert_eq!(status, 410);
    assert_eq!(body, anonymous);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(rows(&gw).await, expected);
}
