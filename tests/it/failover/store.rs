//! The store's own rules under failover, one call at a time: an admission tried again after its
//! insert committed finds its own row; a call refused as read-only runs once more on a fresh
//! connection, which follows the address to the promoted server; a pooled connection past its
//! lifetime is not lent again.

use std::time::Duration;

use q_a2a_gateway::config::DatabaseConfig;
use q_a2a_gateway::store::{Admission, PgTaskStore};
use uuid::Uuid;

use crate::support::db::new_task;
use crate::support::gateway::migrate_with;
use crate::support::pg_pair::{Node, PgPair};
use crate::support::proxy::TcpProxy;
use crate::support::{new_id, GatewayOptions, TestDb, Upstream};

/// A migrated primary and standby, and a URL of the primary through an address that can move.
async fn migrated_pair_behind_an_address() -> (PgPair, TcpProxy, String) {
    let pair = PgPair::start().await;
    let address = TcpProxy::start(&pair.a.addr()).await;
    let url = PgPair::url_at(&format!("127.0.0.1:{}", address.port));
    let upstream = Upstream::start().await;
    let migrated = migrate_with(
        &TestDb::elsewhere(url.clone()),
        &upstream.url,
        &GatewayOptions::default(),
    )
    .await;
    assert!(migrated.status.success());
    (pair, address, url)
}

fn store(url: &str) -> PgTaskStore {
    PgTaskStore::connect(&DatabaseConfig {
        url: url.into(),
        pool_size: 4,
        ..DatabaseConfig::default()
    })
    .unwrap()
}

/// What a second attempt of an admission runs (the same task and context ids, after the first
/// committed and its answer was lost) is answered as created, with the row the first wrote:
/// the request goes on to dispatch it, with the claim its first attempt took. Other ids for
/// the same identity find it as existing.
#[tokio::test]
async fn an_admission_tried_again_after_its_insert_committed_finds_its_own_row() {
    let db = TestDb::create().await;
    let upstream = Upstream::start().await;
    let migrated = migrate_with(&db, &upstream.url, &GatewayOptions::default()).await;
    assert!(migrated.status.success());
    let store = store(&db.url);
    let (task_id, context_id) = (Uuid::new_v4(), Uuid::new_v4());
    let new = new_task(&new_id());
    for attempt in 0..2 {
        match store.admit_as(task_id, context_id, &new).await.unwrap() {
            Admission::Created(row) => {
                assert_eq!(row.task_id, task_id, "attempt {attempt}");
                assert_eq!(row.context_id, context_id, "attempt {attempt}");
            }
            other => panic!("attempt {attempt}: {other:?}"),
        }
    }
    match store.admit(&new).await.unwrap() {
        Admission::Existing(row) => assert_eq!(row.task_id, task_id),
        other => panic!("a repeat of the messageId: {other:?}"),
    }
    assert_eq!(db.task_count().await, 1);
}

/// A pool whose every connection is on a primary that was just fenced read-only: the next
/// call is refused as read-only, its connection and every one made before it leave the pool,
/// and the call runs once more on a fresh connection, made through the address that now leads
/// to the promoted server. The caller sees one call, and it succeeded.
#[tokio::test]
async fn a_call_refused_as_read_only_runs_once_more_on_a_fresh_connection() {
    let (pair, address, url) = migrated_pair_behind_an_address().await;
    let store = store(&url);
    // Four connections in the pool, all to the primary.
    let admitted = futures_util::future::join_all(
        (0..4).map(|_| async { store.admit(&new_task(&new_id())).await }),
    )
    .await;
    assert!(admitted.iter().all(Result::is_ok));
    assert!(store.writable().now());

    pair.set_read_only(Node::A, true).await;
    pair.promote(Node::B).await;
    address.retarget(&pair.b.addr());
    let new = new_task(&new_id());
    match store.admit(&new).await {
        Ok(Admission::Created(row)) => {
            let on_b = pair.local(Node::B, crate::support::pg_pair::DATABASE).await;
            let found: i64 = on_b
                .unwrap()
                .query_one(
                    "SELECT count(*) FROM a2a_tasks WHERE task_id = $1",
                    &[&row.task_id],
                )
                .await
                .unwrap()
                .get(0);
            assert_eq!(found, 1, "written on the promoted server");
        }
        other => panic!("the call after the fence: {other:?}"),
    }
    // The next calls take fresh connections too: none of the four is lent again.
    for _ in 0..4 {
        assert!(store.admit(&new_task(&new_id())).await.is_ok());
    }
}

/// A pooled connection past `database.max_lifetime_seconds` is not lent again: with the
/// address moved to another server that also takes writes (a switchover whose old primary was
/// not fenced), calls reach the new server once the lifetime (less up to a fifth) has passed,
/// and not before.
#[tokio::test]
async fn pooled_connections_follow_a_moved_address_within_their_lifetime() {
    let (pair, address, url) = migrated_pair_behind_an_address().await;
    let store = PgTaskStore::connect(&DatabaseConfig {
        url: url.as_str().into(),
        pool_size: 2,
        max_lifetime_seconds: 2,
        ..DatabaseConfig::default()
    })
    .unwrap();
    assert!(store.admit(&new_task(&new_id())).await.is_ok());
    // B is promoted and takes writes, and so does A still (no longer waiting for a synchronous
    // standby): a split the operator's fencing should prevent, and the lifetime bounds.
    pair.sql(Node::A, "ALTER SYSTEM SET synchronous_standby_names = ''")
        .await;
    pair.sql(Node::A, "SELECT pg_reload_conf()").await;
    pair.promote(Node::B).await;
    address.retarget(&pair.b.addr());
    let count_on = async |node: Node| -> i64 {
        pair.local(node, crate::support::pg_pair::DATABASE)
            .await
            .unwrap()
            .query_one("SELECT count(*) FROM a2a_tasks", &[])
            .await
            .unwrap()
            .get(0)
    };
    let b_before = count_on(Node::B).await;
    assert!(store.admit(&new_task(&new_id())).await.is_ok());
    assert_eq!(
        count_on(Node::B).await,
        b_before,
        "a young pooled connection stays where it was made"
    );
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    if let Err(e) = store.admit(&new_task(&new_id())).await {
        panic!("past the lifetime: {e}");
    }
    assert_eq!(
        count_on(Node::B).await,
        b_before + 1,
        "past its lifetime, the connection was replaced by one to the moved address"
    );
}

/// A first host that takes the connection and never answers (a partitioned primary, a
/// wedged proxy) leaves time for the next host within one acquire window: each host of a
/// multi-host URL gets its share of `acquire_timeout_ms` (2 s here, 1 s each).
#[tokio::test]
async fn a_silent_first_host_leaves_time_for_the_next_within_one_acquire() {
    let db = TestDb::create().await;
    let upstream = Upstream::start().await;
    let migrated = migrate_with(&db, &upstream.url, &GatewayOptions::default()).await;
    assert!(migrated.status.success());
    let silent = TcpProxy::start(&crate::support::db::postgres_addr()).await;
    silent.black_hole();
    let (_, rest) = db.url.rsplit_once('@').unwrap();
    let url = format!("postgres://postgres@127.0.0.1:{},{rest}", silent.port);
    let store = store(&url);
    let started = std::time::Instant::now();
    let admitted = store.admit(&new_task(&new_id())).await;
    let took = started.elapsed();
    assert!(admitted.is_ok(), "{admitted:?}");
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_millis(2_000),
        "the silent host had its second, then the next host answered: {took:?}"
    );
}
