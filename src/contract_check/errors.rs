//! `error-statuses`: every error the kit can provoke comes with the contract's code under the
//! one status the contract pairs it with (`ErrorCode::status`), on a route that defines it.
//! The gateway takes an error as a definite refusal only then (`upstream::definite`): the same
//! code under another status, or a bare status, leaves it retrying or unable to conclude.
//!
//! Not provoked: `workspace_access_denied` (it needs a revoked grant: `access-reflects` checks
//! it through the hook), `workflow_id_conflict` (`create-conflict`), and the approval API's
//! codes (`approval_not_found`, `approval_not_pending`), which the gateway never calls for.

use std::collections::BTreeMap;

use futures_util::future::join_all;
use reqwest::Method;
use serde_json::{json, Value};

use crate::upstream::contract::{CancelRunRequest, ErrorCode, Run, RunStatus};
use crate::upstream::definite;

use super::client::{describe, encode, indefinite, Reply};
use super::report::Promise;
use super::{access_path, Kit, Options};

/// One request that must be refused with `expected`.
struct Probe {
    what: String,
    expected: ErrorCode,
    /// The codes the gateway takes as definite on this route (`upstream::definite`); empty
    /// for the service token's `unauthorized`, which is never definite.
    definite: &'static [ErrorCode],
    method: Method,
    path: String,
    body: Option<Value>,
    /// A wrong service token instead of the kit's.
    wrong_token: bool,
    /// The workflow id a create names, so a create Q wrongly accepted is cleaned up.
    workflow_id: Option<String>,
}

fn probe(what: &str, expected: ErrorCode, definite: &'static [ErrorCode], path: String) -> Probe {
    Probe {
        what: what.to_owned(),
        expected,
        definite,
        method: Method::GET,
        path,
        body: None,
        wrong_token: false,
        workflow_id: None,
    }
}

impl Probe {
    fn post(mut self, body: Value) -> Probe {
        self.method = Method::POST;
        self.workflow_id = body["workflow_id"].as_str().map(str::to_owned);
        self.body = Some(body);
        self
    }

    fn unauthorized(mut self) -> Probe {
        self.wrong_token = true;
        self
    }
}

