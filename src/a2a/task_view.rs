//! How a Q run appears as an A2A Task: state mapping, the status message, history and the
//! verified Markdown artifact.

use std::collections::HashMap;

use a2a::{Artifact, Message, Part, Role, Task, TaskState, TaskStatus};
use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use crate::access::Clearance;
use crate::error::RpcError;
use crate::store::{TaskRow, Tombstone};
use crate::upstream::contract::{text_sha256, RunOutput};

/// Terminal or interrupted: where a blocking SendMessage stops waiting.
pub fn is_settled(state: &TaskState) -> bool {
    state.is_terminal() || matches!(state, TaskState::InputRequired | TaskState::AuthRequired)
}

/// The one media type of an artifact: the profile's "verified inline Markdown".
pub const ARTIFACT_MEDIA_TYPE: &str = "text/markdown";

/// Whether `declared` is Markdown text as the profile answers it: `text/markdown` (any case),
/// with no parameter but a UTF-8 `charset`.
fn is_inline_markdown(declared: &str) -> bool {
    let mut pieces = declared.split(';');
    let essence = pieces.next().unwrap_or_default().trim();
    essence.eq_ignore_ascii_case(ARTIFACT_MEDIA_TYPE)
        && pieces.all(|parameter| {
            let (name, value) = parameter.split_once('=').unwrap_or((parameter, ""));
            name.trim().eq_ignore_ascii_case("charset")
                && matches!(
                    value.trim().trim_matches('"').to_ascii_lowercase().as_str(),
                    "utf-8" | "utf8"
                )
        })
}

/// Checks Q's output against its own checksum and byte count, and that it is Markdown, and
/// turns it into the artifact (`text/markdown`). A mismatch or another media type is an error,
/// never an empty success.
pub fn verified_artifact(output: &RunOutput) -> Result<Artifact, RpcError> {
    if !is_inline_markdown(&output.media_type) {
        tracing::error!(
            artifact_id = %output.artifact_id,
            media_type = %output.media_type.chars().take(100).collect::<String>(),
            "run output is not Markdown"
        );
        return Err(RpcError::invalid_agent_response(
            "the run's output is not text/markdown; it is not returned",
        )
        .with_meta("artifactId", output.artifact_id.clone()));
    }
    let bytes = output.text.len() as u64;
    let digest = text_sha256(&output.text);
    if bytes != output.byte_count || !digest.eq_ignore_ascii_case(&output.sha256) {
        tracing::error!(
            artifact_id = %output.artifact_id,
            expected_bytes = output.byte_count,
            actual_bytes = bytes,
            checksum_matches = digest.eq_ignore_ascii_case(&output.sha256),
            "run output failed verification"
        );
        return Err(RpcError::invalid_agent_response(
            "the run's output failed checksum or size verification; it is not returned",
        )
        .with_meta("artifactId", output.artifact_id.clone()));
    }
    let mut metadata = HashMap::new();
    metadata.insert("sha256".to_string(), Value::String(digest));
    metadata.insert("byteCount".to_string(), json!(bytes));
    Ok(Artifact {
        artifact_id: output.artifact_id.clone(),
        name: Some(output.name.clone()),
        description: None,
        parts: vec![Part::text(output.text.clone()).with_media_type(ARTIFACT_MEDIA_TYPE)],
        metadata: Some(metadata),
        extensions: None,
    })
}

/// What is known about a task at the moment it is rendered.
#[derive(Debug)]
pub struct Snapshot {
    pub state: TaskState,
    pub status_message: Option<String>,
    pub status_timestamp: DateTime<Utc>,
    pub artifact: Option<Artifact>,
    /// Q's confirmation that the caller may see the task's content now (the freshness rule,
    /// `crate::access`); without it the task is a control receipt: id, context, state and its
    /// timestamp, no history, status text or artifact.
    pub clearance: Option<Clearance>,
}

impl Snapshot {
    /// The task as its row stores it (state, status text and timestamp), with `artifact` and
    /// `clearance`: a read answered from the store alone.
    pub fn stored(row: &TaskRow, artifact: Option<Artifact>, clearance: Option<Clearance>) -> Self {
        Snapshot {
            state: row.state.clone(),
            status_message: row.status_message.clone(),
            status_timestamp: row.status_timestamp,
            artifact,
            clearance,
        }
    }
}

