//! `q-a2a-gateway`: serve the A2A gateway, migrate its database, or check a deployment.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use q_a2a_gateway::access::AccessCache;
use q_a2a_gateway::app::access_settings;
use q_a2a_gateway::app::App;
use q_a2a_gateway::card_signature::CardSigner;
use q_a2a_gateway::config::Config;
use q_a2a_gateway::ops;
use q_a2a_gateway::outbound::credential::CredentialKeys;
use q_a2a_gateway::server::ConnectionLimits;
use q_a2a_gateway::store::outbound::PgOutboundStore;
use q_a2a_gateway::store::retired::PgRetiredHits;
use q_a2a_gateway::store::{migrate, PgTaskStore};
use q_a2a_gateway::upstream::UpstreamRunApi;

/// The benchmark build counts its allocations (`alloc_count`) on the way to the system allocator,
/// which every build uses (docs/performance.md says why mimalloc was not kept).
#[cfg(feature = "alloc-count")]
#[global_allocator]
static GLOBAL: alloc_count::Counting<std::alloc::System> =
    alloc_count::Counting(std::alloc::System);

#[cfg(any(feature = "alloc-count", test))]
mod alloc_count;

#[derive(Parser)]
#[command(
    name = "q-a2a-gateway",
    version,
    about = "A2A 1.0 JSON-RPC gateway for Q"
)]
struct Cli {
    /// Configuration file (TOML; see config/gateway.toml). Environment variables override it.
    #[arg(long, env = q_a2a_gateway::config::env::CONFIG_FILE, global = true)]
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
    /// Check what this gateway can see of its rollout requirements; exit 1 if any check fails.
    Preflight,
    /// Which tenants still call the retired routes (calls carrying a valid credential), per
    /// route, over the last days: the tenants to contact before the routes go away.
    RetiredReport {
        /// How many days back, today included.
        #[arg(long, default_value_t = 30)]
        days: i32,
    },
    /// One tenant's A2A data: export it as JSON lines, or delete all of it (docs/operations.md).
    Tenant {
        #[command(subcommand)]
        action: TenantAction,
    },
    /// Stored remote credentials (docs/operations.md, "Rotating the credential key").
    Credentials {
        #[command(subcommand)]
        action: CredentialsAction,
    },
    /// Prints the public keys of the card signing keys as a JWK Set (the active key first):
    /// what partners configure to verify this gateway's cards (docs/outbound.md).
    CardKeys,
    /// Check that a Q deployment keeps the promises of its contract the gateway relies on
    /// (docs/contract-kit.md): prints each promise kept, broken or not checked, and the runs
    /// it created and canceled. Exit 1 if a promise is broken, 2 if the check could not run.
    /// Needs no configuration file, database or Redis.
    ContractCheck(ContractCheckArgs),
}

#[derive(clap::Args)]
struct ContractCheckArgs {
    /// Base URL of Q's internal API (its contract routes are under /internal/v1).
    #[arg(long, env = q_a2a_gateway::config::env::UPSTREAM_URL)]
    upstream: String,
    /// The service credential Q issued to the gateway. Prefer the variable: arguments show in
    /// process lists.
    #[arg(
        long,
        env = q_a2a_gateway::config::env::UPSTREAM_SERVICE_TOKEN,
        hide_env_values = true
    )]
    service_token: String,
    /// The tenant whose agent the check runs.
    #[arg(long)]
    tenant: String,
    /// A principal of the tenant with granted access to the agent's workspace: the runs are
    /// its, and the hook revokes and restores its grants.
    #[arg(long)]
    principal: String,
    /// The agent the check creates runs of (each is canceled at the end).
    #[arg(long)]
    agent: String,
    /// Operator hook: a URL the check POSTs each grant change to, as JSON (docs/contract-kit.md).
    #[arg(long, conflicts_with = "hook_command")]
    hook_url: Option<String>,
    /// Operator hook: a command run through `sh -c` for each grant change, given as JSON on
    /// stdin and in CONTRACT_HOOK_* variables.
    #[arg(long)]
    hook_command: Option<String>,
    /// Prefix of every workflow id the check uses [default: contract-check-<8 random hex>].
    #[arg(long)]
    workflow_prefix: Option<String>,
    /// Longest wait, in milliseconds, for a change to reach a feed.
    #[arg(long, default_value_t = 10_000)]
    wait_ms: u64,
    /// Also exit non-zero (3) when a promise could not be checked at all and none is broken
    /// (a promise only partly checked always does).
    #[arg(long)]
    strict: bool,
}