/// The requests, for the kit's principal and one of its live runs.
fn probes(o: &Options, run_id: &str) -> Vec<Probe> {
    use ErrorCode::*;
    let prefix = &o.workflow_prefix;
    let unknown_run = encode(&format!("{prefix}-no-such-run"));
    let unknown_agent = format!("{prefix}-no-such-agent");
    let run = encode(run_id);
    let create = |workflow: &str, agent: &str, parts: &[&str]| {
        json!({
            "workflow_id": format!("{prefix}-{workflow}"),
            "tenant_id": o.tenant_id, "principal_id": o.principal_id, "agent_id": agent,
            "input": {"parts": parts}, "execution_timeout_seconds": 3600,
        })
    };
    let access = access_path(&o.tenant_id, &o.agent_id, &o.principal_id);
    let without_principal = access.split('?').next().unwrap_or_default().to_owned();
    vec![
        probe(
            "POST /runs with a wrong service token",
            Unauthorized,
            &[],
            "/runs".into(),
        )
        .post(create("unauthorized", &o.agent_id, &["contract check"]))
        .unauthorized(),
        probe(
            "GET /changes/runs with a wrong service token",
            Unauthorized,
            &[],
            "/changes/runs?after=0&limit=1".into(),
        )
        .unauthorized(),
        probe(
            "GET /access of an unknown agent",
            AgentNotFound,
            definite::AGENT_ACCESS,
            access_path(&o.tenant_id, &unknown_agent, &o.principal_id),
        ),
        probe(
            "GET /access without principal_id",
            Invalid,
            definite::AGENT_ACCESS,
            without_principal,
        ),
        probe(
            "POST /runs for an unknown agent",
            AgentNotFound,
            definite::CREATE_RUN,
            "/runs".into(),
        )
        .post(create("unknown-agent", &unknown_agent, &["contract check"])),
        probe(
            "POST /runs with no input part",
            Invalid,
            definite::CREATE_RUN,
            "/runs".into(),
        )
        .post(create("no-parts", &o.agent_id, &[])),
        probe(
            "GET /runs/{unknown}",
            RunNotFound,
            definite::RUN_READ,
            format!("/runs/{unknown_run}"),
        ),
        probe(
            "GET /runs/{unknown}/events",
            RunNotFound,
            definite::RUN_EVENTS,
            format!("/runs/{unknown_run}/events"),
        ),
        probe(
            "GET /runs/{unknown}/output",
            RunNotFound,
            definite::RUN_OUTPUT,
            format!("/runs/{unknown_run}/output"),
        ),
        probe(
            "GET /runs/{unknown}/approvals",
            RunNotFound,
            definite::RUN_READ,
            format!("/runs/{unknown_run}/approvals"),
        ),
        probe(
            "GET /runs/{unknown}/grants/{principal}",
            RunNotFound,
            definite::RUN_READ,
            format!("/runs/{unknown_run}/grants/{}", encode(&o.principal_id)),
        ),
        probe(
            "POST /runs/{unknown}/cancel",
            RunNotFound,
            definite::CANCEL_RUN,
            format!("/runs/{unknown_run}/cancel"),
        )
        .post(json!({"principal_id": o.principal_id})),
        probe(
            "GET /runs/{id}/events?after_seq=x",
            Invalid,
            definite::RUN_EVENTS,
            format!("/runs/{run}/events?after_seq=x"),
        ),
        probe(
            "POST /runs/{id}/cancel without principal_id",
            Invalid,
            definite::CANCEL_RUN,
            format!("/runs/{run}/cancel"),
        )
        .post(json!({})),
        probe(
            "GET /changes/runs?after=x",
            Invalid,
            definite::QUERY,
            "/changes/runs?after=x".into(),
        ),
        probe(
            "GET /changes/access?after=x",
            Invalid,
            definite::QUERY,
            "/changes/access?after=x".into(),
        ),
        probe(
            "POST /evidence-grants/query without principal_id",
            Invalid,
            definite::QUERY,
            "/evidence-grants/query".into(),
        )
        .post(json!({"run_ids": [run_id]})),
        probe(
            "POST /identity/introspect without a token",
            Invalid,
            definite::INTROSPECT,
            "/identity/introspect".into(),
        )
        .post(json!({})),
    ]
}

/// The token sent where the check needs a wrong one.
const WRONG_TOKEN: &str = "contract-check-wrong-service-token";

async fn send(kit: &Kit, probe: &Probe) -> Reply {
    let token = if probe.wrong_token {
        WRONG_TOKEN
    } else {
        &kit.options.service_token
    };
    let reply = kit
        .q
        .send(
            probe.method.clone(),
            &probe.path,
            probe.body.as_ref(),
            Some(token),
        )
        .await;
    if let Some(workflow_id) = &probe.workflow_id {
        kit.ledger.note(workflow_id, &reply);
    }
    reply
}