/// The content-free receipt of a task retention removed, from its tombstone: id, context,
/// final state and its time (nothing else is kept).
pub fn receipt_of(tombstone: &Tombstone) -> Task {
    Task {
        id: tombstone.task_id.to_string(),
        context_id: tombstone.context_id.to_string(),
        status: TaskStatus {
            state: tombstone.state.clone(),
            message: None,
            timestamp: Some(tombstone.status_timestamp),
        },
        artifacts: None,
        history: None,
        metadata: None,
    }
}

/// Bytes `value` takes as JSON, counted without writing it anywhere.
pub fn json_len<T: serde::Serialize + ?Sized>(value: &T) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    match serde_json::to_writer(&mut count, value) {
        Ok(()) => count.0,
        Err(_) => usize::MAX / 4,
    }
}

/// What a task's answer without its artifact takes at most, known from its row without
/// building it (what a response budget reservation asks for,
/// `crate::http::response_budget`): the stored message twice (history, and the room its
/// task and context ids take), the status message twice (status and history, escaped), and
/// [`TASK_FRAME_BYTES`] for the rest.
pub fn answer_allowance(row: &TaskRow) -> usize {
    let status = row.status_message.as_ref().map_or(0, json_len);
    TASK_FRAME_BYTES + 2 * json_len(&row.message) + 2 * status
}

/// A rendered task's ids, state, timestamps, keys and punctuation, generously.
pub const TASK_FRAME_BYTES: usize = 1024;

