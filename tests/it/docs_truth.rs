//! The migration and rollout guides, held to the code and to a running gateway.
//!
//! `docs/migration.md`: its retired-route table is `http::retired::RETIRED` (route, replacement,
//! anchor), each anchor is a heading, and a running gateway's 410s say the same; its method
//! reference covers `Method::ALL` with the right scopes, and every row is sent to a running
//! gateway, which must answer as the row says; a method's section names only JSON-RPC codes
//! its rows document.
//!
//! `docs/rollout.md`: every prerequisite the interoperability profile names is a heading or a
//! bullet, its preflight table is what `q-a2a-gateway preflight` prints, and every variable,
//! metric and table it names exists.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use crate::support::gateway::{migrate, preflight};
use crate::support::*;
use q_a2a_gateway::a2a::method::Method;
use q_a2a_gateway::config::env::VARIABLES;
use q_a2a_gateway::http::retired::RETIRED;
use q_a2a_gateway::metrics;
use serde_json::{json, Value};

const MIGRATION: &str = "docs/migration.md";
const ROLLOUT: &str = "docs/rollout.md";
const ALICE: &str = "tok-alice";
const WRITER: &str = "ag-writer";
/// Asks for approval before finishing, so its tasks stay non-terminal for as long as needed.
const APPROVER: &str = "ag-approver";
/// Shaped like the ids the retired routes handed out: never issued by the new interface.
const OLD_TASK_ID: &str = "0b3e7f3c-old-process-task";

// --- Markdown, read just far enough ------------------------------------------------------------

pub(crate) fn read(relative: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The lines outside fenced code blocks (a `# comment` in a shell block is not a heading).
fn prose_lines(doc: &str) -> Vec<&str> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for line in doc.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            lines.push(line);
        }
    }
    lines
}

/// `(level, text)` of a heading line.
fn heading(line: &str) -> Option<(usize, &str)> {
    let level = line.chars().take_while(|c| *c == '#').count();
    let text = line[level..].strip_prefix(' ')?;
    (1..=6).contains(&level).then_some((level, text.trim()))
}

fn headings(doc: &str) -> Vec<String> {
    prose_lines(doc)
        .into_iter()
        .filter_map(heading)
        .map(|(_, text)| text.to_string())
        .collect()
}

/// The anchor GitHub gives a heading: lower case, spaces to hyphens, other punctuation dropped.
fn slug(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The prose under the heading `title`, up to the next heading of the same or a higher level.
fn section<'a>(doc: &'a str, title: &str) -> Option<Vec<&'a str>> {
    let lines = prose_lines(doc);
    let start = lines
        .iter()
        .position(|l| heading(l).is_some_and(|(_, t)| t == title))?;
    let level = heading(lines[start]).unwrap().0;
    Some(
        lines[start + 1..]
            .iter()
            .take_while(|l| heading(l).is_none_or(|(lv, _)| lv > level))
            .copied()
            .collect(),
    )
}

