//! The faults of a schedule, injected into the running world: Q's contract faults through its
//! admin API, and process faults (a replica SIGKILLed and started again, the Redis primary
//! stopped and started again empty or demoted under its replica, every PostgreSQL connection
//! of the gateways terminated, the PostgreSQL primary crashed and restarted or failed over to
//! its standby).

use std::time::Duration;

use serde_json::json;

use super::super::history::FaultKind;
use super::super::schedule::{FaultStep, REVOCABLE_PRINCIPAL, REVOCABLE_TOKEN, WORKSPACE};
use super::{replicate, Process, World};
use crate::support::kill9;
use crate::support::pg_pair::{Node, DATABASE};
use crate::support::redis::PrivateRedis;

fn other(node: Node) -> Node {
    match node {
        Node::A => Node::B,
        Node::B => Node::A,
    }
}

impl World {
    pub(super) async fn inject(&self, fault: &FaultStep) {
        let q = &self.gw.upstream;
        let at = self.now();
        match fault {
            FaultStep::Q(faults) => {
                q.faults(faults.clone()).await;
                self.fault(FaultKind::Q(faults.to_string()), at, None);
            }
            FaultStep::QFor { set, clear, ms } => {
                q.faults(set.clone()).await;
                tokio::time::sleep(Duration::from_millis(*ms)).await;
                q.faults(clear.clone()).await;
                self.fault(FaultKind::Q(set.to_string()), at, Some(self.now()));
            }
            FaultStep::FeedFailover(feed) => {
                q.post(&format!("/admin/feeds/{feed}/failover"), json!({"lost": 2}))
                    .await;
                self.fault(FaultKind::FeedFailover(feed), at, None);
            }
            FaultStep::FeedCompact(feed) => {
                q.post(&format!("/admin/feeds/{feed}/compact"), json!({}))
                    .await;
                self.fault(FaultKind::FeedCompacted(feed), at, None);
            }
            FaultStep::RevokeToken => {
                q.post("/admin/tokens/revoke", json!({"token": REVOCABLE_TOKEN}))
                    .await;
                self.fault(FaultKind::TokenRevoked(REVOCABLE_TOKEN.into()), at, None);
            }
            FaultStep::RevokeWorkspace { ms } => {
                q.grant_workspace(WORKSPACE, REVOCABLE_PRINCIPAL, false)
                    .await;
                // The revocation counts from the moment Q committed it: the admin call's end.
                let revoked = self.now();
                tokio::time::sleep(Duration::from_millis(*ms)).await;
                let restoring = self.now();
                q.grant_workspace(WORKSPACE, REVOCABLE_PRINCIPAL, true)
                    .await;
                let kind = FaultKind::WorkspaceRevoked {
                    principal: REVOCABLE_PRINCIPAL.into(),
                    workspace: WORKSPACE.into(),
                };
                self.fault(kind, revoked, Some(restoring));
            }
            FaultStep::AgentUnavailable { agent, ms } => {
                let path = format!("/admin/agents/{agent}/available");
                q.post(&path, json!({"available": false})).await;
                tokio::time::sleep(Duration::from_millis(*ms)).await;
                q.post(&path, json!({"available": true})).await;
                self.fault(
                    FaultKind::AgentUnavailable(agent.to_string()),
                    at,
                    Some(self.now()),
                );
            }
            FaultStep::KillReplica { slot, down_ms } => {
                self.kill(*slot).await;
                tokio::time::sleep(Duration::from_millis(*down_ms)).await;
                self.revive(*slot).await;
                self.fault(FaultKind::ReplicaKilled(*slot), at, Some(self.now()));
            }
            FaultStep::RestartRedis { down_ms } => {
                let mut redis = self.redis.lock().await;
                let primary = redis.primary;
                if let Some(mut server) = redis.servers[primary].take() {
                    kill9(&mut server.child).await;
                }
                tokio::time::sleep(Duration::from_millis(*down_ms)).await;
                // Empty, and a primary; its replica follows it and empties too.
                redis.servers[primary] = Some(PrivateRedis::start_on(redis.ports[primary]).await);
                self.fault(FaultKind::RedisRestarted, at, Some(self.now()));
            }
            FaultStep::DemoteRedis { lag_ms } => {
                let mut redis = self.redis.lock().await;
                let (old, new) = (redis.primary, 1 - redis.primary);
                replicate(redis.ports[new], None).await;
                replicate(redis.ports[old], Some(redis.ports[new])).await;
                // The address still leads to the demoted server a while, as a DNS name does.
                tokio::time::sleep(Duration::from_millis(*lag_ms)).await;
                self.redis_address
                    .retarget(&format!("127.0.0.1:{}", redis.ports[new]));
                redis.primary = new;
                self.fault(FaultKind::RedisDemoted, at, Some(self.now()));
            }
            FaultStep::KillPostgresConnections => {
                let primary = self.pg_primary.lock().await;
                let Ok(db) = self.pg.local(*primary, DATABASE).await else {
                    return;
                };
                db.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                     WHERE datname = $1 AND pid <> pg_backend_pid()",
                    &[&DATABASE],
                )
                .await
                .expect("terminate the gateways' connections");
                self.fault(FaultKind::PostgresConnectionsKilled, at, None);
            }
            FaultStep::RestartPostgres { down_ms } => {
                let primary = self.pg_primary.lock().await;
                let at = self.now();
                self.pg.crash(*primary).await;
                tokio::time::sleep(Duration::from_millis(*down_ms)).await;
                self.pg.start_node(*primary).await;
                self.fault(FaultKind::PostgresRestarted, at, Some(self.now()));
            }
            FaultStep::FailOverPostgres { down_ms } => {
                let mut primary = self.pg_primary.lock().await;
                let (old, new) = (*primary, other(*primary));
                let at = self.now();
                self.pg.crash(old).await;
                tokio::time::sleep(Duration::from_millis(*down_ms)).await;
                self.pg.promote(new).await;
                *primary = new;
                self.fault(FaultKind::PostgresFailedOver, at, Some(self.now()));
                // The old primary rejoins as the new one's synchronous standby, as Patroni
                // rebuilds it, so that the next fault finds a pair again.
                self.pg.make_standby(old, new).await;
                self.pg
                    .sql(new, "ALTER SYSTEM SET synchronous_standby_names = '*'")
                    .await;
                self.pg.sql(new, "SELECT pg_reload_conf()").await;
                self.pg.wait_sync(new).await;
            }
        }
    }

    /// SIGKILLs a slot's process (nothing when it is down already).
    pub(super) async fn kill(&self, slot: usize) {
        let mut procs = self.procs.lock().await;
        match std::mem::replace(&mut procs[slot], Process::Down) {
            Process::First(pid) => {
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
            Process::Replica(mut r) => kill9(&mut r.child).await,
            Process::Down => {}
        }
    }

    /// Starts a replica in a slot that is down.
    pub(super) async fn revive(&self, slot: usize) {
        let mut procs = self.procs.lock().await;
        if matches!(procs[slot], Process::Down) {
            let replica = self.gw.start_replica(&self.options).await;
            self.urls.lock().unwrap()[slot] = replica.url.clone();
            procs[slot] = Process::Replica(Box::new(replica));
        }
    }
}