pub fn render(row: &TaskRow, snapshot: Snapshot, history_length: Option<usize>) -> Task {
    let task_id = row.task_id.to_string();
    let context_id = row.context_id.to_string();
    let content_visible = snapshot.clearance.is_some();
    let status_message = snapshot
        .status_message
        .as_ref()
        .filter(|_| content_visible)
        .map(|text| Message {
            message_id: format!("{task_id}-status"),
            context_id: Some(context_id.clone()),
            task_id: Some(task_id.clone()),
            role: Role::Agent,
            parts: vec![Part::text(text.clone())],
            metadata: None,
            extensions: None,
            reference_task_ids: None,
        });
    let history = if content_visible {
        let mut history = Vec::new();
        if let Ok(mut message) = serde_json::from_value::<Message>(row.message.clone()) {
            message.task_id = Some(task_id.clone());
            message.context_id = Some(context_id.clone());
            history.push(message);
        }
        if let Some(status) = &status_message {
            history.push(status.clone());
        }
        let keep = history_length.unwrap_or(history.len()).min(history.len());
        let history: Vec<Message> = history.split_off(history.len() - keep);
        (!history.is_empty()).then_some(history)
    } else {
        None
    };
    Task {
        id: task_id,
        context_id,
        status: TaskStatus {
            state: snapshot.state,
            message: status_message,
            timestamp: Some(snapshot.status_timestamp),
        },
        artifacts: snapshot
            .artifact
            .filter(|_| content_visible)
            .map(|a| vec![a]),
        history,
        metadata: None,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::store::task_state;
    use crate::store::{Dispatch, Owner};
    use crate::upstream::contract::RunStatus;
    use uuid::Uuid;

    fn output(text: &str) -> RunOutput {
        RunOutput {
            artifact_id: "answer-1".into(),
            name: "answer.md".into(),
            media_type: "text/markdown".into(),
            text: text.into(),
            sha256: text_sha256(text),
            byte_count: text.len() as u64,
        }
    }

    #[test]
    fn states_map_per_profile() {
        assert_eq!(
            task_state(RunStatus::AwaitingApproval),
            Some(TaskState::InputRequired)
        );
        assert_eq!(
            task_state(RunStatus::AwaitingInput),
            Some(TaskState::InputRequired)
        );
        assert_eq!(task_state(RunStatus::TimedOut), Some(TaskState::Failed));
        // A status of a newer contract revision is no state at all, least of all a final one.
        assert_eq!(task_state(RunStatus::Unknown), None);
        assert!(is_settled(&TaskState::InputRequired));
        assert!(!is_settled(&TaskState::Working));
    }

    #[test]
    fn verified_artifact_carries_checksum_and_size() {
        let a = verified_artifact(&output("# Hi\n\nÉ")).unwrap();
        let v = serde_json::to_value(&a).unwrap();
        assert_eq!(v["parts"][0]["mediaType"], "text/markdown");
        assert_eq!(v["metadata"]["byteCount"], "# Hi\n\nÉ".len());
        assert_eq!(v["metadata"]["sha256"], text_sha256("# Hi\n\nÉ"));
    }

    #[test]
    fn mismatches_are_errors() {
        let mut bad = output("text");
        bad.sha256 = text_sha256("other");
        assert_eq!(verified_artifact(&bad).unwrap_err().code, -32006);
        let mut bad = output("text");
        bad.byte_count += 1;
        assert_eq!(verified_artifact(&bad).unwrap_err().code, -32006);
    }

    #[test]
    fn only_markdown_is_an_artifact() {
        for declared in [
            "text/html",
            "text/plain",
            "application/octet-stream",
            "text/markdown-extra",
            "",
            "text/markdown; charset=latin1",
            "text/markdown; variant=GFM",
        ] {
            let mut other = output("text");
            other.media_type = declared.into();
            let refused = verified_artifact(&other).unwrap_err();
            assert_eq!(refused.code, -32006, "{declared:?}");
            assert!(refused.message.contains("text/markdown"), "{declared:?}");
        }
        for declared in [
            "text/markdown",
            "Text/Markdown",
            "text/markdown; charset=UTF-8",
        ] {
            let mut markdown = output("text");
            markdown.media_type = declared.into();
            let artifact = serde_json::to_value(verified_artifact(&markdown).unwrap()).unwrap();
            // Answered as the profile's one media type, whatever the spelling.
            assert_eq!(artifact["parts"][0]["mediaType"], "text/markdown");
        }
    }

    /// A task row for tests: submitted, with a run.
    pub(crate) fn row() -> TaskRow {
        TaskRow {
            task_id: Uuid::new_v4(),
            owner: Owner {
                tenant_id: "t".into(),
                principal_id: "p".into(),
                agent_id: "a".into(),
            },
            message_id: "m".into(),
            content_sha256: String::new(),
            context_id: Uuid::new_v4(),
            workflow_id: "w".into(),
            message: json!({"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "q"}]}),
            state: TaskState::Submitted,
            status_message: None,
            status_timestamp: Utc::now(),
            dispatch: Dispatch::Dispatched,
            run_id: Some("r".into()),
            deadline_at: None,
            created_at: Utc::now(),
            cancel_requested: false,
        }
    }

    fn snapshot(visible: bool) -> Snapshot {
        Snapshot {
            state: TaskState::InputRequired,
            status_message: Some("Approve tool".into()),
            status_timestamp: Utc::now(),
            artifact: Some(verified_artifact(&output("x")).unwrap()),
            clearance: visible.then(Clearance::for_unit_tests),
        }
    }

    #[test]
    fn history_length_keeps_most_recent() {
        let r = row();
        let all = render(&r, snapshot(true), None);
        assert_eq!(all.history.as_ref().unwrap().len(), 2);
        let h = all.history.unwrap();
        assert_eq!(
            h[0].task_id.as_deref(),
            Some(r.task_id.to_string().as_str())
        );
        let one = render(&r, snapshot(true), Some(1));
        assert_eq!(one.history.unwrap()[0].role, Role::Agent);
        assert!(render(&r, snapshot(true), Some(0)).history.is_none());
    }

    #[test]
    fn revoked_evidence_hides_content() {
        let t = render(&row(), snapshot(false), None);
        assert!(t.history.is_none());
        assert!(t.artifacts.is_none());
        assert!(
            t.status.message.is_none(),
            "a control receipt carries no Q text"
        );
        assert_eq!(t.status.state, TaskState::InputRequired);
    }
}
