//! `q-reference-upstream`: the reference implementation of the Q upstream contract
//! (`crates/q-upstream-contract`, `docs/upstream-api.md`, `docs/upstream-openapi.yaml`).
//!
//! It stands in for Q's identity, agent, run and approval services in the dev command and in
//! every integration test. State is in memory and seeded from a fixtures file
//! (`config/q-fixtures.json`); runs progress on timers scaled by `--latency-scale`. The
//! `/admin/*` routes (fault injection, grant revocation, inspection) exist only here and are
//! not part of the contract.
//!
//! Started with `--break PROMISE` (repeatable) it breaks that promise of the contract on
//! purpose and keeps the others (`breaks.rs`), so that the contract kit
//! (`q-a2a-gateway contract-check`) can be shown to find each broken promise.
//!
//! After binding it prints exactly one line to stdout, `listening on http://ADDR`, which tests
//! parse to learn the port; logs go to stderr. SIGTERM or ctrl-c stops it.
//!
//! The contract types come from the `q-upstream-contract` crate, the one the gateway compiles
//! against, so this binary serves the same shapes without depending on the gateway's code.

use q_upstream_contract as contract;

mod admin;
mod breaks;
mod error;
mod faults;
mod feed;
mod fixtures;
mod grants;
mod progression;
mod routes;
mod runs;
mod state;
mod stats;
#[cfg(test)]
mod testing;

use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use axum::body::Body;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tower::ServiceExt;

use crate::contract::ErrorBody;
use crate::fixtures::Fixtures;
use crate::routes::ConnKill;
use crate::state::AppState;

/// How long in-flight requests (long polls) may delay exit after a shutdown signal.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// Reference implementation of the Q upstream contract, for dev and tests.
#[derive(Debug, clap::Parser)]
#[command(name = "q-reference-upstream", version)]
struct Args {
    /// Address to listen on; port 0 picks a free port (printed on stdout).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Fixtures file: service token, tenants, principals, tokens, workspaces, agents.
    #[arg(long, default_value = "config/q-fixtures.json")]
    fixtures: PathBuf,
    /// Multiplies every agent latency (0.1 = ten times faster).
    #[arg(long, default_value_t = 1.0)]
    latency_scale: f64,
    /// Breaks one promise of the contract on purpose (repeatable), to show that
    /// `q-a2a-gateway contract-check` finds it (docs/upstream-api.md, "A broken reference").
    #[arg(long = "break", value_enum, value_name = "PROMISE")]
    breaks: Vec<breaks::Break>,
}

fn app(state: AppState) -> Router {
    routes::router(state.clone())
        .fallback(|| async {
            (
                StatusCode::NOT_FOUND,
                axum::Json(ErrorBody {
                    error: "not_found".to_owned(),
                    message: Some("no such route".to_owned()),
                }),
            )
                .into_response()
        })
        // Every request the gateway makes is recorded, also one to a path Q does not serve.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            record_traceparent,
        ))
        .merge(admin::router())
        .with_state(state)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = <Args as clap::Parser>::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,hyper=warn".into()),
        )
        .init();

    if !args.latency_scale.is_finite() || args.latency_scale < 0.0 {
        anyhow::bail!("--latency-scale must be a non-negative number");
    }
    let fixtures = Fixtures::load(&args.fixtures)?;
    tracing::info!(
        fixtures = %args.fixtures.display(),
        agents = fixtures.agents.len(),
        latency_scale = args.latency_scale,
        "fixtures loaded"
    );
    if !args.breaks.is_empty() {
        tracing::warn!(breaks = ?args.breaks, "breaking these promises of the contract on purpose");
    }
    let state = AppState::with_breaks(
        fixtures,
        args.latency_scale,
        breaks::Breaks::new(&args.breaks),
    );
    let app = app(state.clone());

    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let addr = listener.local_addr()?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on http://{addr}")?;
        out.flush()?;
    }
    tracing::info!(%addr, "q-reference-upstream ready");

    serve(listener, app, &state).await;
    tracing::info!("stopped");
    Ok(())
}