pub async fn check(kit: &Kit) {
    let p = Promise::ErrorStatuses;
    let f = &kit.findings;
    let workflow_id = kit.workflow("errors");
    let reply = kit
        .ledger
        .create(&kit.q, &kit.request(&workflow_id, "contract check: errors"))
        .await;
    let Some(run) = reply.as_ref().ok().and_then(|a| a.json::<Run>().ok()) else {
        f.not_checked(
            p,
            format!("the create of {workflow_id} answered {}", describe(&reply)),
        );
        return;
    };
    let mut answered: Vec<(Probe, Reply)> = Vec::new();
    // Before anything else can end the run: its output is not ready.
    let output = probe(
        "GET /runs/{id}/output of a run that has not succeeded",
        ErrorCode::OutputNotReady,
        definite::RUN_OUTPUT,
        format!("/runs/{}/output", encode(&run.id)),
    );
    let reply = send(kit, &output).await;
    if reply.as_ref().is_ok_and(|a| a.status == 200) {
        f.not_checked(p, "output_not_ready: the run had already succeeded");
    } else {
        answered.push((output, reply));
    }
    let probes = probes(&kit.options, &run.id);
    let replies = join_all(probes.iter().map(|probe| send(kit, probe))).await;
    answered.extend(probes.into_iter().zip(replies));
    // A run that ended: canceling it again is `run_terminal`.
    let body = CancelRunRequest {
        principal_id: kit.options.principal_id.clone(),
    };
    let cancel_path = format!("/runs/{}/cancel", encode(&run.id));
    let first = kit.q.post(&cancel_path, &body).await;
    if let Ok(a) = &first {
        if a.status == 200 {
            kit.ledger.mark(&run.id, RunStatus::Canceled, a.received);
        }
    }
    let again = probe(
        "POST /runs/{id}/cancel of a run that ended",
        ErrorCode::RunTerminal,
        definite::CANCEL_RUN,
        cancel_path,
    )
    .post(json!({"principal_id": kit.options.principal_id}));
    let reply = send(kit, &again).await;
    answered.push((again, reply));

    let mut kept: BTreeMap<String, usize> = BTreeMap::new();
    for (probe, reply) in &answered {
        let status = probe.expected.status().unwrap_or_default();
        let code = probe.expected.as_str();
        if reply.as_ref().is_ok_and(|a| a.is(probe.expected)) {
            *kept.entry(format!("{status} {code}")).or_default() += 1;
        } else if indefinite(reply) {
            f.not_checked(p, format!("{}: {}", probe.what, describe(reply)));
        } else {
            let consequence = if probe.definite.is_empty() {
                ""
            } else {
                " (the gateway cannot take it as a refusal)"
            };
            f.broken(
                p,
                format!(
                    "{}: answered {}, the contract's is {status} {code}{consequence}",
                    probe.what,
                    describe(reply)
                ),
            );
        }
    }
    let counts: Vec<String> = kept.iter().map(|(k, n)| format!("{k} ×{n}")).collect();
    if !counts.is_empty() {
        f.kept(
            p,
            format!(
                "{} of {} provoked errors as documented: {}",
                kept.values().sum::<usize>(),
                answered.len(),
                counts.join(", ")
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn each_probe_expects_a_code_the_gateway_takes_as_definite_on_its_route() {
        let options = Options {
            upstream: "http://q".into(),
            service_token: "t".into(),
            tenant_id: "t-acme".into(),
            principal_id: "p-alice".into(),
            agent_id: "ag-writer".into(),
            hook: None,
            workflow_prefix: "contract-check-x".into(),
            wait: Duration::from_secs(1),
        };
        let probes = probes(&options, "run-1");
        assert!(probes.len() >= 18);
        for probe in &probes {
            if probe.expected == ErrorCode::Unauthorized {
                assert!(
                    probe.wrong_token && probe.definite.is_empty(),
                    "{}",
                    probe.what
                );
            } else {
                assert!(probe.definite.contains(&probe.expected), "{}", probe.what);
            }
            if probe.method == Method::POST && probe.path == "/runs" {
                let workflow = probe.workflow_id.as_deref().unwrap_or_default();
                assert!(workflow.starts_with("contract-check-x-"), "{}", probe.what);
            }
        }
        let codes: std::collections::BTreeSet<&str> =
            probes.iter().map(|p| p.expected.as_str()).collect();
        assert_eq!(
            codes.into_iter().collect::<Vec<_>>(),
            [
                "agent_not_found",
                "invalid",
                "run_not_found",
                "unauthorized"
            ]
        );
    }
}