#[derive(Subcommand)]
enum CredentialsAction {
    /// Seals every stored credential again under the active key, in batches, while replicas
    /// serve; reports what still needs an old key and exits 1 while anything does.
    Reseal {
        /// Registrations per batch.
        #[arg(long, default_value_t = 100)]
        batch_size: i64,
        /// Only count (and try to open) what would be sealed again.
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Subcommand)]
enum TenantAction {
    /// Writes the tenant's tasks (with messages and artifacts), registrations (without
    /// credentials), delegations and retired-route counters to a JSON-lines file. Running it
    /// again on the same file resumes after the last whole record.
    Export {
        #[arg(long)]
        tenant: String,
        /// The file written (created, or resumed when it holds a partial export).
        #[arg(long)]
        out: PathBuf,
        /// Rows read per batch.
        #[arg(long, default_value_t = ops::DEFAULT_BATCH)]
        batch_size: i64,
        /// Do not ask Q: every task is exported as a content-free receipt (id, state, owner),
        /// since without Q no task's content can be confirmed as still visible to its owner.
        #[arg(long, alias = "no-artifacts")]
        receipts_only: bool,
        /// Only count what would be exported.
        #[arg(long)]
        dry_run: bool,
    },
    /// Deletes every A2A row of the tenant, in batches; running it again deletes what is left.
    Delete {
        #[arg(long)]
        tenant: String,
        /// Rows deleted per statement.
        #[arg(long, default_value_t = ops::DEFAULT_BATCH)]
        batch_size: i64,
        /// Only count what would be deleted.
        #[arg(long)]
        dry_run: bool,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let cli = match cli.command {
        // Needs only Q: no configuration is read, so a gateway's settings cannot stop it.
        Command::ContractCheck(args) => return run_contract_check(args).await,
        _ => cli,
    };
    let config = Config::load(cli.config.as_deref()).context("loading configuration")?;
    // Only the server exports traces; the one-shot commands log.
    let serving = matches!(cli.command, Command::Serve);
    let telemetry = q_a2a_gateway::telemetry::init(serving.then_some(&config.traces))?;
    match cli.command {
        Command::Migrate => run_migrate(&config).await,
        Command::Serve => {
            let served = run_serve(config).await;
            telemetry.shutdown();
            served
        }
        Command::RetiredReport { days } => run_retired_report(&config, days).await,
        Command::Tenant { action } => run_tenant(&config, action).await,
        Command::Credentials {
            action:
                CredentialsAction::Reseal {
                    batch_size,
                    dry_run,
                },
        } => run_reseal(&config, batch_size, dry_run).await,
        Command::CardKeys => run_card_keys(&config),
        Command::ContractCheck(_) => unreachable!("handled before the configuration is read"),
        Command::Preflight => {
            let report = q_a2a_gateway::preflight::run(&config).await?;
            print!("{}", report.render());
            use std::io::Write;
            std::io::stdout().flush()?;
            if !report.passed() {
                std::process::exit(1);
            }
            Ok(())
        }
    }
}

async fn run_contract_check(args: ContractCheckArgs) -> anyhow::Result<()> {
    use q_a2a_gateway::contract_check::{self, Hook, Options};
    q_a2a_gateway::telemetry::init(None)?;
    let hook = match (args.hook_url, args.hook_command) {
        (Some(url), _) => Some(Hook::Url(url)),
        (None, Some(command)) => Some(Hook::Command(command)),
        (None, None) => None,
    };
    let options = Options {
        upstream: args.upstream,
        service_token: args.service_token,
        tenant_id: args.tenant,
        principal_id: args.principal,
        agent_id: args.agent,
        hook,
        workflow_prefix: args.workflow_prefix.unwrap_or_else(Options::default_prefix),
        wait: std::time::Duration::from_millis(args.wait_ms),
    };
    let report = match contract_check::run(options).await {
        Ok(report) => report,
        Err(unrunnable) => {
            eprintln!("contract-check: cannot run: {unrunnable}");
            std::process::exit(2);
        }
    };
    print!("{}", report.render());
    use std::io::Write;
    std::io::stdout().flush()?;
    match report.exit_code(args.strict) {
        0 => Ok(()),
        code => std::process::exit(code),
    }
}

async fn run_tenant(config: &Config, action: TenantAction) -> anyhow::Result<()> {
    let store = PgTaskStore::connect(&config.database)?;
    match action {
        TenantAction::Export {
            tenant,
            out,
            batch_size,
            receipts_only,
            dry_run,
        } => {
            anyhow::ensure!(batch_size > 0, "--batch-size must be > 0");
            if dry_run {
                return print_counts(
                    "would export",
                    &ops::offboard::count(&store, &tenant).await?,
                );
            }
            let q = if receipts_only {
                None
            } else {
                let upstream = UpstreamRunApi::new(&config.upstream)?;
                // No feed follower here: every answer is asked of Q and serves only within the
                // direct bound, as for a replica whose access feed is down.
                let access = AccessCache::new(upstream.clone(), access_settings(config));
                Some(ops::export::ExportQ { upstream, access })
            };
            let exporter = ops::export::Exporter {
                outbound: PgOutboundStore::new(store.pool().clone()),
                store,
                q,
            };
            let options = ops::export::ExportOptions {
                tenant,
                out: out.clone(),
                batch_size,
            };
            let (written, complete) = exporter.run(&options).await?;
            if complete {
                println!("{}: already complete", out.display());
                return Ok(());
            }
            let written: Vec<(&str, i64)> =
                written.into_iter().map(|(k, n)| (k, n as i64)).collect();
            print_counts("exported", &written)?;
            println!("{}: complete", out.display());
            Ok(())
        }
        TenantAction::Delete {
            tenant,
            batch_size,
            dry_run,
        } => {
            anyhow::ensure!(batch_size > 0, "--batch-size must be > 0");
            if dry_run {
                return print_counts(
                    "would delete",
                    &ops::offboard::count(&store, &tenant).await?,
                );
            }
            let (deleted, left) =
                ops::offboard::delete(&store, &tenant, batch_size, |kind, so_far| {
                    tracing::info!(tenant = %tenant, kind, deleted = so_far, "tenant rows deleted")
                })
                .await?;
            print_counts("deleted", &deleted)?;
            if !left.is_empty() {
                print_counts("written meanwhile, left", &left)?;
                anyhow::bail!(
                    "tenant {tenant:?} was still being served: turn its agent_api feature off in Q, then run this again"
                );
            }
            Ok(())
        }
    }
}

fn run_card_keys(config: &Config) -> anyhow::Result<()> {
    let signer = CardSigner::from_config(&config.card_signing).context("card signing keys")?;
    let Some(keys) = signer.keys() else {
        anyhow::bail!(
            "no card signing keys configured: set card_signing.keys_dir ({})",
            q_a2a_gateway::config::env::CARD_SIGNING_KEYS_DIR
        );
    };
    println!("{}", serde_json::to_string_pretty(&keys.jwks())?);
    Ok(())
}

async fn run_reseal(config: &Config, batch_size: i64, dry_run: bool) -> anyhow::Result<()> {
    anyhow::ensure!(batch_size > 0, "--batch-size must be > 0");
    let keys = CredentialKeys::parse(
        config.outbound.credential_keys.expose(),
        &config.outbound.credential_active_key,
    )?;
    let store = PgOutboundStore::new(PgTaskStore::connect(&config.database)?.pool().clone());
    let started = std::time::Instant::now();
    let report = ops::reseal::reseal(&store, &keys, batch_size, dry_run).await?;
    let verb = if dry_run { "would reseal" } else { "resealed" };
    println!(
        "{verb} {} credential(s) under {:?} in {:.1} s",
        report.resealed,
        keys.active_key_id().unwrap_or_default(),
        started.elapsed().as_secs_f64()
    );
    if report.changed_meanwhile > 0 {
        println!(
            "set again by their tenant meanwhile (already under the active key): {}",
            report.changed_meanwhile
        );
    }
    for (registration, key, why) in &report.unusable {
        println!("cannot open {registration} (key {key:?}): {why}");
    }
    for (key, n) in &report.remaining {
        println!("still under {key:?}: {n}");
    }
    if !report.remaining.is_empty() && !dry_run {
        anyhow::bail!("some credentials still need an old key (above): keep it configured");
    }
    Ok(())
}

fn print_counts(what: &str, counts: &[(&str, i64)]) -> anyhow::Result<()> {
    for (kind, n) in counts {
        println!("{what} {kind}: {n}");
    }
    Ok(())
}

async fn run_retired_report(config: &Config, days: i32) -> anyhow::Result<()> {
    let store = PgTaskStore::connect(&config.database)?;
    let uses = PgRetiredHits::new(store.pool().clone())
        .report(days.max(1))
        .await
        .context("reading a2a_retired_route_hits (run `q-a2a-gateway migrate` first)")?;
    if uses.is_empty() {
        println!("retired routes: no attributed calls in the last {days} days");
        return Ok(());
    }
    println!(
        "{:<24} {:<34} {:>8}  {:<10}  last seen (UTC)",
        "tenant", "route", "calls", "since"
    );
    for u in &uses {
        println!(
            "{:<24} {:<34} {:>8}  {:<10}  {}",
            u.tenant_id,
            u.route,
            u.hits,
            u.first_day,
            u.last_seen.format("%Y-%m-%d %H:%M:%S")
        );
    }
    Ok(())
}

async fn run_migrate(config: &Config) -> anyhow::Result<()> {
    // A migration may rewrite a large table: no statement limit, and no answer deadline.
    let mut database = config.database.clone();
    database.statement_timeout_ms = 0;
    let store = PgTaskStore::connect(&database)?;
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
    let grace = config.shutdown_grace();
    let limits = ConnectionLimits::from_config(&config);
    let metrics = q_a2a_gateway::metrics::install()?;
    #[cfg(feature = "alloc-count")]
    q_a2a_gateway::metrics::count_allocations_with(alloc_count::totals);
    let tls = q_a2a_gateway::tls::acceptor(&config.tls)?;
    let metrics_listen = config.metrics_listen;
    let app = App::new(&config)?;
    let rollout_checked = app.check_rollout().await?;
    let metrics_listener = q_a2a_gateway::metrics::bind(metrics_listen).await?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    let local = listener.local_addr()?;
    let metrics_local = metrics_listener.local_addr()?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    tracing::info!(%local, %metrics_local, profile_enabled, tls = tls.is_some(), "gateway listening");
    // Tests and scripts read the bound address (port 0 picks a free one) from the first
    // `listening on` line of stdout; the metrics line deliberately has another prefix.
    println!("listening on {scheme}://{local}");
    println!("metrics on http://{metrics_local}");
    use std::io::Write;
    std::io::stdout().flush()?;

    let (stop, stopped) = tokio::sync::watch::channel(false);
    let on_signal = stop.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        let _ = on_signal.send(true);
    });
    // Started while the database could not be reached: checked again until it answers, and
    // the replica stops serving if it then finds the migration missing.
    let refused: std::sync::Arc<std::sync::Mutex<Option<anyhow::Error>>> = Default::default();
    if !rollout_checked {
        let (rollout, refused) = (app.rollout(), refused.clone());
        tokio::spawn(async move {
            if let Err(e) = rollout.confirm().await {
                tracing::error!(error = %e, "stopping: the rollout check failed");
                *refused.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
                let _ = stop.send(true);
            }
        });
    }
    let wait = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    let metrics_task = tokio::spawn(q_a2a_gateway::metrics::serve(
        metrics_listener,
        metrics,
        wait(stopped.clone()),
    ));
    app.run(listener, tls, grace, limits, stopped).await;
    metrics_task.abort();
    tracing::info!("gateway stopped");
    let refusal = refused.lock().unwrap_or_else(|e| e.into_inner()).take();
    match refusal {
        Some(e) => Err(e),
        None => Ok(()),
    }
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
}
