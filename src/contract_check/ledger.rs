//! Every run the kit creates, by name, so that it can cancel each one at the end: every create
//! goes through [`Ledger::create`], which keeps the run Q answered with or, when no definite
//! answer came, the workflow id to look the run up by. It also keeps when Q's API first
//! reflected each change the kit made (a create answered, a cancel answered), which the feed
//! checks compare the feeds' heads with.

use std::sync::Mutex;
use std::time::Instant;

use crate::upstream::contract::{CancelRunRequest, CreateRunRequest, ErrorCode, Run, RunStatus};

use super::client::{describe, encode, indefinite, Reply, Q};
use super::report::CreatedRun;

/// A change of one of the kit's runs that Q's API answered at `at`: the feeds must have it at
/// or below the head of any read sent after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunMark {
    pub run_id: String,
    pub status: RunStatus,
    /// The event's `seq` when known (a create's `queued` is 1), else 0.
    pub seq: u64,
    pub at: Instant,
}

#[derive(Debug, Default)]
struct Entries {
    runs: Vec<Run>,
    /// Workflow ids whose create got no definite answer: Q may have a run under them.
    unresolved: Vec<String>,
    marks: Vec<RunMark>,
}

#[derive(Debug, Default)]
pub struct Ledger(Mutex<Entries>);

impl Ledger {
    fn entries(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `POST /runs`, keeping whatever run it names.
    pub async fn create(&self, q: &Q, request: &CreateRunRequest) -> Reply {
        let reply = q.post("/runs", request).await;
        self.note(&request.workflow_id, &reply);
        reply
    }

    /// Keeps the run a create's reply names, or its workflow id when the reply leaves open
    /// whether Q made one.
    pub fn note(&self, workflow_id: &str, reply: &Reply) {
        let mut entries = self.entries();
        match reply {
            Ok(answer) if answer.status == 200 || answer.status == 201 => {
                match answer.json::<Run>() {
                    Ok(run) => {
                        if answer.status == 201 {
                            entries.marks.push(RunMark {
                                run_id: run.id.clone(),
                                status: RunStatus::Queued,
                                seq: 1,
                                at: answer.received,
                            });
                        }
                        if !entries.runs.iter().any(|r| r.id == run.id) {
                            entries.runs.push(run);
                        }
                    }
                    // A success the kit cannot read may still have made a run.
                    Err(_) => entries.unresolved.push(workflow_id.to_owned()),
                }
            }
            _ if indefinite(reply) => entries.unresolved.push(workflow_id.to_owned()),
            // A refusal: nothing was created.
            _ => {}
        }
    }

    pub fn mark(&self, run_id: &str, status: RunStatus, at: Instant) {
        self.entries().marks.push(RunMark {
            run_id: run_id.to_owned(),
            status,
            seq: 0,
            at,
        });
    }

    /// The runs created so far, oldest first.
    pub fn runs(&self) -> Vec<Run> {
        self.entries().runs.clone()
    }

    pub fn marks(&self) -> Vec<RunMark> {
        self.entries().marks.clone()
    }

    /// Looks up every create that got no definite answer, then cancels every run created.
    /// Returns each run with what its cancel answered.
    pub async fn clean_up(&self, q: &Q, principal_id: &str) -> Vec<CreatedRun> {
        let unresolved = std::mem::take(&mut self.entries().unresolved);
        for workflow_id in unresolved {
            let reply = q
                .get(&format!("/runs/by-workflow/{}", encode(&workflow_id)))
                .await;
            if let Ok(run) = reply.as_ref().map_err(Clone::clone).and_then(|a| {
                if a.status == 200 {
                    a.json::<Run>()
                } else {
                    Err(a.describe())
                }
            }) {
                let mut entries = self.entries();
                if !entries.runs.iter().any(|r| r.id == run.id) {
                    entries.runs.push(run);
                }
            }
        }
        let body = CancelRunRequest {
            principal_id: principal_id.to_owned(),
        };
        let cancels = self.runs().into_iter().map(|run| {
            let body = &body;
            async move {
                let reply = q
                    .post(&format!("/runs/{}/cancel", encode(&run.id)), body)
                    .await;
                let cleanup = match &reply {
                    Ok(a) if a.status == 200 => {
                        self.mark(&run.id, RunStatus::Canceled, a.received);
                        "canceled".to_owned()
                    }
                    Ok(a) if a.is(ErrorCode::RunTerminal) => {
                        "already ended (409 run_terminal)".to_owned()
                    }
                    _ => format!("NOT canceled: cancel answered {}", describe(&reply)),
                };
                CreatedRun {
                    run_id: run.id,
                    workflow_id: run.workflow_id,
                    cleanup,
                }
            }
        });
        futures_util::future::join_all(cancels).await
    }
}
