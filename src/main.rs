//! `q-a2a-gateway`: serve the A2A gateway or migrate its database.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};
use q_a2a_gateway::config::Config;
use q_a2a_gateway::server::{self, AppState};
use q_a2a_gateway::store::{migrate, PgTaskStore};

#[derive(Parser)]
#[command(
    name = "q-a2a-gateway",
    version,
    about = "A2A 1.0 JSON-RPC gateway for Q"
)]
struct Cli {
    /// Configuration file (TOML; see config/gateway.toml). Environment variables override it.
    #[arg(long, env = "Q_A2A_CONFIG", global = true)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the A2A routes.
    Serve,
    /// Apply pending database migrations (safe to run from several replicas at once).
    Migrate,
}

fn init_logging() {
    use tracing_subscriber::EnvFilter;
    tracing_subscriber::fmt()
        .json()
        .with_current_span(true)
        .with_span_list(false)
        .with_env_filter(
            EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| EnvFilter::new("info,tower_http=warn")),
        )
        .with_writer(std::io::stderr)
        .init();
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    init_logging();
    let config = Config::load(cli.config.as_deref()).context("loading configuration")?;
    match cli.command {
        Command::Migrate => run_migrate(&config).await,
        Command::Serve => run_serve(config).await,
    }
}

async fn run_migrate(config: &Config) -> anyhow::Result<()> {
    let store = PgTaskStore::connect(&config.database)?;
    let mut client = store
        .pool()
        .get()
        .await
        .context("connecting to PostgreSQL")?;
    let applied = migrate::run(&mut client)
        .await
        .context("applying migrations")?;
    if applied.is_empty() {
        println!("migrations: up to date");
    } else {
        for version in &applied {
            println!("migrations: applied {version}");
        }
    }
    Ok(())
}

async fn run_serve(config: Config) -> anyhow::Result<()> {
    let listen = config.listen;
    let profile_enabled = config.profile_enabled;
    let state = Arc::new(AppState::new(config)?);
    server::check_rollout(&state).await?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    let local = listener.local_addr()?;
    tracing::info!(%local, profile_enabled, "gateway listening");
    // Tests and scripts read the bound address (port 0 picks a free one) from stdout.
    println!("listening on http://{local}");
    use std::io::Write;
    std::io::stdout().flush()?;

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let reconciler = state.config.reconciler.enabled.then(|| {
        tokio::spawn(q_a2a_gateway::reconciler::run(
            state.clone(),
            stop_rx.clone(),
        ))
    });
    let forgetter = {
        let state = state.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(q_a2a_gateway::http::rate_limit::FORGET_INTERVAL).await;
                state.rate_limit.forget_idle();
            }
        })
    };
    let drain = state.drain.clone();
    let signal = async move {
        shutdown_signal().await;
        let _ = stop_tx.send(true);
        // Open streams end now so their connections can close.
        let _ = drain.send(true);
    };
    server::serve(listener, state, signal).await?;
    forgetter.abort();
    if let Some(reconciler) = reconciler {
        let _ = reconciler.await;
    }
    tracing::info!("gateway stopped");
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = ctrl_c => {},
        _ = terminate => {},
    }
    tracing::info!("shutdown requested: no new connections; finishing in-flight requests");
}
