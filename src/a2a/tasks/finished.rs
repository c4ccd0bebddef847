//! Finished tasks kept in process, so a repeated GetTask of one makes no database round trip.
//!
//! A task in a terminal state (COMPLETED, FAILED, CANCELED, REJECTED) never changes in the
//! store: every write of a state or status text skips terminal rows (`store::tasks`,
//! `store::feed`), its message is fixed at admission, its run id once recorded, and its
//! artifact is committed once. What GetTask reads of such a task (the row and, for a completed
//! one, its artifact verified against its checksum and size) is therefore the same on every
//! replica until the task is deleted, and a replica keeps it after one read.
//!
//! What stays per request, on a hit as on a miss: the caller's workspace access (no access,
//! -32001), the task's owner against the caller (anyone else, -32001), and the [`Clearance`]
//! under the freshness rule (`crate::access`), which alone decides between the task with its
//! content and a control receipt. So a revoked grant or workspace is seen exactly as fast as
//! without this cache; only the task's own immutable record is reused.
//!
//! **Time bound.** A finished task leaves the store in two ways, neither of which tells a
//! replica: retention (the reconciler leader deletes it `retention.tasks_seconds` after its
//! terminal time, tombstone first) and offboarding its tenant (`q-a2a-gateway tenant delete`,
//! another process). An entry therefore lives at most `task_cache.ttl_ms` after the read that
//! filled it, and never past the task's retention age (its terminal time plus
//! `retention.tasks_seconds`, on the replica's clock against the database's timestamp): a
//! deleted task is answered by a replica for at most `ttl_ms` (offboarding) and never after
//! retention would delete it. Bounded in bytes by `task_cache.capacity_bytes`, each entry
//! weighed by its content; 0 turns the cache off.
//!
//! [`Clearance`]: crate::access::Clearance

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use a2a::{Artifact, TaskState};
use bytes::Bytes;
use moka::sync::Cache;
use moka::Expiry;
use uuid::Uuid;

use crate::a2a::caller::Caller;
use crate::a2a::task_view::verified_artifact;
use crate::store::{StoredArtifact, TaskRow};

/// What a finished task's GetTask needs from the store, verified once, and its two common
/// answers serialised the first time each is given: with its content (no `historyLength`) and
/// as a control receipt. Which one a request gets is decided by that request's clearance.
#[derive(Debug)]
pub(crate) struct Finished {
    pub row: TaskRow,
    pub content: Content,
    pub with_content: OnceLock<Bytes>,
    pub receipt: OnceLock<Bytes>,
    /// How long this entry may serve from when it was read.
    serves_for: Duration,
    /// Its share of the cache's byte capacity.
    weight: u32,
}

/// A finished task's artifact as a cleared read answers it.
#[derive(Debug)]
pub(crate) enum Content {
    /// Not completed: no artifact is answered.
    NoArtifact,
    /// Completed: the artifact, verified when it was read.
    Artifact(Artifact),
    /// Completed, with an output over the result bound: a cleared read is -32006.
    TooLarge,
}

/// The cache's settings (`[task_cache]`, `retention.tasks_seconds`).
#[derive(Debug, Clone, Copy)]
pub struct FinishedSettings {
    /// Longest an entry serves after the read that filled it.
    pub ttl: Duration,
    /// Bytes of content held at most; 0 keeps nothing.
    pub capacity_bytes: u64,
    /// Age since its terminal time after which retention deletes a task; `None`: never.
    pub retention: Option<Duration>,
}

/// Per-entry expiry: each entry carries its own bound (the TTL or its retention age).
struct Bound;

impl Expiry<Uuid, Arc<Finished>> for Bound {
    fn expire_after_create(&self, _: &Uuid, value: &Arc<Finished>, _: Instant) -> Option<Duration> {
        Some(value.serves_for)
    }
}

/// Bytes an entry is counted for beyond its content. Its content (message, status text,
/// artifact text) counts twice: once as read, once in the answer serialised from it.
const ENTRY_OVERHEAD_BYTES: usize = 1024;

/// The finished tasks this replica read lately.
pub(crate) struct FinishedTasks {
    entries: Option<Cache<Uuid, Arc<Finished>>>,
    settings: FinishedSettings,
}

