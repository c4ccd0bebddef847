//! PostgreSQL's faults under load: the primary crash-restarted, a failover to its promoted
//! synchronous standby with the multi-host URL in both orders, an outage with the standby
//! listed (nothing may go to it), an address that moves to the promoted server while the old
//! one comes back read-only, and a switchover that fences the old primary read-only under the
//! pool's open connections.

use std::time::Duration;

use super::{connect_check, durable_and_once, failover_env, gateway_bin, History, Load, RECOVERY};
use crate::support::pg_pair::{Node, PgPair, PASSWORD};
use crate::support::proxy::TcpProxy;
use crate::support::{metrics, new_id, Gateway, GatewayOptions, TestDb, Upstream};

/// A gateway on the pair through `url`, Q's deduplication off.
async fn gateway(pair: &PgPair, url: String) -> Gateway {
    let upstream = Upstream::start().await;
    upstream.workflow_dedup(false).await;
    let mut env = failover_env();
    env.push(("Q_A2A_DATABASE_URL".into(), url));
    let options = GatewayOptions {
        env,
        bin: gateway_bin(),
        ..GatewayOptions::default()
    };
    Gateway::start_on(TestDb::elsewhere(pair.url(&[Node::A])), upstream, options).await
}

/// A primary's URL for the test's own checks.
async fn check_db(pair: &PgPair, primary: Node) -> tokio_postgres::Client {
    connect_check(&pair.url(&[primary])).await
}

/// `a2a_store_errors_total{class="25"}`: statements a read-only server refused.
async fn read_only_refusals(gw: &Gateway) -> f64 {
    metrics::metric(
        &gw.metrics().await,
        "a2a_store_errors_total",
        &[("class", "25")],
    )
    .unwrap_or(0.0)
}

/// The primary crashes (`pg_ctl stop -m immediate`) under load, is down 5 s and starts again;
/// the gateway reaches it through a URL of these hosts.
async fn crashed_and_restarted(hosts: &[Node]) -> (PgPair, Gateway, History) {
    let pair = PgPair::start().await;
    let gw = gateway(&pair, pair.url(hosts)).await;
    let mut load = Load::warmed(&gw, 4, 0).await;
    load.losing();
    pair.crash(Node::A).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    load.restoring();
    pair.start_node(Node::A).await;
    load.restored();
    let history = load.finish_checked(None).await;
    (pair, gw, history)
}

/// A crash-restart of the only host: nothing acknowledged is lost, one run per messageId,
/// writes recover, and the replica was not ready meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_crashed_and_restarted_under_load_loses_nothing() {
    let (pair, gw, history) = crashed_and_restarted(&[Node::A]).await;
    durable_and_once(&gw, &check_db(&pair, Node::A).await, &history).await;
}

/// With the standby listed too (`primary,standby`), a 5 s outage of the primary sends no
/// connection to the standby: no statement is refused as read-only, and writes recover as soon
/// as the primary is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_with_the_standby_listed_sends_nothing_to_the_standby() {
    let (pair, gw, history) = crashed_and_restarted(&[Node::A, Node::B]).await;
    assert_eq!(
        read_only_refusals(&gw).await,
        0.0,
        "a statement went to the standby"
    );
    durable_and_once(&gw, &check_db(&pair, Node::A).await, &history).await;
}

