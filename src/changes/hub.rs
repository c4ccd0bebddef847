//! In-process fan-out of Q's run changes: one follower per replica publishes, every stream and
//! blocking wait on the replica subscribes to the run it observes.
//!
//! A subscription is a bounded broadcast receiver per run (created on first subscription,
//! dropped with the last): a change reaches every subscriber of its run without copying it
//! (`Arc`). A subscriber that falls behind, or a feed that was reset or lost its position, gets
//! [`RunSignal::Resync`]: it must read the run from Q once instead of trusting what it saw.
//!
//! The hub also remembers the latest change of each recently changed run (bounded in count
//! and age), and a subscription starts with it: what the follower saw before the subscription
//! comes from there, what it sees after through the channel, under one lock, so a blocking
//! wait that subscribes just after creating its run misses nothing without asking Q.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::broadcast;

use crate::upstream::contract::RunChange;

/// Changes buffered per run before a slow subscriber is told to resync.
const PER_RUN_BUFFER: usize = 16;

/// What a subscriber of a run receives.
#[derive(Debug, Clone)]
pub enum RunSignal {
    /// A change of the run, in feed order.
    Change(Arc<RunChange>),
    /// Changes may have been missed: read the run again.
    Resync,
}

/// Runs whose latest change is remembered, at most.
const RECENT_RUNS: usize = 65_536;

/// How long a run's latest change is remembered.
const RECENT_FOR: Duration = Duration::from_secs(300);

/// The replica's subscribers, by run id.
#[derive(Default)]
pub struct RunHub {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    runs: HashMap<String, broadcast::Sender<RunSignal>>,
    /// The latest change of recently changed runs, and their order of arrival.
    recent: HashMap<String, Arc<RunChange>>,
    arrivals: VecDeque<(Instant, String, u64)>,
}

impl Inner {
    fn remember(&mut self, change: &Arc<RunChange>) {
        let now = Instant::now();
        self.recent.insert(change.run_id.clone(), change.clone());
        self.arrivals
            .push_back((now, change.run_id.clone(), change.cursor));
        while let Some((at, run, cursor)) = self.arrivals.front() {
            if self.arrivals.len() <= RECENT_RUNS && now.duration_since(*at) < RECENT_FOR {
                break;
            }
            // Forget the run only if this arrival is still its latest.
            if self.recent.get(run).is_some_and(|c| c.cursor == *cursor) {
                self.recent.remove(run);
            }
            self.arrivals.pop_front();
        }
    }
}

/// One subscriber's view of one run.
pub struct RunSubscription {
    rx: broadcast::Receiver<RunSignal>,
    /// The run's latest change the follower had seen when the subscription started.
    pub latest: Option<Arc<RunChange>>,
}

impl RunSubscription {
    /// The next signal; `Resync` if this subscriber fell behind.
    pub async fn next(&mut self) -> RunSignal {
        match self.rx.recv().await {
            Ok(signal) => signal,
            Err(broadcast::error::RecvError::Lagged(_)) => RunSignal::Resync,
            // The hub holds the sender while any receiver lives; closed only if it is gone.
            Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
        }
    }
}

impl RunHub {
    pub fn new() -> Arc<Self> {
        Arc::new(RunHub::default())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Subscribes to `run_id`'s changes from now on, starting from its latest known change.
    pub fn subscribe(&self, run_id: &str) -> RunSubscription {
        let mut inner = self.lock();
        let rx = match inner.runs.get(run_id) {
            Some(tx) => tx.subscribe(),
            None => {
                let (tx, rx) = broadcast::channel(PER_RUN_BUFFER);
                inner.runs.insert(run_id.to_owned(), tx);
                rx
            }
        };
        crate::metrics::run_subscribers(inner.runs.len());
        RunSubscription {
            rx,
            latest: inner.recent.get(run_id).cloned(),
        }
    }

    /// Hands `change` to its run's subscribers, if any, and remembers it.
    pub fn publish(&self, change: RunChange) {
        let change = Arc::new(change);
        let mut inner = self.lock();
        inner.remember(&change);
        let gone = match inner.runs.get(&change.run_id) {
            // An error means every subscriber has gone.
            Some(tx) => tx.send(RunSignal::Change(change.clone())).is_err(),
            None => false,
        };
        if gone {
            inner.runs.remove(&change.run_id);
        }
    }

    /// Tells every subscriber to read its run again, forgets what it remembered, and forgets
    /// runs nobody follows.
    pub fn resync_all(&self) {
        let mut inner = self.lock();
        inner.recent.clear();
        inner.arrivals.clear();
        inner
            .runs
            .retain(|_, tx| tx.send(RunSignal::Resync).is_ok());
        crate::metrics::run_subscribers(inner.runs.len());
    }

    /// Forgets runs whose subscribers have all gone (called periodically).
    pub fn prune(&self) {
        let mut inner = self.lock();
        inner.runs.retain(|_, tx| tx.receiver_count() > 0);
        crate::metrics::run_subscribers(inner.runs.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::contract::RunStatus;

    fn change(run: &str, cursor: u64, status: RunStatus) -> RunChange {
        RunChange {
            cursor,
            run_id: run.into(),
            workflow_id: format!("wf-{run}"),
            status,
            status_message: None,
            seq: cursor,
            at: chrono::Utc::now(),
        }
    }

    #[tokio::test]
    async fn a_change_reaches_every_subscriber_of_its_run_only() {
        let hub = RunHub::new();
        let mut a1 = hub.subscribe("a");
        let mut a2 = hub.subscribe("a");
        let mut b = hub.subscribe("b");
        hub.publish(change("a", 1, RunStatus::Running));
        for sub in [&mut a1, &mut a2] {
            match sub.next().await {
                RunSignal::Change(c) => assert_eq!((c.run_id.as_str(), c.cursor), ("a", 1)),
                RunSignal::Resync => panic!("unexpected resync"),
            }
        }
        assert!(b.rx.try_recv().is_err(), "b saw a's change");
    }

    #[tokio::test]
    async fn a_subscriber_that_falls_behind_is_told_to_resync() {
        let hub = RunHub::new();
        let mut slow = hub.subscribe("a");
        for cursor in 0..(PER_RUN_BUFFER as u64 + 4) {
            hub.publish(change("a", cursor + 1, RunStatus::Running));
        }
        assert!(matches!(slow.next().await, RunSignal::Resync));
    }

    #[tokio::test]
    async fn runs_nobody_follows_are_forgotten() {
        let hub = RunHub::new();
        let sub = hub.subscribe("a");
        drop(sub);
        hub.publish(change("a", 1, RunStatus::Running));
        assert!(hub.lock().runs.is_empty());
        let _kept = hub.subscribe("b");
        hub.prune();
        assert_eq!(hub.lock().runs.len(), 1);
    }

    #[tokio::test]
    async fn a_subscription_starts_from_the_latest_change_seen_before_it() {
        let hub = RunHub::new();
        assert!(hub.subscribe("a").latest.is_none());
        hub.publish(change("a", 1, RunStatus::Running));
        hub.publish(change("a", 2, RunStatus::Succeeded));
        let sub = hub.subscribe("a");
        let latest = sub.latest.expect("remembered");
        assert_eq!((latest.cursor, latest.status), (2, RunStatus::Succeeded));
        hub.resync_all();
        assert!(hub.subscribe("a").latest.is_none(), "kept across a resync");
    }
}
