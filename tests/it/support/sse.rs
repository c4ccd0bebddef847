//! Streaming JSON-RPC calls (SendStreamingMessage, SubscribeToTask) read frame by frame.

use reqwest::header::HeaderMap;
use serde_json::{json, Value};

use super::rpc::{text_message, Agent};

/// Whether an answer's content type is `text/event-stream`.
pub fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}

/// One SSE frame: a comment, or an event (default `message`) with its JSON data.
#[derive(Debug, Clone)]
pub enum SseFrame {
    // The text shows in `{:?}` output only.
    Comment(#[allow(dead_code)] String),
    Event { event: String, data: Value },
}

/// An open SSE response, or the plain JSON answer that came instead.
pub struct SseStream {
    pub status: u16,
    pub headers: HeaderMap,
    response: Option<reqwest::Response>,
    buffer: String,
    pub body_if_json: Option<Value>,
    /// Why the stream ended without the server closing it cleanly (a reset, a cut connection,
    /// a body cut short), if it did.
    broken: Option<String>,
}

impl Agent {
    /// Posts a streaming JSON-RPC call (request id `s-1`).
    pub async fn stream(&self, method: &str, params: Value) -> SseStream {
        SseStream::open(self, method, params).await
    }

    /// SendStreamingMessage of one text part, accepting markdown.
    pub async fn stream_text(&self, message_id: &str, text: &str) -> SseStream {
        self.stream(
            "SendStreamingMessage",
            json!({"message": text_message(message_id, text),
                   "configuration": {"acceptedOutputModes": ["text/markdown"]}}),
        )
        .await
    }

    /// SubscribeToTask.
    pub async fn subscribe(&self, task_id: &str) -> SseStream {
        self.stream("SubscribeToTask", json!({"id": task_id})).await
    }
}

impl SseStream {
    async fn open(agent: &Agent, method: &str, params: Value) -> SseStream {
        let body = json!({"jsonrpc": "2.0", "id": "s-1", "method": method, "params": params});
        // A client of its own without a total timeout: a stream may stay open for minutes.
        let mut request = reqwest::Client::new()
            .post(format!("{}/rpc", agent.url()))
            .header("a2a-version", "1.0")
            .header("accept", "text/event-stream")
            .json(&body);
        if let Some(token) = agent.token() {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.expect("streaming request");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        if is_event_stream(&headers) {
            SseStream {
                status,
                headers,
                response: Some(response),
                buffer: String::new(),
                body_if_json: None,
                broken: None,
            }
        } else {
            let body = response.json().await.ok();
            SseStream {
                status,
                headers,
                response: None,
                buffer: String::new(),
                body_if_json: body,
                broken: None,
            }
        }
    }

    pub fn is_sse(&self) -> bool {
        self.body_if_json.is_none() && self.response.is_some()
    }

    /// The plain JSON answer that came instead of a stream; panics if it is a stream.
    pub fn json(&self) -> &Value {
        self.body_if_json.as_ref().unwrap_or_else(|| {
            panic!(
                "expected a JSON answer, got HTTP {} (a stream or no body)",
                self.status
            )
        })
    }

    /// Why the stream broke instead of ending cleanly; `None` while it is open or after a
    /// clean end.
    pub fn broken(&self) -> Option<&str> {
        self.broken.as_deref()
    }

    /// The next frame, or None when the stream ended: cleanly (the server closed it), or
    /// broken ([`SseStream::broken`] says why).
    pub async fn next(&mut self) -> Option<SseFrame> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let raw: String = self.buffer.drain(..end + 2).collect();
                let mut event = "message".to_string();
                let mut data = String::new();
                let mut comment = None;
                for line in raw.lines() {
                    if let Some(c) = line.strip_prefix(':') {
                        comment = Some(c.trim().to_string());
                    } else if let Some(e) = line.strip_prefix("event:") {
                        event = e.trim().to_string();
                    } else if let Some(d) = line.strip_prefix("data:") {
                        data.push_str(d.trim_start());
                    }
                }
                if data.is_empty() {
                    return Some(SseFrame::Comment(comment.unwrap_or_default()));
                }
                return Some(SseFrame::Event {
                    event,
                    data: serde_json::from_str(&data).expect("data is JSON"),
                });
            }
            let chunk = match self.response.as_mut()?.chunk().await {
                Ok(Some(chunk)) => chunk,
                Ok(None) if self.buffer.trim().is_empty() => return None,
                Ok(None) => {
                    self.broken = Some(format!("ended inside a frame: {:?}", self.buffer));
                    return None;
                }
                Err(e) => {
                    self.broken = Some(e.to_string());
                    return None;
                }
            };
            self.buffer
                .push_str(std::str::from_utf8(&chunk).expect("UTF-8 frames"));
        }
    }

    /// The next event's JSON-RPC `result` (skipping comments); None at the end of the stream.
    pub async fn next_result(&mut self) -> Option<Value> {
        loop {
            match self.next().await? {
                SseFrame::Comment(_) => continue,
                SseFrame::Event { event, data } => {
                    assert_eq!(event, "message", "unexpected event: {data}");
                    assert_eq!(data["id"], "s-1");
                    return Some(data["result"].clone());
                }
            }
        }
    }

    /// Every remaining result until the stream closes, which it must do cleanly.
    pub async fn rest(&mut self) -> Vec<Value> {
        let mut all = Vec::new();
        while let Some(result) = self.next_result().await {
            all.push(result);
        }
        assert!(
            self.broken.is_none(),
            "the stream broke instead of ending: {:?} (after {} results)",
            self.broken,
            all.len()
        );
        all
    }
}
