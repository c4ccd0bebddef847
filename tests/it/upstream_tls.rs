//! Q behind `https://` with a certificate of a private CA (the reference upstream behind a
//! TLS-terminating forwarder): with `upstream.tls_ca_file` naming that CA the gateway serves;
//! with another CA trusted, or none configured (the built-in public roots), nothing reaches Q
//! (readiness names the certificate, requests needing Q get 503); a CA file for an `http://`
//! Q is a configuration error.

use std::net::SocketAddr;
use std::time::Duration;

use crate::support::certs::ServerCerts;
use crate::support::gateway::serve_refused;
use crate::support::tls_proxy::TlsProxy;
use crate::support::upstream::Upstream;
use crate::support::{new_id, Gateway, GatewayOptions};

async fn upstream_behind_tls(certs: &ServerCerts) -> (Upstream, TlsProxy) {
    let upstream = Upstream::start().await;
    let target: SocketAddr = upstream.url.trim_start_matches("http://").parse().unwrap();
    let proxy = TlsProxy::start(certs, target).await;
    (upstream, proxy)
}

#[tokio::test]
async fn the_gateway_reaches_an_https_q_through_its_configured_ca() {
    let certs = ServerCerts::generate();
    let (upstream, proxy) = upstream_behind_tls(&certs).await;
    let ca = certs.ca().display().to_string();
    let gw = Gateway::start_with_upstream(
        upstream,
        GatewayOptions::with_env(&[
            ("Q_A2A_UPSTREAM_URL", &proxy.url),
            ("Q_A2A_UPSTREAM_TLS_CA_FILE", &ca),
        ]),
    )
    .await;
    let body = gw.wait_readyz(200, Duration::from_secs(20)).await;
    assert_eq!(body["checks"]["upstream"]["ok"], true, "{body}");
    let writer = gw.caller("tok-alice").agent("ag-writer");
    let task = writer.send_text(&new_id(), "over https").await.task();
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED");
}

#[tokio::test]
async fn an_untrusted_q_certificate_is_refused() {
    let certs = ServerCerts::generate();
    let foreign = certs.foreign_ca().display().to_string();
    for ca in [Some(foreign.as_str()), None] {
        let (upstream, proxy) = upstream_behind_tls(&certs).await;
        let mut env = vec![("Q_A2A_UPSTREAM_URL", proxy.url.as_str())];
        if let Some(ca) = ca {
            env.push(("Q_A2A_UPSTREAM_TLS_CA_FILE", ca));
        }
        let gw = Gateway::start_with_upstream(upstream, GatewayOptions::with_env(&env)).await;
        // Q failing takes the replica out of service (no outage grace by default).
        let body = gw.wait_readyz(503, Duration::from_secs(20)).await;
        let upstream = &body["checks"]["upstream"];
        assert_eq!(upstream["ok"], false, "{ca:?}: {body}");
        assert!(
            upstream["detail"]
                .as_str()
                .is_some_and(|d| d.contains("certificate")),
            "{ca:?}: {body}"
        );
        assert_eq!(body["degraded"], serde_json::json!([]), "{body}");
        // Nothing reaches Q: an unauthenticated-by-Q request cannot be authorised.
        let reply = gw
            .caller("tok-alice")
            .agent("ag-writer")
            .send_text(&new_id(), "never sent")
            .await;
        assert_eq!(reply.status, 503, "{ca:?}: {:?}", reply.body);
    }
}

#[tokio::test]
async fn a_ca_file_for_a_plain_http_q_is_a_configuration_error() {
    let output = serve_refused(&[
        ("Q_A2A_UPSTREAM_URL", "http://127.0.0.1:9"),
        ("Q_A2A_UPSTREAM_TLS_CA_FILE", "/nonexistent/ca.pem"),
        ("Q_A2A_UPSTREAM_SERVICE_TOKEN", "t"),
    ])
    .await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("upstream.tls_ca_file needs an https:// upstream.url"),
        "{stderr}"
    );
}