/// The primary crashes and its synchronous standby is promoted; the URL lists both in `order`.
/// Every send before the crash succeeds (whichever host is first), writes move to the promoted
/// server within the recovery bound, nothing acknowledged is lost.
async fn failover_to_the_promoted_standby(order: [Node; 2]) {
    let pair = PgPair::start().await;
    let gw = gateway(&pair, pair.url(&order)).await;
    let mut load = Load::warmed(&gw, 4, 0).await;
    load.losing();
    pair.crash(Node::A).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    load.restoring();
    pair.promote(Node::B).await;
    load.restored();
    let history = load.finish_checked(None).await;
    let lost = history.outage.unwrap().lost;
    let before: Vec<_> = history
        .attempts
        .iter()
        .filter(|a| a.at + a.took < lost)
        .collect();
    assert!(
        before
            .iter()
            .all(|a| matches!(a.outcome, super::Outcome::Acked(_))),
        "a send failed before the crash: {:?}",
        before
            .iter()
            .find(|a| !matches!(a.outcome, super::Outcome::Acked(_)))
    );
    durable_and_once(&gw, &check_db(&pair, Node::B).await, &history).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_with_the_primary_listed_first_moves_writes_to_the_promoted_standby() {
    failover_to_the_promoted_standby([Node::A, Node::B]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_with_the_standby_listed_first_moves_writes_to_the_promoted_standby() {
    failover_to_the_promoted_standby([Node::B, Node::A]).await;
}

/// A gateway reaching the pair's primary through one address (a forwarder standing in for a
/// DNS name or a Service such as CloudNativePG's `-rw`).
async fn behind_an_address() -> (PgPair, TcpProxy, Gateway) {
    let pair = PgPair::start().await;
    let address = TcpProxy::start(&pair.a.addr()).await;
    let gw = gateway(
        &pair,
        PgPair::url_at(&format!("127.0.0.1:{}", address.port)),
    )
    .await;
    (pair, address, gw)
}

/// The primary crashes, the standby is promoted, the old primary comes back read-only (a
/// standby of the new one) while the address still points at it for 4 s more, then the
/// address moves to the promoted server: writes follow it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_that_moves_to_the_promoted_server_is_followed() {
    let (pair, address, gw) = behind_an_address().await;
    let mut load = Load::warmed(&gw, 4, 0).await;
    load.losing();
    pair.crash(Node::A).await;
    pair.promote(Node::B).await;
    pair.restart_as_standby(Node::A, Node::B).await;
    assert!(
        !pair.writable(Node::A).await,
        "the old primary is back read-only"
    );
    tokio::time::sleep(Duration::from_secs(4)).await;
    load.restoring();
    address.retarget(&pair.b.addr());
    load.restored();
    let history = load.finish_checked(None).await;
    durable_and_once(&gw, &check_db(&pair, Node::B).await, &history).await;
}

/// A switchover under the pool's open connections: the old primary is fenced read-only
/// without a restart (`default_transaction_read_only`), the standby promoted, and the address
/// moved to it 5 s later. Each pooled connection that meets the read-only server leaves the
/// pool at once with every connection made before it, so writes follow the address as soon as
/// it moved, and none is sent to the old server after that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_fenced_read_only_under_open_connections_loses_them_at_once() {
    let (pair, address, gw) = behind_an_address().await;
    let mut load = Load::warmed(&gw, 4, 0).await;
    load.losing();
    pair.set_read_only(Node::A, true).await;
    pair.promote(Node::B).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    load.restoring();
    address.retarget(&pair.b.addr());
    load.restored();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let refused_by_old = read_only_refusals(&gw).await;
    let history = load.finish_checked(None).await;
    assert!(
        refused_by_old > 0.0,
        "the pooled connections met the fenced server"
    );
    assert_eq!(
        read_only_refusals(&gw).await,
        refused_by_old,
        "a statement still went to the fenced server after the address moved"
    );
    // The log names the cause, never the URL's password.
    let logs = gw.log_text();
    // Whichever statement met the fenced server first (a send's INSERT, the dispatcher's or
    // the reconciler's UPDATE) is named with the server's own message.
    assert!(
        logs.lines()
            .any(|line| line.contains("SQLSTATE 25006: cannot execute ")
                && line.contains(" in a read-only transaction")),
        "the log names the SQLSTATE and the server's message"
    );
    assert!(!logs.contains(PASSWORD), "the URL's password in the log");
    durable_and_once(&gw, &check_db(&pair, Node::B).await, &history).await;
}

/// `migrate` and the other one-shot commands take the writable host of a multi-host URL
/// whatever its order; a URL asking for any other session attributes refuses to start,
/// saying what to set.
#[tokio::test]
async fn migrate_takes_the_writable_host_and_other_session_attributes_are_refused() {
    let pair = PgPair::start().await;
    let upstream = Upstream::start().await;
    let db = TestDb::elsewhere(pair.url(&[Node::B, Node::A]));
    let options = GatewayOptions {
        env: failover_env(),
        bin: gateway_bin(),
        ..GatewayOptions::default()
    };
    let out = crate::support::gateway::migrate_with(&db, &upstream.url, &options).await;
    assert!(
        out.status.success(),
        "migrate with the standby listed first: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let applied: i64 = check_db(&pair, Node::A)
        .await
        .query_one("SELECT count(*) FROM a2a_schema_migrations", &[])
        .await
        .unwrap()
        .get(0);
    assert!(applied > 0);
    let delete = crate::support::gateway::run_command_with(
        &db,
        &upstream.url,
        &options,
        &["tenant", "delete", "--tenant", "t-none"],
    )
    .await;
    assert!(
        delete.status.success(),
        "a one-shot write with the standby listed first: {}",
        String::from_utf8_lossy(&delete.stderr)
    );
    for attrs in ["any", "read-only", "primary", "prefer-standby"] {
        let url = format!(
            "{}?target_session_attrs={attrs}",
            pair.url(&[Node::B, Node::A])
        );
        let mut refused = options.clone();
        refused.env.push(("Q_A2A_DATABASE_URL".into(), url));
        let out = crate::support::gateway::migrate_with(&db, &upstream.url, &refused).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "migrate started with {attrs}");
        assert!(
            stderr.contains(&format!("target_session_attrs={attrs} is not supported"))
                && stderr.contains("target_session_attrs=read-write"),
            "{attrs}: {stderr}"
        );
    }
}

/// A replica started while no primary takes writes (one replaced during a failover) serves,
/// not ready, instead of exiting into a restart loop; it becomes ready, and sends succeed,
/// once the primary is back. Started on a database that then turns out to lack the status
/// migration, it stops, as it refuses to start on one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_started_without_a_primary_serves_not_ready_until_one_is_reachable() {
    let pair = PgPair::start().await;
    let upstream = Upstream::start().await;
    let mut options = GatewayOptions {
        env: failover_env(),
        bin: gateway_bin(),
        ..GatewayOptions::default()
    };
    options
        .env
        .push(("Q_A2A_DATABASE_URL".into(), pair.url(&[Node::A, Node::B])));
    let db = TestDb::elsewhere(pair.url(&[Node::A]));
    let migrated = crate::support::gateway::migrate_with(&db, &upstream.url, &options).await;
    assert!(migrated.status.success());
    pair.crash(Node::A).await;
    let gw = Gateway::start_on(db, upstream, options.clone().unmigrated()).await;
    let (status, report) = gw.readyz().await;
    assert_eq!(status, 503, "{report}");
    let writer = gw.caller("tok-alice").agent("ag-writer");
    let refused = writer.send_text_immediately(&new_id(), "no primary").await;
    assert_eq!(refused.error_code(), Some(-32603), "{}", refused.body);
    assert_eq!(
        refused.body["error"]["data"][0]["metadata"]["retryable"],
        "true"
    );
    pair.start_node(Node::A).await;
    gw.wait_readyz(200, RECOVERY + Duration::from_secs(2)).await;
    writer.new_task("the primary is back").await;

    // The same start on a database without the migration: it stops once it can tell.
    let other = PgPair::start().await;
    other.crash(Node::A).await;
    let mut unmigrated = options.clone().unmigrated();
    unmigrated
        .env
        .push(("Q_A2A_DATABASE_URL".into(), other.url(&[Node::A, Node::B])));
    let mut gw = Gateway::start_on(
        TestDb::elsewhere(other.url(&[Node::A])),
        Upstream::start().await,
        unmigrated,
    )
    .await;
    other.start_node(Node::A).await;
    let status = gw.wait_exit(Duration::from_secs(10)).await;
    assert!(!status.success());
    assert!(
        gw.log_text()
            .contains("is not applied; run `q-a2a-gateway migrate` first"),
        "{}",
        gw.log_text()
    );
}
