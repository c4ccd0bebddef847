//! The benchmark's stream holder: opens one `SubscribeToTask` stream per task id read from
//! standard input, over HTTP/1.1 (one connection per stream) or HTTP/2 cleartext (up to
//! `STREAMS_PER_CONNECTION` streams per connection), waits for each stream's first event (the
//! task snapshot), then holds every stream open, reading and discarding what arrives, until
//! its standard input says `stop` (or closes). A Python client could not hold more than a few
//! thousand streams on this machine; this one holds tens of thousands, so the gateway's memory
//! per open stream can be measured at scale.
//!
//!     cargo build --release --example bench_stream_holder
//!     bench_stream_holder URL TOKEN h1|h2 < task-ids
//!
//! URL is the agent's JSON-RPC endpoint (`http://127.0.0.1:PORT/v1/a2a/agents/AGENT/rpc`).
//! Standard input: one task id per line, then an empty line. Standard output, one JSON object
//! per line: `{"opened":N,"failed":F,"errors":[...]}` once every stream has its snapshot or
//! failed, and `{"ended_early":E,"status_at":{TASK_ID:SECONDS,...}}` after `stop` (streams
//! the gateway ended while they were held, and when each stream's first `statusUpdate` after
//! its snapshot arrived: wall-clock seconds since the epoch, read as the bytes come off the
//! socket). Used by `scripts/bench`; not part of the gateway.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::Request;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::{watch, Semaphore};

/// Below the gateway's 64 concurrent streams per HTTP/2 connection.
const STREAMS_PER_CONNECTION: usize = 60;
/// Streams being opened at once.
const OPENING: usize = 128;

#[derive(Default)]
struct Tally {
    opened: AtomicUsize,
    failed: AtomicUsize,
    ended_early: AtomicUsize,
    errors: Mutex<Vec<String>>,
    /// Task id → when its first `statusUpdate` arrived.
    status_at: Mutex<HashMap<String, f64>>,
}

impl Tally {
    fn fail(&self, why: String) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        let mut errors = self.errors.lock().unwrap();
        if errors.len() < 5 {
            errors.push(why);
        }
    }
}

struct Target {
    url: http::Uri,
    token: String,
}

impl Target {
    fn authority(&self) -> String {
        let authority = self.url.authority().expect("URL with host");
        authority.as_str().to_owned()
    }

    fn body(task_id: &str) -> String {
        format!(
            r#"{{"jsonrpc":"2.0","id":"1","method":"SubscribeToTask","params":{{"id":"{task_id}"}}}}"#
        )
    }
}

/// Notes when a stream's first status update arrives. Fed every part read after the
/// snapshot; remembers the last bytes of the one before, so a marker split between two
/// reads is still seen.
struct StatusWatch {
    task_id: String,
    tail: Vec<u8>,
    seen: bool,
}

const STATUS_MARKER: &[u8] = br#""statusUpdate""#;

impl StatusWatch {
    fn new(task_id: &str) -> Self {
        StatusWatch {
            task_id: task_id.to_owned(),
            tail: Vec::new(),
            seen: false,
        }
    }

    fn feed(&mut self, part: &[u8], tally: &Tally) {
        if self.seen {
            return;
        }
        let at = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64();
        self.tail.extend_from_slice(part);
        if self
            .tail
            .windows(STATUS_MARKER.len())
            .any(|w| w == STATUS_MARKER)
        {
            self.seen = true;
            tally
                .status_at
                .lock()
                .unwrap()
                .insert(std::mem::take(&mut self.task_id), at);
            self.tail = Vec::new();
            return;
        }
        let keep = self.tail.len().saturating_sub(STATUS_MARKER.len() - 1);
        self.tail.drain(..keep);
    }
}

/// The bytes after the end of the SSE event carrying the snapshot, if `seen` holds it.
fn after_snapshot(seen: &[u8]) -> Option<&[u8]> {
    let mut start = 0;
    while let Some(end) = seen[start..].windows(2).position(|w| w == b"\n\n") {
        let event = &seen[start..start + end];
        start += end + 2;
        let text = String::from_utf8_lossy(event);
        if text.contains("data:") && text.contains(r#""task""#) {
            return Some(&seen[start..]);
        }
    }
    None
}

