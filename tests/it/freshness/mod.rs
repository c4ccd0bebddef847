//! The freshness rule (docs/architecture.md, "The freshness rule") held against a Q that fails
//! in each way its contract allows: no content goes out past the bound after Q commits a
//! revocation, on GetTask, ListTasks, the card, an open SubscribeToTask and a blocking
//! SendMessage, whatever the access feed or Q's identity service does meanwhile.
//!
//! Each scenario starts a gateway process with its own reference upstream, opens every surface
//! with content (a completed task, a listing, the card, a stream and a blocking send on a
//! running task), arms what fails, revokes, and then reads every surface until well past the
//! bound. The time is counted from the moment the revocation was *sent* to Q (its commit is
//! later), and every answer that *started* after `revocation + bound + TOLERANCE` must be
//! content-free: an error, a refusal, or a control receipt without history, status text or
//! artifacts. The stream must have ended by then, and the blocking send answer content-free.

mod created_grant;
mod feeds;
mod fill_race;
mod identity;
mod observations;

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::support::{
    new_id, wait_until, Agent, Gateway, GatewayOptions, InProcessGateway, SseFrame,
};

/// What the measurement allows beyond a bound: scheduling on a loaded two-core machine and
/// one read in flight (reads are 50 ms apart).
pub const TOLERANCE: Duration = Duration::from_millis(300);

/// The freshness bound of access answers (1 s by default, whatever the feed does).
pub const ACCESS_BOUND: Duration = Duration::from_secs(1);

/// The token bound: the introspection cache's time-to-live (5 s by default).
pub const TOKEN_BOUND: Duration = Duration::from_secs(5);

/// How long after the bound the surfaces are still read.
pub const SETTLE: Duration = Duration::from_millis(1500);

/// Waits until the reference upstream holds one answer at its barrier (the `hold` fault).
async fn held(gw: &InProcessGateway) {
    wait_until(
        "an answer held at the barrier",
        Duration::from_secs(10),
        async || gw.upstream.admin(Method::GET, "/admin/barrier", None).await["held"] == 1,
    )
    .await;
}

/// Whether a JSON-RPC answer of GetTask or ListTasks carries content.
fn carries_content(body: &Value) -> bool {
    // SendMessage answers its task under `task`.
    let result = match body["result"].get("task") {
        Some(task) => task,
        None => &body["result"],
    };
    let task_content = |task: &Value| {
        task.get("history").is_some()
            || task.get("artifacts").is_some()
            || task["status"].get("message").is_some()
    };
    match result.get("tasks") {
        Some(tasks) => tasks.as_array().is_some_and(|t| t.iter().any(task_content)),
        None => result.is_object() && task_content(result),
    }
}

/// One read of a surface: when it started (relative to the revocation) and whether it
/// answered content.
#[derive(Debug, Clone)]
pub struct Read {
    pub surface: &'static str,
    pub at: Duration,
    pub content: bool,
    pub status: u16,
}

/// Every surface of one caller, open before the revocation.
pub struct Surfaces {
    agent: Agent,
    completed: String,
    stream: JoinHandle<(Vec<(Instant, bool)>, Instant)>,
    blocking: JoinHandle<(Instant, u16, Value)>,
}

/// A gateway process with its reference upstream and the caller the scenario revokes.
pub struct Scenario {
    pub gw: Gateway,
    pub token: &'static str,
}

impl Scenario {
    /// A gateway with these settings (the defaults plus `env`).
    pub async fn start(env: &[(&str, &str)]) -> Scenario {
        let gw = Gateway::start_with(GatewayOptions::with_env(env)).await;
        Scenario {
            gw,
            token: "tok-alice",
        }
    }

