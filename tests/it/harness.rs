//! The harness itself: the suite must not exhaust the PostgreSQL server's connections on a
//! machine with many cores (every test thread may run gateways with pools of their own).

use crate::support::gateway::{MAX_GATEWAYS_PER_TEST, TEST_POOL_SIZE};
use crate::support::TestDb;

/// How many tests libtest runs at once here.
fn test_threads() -> usize {
    std::env::var("RUST_TEST_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

#[tokio::test]
async fn fits_the_database() {
    let db = TestDb::create().await;
    let client = db.client().await;
    let setting = |name: &'static str| {
        let client = &client;
        async move {
            let row = client
                .query_one(
                    "SELECT setting::int FROM pg_settings WHERE name = $1",
                    &[&name],
                )
                .await
                .unwrap();
            row.get::<_, i32>(0) as usize
        }
    };
    let usable = setting("max_connections").await - setting("superuser_reserved_connections").await;
    // Per gateway: its pool and the reconciler's leader connection; per test: its own
    // clients (the test database and the admin connection that creates it).
    let worst = test_threads() * (MAX_GATEWAYS_PER_TEST * (TEST_POOL_SIZE + 1) + 2);
    assert!(
        worst <= usable,
        "{} test threads could open {worst} connections; the server allows {usable}: \
         set RUST_TEST_THREADS (scripts/test caps it) or lower TEST_POOL_SIZE",
        test_threads()
    );
}