/// Whether `seen` holds the end of an SSE event carrying the snapshot (`"task"` result).
fn has_snapshot(seen: &[u8]) -> bool {
    let text = String::from_utf8_lossy(seen);
    let Some(end) = text.rfind("\n\n") else {
        return false;
    };
    text[..end]
        .split("\n\n")
        .any(|event| event.contains("data:") && event.contains(r#""task""#))
}

async fn hold_h1(
    target: Arc<Target>,
    task_id: String,
    tally: Arc<Tally>,
    opened: Arc<Semaphore>,
    mut stop: watch::Receiver<bool>,
) {
    let authority = target.authority();
    let body = Target::body(&task_id);
    let request = format!(
        "POST {} HTTP/1.1\r\nHost: {authority}\r\nAuthorization: Bearer {}\r\nA2A-Version: 1.0\r\n\
         Content-Type: application/json\r\nAccept: text/event-stream\r\nContent-Length: {}\r\n\r\n{body}",
        target.url.path(),
        target.token,
        body.len()
    );
    let mut socket = match TcpStream::connect(&authority).await {
        Ok(s) => s,
        Err(e) => return fail(&tally, &opened, format!("connect: {e}")),
    };
    if let Err(e) = socket.write_all(request.as_bytes()).await {
        return fail(&tally, &opened, format!("write: {e}"));
    }
    let mut seen = Vec::new();
    let mut buf = [0u8; 2048];
    loop {
        match socket.read(&mut buf).await {
            Ok(0) => {
                return fail(
                    &tally,
                    &opened,
                    format!("closed before the snapshot: {}", head(&seen)),
                )
            }
            Ok(n) => seen.extend_from_slice(&buf[..n]),
            Err(e) => return fail(&tally, &opened, format!("read: {e}")),
        }
        if !seen.starts_with(b"HTTP/1.1 200") && seen.len() >= 12 {
            return fail(&tally, &opened, format!("answer: {}", head(&seen)));
        }
        if has_snapshot(&seen) {
            break;
        }
    }
    let mut watch = StatusWatch::new(&task_id);
    watch.feed(after_snapshot(&seen).unwrap_or_default(), &tally);
    drop(seen);
    open(&tally, &opened);
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            read = socket.read(&mut buf) => match read {
                Ok(n) if n > 0 => watch.feed(&buf[..n], &tally),
                _ => {
                    tally.ended_early.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            }
        }
    }
}

async fn hold_h2_connection(
    target: Arc<Target>,
    task_ids: Vec<String>,
    tally: Arc<Tally>,
    opened: Arc<Semaphore>,
    stop: watch::Receiver<bool>,
) {
    let authority = target.authority();
    let connected = async {
        let socket = TcpStream::connect(&authority)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        h2::client::handshake(socket)
            .await
            .map_err(|e| format!("handshake: {e}"))
    };
    let (client, connection) = match connected.await {
        Ok(pair) => pair,
        Err(why) => {
            // No permit was taken for these streams: none is given back.
            for _ in &task_ids {
                tally.fail(why.clone());
            }
            return;
        }
    };
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let mut streams = Vec::new();
    for task_id in task_ids {
        let (target, tally, opened, stop) =
            (target.clone(), tally.clone(), opened.clone(), stop.clone());
        let client = client.clone();
        let permit = opened.clone().acquire_owned().await.expect("never closed");
        permit.forget();
        streams.push(tokio::spawn(async move {
            hold_h2_stream(client, &target, &task_id, &tally, &opened, stop).await
        }));
    }
    for stream in streams {
        let _ = stream.await;
    }
}

async fn hold_h2_stream(
    client: h2::client::SendRequest<Bytes>,
    target: &Target,
    task_id: &str,
    tally: &Tally,
    opened: &Semaphore,
    mut stop: watch::Receiver<bool>,
) {
    let request = Request::post(target.url.clone())
        .header("authorization", format!("Bearer {}", target.token))
        .header("a2a-version", "1.0")
        .header("content-type", "application/json")
        .header("accept", "text/event-stream")
        .body(())
        .expect("valid request");
    let mut client = match client.ready().await {
        Ok(c) => c,
        Err(e) => return fail(tally, opened, format!("ready: {e}")),
    };
    let (response, mut send) = match client.send_request(request, false) {
        Ok(pair) => pair,
        Err(e) => return fail(tally, opened, format!("send: {e}")),
    };
    if let Err(e) = send.send_data(Bytes::from(Target::body(task_id)), true) {
        return fail(tally, opened, format!("body: {e}"));
    }
    let response = match response.await {
        Ok(r) => r,
        Err(e) => return fail(tally, opened, format!("response: {e}")),
    };
    if response.status() != 200 {
        return fail(tally, opened, format!("HTTP {}", response.status()));
    }
    let mut body = response.into_body();
    let mut seen = Vec::new();
    loop {
        match body.data().await {
            Some(Ok(chunk)) => {
                let _ = body.flow_control().release_capacity(chunk.len());
                seen.extend_from_slice(&chunk);
            }
            Some(Err(e)) => return fail(tally, opened, format!("read: {e}")),
            None => {
                return fail(
                    tally,
                    opened,
                    format!("ended before the snapshot: {}", head(&seen)),
                )
            }
        }
        if has_snapshot(&seen) {
            break;
        }
    }
    let mut watch = StatusWatch::new(task_id);
    watch.feed(after_snapshot(&seen).unwrap_or_default(), tally);
    drop(seen);
    open(tally, opened);
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            data = body.data() => match data {
                Some(Ok(chunk)) => {
                    watch.feed(&chunk, tally);
                    let _ = body.flow_control().release_capacity(chunk.len());
                }
                _ => {
                    tally.ended_early.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            }
        }
    }
}