impl FinishedTasks {
    pub fn new(settings: FinishedSettings) -> Self {
        let entries = (settings.capacity_bytes > 0 && !settings.ttl.is_zero()).then(|| {
            Cache::builder()
                .max_capacity(settings.capacity_bytes)
                .weigher(|_, v: &Arc<Finished>| v.weight)
                .expire_after(Bound)
                .build()
        });
        FinishedTasks { entries, settings }
    }

    /// The kept task `id` if `caller` owns it. `Err(())` for a kept task of someone else (the
    /// task id is the table's key: the store has no such task for this caller either).
    pub fn get(&self, caller: &Caller, id: Uuid) -> Result<Option<Arc<Finished>>, ()> {
        let Some(entries) = &self.entries else {
            return Ok(None);
        };
        // Not counted yet: whether it is a miss depends on what the store answers
        // ([`FinishedTasks::count_read`]).
        let Some(found) = entries.get(&id) else {
            return Ok(None);
        };
        let owner = &found.row.owner;
        if owner.tenant_id != caller.principal.tenant_id
            || owner.principal_id != caller.principal.principal_id
            || owner.agent_id != caller.agent.id
        {
            crate::metrics::finished_task_lookup("other_owner");
            return Err(());
        }
        crate::metrics::finished_task_lookup("hit");
        Ok(Some(found))
    }

    /// Counts a task read from the store after a lookup here found nothing: a `miss` when it
    /// was then kept (a finished task this replica had not kept), `not_kept` otherwise (not
    /// finished, no run recorded, its artifact not committed yet, or due for retention), so the
    /// misses are the reads this table could have saved, not every read of a running task.
    pub fn count_read(&self, kept: bool) {
        if self.entries.is_some() {
            crate::metrics::finished_task_lookup(if kept { "miss" } else { "not_kept" });
        }
    }

    /// Keeps a task just read with its committed artifact, if it is finished and complete: a
    /// terminal state, a recorded run and, for a completed task, an artifact committed (one
    /// that fails verification is not kept; the read path reports it). The entry, or `None`.
    pub fn keep(&self, row: &TaskRow, committed: Option<&StoredArtifact>) -> Option<Arc<Finished>> {
        let entries = self.entries.as_ref()?;
        let serves_for = serves_for(&self.settings, row, chrono::Utc::now())?;
        let (content, content_bytes) = finished_content(row, committed)?;
        let message_bytes = serde_json::to_vec(&row.message).map_or(0, |m| m.len());
        let bytes = ENTRY_OVERHEAD_BYTES
            + 2 * (message_bytes
                + content_bytes
                + row.status_message.as_ref().map_or(0, String::len));
        let finished = Arc::new(Finished {
            row: row.clone(),
            content,
            with_content: OnceLock::new(),
            receipt: OnceLock::new(),
            serves_for,
            weight: u32::try_from(bytes).unwrap_or(u32::MAX),
        });
        entries.insert(row.task_id, finished.clone());
        Some(finished)
    }
}

/// How long a finished task read at `now` may be kept: the TTL, cut at its retention age;
/// `None` when it may not be kept at all (not finished, no run recorded, or due for retention).
fn serves_for(
    settings: &FinishedSettings,
    row: &TaskRow,
    now: chrono::DateTime<chrono::Utc>,
) -> Option<Duration> {
    if !row.state.is_terminal() || row.run_id.is_none() {
        return None;
    }
    let until_retention = match settings.retention {
        None => settings.ttl,
        Some(age) => {
            let deadline = row.status_timestamp + chrono::Duration::from_std(age).ok()?;
            (deadline - now).to_std().ok()?
        }
    };
    let bound = settings.ttl.min(until_retention);
    (!bound.is_zero()).then_some(bound)
}