    /// Opens every surface, each seen with content first.
    pub async fn open(&self) -> Surfaces {
        let caller = self.gw.caller(self.token);
        let writer = caller.agent("ag-writer");
        let slow = caller.agent("ag-slower");
        let done = writer.send_text(&new_id(), "secret words").await;
        assert!(carries_content(&done.body), "{}", done.body);
        let completed = done.task_id();
        let listed = writer.list_tasks(json!({"includeArtifacts": true})).await;
        assert!(carries_content(&listed.body), "{}", listed.body);
        assert_eq!(writer.card().await.status, 200);

        let running = slow
            .send_text_immediately(&new_id(), "still running")
            .await
            .task_id();
        let mut stream = slow.subscribe(&running).await;
        assert!(stream.is_sse(), "the stream opens");
        let stream = tokio::spawn(async move {
            let mut frames = Vec::new();
            while let Some(frame) = stream.next().await {
                if let SseFrame::Event { data, .. } = frame {
                    let result = &data["result"];
                    let content = result["task"].get("history").is_some()
                        || result["statusUpdate"]["status"].get("message").is_some()
                        || result.get("artifactUpdate").is_some();
                    frames.push((Instant::now(), content));
                }
            }
            // The gateway ends the stream; a connection that broke is not an end.
            assert!(
                stream.broken().is_none(),
                "the stream broke: {:?}",
                stream.broken()
            );
            (frames, Instant::now())
        });
        let blocking_agent = slow.clone();
        let blocking = tokio::spawn(async move {
            let reply = blocking_agent.send_text(&new_id(), "a blocking send").await;
            (Instant::now(), reply.status, reply.body)
        });
        // The blocking send is waiting (its lease held, its run created) before the revocation.
        tokio::time::sleep(Duration::from_millis(500)).await;
        Surfaces {
            agent: writer,
            completed,
            stream,
            blocking,
        }
    }
}

impl Surfaces {
    /// Reads GetTask, ListTasks and the card every 50 ms from `from` until `bound + SETTLE`
    /// after `revoked`, then collects the stream and the blocking send, and asserts the rule.
    pub async fn assert_fresh(self, revoked: Instant, from: Instant, bound: Duration, what: &str) {
        self.assert_fresh_for(revoked, from, bound, SETTLE, what)
            .await
    }

    /// [`Surfaces::assert_fresh`], reading for `settle` past the bound.
    pub async fn assert_fresh_for(
        self,
        revoked: Instant,
        from: Instant,
        bound: Duration,
        settle: Duration,
        what: &str,
    ) {
        let mut reads: Vec<Read> = Vec::new();
        tokio::time::sleep_until(from).await;
        let until = revoked + bound + settle;
        while Instant::now() < until {
            let at = Instant::now() - revoked;
            let (got, listed, card) = tokio::join!(
                self.agent.get_task(&self.completed),
                self.agent.list_tasks(json!({"includeArtifacts": true})),
                self.agent.card(),
            );
            reads.push(Read {
                surface: "GetTask",
                at,
                content: carries_content(&got.body),
                status: got.status,
            });
            reads.push(Read {
                surface: "ListTasks",
                at,
                content: carries_content(&listed.body),
                status: listed.status,
            });
            reads.push(Read {
                surface: "card",
                at,
                content: card.status == 200,
                status: card.status,
            });
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let limit = bound + TOLERANCE;
        for surface in ["GetTask", "ListTasks", "card"] {
            let after: Vec<&Read> = reads
                .iter()
                .filter(|r| r.surface == surface && r.at > limit)
                .collect();
            assert!(
                after.len() >= 3,
                "{what}: too few reads of {surface} after the bound"
            );
            let served: Vec<&&Read> = after.iter().filter(|r| r.content).collect();
            assert!(
                served.is_empty(),
                "{what}: {surface} served content {:?} after the revocation (bound {bound:?} + {TOLERANCE:?})",
                served.iter().map(|r| (r.at, r.status)).collect::<Vec<_>>()
            );
            if from <= revoked + Duration::from_millis(10) {
                let first_free = reads
                    .iter()
                    .filter(|r| r.surface == surface && !r.content)
                    .map(|r| r.at)
                    .min()
                    .expect("a content-free answer");
                eprintln!("{what}: {surface} content-free {first_free:?} after the revocation");
            }
        }
        let (frames, ended) = tokio::time::timeout(Duration::from_secs(30), self.stream)
            .await
            .expect("the stream ends")
            .unwrap();
        let late: Vec<Duration> = frames
            .iter()
            .filter(|(at, content)| *content && *at > revoked + limit)
            .map(|(at, _)| *at - revoked)
            .collect();
        assert!(
            late.is_empty(),
            "{what}: stream content after the bound at {late:?}"
        );
        assert!(
            ended <= revoked + limit,
            "{what}: the stream ended {:?} after the revocation (bound {bound:?})",
            ended - revoked
        );
        eprintln!(
            "{what}: stream ended {:?} after the revocation",
            ended - revoked
        );
        let (answered, status, body) = tokio::time::timeout(Duration::from_secs(30), self.blocking)
            .await
            .expect("the blocking send answers")
            .unwrap();
        if answered > revoked + limit {
            assert!(
                !carries_content(&body),
                "{what}: the blocking send answered content {:?} after the revocation: {status} {body}",
                answered - revoked
            );
        }
        eprintln!(
            "{what}: blocking send answered {status} {:?} after the revocation, content {}",
            answered.saturating_duration_since(revoked),
            carries_content(&body)
        );
    }
}