/// A stream has its snapshot: counted, and its opening permit given back.
fn open(tally: &Tally, opened: &Semaphore) {
    tally.opened.fetch_add(1, Ordering::Relaxed);
    opened.add_permits(1);
}

fn fail(tally: &Tally, opened: &Semaphore, why: String) {
    tally.fail(why);
    opened.add_permits(1);
}

fn head(seen: &[u8]) -> String {
    String::from_utf8_lossy(&seen[..seen.len().min(200)]).into_owned()
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, url, token, protocol] = &args[..] else {
        eprintln!("usage: bench_stream_holder URL TOKEN h1|h2 < task-ids");
        std::process::exit(2);
    };
    let target = Arc::new(Target {
        url: url.parse().expect("URL"),
        token: token.clone(),
    });
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut task_ids = Vec::new();
    while let Ok(Some(line)) = lines.next_line().await {
        if line.trim().is_empty() {
            break;
        }
        task_ids.push(line.trim().to_owned());
    }
    let total = task_ids.len();
    let tally = Arc::new(Tally::default());
    // A permit per stream being opened: given back when it has its snapshot or failed.
    let opening = Arc::new(Semaphore::new(OPENING));
    let (stop_tx, stop) = watch::channel(false);
    let mut holders = Vec::new();
    match protocol.as_str() {
        "h1" => {
            for task_id in task_ids {
                let permit = opening.clone().acquire_owned().await.expect("never closed");
                permit.forget();
                let (target, tally, opening, stop) =
                    (target.clone(), tally.clone(), opening.clone(), stop.clone());
                holders.push(tokio::spawn(hold_h1(target, task_id, tally, opening, stop)));
            }
        }
        "h2" => {
            for chunk in task_ids.chunks(STREAMS_PER_CONNECTION) {
                let (target, tally, opening, stop) =
                    (target.clone(), tally.clone(), opening.clone(), stop.clone());
                holders.push(tokio::spawn(hold_h2_connection(
                    target,
                    chunk.to_vec(),
                    tally,
                    opening,
                    stop,
                )));
            }
        }
        other => {
            eprintln!("protocol {other:?}: h1 or h2");
            std::process::exit(2);
        }
    }
    while tally.opened.load(Ordering::Relaxed) + tally.failed.load(Ordering::Relaxed) < total {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let errors = tally.errors.lock().unwrap().clone();
    println!(
        "{}",
        serde_json::json!({
            "opened": tally.opened.load(Ordering::Relaxed),
            "failed": tally.failed.load(Ordering::Relaxed),
            "errors": errors,
        })
    );
    // Held until told to stop (or standard input closes).
    while let Ok(Some(line)) = lines.next_line().await {
        if line.trim() == "stop" {
            break;
        }
    }
    let ended_early = tally.ended_early.load(Ordering::Relaxed);
    let _ = stop_tx.send(true);
    for holder in holders {
        let _ = holder.await;
    }
    let status_at = tally.status_at.lock().unwrap().clone();
    println!(
        "{}",
        serde_json::json!({ "ended_early": ended_early, "status_at": status_at })
    );
}
