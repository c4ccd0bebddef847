//! Observer leases on a Redis Cluster of three masters: the acquire script touches the global,
//! tenant and principal keys at once, which a cluster allows only within one slot. With the
//! node serving that slot killed, observation fails closed (503) and everything else keeps
//! working; once the node is back, leases work again.

use std::time::Duration;

use serde_json::json;

use crate::support::gateway::redis_key_prefix;
use crate::support::redis::RedisCluster;
use crate::support::report::report;
use crate::support::{new_id, Gateway, GatewayOptions};

use super::{approver, waiting_task};

#[tokio::test]
async fn leases_hold_on_a_cluster_and_survive_a_node_restart() {
    let mut cluster = RedisCluster::start().await;
    let gw = Gateway::start_with(GatewayOptions::with_env(&[
        ("Q_A2A_REDIS_URL", &cluster.url()),
        ("Q_A2A_REDIS_CLUSTER", "true"),
        ("Q_A2A_OBSERVERS_PER_PRINCIPAL", "2"),
        ("Q_A2A_LEASE_TTL_MS", "3000"),
    ]))
    .await;
    let body = gw.wait_readyz(200, Duration::from_secs(20)).await;
    assert_eq!(body["checks"]["redis"]["ok"], true, "{body}");
    let tag = format!("{{{}:leases}}", redis_key_prefix(&gw.db));

    let watch = approver(&gw, "tok-alice");
    let id = waiting_task(&gw, "tok-alice").await;
    let mut first = watch.subscribe(&id).await;
    assert!(first.is_sse(), "{} {:?}", first.status, first.json());
    first.next_result().await.unwrap();
    let mut second = watch.subscribe(&id).await;
    assert!(second.is_sse());
    second.next_result().await.unwrap();
    for scope in [
        format!("{tag}:global"),
        format!("{tag}:tenant:6:t-acme"),
        format!("{tag}:principal:6:t-acme:7:p-alice"),
    ] {
        assert_eq!(cluster.live_members(&scope).await, 2, "{scope}");
    }
    let third = watch.subscribe(&id).await;
    assert_eq!(
        third.status, 429,
        "the principal bound holds on the cluster"
    );
    // Disconnecting releases (a pipeline over the three keys: one slot again).
    drop((first, second));
    let principal = format!("{tag}:principal:6:t-acme:7:p-alice");
    let mut released = false;
    for _ in 0..30 {
        if cluster.live_members(&principal).await == 0 {
            released = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(released, "dropped streams give their leases back");

    // The node serving the leases' slot dies, with their data.
    let owner = cluster.owner_of(&format!("{tag}:global")).await;
    cluster.kill(owner).await;
    let started = tokio::time::Instant::now();
    let refused = watch.subscribe(&id).await;
    let refused_in = started.elapsed();
    assert_eq!(refused.status, 503, "fails closed while the slot is down");
    assert_eq!(refused.json()["error"], "observation_unavailable");
    assert!(refused_in < Duration::from_secs(5), "{refused_in:?}");
    let writer = gw.caller("tok-alice").agent("ag-writer");
    let quick = writer
        .send_text_immediately(&new_id(), "no lease needed")
        .await;
    assert!(writer.get_task(&quick.task_id()).await.is_result());
    assert!(writer.list_tasks(json!({})).await.is_result());

    // Back on its port, from its cluster state file: leases work again, counted afresh.
    let restarted = tokio::time::Instant::now();
    cluster.restart(owner).await;
    cluster.wait_ok(Duration::from_secs(30)).await;
    let mut back = None;
    for _ in 0..60 {
        let s = watch.subscribe(&id).await;
        if s.is_sse() {
            back = Some(s);
            break;
        }
        assert_eq!(s.status, 503, "{:?}", s.json());
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let mut back = back.expect("observation recovers once the node is back");
    report(
        "streaming",
        &format!(
            "redis cluster node restart: refused in {refused_in:?} while down, leases back {:?} after the restart",
            restarted.elapsed()
        ),
    );
    back.next_result().await.unwrap();
    let mut again = watch.subscribe(&id).await;
    assert!(again.is_sse());
    again.next_result().await.unwrap();
    assert_eq!(
        watch.subscribe(&id).await.status,
        429,
        "the bound holds again"
    );
    assert_eq!(cluster.live_members(&principal).await, 2);
}
