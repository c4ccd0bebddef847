//! Runs: the stored entry of each run (status, events, approvals, output), the synthesized
//! output, and what a create does given the run already stored under its workflow id.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use tokio::sync::{watch, Notify};

use crate::contract::{
    input_sha256, text_sha256, Approval, CreateRunRequest, Run, RunChange, RunEvent, RunInput,
    RunOutput, RunStatus,
};
use crate::faults::CorruptMode;
use crate::feed::ChangeFeed;

/// One run as Q holds it, with its history.
pub struct RunEntry {
    pub run: Run,
    pub input: RunInput,
    pub events: Vec<RunEvent>,
    pub approvals: Vec<Approval>,
    /// Ready once the run succeeded.
    pub output: Option<RunOutput>,
    pub corrupt: Option<CorruptMode>,
    /// Last event seq; long-polls subscribe to it.
    seq_tx: watch::Sender<u64>,
    /// Wakes the progression task while it waits on an approval (approve, cancel, reset).
    pub wake: Arc<Notify>,
    /// The feed this run's events are numbered in: the state's own, shared so that a
    /// transition needs no second borrow of the state.
    feed: Arc<ChangeFeed>,
}

impl RunEntry {
    /// A fresh `queued` run with its first event (seq 1).
    pub fn new(
        id: String,
        req: &CreateRunRequest,
        now: DateTime<Utc>,
        deadline_at: DateTime<Utc>,
        feed: Arc<ChangeFeed>,
    ) -> Self {
        let run = Run {
            id,
            workflow_id: req.workflow_id.clone(),
            tenant_id: req.tenant_id.clone(),
            principal_id: req.principal_id.clone(),
            agent_id: req.agent_id.clone(),
            status: RunStatus::Queued,
            status_message: None,
            created_at: now,
            updated_at: now,
            deadline_at,
            input_sha256: input_sha256(&req.input),
            principal_evidence: None,
        };
        let (seq_tx, _) = watch::channel(0);
        let mut entry = RunEntry {
            run,
            input: req.input.clone(),
            events: Vec::new(),
            approvals: Vec::new(),
            output: None,
            corrupt: None,
            seq_tx,
            wake: Arc::new(Notify::new()),
            feed,
        };
        entry.push_event(now, true);
        entry
    }

    /// Appends the event of the current status, and (when `announce`) its entry in the run
    /// change feed.
    fn push_event(&mut self, at: DateTime<Utc>, announce: bool) {
        let seq = self.last_seq() + 1;
        let event = RunEvent {
            seq,
            status: self.run.status,
            status_message: self.run.status_message.clone(),
            at,
        };
        if announce {
            self.feed.append(|cursor| RunChange {
                cursor,
                run_id: self.run.id.clone(),
                workflow_id: self.run.workflow_id.clone(),
                status: event.status,
                status_message: event.status_message.clone(),
                seq,
                at,
            });
        }
        self.events.push(event);
        self.seq_tx.send_replace(seq);
    }

    /// Sets the status and appends the matching event; every status change is an event.
    pub fn transition(&mut self, status: RunStatus, message: Option<String>, now: DateTime<Utc>) {
        self.change(status, message, now, true);
    }

    /// [`RunEntry::transition`] without the run feed's entry (`--break run-feed-complete`).
    pub fn transition_unannounced(
        &mut self,
        status: RunStatus,
        message: Option<String>,
        now: DateTime<Utc>,
    ) {
        self.change(status, message, now, false);
    }

    fn change(
        &mut self,
        status: RunStatus,
        message: Option<String>,
        now: DateTime<Utc>,
        announce: bool,
    ) {
        self.run.status = status;
        self.run.status_message = message;
        self.run.updated_at = now;
        if status == RunStatus::Succeeded {
            self.output = Some(synthesize_output(&self.run.id, &self.input));
        }
        self.push_event(now, announce);
    }

    pub fn last_seq(&self) -> u64 {
        self.events.last().map_or(0, |e| e.seq)
    }

    pub fn events_after(&self, after_seq: u64) -> Vec<RunEvent> {
        self.events
            .iter()
            .filter(|e| e.seq > after_seq)
            .cloned()
            .collect()
    }

    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.seq_tx.subscribe()
    }

    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// A non-terminal run past its deadline becomes `timed_out`. True if it is now terminal.
    pub fn enforce_deadline(&mut self, now: DateTime<Utc>) -> bool {
        if !self.run.status.is_terminal() && now >= self.run.deadline_at {
            self.time_out(now);
        }
        self.run.status.is_terminal()
    }

    pub fn time_out(&mut self, now: DateTime<Utc>) {
        self.transition(
            RunStatus::TimedOut,
            Some("execution deadline exceeded".to_owned()),
            now,
        );
        self.wake();
    }

    /// The output as served, including any injected corruption.
    pub fn served_output(&self) -> Option<RunOutput> {
        let mut out = self.output.clone()?;
        match self.corrupt {
            Some(CorruptMode::Checksum) => out.sha256 = text_sha256(&format!("{}#", out.text)),
            Some(CorruptMode::ByteCount) => out.byte_count += 1,
            Some(CorruptMode::Oversize) => {
                out.text = format!("{}\n{}\n", out.text, "x".repeat(1024 * 1024 + 1));
                out.sha256 = text_sha256(&out.text);
                out.byte_count = out.text.len() as u64;
            }
            Some(CorruptMode::Large) => {
                out.text = format!("{}\n{}\n", out.text, "y".repeat(400 * 1024));
                out.sha256 = text_sha256(&out.text);
                out.byte_count = out.text.len() as u64;
            }
            Some(CorruptMode::MediaType) => out.media_type = "text/html".to_owned(),
            None => {}
        }
        Some(out)
    }
}

