//! PostgreSQL wedged in the middle of an answer, on a connection the pool lent out: the call
//! fails at the answer deadline counted from the last bytes that came.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use q_a2a_gateway::config::DatabaseConfig;
use q_a2a_gateway::store::{PgTaskStore, ANSWER_SLACK};

use crate::support::db::{postgres_addr, via_port};
use crate::support::TestDb;

/// A proxy to PostgreSQL that forwards everything until armed, then passes on only the first
/// `budget` bytes of what the server sends and holds both ends open: an answer that starts and
/// stops midway (a server or a path wedged during a long answer, with the proxy still
/// acknowledging).
async fn stalling_proxy(budget: Arc<AtomicUsize>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((inbound, _)) = listener.accept().await {
            let budget = budget.clone();
            tokio::spawn(async move {
                let outbound = TcpStream::connect(postgres_addr()).await.unwrap();
                let (mut client_read, mut client_write) = inbound.into_split();
                let (mut server_read, mut server_write) = outbound.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
                });
                let mut buf = vec![0u8; 16 * 1024];
                while let Ok(n) = server_read.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    let left = budget.load(Ordering::SeqCst);
                    let pass = n.min(left);
                    if left != usize::MAX {
                        budget.store(left - pass, Ordering::SeqCst);
                    }
                    if client_write.write_all(&buf[..pass]).await.is_err() {
                        break;
                    }
                    if pass < n {
                        // Stalled: keep both ends open, forward nothing more.
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                    }
                }
            });
        }
    });
    port
}

/// A pooled connection whose answer stops midway fails at the answer deadline counted from the
/// last bytes that came, not never: keep-alive cannot see a path that still acknowledges, and
/// the statement already finished on the server. (Before, any byte of an answer disarmed the
/// deadline, and such a read waited until the connection closed.)
#[tokio::test]
async fn an_answer_that_stops_midway_fails_at_the_answer_deadline() {
    const STATEMENT: Duration = Duration::from_millis(400);
    let db = TestDb::create().await;
    let budget = Arc::new(AtomicUsize::new(usize::MAX));
    let port = stalling_proxy(budget.clone()).await;
    let config = DatabaseConfig {
        url: via_port(&db.url, port).into(),
        statement_timeout_ms: STATEMENT.as_millis() as u64,
        ..DatabaseConfig::default()
    };
    let store = PgTaskStore::connect(&config).unwrap();
    let client = store.pool().get().await.unwrap();
    let small: i32 = client.query_one("SELECT 1", &[]).await.unwrap().get(0);
    assert_eq!(small, 1);
    // About 1 MiB of answer; 20 KiB of it get through.
    budget.store(20 * 1024, Ordering::SeqCst);
    let started = Instant::now();
    let answer = tokio::time::timeout(
        Duration::from_secs(20),
        client.query_one("SELECT repeat('x', 1048576)", &[]),
    )
    .await
    .expect("the query ends by itself");
    let took = started.elapsed();
    assert!(answer.is_err(), "a stalled answer is an error");
    assert_eq!(budget.load(Ordering::SeqCst), 0, "part of the answer came");
    let bound = STATEMENT + ANSWER_SLACK + Duration::from_millis(1_000);
    assert!(
        took < bound,
        "the stalled answer failed after {took:?} (bound {bound:?})"
    );
    drop(client);
    // The broken connection is never lent again: the next call gets a working one.
    budget.store(usize::MAX, Ordering::SeqCst);
    let again = store.pool().get().await.unwrap();
    let one: i32 = again.query_one("SELECT 1", &[]).await.unwrap().get(0);
    assert_eq!(one, 1);
}

/// A connection that sat in the pool for longer than the answer deadline answers when it is
/// lent again. (Before, the deadline of its last answer, long past, still counted once it was
/// lent out again: the connection's first read after the lending failed at once, before the
/// new statement was even sent, and every pooled connection idle for more than
/// `statement_timeout_ms` + 1 s failed the next call made on it with "connection closed".)
#[tokio::test]
async fn a_connection_idle_in_the_pool_past_the_deadline_answers_when_lent_again() {
    const STATEMENT: Duration = Duration::from_millis(300);
    let db = TestDb::create().await;
    let config = DatabaseConfig {
        url: db.url.clone().into(),
        statement_timeout_ms: STATEMENT.as_millis() as u64,
        // One connection: the second call is lent the very connection the first one used.
        pool_size: 1,
        ..DatabaseConfig::default()
    };
    let store = PgTaskStore::connect(&config).unwrap();
    let mut backends = Vec::new();
    for round in 0..3 {
        let client = store.pool().get().await.unwrap();
        // A cached statement, as the store's calls use: nothing is closed after the answer, so
        // the last bytes the connection reads are the answer's, while it is lent out.
        let statement = client
            .prepare_cached("SELECT pg_backend_pid()")
            .await
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        let backend: i32 = client
            .query_one(&statement, &[])
            .await
            .unwrap_or_else(|e| panic!("round {round}: {e}"))
            .get(0);
        backends.push(backend);
        drop(client);
        // Idle in the pool for longer than the deadline of the answer it last read.
        tokio::time::sleep(STATEMENT + ANSWER_SLACK + Duration::from_millis(300)).await;
    }
    assert!(
        backends.windows(2).all(|w| w[0] == w[1]),
        "one connection served every round: {backends:?}"
    );
}