/// Largest create body read to learn its workflow id.
const RECORDED_BODY_LIMIT: usize = 1 << 20;

/// Remembers every request outside `/admin` in arrival order: path, `traceparent`, the workflow
/// id it names and, once answered, its status (see `/admin/last-traceparent`, `/admin/calls`).
async fn record_traceparent(
    axum::extract::State(st): axum::extract::State<AppState>,
    request: Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let path = request.uri().path().to_owned();
    let method = request.method().to_string();
    let by_workflow = path
        .strip_prefix(&format!("{}/runs/by-workflow/", contract::PREFIX))
        .map(percent_decode);
    let (request, workflow_id) = if method == "POST" && path == format!("{}/runs", contract::PREFIX)
    {
        // The create's workflow id is in its body: read it, then hand the same bytes on.
        let (parts, body) = request.into_parts();
        let bytes = axum::body::to_bytes(body, RECORDED_BODY_LIMIT)
            .await
            .unwrap_or_default();
        let workflow_id = serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|v| v["workflow_id"].as_str().map(str::to_owned));
        (Request::from_parts(parts, Body::from(bytes)), workflow_id)
    } else {
        (request, by_workflow)
    };
    let seq = {
        let mut inner = st.lock().await;
        inner.last_seq += 1;
        let seen = stats::SeenTraceparent {
            seq: inner.last_seq,
            method,
            path,
            traceparent: request
                .headers()
                .get("traceparent")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            workflow_id,
            status: None,
            error: None,
        };
        if inner.traceparents.len() >= stats::TRACEPARENTS_KEPT {
            inner.traceparents.pop_front();
        }
        inner.traceparents.push_back(seen);
        inner.last_seq
    };
    let response = next.run(request).await;
    let status = response.status();
    let (response, error) = if status.is_client_error() || status.is_server_error() {
        // Error bodies are small: read the code, then hand the same bytes on.
        let (parts, body) = response.into_parts();
        let bytes = axum::body::to_bytes(body, RECORDED_BODY_LIMIT)
            .await
            .unwrap_or_default();
        let error = serde_json::from_slice::<contract::ErrorBody>(&bytes)
            .ok()
            .map(|b| b.error);
        (
            axum::response::Response::from_parts(parts, Body::from(bytes)),
            error,
        )
    } else {
        (response, None)
    };
    let mut inner = st.lock().await;
    if let Some(seen) = inner.traceparents.iter_mut().rev().find(|s| s.seq == seq) {
        seen.status = Some(status.as_u16());
        seen.error = error;
    }
    response
}

/// Decodes `%XX` escapes of one path segment (the gateway escapes reserved characters).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The accept loop. Hand-rolled (rather than `axum::serve`) so a handler can make its
/// connection vanish without a response: each connection gets a `ConnKill` in its requests'
/// extensions, and the connection future is dropped when it fires.
async fn serve(listener: tokio::net::TcpListener, app: Router, state: &AppState) {
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown_signal());
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(err) => {
                    tracing::warn!(%err, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let kill = ConnKill::default();
        let app = app.clone();
        let conn_kill = kill.clone();
        let service = hyper::service::service_fn(move |mut req: Request<hyper::body::Incoming>| {
            req.extensions_mut().insert(conn_kill.clone());
            app.clone().oneshot(req.map(Body::new))
        });
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let builder = auto::Builder::new(TokioExecutor::new());
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                res = watcher.watch(conn) => {
                    if let Err(err) = res {
                        tracing::debug!(%peer, %err, "connection error");
                    }
                }
                () = kill.0.notified() => {
                    tracing::info!(%peer, "connection dropped without a response");
                }
            }
        });
    }
    drop(listener);
    tracing::info!("shutting down");
    state.begin_shutdown();
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::info!("in-flight requests abandoned at shutdown");
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