/// The deterministic Markdown answer of a run.
pub fn synthesize_output(run_id: &str, input: &RunInput) -> RunOutput {
    let joined = input.parts.join(" ");
    let asked: String = joined.chars().take(200).collect();
    let text = format!("# Answer\n\nYou asked: **{asked}**\n\n- point one\n- point two\n");
    RunOutput {
        artifact_id: format!("answer-{run_id}"),
        name: "answer.md".to_owned(),
        media_type: "text/markdown".to_owned(),
        sha256: text_sha256(&text),
        byte_count: text.len() as u64,
        text,
    }
}

/// What a create does given the run already stored under its workflow id.
#[derive(Debug, PartialEq, Eq)]
pub enum CreateDecision {
    /// No run yet: create one.
    Create,
    /// Same request replayed: return the existing run (200).
    Existing,
    /// The workflow id is taken by a different request: 409 `workflow_id_conflict`.
    Conflict,
}

/// Idempotency on `workflow_id`: a replay must match the stored run's input hash and also its
/// tenant, principal and agent (a workflow id never leaks another caller's run).
pub fn decide_create(existing: Option<&Run>, req: &CreateRunRequest) -> CreateDecision {
    match existing {
        None => CreateDecision::Create,
        Some(run)
            if run.input_sha256 == input_sha256(&req.input)
                && run.tenant_id == req.tenant_id
                && run.principal_id == req.principal_id
                && run.agent_id == req.agent_id =>
        {
            CreateDecision::Existing
        }
        Some(_) => CreateDecision::Conflict,
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeDelta;

    use super::*;
    use crate::testing::req;

    #[test]
    fn decide_create_is_idempotent_on_input_hash() {
        let a = req("wf-1", "ag-writer", &["hello", "world"]);
        let now = Utc::now();
        let run = RunEntry::new("run-1".into(), &a, now, now, Arc::default()).run;
        assert_eq!(decide_create(None, &a), CreateDecision::Create);
        assert_eq!(decide_create(Some(&run), &a), CreateDecision::Existing);
        let different_input = req("wf-1", "ag-writer", &["hello world"]);
        assert_eq!(
            decide_create(Some(&run), &different_input),
            CreateDecision::Conflict
        );
        let mut other_principal = a.clone();
        other_principal.principal_id = "p-bob".into();
        assert_eq!(
            decide_create(Some(&run), &other_principal),
            CreateDecision::Conflict
        );
        // The timeout is not part of the identity of the request.
        let mut other_timeout = a.clone();
        other_timeout.execution_timeout_seconds = 10;
        assert_eq!(
            decide_create(Some(&run), &other_timeout),
            CreateDecision::Existing
        );
    }

    #[test]
    fn transitions_append_events_and_output() {
        let now = Utc::now();
        let mut e = RunEntry::new(
            "run-x".into(),
            &req("wf", "ag-writer", &["q"]),
            now,
            now + TimeDelta::hours(1),
            Arc::default(),
        );
        assert_eq!(e.last_seq(), 1);
        assert_eq!(e.events[0].status, RunStatus::Queued);
        e.transition(RunStatus::Running, None, now);
        assert!(e.output.is_none());
        e.transition(RunStatus::Succeeded, None, now);
        assert_eq!(e.last_seq(), 3);
        assert_eq!(e.events_after(1).len(), 2);
        let out = e.served_output().unwrap();
        assert_eq!(out.artifact_id, "answer-run-x");
        assert_eq!(out.sha256, text_sha256(&out.text));
        assert_eq!(out.byte_count, out.text.len() as u64);
        assert!(out.text.contains("You asked: **q**"));
        e.corrupt = Some(CorruptMode::ByteCount);
        assert_eq!(e.served_output().unwrap().byte_count, out.byte_count + 1);
        e.corrupt = Some(CorruptMode::Checksum);
        assert_ne!(e.served_output().unwrap().sha256, out.sha256);
    }

    #[test]
    fn deadline_times_out_non_terminal_runs_only() {
        let now = Utc::now();
        let mut e = RunEntry::new(
            "r".into(),
            &req("wf", "ag-writer", &["q"]),
            now,
            now,
            Arc::default(),
        );
        assert!(e.enforce_deadline(now));
        assert_eq!(e.run.status, RunStatus::TimedOut);
        assert_eq!(e.last_seq(), 2);
        // Idempotent: no further event.
        assert!(e.enforce_deadline(now));
        assert_eq!(e.last_seq(), 2);
    }

    #[test]
    fn output_quotes_at_most_200_chars() {
        let long = "é".repeat(500);
        let out = synthesize_output("r", &RunInput { parts: vec![long] });
        assert!(out.text.contains(&format!("**{}**", "é".repeat(200))));
        assert_eq!(out.byte_count, out.text.len() as u64);
    }
}