/// The body rows of the first table in the section `title`, cells trimmed.
pub(crate) fn table(doc: &str, title: &str) -> Vec<Vec<String>> {
    let lines = section(doc, title).unwrap_or_else(|| panic!("no heading {title:?}"));
    let rows: Vec<&str> = lines
        .iter()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .copied()
        .collect();
    assert!(rows.len() > 2, "no table under {title:?}");
    rows[2..]
        .iter()
        .map(|row| {
            row.trim()
                .trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect()
}

fn unquote(cell: &str) -> &str {
    cell.trim_matches('`')
}

/// Every `-32xxx` JSON-RPC code in a text.
fn codes(text: &str) -> BTreeSet<i64> {
    text.match_indices("-32")
        .filter_map(|(i, _)| {
            let digits: String = text[i + 1..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            (digits.len() == 5).then(|| -digits.parse::<i64>().unwrap())
        })
        .collect()
}

// --- The migration guide's tables --------------------------------------------------------------

/// One row of the retired-route table.
#[derive(Debug)]
struct Retired {
    method: String,
    path: String,
    replacement: String,
    anchor: String,
}

fn retired_rows(doc: &str) -> Vec<Retired> {
    table(doc, "Retired routes")
        .into_iter()
        .map(|cells| {
            assert_eq!(cells.len(), 4, "{cells:?}");
            let (method, path) = unquote(&cells[0])
                .split_once(' ')
                .unwrap_or_else(|| panic!("route {:?}", cells[0]));
            let anchor = cells[3]
                .split_once("](#")
                .and_then(|(_, rest)| rest.strip_suffix(')'))
                .unwrap_or_else(|| panic!("guide link {:?}", cells[3]));
            Retired {
                method: method.to_string(),
                path: path.to_string(),
                replacement: unquote(&cells[2]).to_string(),
                anchor: anchor.to_string(),
            }
        })
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Result,
    Stream,
    Error(i64),
}

/// One row of the method reference.
#[derive(Debug)]
struct MethodRow {
    method: Method,
    scope: String,
    supported: bool,
    case: String,
    answer: Answer,
    text: String,
}

fn method_rows(doc: &str) -> Vec<MethodRow> {
    table(doc, "Method reference")
        .into_iter()
        .map(|cells| {
            assert_eq!(cells.len(), 5, "{cells:?}");
            let name = unquote(&cells[0]);
            let method = Method::parse(name).unwrap_or_else(|| {
                panic!("the guide lists {name}, which the gateway does not know")
            });
            let supported = match cells[2].as_str() {
                "supported" => true,
                "unsupported" => false,
                other => panic!("{name}: support {other:?} is neither supported nor unsupported"),
            };
            let text = cells[4].clone();
            let documented = codes(&text);
            let answer = if let Some(code) = documented.first() {
                assert_eq!(documented.len(), 1, "{name}: one code per row: {text}");
                Answer::Error(*code)
            } else if text.starts_with("SSE stream") {
                Answer::Stream
            } else if text.starts_with("result") {
                Answer::Result
            } else {
                panic!("{name}: answer {text:?} is neither a result, an SSE stream nor a code");
            };
            MethodRow {
                method,
                scope: unquote(&cells[1]).to_string(),
                supported,
                case: cells[3].clone(),
                answer,
                text,
            }
        })
        .collect()
}

// --- Pure checks of docs/migration.md ----------------------------------------------------------

#[test]
fn retired_table_is_the_router_table() {
    let doc = read(MIGRATION);
    let rows = retired_rows(&doc);
    let slugs: BTreeSet<String> = headings(&doc).iter().map(|h| slug(h)).collect();
    for (method, path, retirement) in RETIRED {
        let row = rows
            .iter()
            .find(|r| r.method == *method && r.path == *path)
            .unwrap_or_else(|| panic!("{MIGRATION} does not list the retired {method} {path}"));
        assert_eq!(
            row.replacement, retirement.replacement,
            "{method} {path}: the guide's replacement is not the one the 410 names"
        );
        let (file, anchor) = retirement.guide.split_once('#').unwrap();
        assert_eq!(file, MIGRATION, "{method} {path}");
        assert_eq!(
            row.anchor, anchor,
            "{method} {path}: the guide links elsewhere"
        );
        assert!(
            slugs.contains(anchor),
            "the 410 of {method} {path} links to #{anchor}, which is no heading of {MIGRATION}"
        );
    }
    for row in &rows {
        assert!(
            RETIRED
                .iter()
                .any(|(m, p, _)| *m == row.method && *p == row.path),
            "{MIGRATION} lists {} {} as retired, but the router does not retire it",
            row.method,
            row.path
        );
    }
}

/// CHANGELOG.md's baseline entry lists every retired route the router answers with 410, and
/// nothing else; the entries above it are newest first.
#[test]
fn the_changelog_baseline_is_the_router_table() {
    let changelog = read("CHANGELOG.md");
    let dates: Vec<&str> = changelog
        .lines()
        .filter_map(|line| line.strip_prefix("## "))
        .map(|title| title.get(..10).unwrap_or(title))
        .collect();
    assert!(!dates.is_empty(), "CHANGELOG.md has no entries");
    let mut sorted = dates.clone();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(dates, sorted, "CHANGELOG.md's entries are newest first");
    let baseline_at = changelog
        .match_indices("\n## ")
        .map(|(at, _)| at + 1)
        .find(|&at| {
            changelog[at..]
                .lines()
                .next()
                .unwrap()
                .contains("the baseline")
        })
        .expect("CHANGELOG.md has a baseline entry");
    assert!(
        !changelog[baseline_at + 3..].contains("\n## "),
        "the baseline is the last entry"
    );
    let listed: BTreeSet<(String, String)> = changelog[baseline_at..]
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split_once('`'))
        .filter_map(|(route, _)| route.split_once(' '))
        .map(|(method, path)| (method.to_string(), path.to_string()))
        .collect();
    let retired: BTreeSet<(String, String)> = RETIRED
        .iter()
        .map(|(method, path, _)| (method.to_string(), path.to_string()))
        .collect();
    assert_eq!(
        listed, retired,
        "CHANGELOG.md's baseline and http::retired::RETIRED"
    );
}

#[test]
fn method_reference_covers_every_method_with_its_scope() {
    let doc = read(MIGRATION);
    let rows = method_rows(&doc);
    let listed: BTreeSet<&str> = rows.iter().map(|r| r.method.name()).collect();
    for method in Method::ALL {
        assert!(
            listed.contains(method.name()),
            "{MIGRATION}'s method reference lacks {}",
            method.name()
        );
    }
    let mut support: BTreeMap<&str, bool> = BTreeMap::new();
    for row in &rows {
        let name = row.method.name();
        assert_eq!(
            row.scope,
            row.method.access().required_scopes()[1],
            "{name}: the guide names the wrong scope"
        );
        let first = *support.entry(name).or_insert(row.supported);
        assert_eq!(first, row.supported, "{name}: rows disagree on support");
        if !row.supported {
            assert!(
                matches!(row.answer, Answer::Error(_)),
                "{name} is documented as unsupported but answers {}",
                row.text
            );
        }
        assert!(
            !matches!(row.answer, Answer::Error(-32601)),
            "{name}: a listed method is never -32601"
        );
    }
    for (name, supported) in support {
        if supported {
            assert!(
                rows.iter().any(|r| r.method.name() == name
                    && matches!(r.answer, Answer::Result | Answer::Stream)),
                "{name} is documented as supported but no row shows it working"
            );
        }
    }
}

/// The guide's prose must not contradict its table: a method's section may name only the codes
/// its rows document (the old text's "ListTasks answers -32004" fails here).
#[test]
fn method_sections_name_only_documented_codes() {
    let doc = read(MIGRATION);
    let rows = method_rows(&doc);
    let mut wrong = Vec::new();
    for method in Method::ALL {
        let Some(lines) = section(&doc, method.name()) else {
            continue;
        };
        let documented: BTreeSet<i64> = rows
            .iter()
            .filter(|r| r.method == method)
            .filter_map(|r| match r.answer {
                Answer::Error(code) => Some(code),
                _ => None,
            })
            .collect();
        // -32603 (Q did not confirm a cancellation) needs Q to fail in the middle of a call,
        // which the method reference cannot drive.
        let named: BTreeSet<i64> = codes(&lines.join("\n"))
            .into_iter()
            .filter(|c| *c != -32603)
            .collect();
        let undocumented: Vec<_> = named.difference(&documented).collect();
        if !undocumented.is_empty() {
            wrong.push(format!(
                "section {} names {undocumented:?}, which its method reference rows do not document",
                method.name()
            ));
        }
    }
    assert!(wrong.is_empty(), "{MIGRATION}:\n{}", wrong.join("\n"));
}

// --- docs/migration.md against a running gateway -----------------------------------------------

/// What one row is sent as: the agent and params, and what a success must show.
struct Scenario {
    agent: &'static str,
    params: Value,
    /// The task a success must be about.
    task_id: Option<String>,
}

fn message(message_id: &str, text: &str) -> Value {
    json!({"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]})
}

/// A completed task of the caller on `WRITER`.
async fn completed_task(gw: &Gateway) -> String {
    let reply = gw
        .caller(ALICE)
        .agent(WRITER)
        .send_text(&new_id(), "docs truth: finish")
        .await;
    let task = &reply.result()["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    task["id"].as_str().unwrap().to_string()
}

/// A task of the caller on `APPROVER` that is not terminal.
async fn live_task(gw: &Gateway) -> String {
    let reply = gw
        .caller(ALICE)
        .agent(APPROVER)
        .send_text_immediately(&new_id(), "docs truth: wait")
        .await;
    reply.result()["task"]["id"].as_str().unwrap().to_string()
}

/// A SendMessage with `id` and `text`, returned at once; its task id.
async fn sent(gw: &Gateway, id: &str, text: &str) -> String {
    let reply = gw
        .caller(ALICE)
        .agent(WRITER)
        .send_text_immediately(id, text)
        .await;
    reply.result()["task"]["id"].as_str().unwrap().to_string()
}

/// Builds what a row's case means. A case this does not know fails the test: a new row needs
/// a way to be driven before the guide may claim it.
async fn scenario(gw: &Gateway, method: Method, case: &str) -> Scenario {
    let on_writer = |params: Value| Scenario {
        agent: WRITER,
        params,
        task_id: None,
    };
    match case {
        "new message" => on_writer(json!({"message": message(&new_id(), "docs truth: new")})),
        "repeated messageId, same text" => {
            let id = new_id();
            let task = sent(gw, &id, "docs truth: same").await;
            Scenario {
                agent: WRITER,
                params: json!({"message": message(&id, "docs truth: same")}),
                task_id: Some(task),
            }
        }
        "repeated messageId, other text" => {
            let id = new_id();
            sent(gw, &id, "docs truth: first").await;
            on_writer(json!({"message": message(&id, "docs truth: changed")}))
        }
        "message naming a taskId" => {
            let task = completed_task(gw).await;
            let mut m = message(&new_id(), "docs truth: continue");
            m["taskId"] = json!(task);
            on_writer(json!({ "message": m }))
        }
        "non-text part" => on_writer(json!({"message": {
            "messageId": new_id(), "role": "ROLE_USER",
            "parts": [{"url": "https://files.example/report.pdf", "mediaType": "application/pdf"}]
        }})),
        "the caller's task" | "terminal task" => {
            let task = completed_task(gw).await;
            Scenario {
                agent: WRITER,
                params: json!({ "id": task }),
                task_id: Some(task),
            }
        }
        "live task" => {
            let task = live_task(gw).await;
            Scenario {
                agent: APPROVER,
                params: json!({ "id": task }),
                task_id: Some(task),
            }
        }
        "unknown task id" => on_writer(json!({ "id": OLD_TASK_ID })),
        "no filters" => on_writer(json!({})),
        "malformed pageToken" => on_writer(json!({"pageToken": "not-a-page-token"})),
        "any" => {
            let task = completed_task(gw).await;
            on_writer(match method {
                Method::CreateTaskPushNotificationConfig => {
                    json!({"taskId": task, "config": {"url": "https://hooks.example/a2a"}})
                }
                Method::GetTaskPushNotificationConfig
                | Method::DeleteTaskPushNotificationConfig => {
                    json!({"taskId": task, "id": "cfg-1"})
                }
                Method::ListTaskPushNotificationConfigs => json!({ "taskId": task }),
                _ => json!({}),
            })
        }
        other => panic!(
            "{MIGRATION}: no way to drive {} in case {other:?}; teach tests/it/docs_truth.rs",
            method.name()
        ),
    }
}

/// What the gateway answered: a result, the first event of a stream, or a JSON-RPC error.
#[derive(Debug)]
enum Outcome {
    Result(Value),
    Stream(Value),
    Error(i64, Value),
}

async fn call(gw: &Gateway, method: Method, scenario: &Scenario) -> Outcome {
    if matches!(
        method,
        Method::SendStreamingMessage | Method::SubscribeToTask
    ) {
        let mut stream = gw
            .caller(ALICE)
            .agent(scenario.agent)
            .stream(method.name(), scenario.params.clone())
            .await;
        assert_eq!(
            stream.status,
            200,
            "{}: {:?}",
            method.name(),
            stream.body_if_json
        );
        if stream.is_sse() {
            let first = stream.next_result().await.expect("a first event");
            return Outcome::Stream(first);
        }
        let body = stream.body_if_json.unwrap();
        let code = body["error"]["code"]
            .as_i64()
            .unwrap_or_else(|| panic!("{}: neither a stream nor an error: {body}", method.name()));
        return Outcome::Error(code, body);
    }
    let reply = gw
        .caller(ALICE)
        .agent(scenario.agent)
        .rpc(method.name(), scenario.params.clone())
        .await;
    assert_eq!(
        reply.status,
        200,
        "{}: an HTTP refusal is no documented answer: {}",
        method.name(),
        reply.body
    );
    match reply.error_code() {
        Some(code) => Outcome::Error(code, reply.body),
        None => Outcome::Result(reply.body["result"].clone()),
    }
}

/// The documented outcome, beyond "no error": the result is about what the row says.
fn check_success(row: &MethodRow, scenario: &Scenario, value: &Value) {
    let name = row.method.name();
    let task = match row.method {
        Method::ListTasks => {
            assert!(value["tasks"].is_array(), "{name}: {value}");
            return;
        }
        Method::SendMessage | Method::SendStreamingMessage | Method::SubscribeToTask => {
            &value["task"]
        }
        _ => value,
    };
    let id = task["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{name} ({}): no task in {value}", row.case));
    if let Some(expected) = &scenario.task_id {
        assert_eq!(id, expected, "{name} ({}): another task", row.case);
    }
    if row.text.contains("TASK_STATE_CANCELED") {
        assert_eq!(
            task["status"]["state"], "TASK_STATE_CANCELED",
            "{name}: {task}"
        );
    }
}

impl Outcome {
    /// One line for a failure message.
    fn summary(&self) -> String {
        let (what, value) = match self {
            Outcome::Result(v) => ("a result".to_string(), v),
            Outcome::Stream(v) => ("an SSE stream".to_string(), v),
            Outcome::Error(code, v) => {
                let note = if matches!(code, -32601 | -32004) {
                    " (not supported)"
                } else {
                    ""
                };
                (format!("{code}{note}"), v)
            }
        };
        let mut json = value.to_string();
        json.truncate(300);
        format!("{what}: {json}")
    }
}

#[tokio::test]
async fn every_method_row_answers_as_documented() {
    let gw = Gateway::start().await;
    let doc = read(MIGRATION);
    let rows = method_rows(&doc);
    let mut wrong = Vec::new();
    for row in &rows {
        let scenario = scenario(&gw, row.method, &row.case).await;
        let outcome = call(&gw, row.method, &scenario).await;
        let answered = match (row.answer, &outcome) {
            (Answer::Result, Outcome::Result(v)) | (Answer::Stream, Outcome::Stream(v)) => {
                check_success(row, &scenario, v);
                true
            }
            (Answer::Error(documented), Outcome::Error(code, _)) => documented == *code,
            _ => false,
        };
        if !answered {
            wrong.push(format!(
                "{} ({}) is documented as {:?}, but the gateway answered {}",
                row.method.name(),
                row.case,
                row.text,
                outcome.summary()
            ));
        }
    }
    assert!(wrong.is_empty(), "{MIGRATION}:\n{}", wrong.join("\n"));
    assert!(rows.len() >= Method::ALL.len());
}

/// A retired route's path with its parameters filled in.
fn concrete(path: &str) -> String {
    path.replace("{id}", OLD_TASK_ID)
        .replace("{skill}", "q.answer")
}

async fn retired_routes_answer_as_the_guide_says(gw: &Gateway) {
    let doc = read(MIGRATION);
    let slugs: BTreeSet<String> = headings(&doc).iter().map(|h| slug(h)).collect();
    for row in retired_rows(&doc) {
        let path = concrete(&row.path);
        let method = reqwest::Method::from_bytes(row.method.as_bytes()).unwrap();
        let response = gw.request(method, &path).await;
        assert_eq!(response.status(), 410, "{} {path}", row.method);
        let body: Value = response.json().await.unwrap();
        assert_eq!(
            body["replacement"], row.replacement,
            "{} {path}",
            row.method
        );
        assert_eq!(
            body["message"],
            format!("this route was retired; use {}", row.replacement),
            "{} {path}",
            row.method
        );
        let guide = body["migrationGuide"].as_str().unwrap();
        assert_eq!(
            guide,
            format!("{MIGRATION}#{}", row.anchor),
            "{} {path}",
            row.method
        );
        assert!(slugs.contains(&row.anchor), "#{} is no heading", row.anchor);

        // "The path's other HTTP methods answer 410 as well, except on /v1/a2a/tasks".
        let other = gw.request(reqwest::Method::DELETE, &path).await;
        let expected = if row.path == "/v1/a2a/tasks" {
            404
        } else {
            410
        };
        assert_eq!(other.status(), expected, "DELETE {path}");
    }
}

#[tokio::test]
async fn retired_routes_and_the_example_body_match_the_guide() {
    let gw = Gateway::start().await;
    retired_routes_answer_as_the_guide_says(&gw).await;

    // The guide's example body is what its route answers, word for word.
    let doc = read(MIGRATION);
    let example = doc
        .split("```json")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("an example 410 body");
    let example: Value = serde_json::from_str(example).unwrap();
    let body: Value = gw
        .request(reqwest::Method::POST, "/v1/a2a/message/send")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body, example);
}

#[tokio::test]
async fn retired_routes_match_the_guide_with_the_profile_off() {
    let gw = Gateway::start_with(GatewayOptions::profile_off().unmigrated()).await;
    retired_routes_answer_as_the_guide_says(&gw).await;
}

// --- docs/rollout.md ---------------------------------------------------------------------------

/// The A2A interoperability profile's sentences naming what enabling the hosted profile needs,
/// word for word (the profile is not part of this repository).
const PROFILE_REQUIREMENTS: [&str; 3] = [
    "It requires the agent_api tenant feature, migrated PostgreSQL, Temporal workers and an existing Q agent with an authorised workspace.",
    "Apply migration 20261009_030000_a2a_status before enablement.",
    "Rollout additionally requires current dependency auditing, TLS/proxy/SSE timeouts, worker grants, reconciler configuration, identity revocation and representative load checks.",
];

/// "It requires a, b and c." → ["a", "b", "c"].
fn listed_requirements(sentence: &str) -> Vec<String> {
    let list = sentence
        .split_once("requires ")
        .map(|(_, list)| list)
        .unwrap_or(sentence)
        .trim_end_matches('.');
    list.split(", ")
        .flat_map(|item| item.split(" and "))
        .map(str::to_string)
        .collect()
}

/// Headings and bullet items, lower case.
fn headings_and_bullets(doc: &str) -> Vec<String> {
    prose_lines(doc)
        .into_iter()
        .filter(|l| heading(l).is_some() || l.trim_start().starts_with("- "))
        .map(str::to_lowercase)
        .collect()
}

#[test]
fn rollout_names_every_prerequisite_of_the_profile() {
    let doc = read(ROLLOUT);
    // The page quotes the profile, so a reader sees where each requirement comes from.
    let flat: String = doc
        .lines()
        .map(|l| l.trim_start().trim_start_matches('>').trim())
        .collect::<Vec<_>>()
        .join(" ");
    let flat = flat.split_whitespace().collect::<Vec<_>>().join(" ");
    let lines = headings_and_bullets(&doc);
    for sentence in PROFILE_REQUIREMENTS {
        assert!(
            flat.contains(sentence),
            "{ROLLOUT} does not quote: {sentence}"
        );
        let items = if sentence.starts_with("Apply migration") {
            vec![
                "20261009_030000_a2a_status".to_string(),
                "before enablement".to_string(),
            ]
        } else {
            listed_requirements(sentence)
        };
        for item in items {
            assert!(
                lines.iter().any(|l| l.contains(&item.to_lowercase())),
                "{ROLLOUT}: no heading or bullet names {item:?}"
            );
        }
    }
    assert!(
        lines
            .iter()
            .any(|l| l.contains("a2a_server_profile_enabled")),
        "{ROLLOUT}: no heading or bullet names A2A_SERVER_PROFILE_ENABLED"
    );
    assert_eq!(
        listed_requirements(PROFILE_REQUIREMENTS[2]).len(),
        6,
        "the rollout sentence lists six requirements"
    );
}

/// Words of `[A-Za-z0-9_]` in a text.
fn words(text: &str) -> BTreeSet<&str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .collect()
}

#[test]
fn rollout_names_only_real_variables_metrics_and_tables() {
    let doc = read(ROLLOUT);
    let client = read("examples/a2a/client.py");
    let variables: BTreeSet<&str> = VARIABLES.iter().map(|v| v.name).collect();
    for word in words(&doc) {
        if word.starts_with("Q_A2A_") || word.starts_with("A2A_") {
            // A gateway variable, or one the example client reads (the smoke run).
            assert!(
                variables.contains(word) || client.contains(&format!("os.environ.get(\"{word}\"")),
                "{ROLLOUT} names {word}, which neither the gateway nor the example client reads"
            );
        }
    }
    let metric_names = [
        metrics::REQUESTS,
        metrics::DURATION,
        metrics::UPSTREAM_ERRORS,
        metrics::RECONCILER_BACKLOG,
        metrics::LEASES,
        metrics::LEASES_HELD,
        metrics::UPSTREAM_DOWN,
        metrics::INTROSPECTIONS_SHED,
        metrics::CARDS_SIGNED,
        metrics::CARD_VERIFICATIONS,
    ];
    let migrations: String =
        std::fs::read_dir(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("migrations"))
            .unwrap()
            .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
            .collect();
    let schema = read("src/store/migrate.rs");
    // Backquoted a2a_* names: metrics, or tables the migrations (or the migration ledger) create.
    for quoted in doc.split('`').skip(1).step_by(2) {
        let Some(name) = quoted.strip_prefix("a2a_") else {
            continue;
        };
        let name = format!("a2a_{}", name.split(['{', ' ']).next().unwrap());
        let table = format!("CREATE TABLE {name} ");
        let ledger = format!("CREATE TABLE IF NOT EXISTS {name} ");
        assert!(
            metric_names.contains(&name.as_str())
                || migrations.contains(&table)
                || schema.contains(&ledger),
            "{ROLLOUT} names `{name}`, which is neither a metric nor a table"
        );
    }
}

/// The preflight table lists exactly the checks the command prints.
#[tokio::test]
async fn rollout_preflight_table_is_what_preflight_prints() {
    let db = TestDb::create().await;
    let upstream = Upstream::start().await;
    assert!(migrate(&db, &upstream.url).await.status.success());
    let out = preflight(&db, &upstream.url, &[]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let printed: BTreeSet<String> = stdout
        .lines()
        .skip(1)
        .filter(|l| !l.starts_with(' ') && !l.starts_with("preflight:"))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect();
    assert!(printed.len() > 5, "{stdout}");
    let doc = read(ROLLOUT);
    let documented: BTreeSet<String> = table(&doc, "What `q-a2a-gateway preflight` checks")
        .iter()
        .map(|cells| unquote(&cells[0]).to_string())
        .collect();
    assert_eq!(documented, printed, "{ROLLOUT} against:\n{stdout}");
}