/// What a cleared read of `row` answers besides the row, and its size in bytes; `None` for a
/// completed task whose artifact is not committed yet or fails verification.
fn finished_content(row: &TaskRow, committed: Option<&StoredArtifact>) -> Option<(Content, usize)> {
    if row.state != TaskState::Completed {
        return Some((Content::NoArtifact, 0));
    }
    match committed? {
        StoredArtifact::Output(output) => {
            let artifact = verified_artifact(output).ok()?;
            Some((Content::Artifact(artifact), output.text.len()))
        }
        StoredArtifact::TooLarge { .. } => Some((Content::TooLarge, 0)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::contract::{text_sha256, RunOutput};
    use chrono::{TimeZone, Utc};

    fn row(state: TaskState, run: Option<&str>, terminal_at: i64) -> TaskRow {
        TaskRow {
            state,
            run_id: run.map(str::to_string),
            status_timestamp: Utc.timestamp_opt(terminal_at, 0).unwrap(),
            ..crate::a2a::task_view::tests::row()
        }
    }

    fn settings(retention: Option<u64>) -> FinishedSettings {
        FinishedSettings {
            ttl: Duration::from_secs(10),
            capacity_bytes: 1 << 20,
            retention: retention.map(Duration::from_secs),
        }
    }

    #[test]
    fn an_entry_serves_for_the_ttl_cut_at_the_tasks_retention_age() {
        let now = Utc.timestamp_opt(1_000_000, 0).unwrap();
        let failed = |at| row(TaskState::Failed, Some("r"), at);
        // No retention, or retention far off: the TTL.
        assert_eq!(
            serves_for(&settings(None), &failed(0), now),
            Some(Duration::from_secs(10))
        );
        assert_eq!(
            serves_for(&settings(Some(86_400)), &failed(999_000), now),
            Some(Duration::from_secs(10))
        );
        // Retention due in 4 s: 4 s, not 10.
        assert_eq!(
            serves_for(&settings(Some(86_400)), &failed(1_000_004 - 86_400), now),
            Some(Duration::from_secs(4))
        );
        // Due now or past: not kept.
        assert_eq!(
            serves_for(&settings(Some(86_400)), &failed(1_000_000 - 86_400), now),
            None
        );
        assert_eq!(serves_for(&settings(Some(86_400)), &failed(0), now), None);
    }

    #[test]
    fn only_a_finished_task_with_its_run_recorded_is_kept() {
        let now = Utc.timestamp_opt(100, 0).unwrap();
        let s = settings(None);
        assert!(serves_for(&s, &row(TaskState::Working, Some("r"), 0), now).is_none());
        assert!(serves_for(&s, &row(TaskState::InputRequired, Some("r"), 0), now).is_none());
        assert!(serves_for(&s, &row(TaskState::Canceled, None, 0), now).is_none());
        assert!(serves_for(&s, &row(TaskState::Canceled, Some("r"), 0), now).is_some());
    }

    #[test]
    fn a_completed_task_is_kept_only_with_its_verified_artifact() {
        let completed = row(TaskState::Completed, Some("r"), 0);
        assert!(finished_content(&completed, None).is_none());
        let good = RunOutput {
            artifact_id: "a1".into(),
            name: "out".into(),
            media_type: "text/markdown".into(),
            text: "done".into(),
            sha256: text_sha256("done"),
            byte_count: 4,
        };
        let mut bad = good.clone();
        bad.text.push('!');
        let mut not_markdown = good.clone();
        not_markdown.media_type = "text/plain".into();
        assert!(
            finished_content(&completed, Some(&StoredArtifact::Output(not_markdown))).is_none()
        );
        assert!(matches!(
            finished_content(&completed, Some(&StoredArtifact::Output(good))),
            Some((Content::Artifact(_), 4))
        ));
        assert!(finished_content(&completed, Some(&StoredArtifact::Output(bad))).is_none());
        assert!(matches!(
            finished_content(
                &completed,
                Some(&StoredArtifact::TooLarge {
                    artifact_id: "a1".into(),
                    byte_count: 2 << 20,
                })
            ),
            Some((Content::TooLarge, 0))
        ));
        let failed = row(TaskState::Failed, Some("r"), 0);
        assert!(matches!(
            finished_content(&failed, None),
            Some((Content::NoArtifact, 0))
        ));
    }

    #[test]
    fn off_keeps_nothing() {
        let off = FinishedTasks::new(FinishedSettings {
            capacity_bytes: 0,
            ..settings(None)
        });
        assert!(off
            .keep(
                &row(TaskState::Failed, Some("r"), Utc::now().timestamp()),
                None
            )
            .is_none());
    }
}
