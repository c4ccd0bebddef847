//! What answers may hold while their clients do not take them.
//!
//! An answer handed to hyper stays in memory until its client takes it: over HTTP/1 until the
//! socket accepts it, over HTTP/2 until the stream's flow-control window lets it go. A client
//! can keep a window at 0 and open streams, so the write deadline on the socket
//! (`crate::http::write_deadline`) alone cannot see it. Two bounds close that:
//!
//! - **A budget of bytes.** Every answer's bytes count, from the moment the answer is handed
//!   to the connection until the client has taken them, against its connection's budget
//!   (`limits.response_buffer_bytes_per_connection`, 8 MiB) and the process's
//!   (`limits.response_buffer_bytes`, 64 MiB). An answer with a known size above
//!   [`ALWAYS_ADMITTED`] that does not fit either budget is refused at once with HTTP 503
//!   `response_buffer_full` and `Retry-After: 1` (the answer is dropped, nothing is kept);
//!   smaller answers (refusals, receipts) and stream frames always pass, and count.
//! - **Shares.** An answer to an authenticated caller also counts against its tenant's and its
//!   principal's share of the process budget (`limits.response_buffer_tenant_share`, 0.5, and
//!   `limits.response_buffer_principal_share`, 0.25): one principal's stalled readers hold at
//!   most a quarter of the process budget, one tenant's at most half, and the rest stays for
//!   everyone else. A refusal names the scope that was full (`connection`, `principal`,
//!   `tenant`, `process`) in `a2a_response_buffer_refusals_total{scope}`.
//! - **Reserved before built.** An answer whose size is large and not known before it is
//!   built (a ListTasks page, a GetTask with its artifact) first reserves its bytes
//!   ([`AnswerSpace::reserve`]) from a size known cheaply (stored byte counts, the stored
//!   message's length): the reservation is granted in full, cut to what is left of the scopes
//!   (a list page then holds fewer tasks), or refused with the same 503 before anything of the
//!   answer is allocated. The answer is then built within what was granted, and its
//!   reservation becomes its count when it is handed to the connection (whatever it did not
//!   use is given back then).
//! - **A deadline on progress.** An answer is cut into parts of at most [`CHUNK`] bytes, and
//!   hyper asks for the next part only once the previous one was sent (HTTP/2: within the
//!   stream's window; HTTP/1: into the socket). An answer whose next part hyper has not asked
//!   for within `limits.write_timeout_seconds` (a response whose first part the window never
//!   admits, an SSE frame the client does not read) closes its connection, and everything the
//!   connection held is freed.
//!
//! Why a body wrapper and not the socket: a flow-control stall is invisible to the socket
//! (nothing is written, nothing blocks), but visible to the body as not being polled. The
//! parts are slices of one buffer (no copy); the buffer is counted whole until the body ends.
//! What hyper still holds of a body after it ended (at most its last part) is not counted.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use hyper::body::{Body as _, Frame, SizeHint};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::error::HttpError;
use crate::http::around::Around;

mod shares;

use shares::Shares;
pub use shares::{charged_to, AnswerFor, AnswerSpace, Payer, Reservation, ShareFractions};

/// Largest part of an answer handed to hyper at once (the default HTTP/2 frame size).
pub const CHUNK: usize = 16 * 1024;
/// Answers up to this size are never refused (refusals and receipts must get out).
pub const ALWAYS_ADMITTED: usize = CHUNK;

/// A count of bytes against a limit.
#[derive(Debug)]
struct Tally {
    limit: usize,
    used: AtomicUsize,
}

impl Tally {
    fn new(limit: usize) -> Self {
        Tally {
            limit,
            used: AtomicUsize::new(0),
        }
    }

    /// Adds `n`; with `enforce`, only if the total stays within the limit.
    fn take(&self, n: usize, enforce: bool) -> bool {
        let before = self.used.fetch_add(n, Ordering::AcqRel);
        if enforce && before + n > self.limit {
            self.used.fetch_sub(n, Ordering::AcqRel);
            return false;
        }
        true
    }

    fn give_back(&self, n: usize) {
        self.used.fetch_sub(n, Ordering::AcqRel);
    }

    fn room(&self) -> usize {
        self.limit.saturating_sub(self.used.load(Ordering::Acquire))
    }
}

/// The process's budget and the size of each connection's; one per listener.
#[derive(Debug)]
pub struct ResponseBudget {
    process: Tally,
    per_connection: usize,
    tenants: Shares,
    principals: Shares,
    gauge: crate::metrics::BufferedGauge,
}

impl ResponseBudget {
    pub fn new(process: usize, per_connection: usize, shares: ShareFractions) -> Arc<Self> {
        let cap = |fraction: f64| (process as f64 * fraction) as usize;
        Arc::new(ResponseBudget {
            process: Tally::new(process),
            per_connection,
            tenants: Shares::new("tenant", cap(shares.tenant)),
            principals: Shares::new("principal", cap(shares.principal)),
            gauge: Default::default(),
        })
    }

    /// Bytes counted right now, all connections together.
    pub fn buffered(&self) -> usize {
        self.process.used.load(Ordering::Acquire)
    }
}

/// One connection's count, and the answers on it that wait for their client.
#[derive(Debug)]
pub struct ConnectionLedger {
    budget: Arc<ResponseBudget>,
    connection: Tally,
    /// Answers whose next part hyper has not asked for yet, with since when.
    waiting: Mutex<HashMap<u64, Instant>>,
    next_id: AtomicU64,
    /// Told when an answer starts waiting on an otherwise idle connection.
    changed: Notify,
}

impl ConnectionLedger {
    pub fn new(budget: Arc<ResponseBudget>) -> Arc<Self> {
        let per_connection = budget.per_connection;
        Arc::new(ConnectionLedger {
            budget,
            connection: Tally::new(per_connection),
            waiting: Mutex::default(),
            next_id: AtomicU64::new(0),
            changed: Notify::new(),
        })
    }

    /// Counts `n` bytes; with `enforce`, only if every scope has room (else which one was
    /// full): the connection, the payer's principal and tenant shares, the process.
    fn take(&self, n: usize, enforce: bool, payer: Option<&Payer>) -> Result<(), &'static str> {
        if n == 0 {
            return Ok(());
        }
        if !self.connection.take(n, enforce) {
            return Err("connection");
        }
        let budget = &self.budget;
        if let Some(payer) = payer {
            if !budget.principals.take(&payer.principal, n, enforce) {
                self.connection.give_back(n);
                return Err(budget.principals.scope);
            }
            if !budget.tenants.take(&payer.tenant, n, enforce) {
                budget.principals.give_back(&payer.principal, n);
                self.connection.give_back(n);
                return Err(budget.tenants.scope);
            }
        }
        if !budget.process.take(n, enforce) {
            self.give_back_shares(n, payer);
            self.connection.give_back(n);
            return Err("process");
        }
        budget.gauge.get().increment(n as f64);
        Ok(())
    }

    fn give_back_shares(&self, n: usize, payer: Option<&Payer>) {
        if let Some(payer) = payer {
            self.budget.principals.give_back(&payer.principal, n);
            self.budget.tenants.give_back(&payer.tenant, n);
        }
    }

    fn give_back(&self, n: usize, payer: Option<&Payer>) {
        if n == 0 {
            return;
        }
        self.connection.give_back(n);
        self.give_back_shares(n, payer);
        self.budget.process.give_back(n);
        self.budget.gauge.get().decrement(n as f64);
    }

    /// What is left for `payer` in the scope with the least room, and that scope.
    fn room(&self, payer: &Payer) -> (usize, &'static str) {
        let budget = &self.budget;
        [
            (self.connection.room(), "connection"),
            (
                budget.principals.room(&payer.principal),
                budget.principals.scope,
            ),
            (budget.tenants.room(&payer.tenant), budget.tenants.scope),
            (budget.process.room(), "process"),
        ]
        .into_iter()
        .min_by_key(|(room, _)| *room)
        .unwrap_or((0, "process"))
    }

    /// Reserves up to `want` bytes more for `payer`'s answer, which holds `already` reserved,
    /// at least `at_least`: what the scopes have left, or which scope refused. An answer of at
    /// most [`ALWAYS_ADMITTED`] in all is always granted, and counts.
    fn reserve(
        self: &Arc<Self>,
        payer: &Payer,
        already: usize,
        want: usize,
        at_least: usize,
    ) -> Result<Reservation, &'static str> {
        let grant = if already + want <= ALWAYS_ADMITTED {
            self.take(want, false, Some(payer))?;
            want
        } else {
            let (room, scope) = self.room(payer);
            let grant = want.min(room);
            if grant < at_least.min(want).max(1) {
                return Err(scope);
            }
            // Another answer may have taken the room meanwhile: then this is refused too.
            self.take(grant, true, Some(payer))?;
            grant
        };
        Ok(Reservation {
            ledger: self.clone(),
            payer: payer.clone(),
            bytes: grant,
        })
    }

    fn wait_starts(&self, id: u64) {
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        let was_empty = waiting.is_empty();
        waiting.insert(id, Instant::now());
        if was_empty {
            self.changed.notify_one();
        }
    }

    fn wait_ends(&self, id: u64) {
        self.waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
    }

    fn oldest_wait(&self) -> Option<Instant> {
        let waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        waiting.values().min().copied()
    }

    /// Resolves once an answer on this connection has waited `limit` for its client.
    pub async fn stalled(&self, limit: Duration) {
        loop {
            let changed = self.changed.notified();
            match self.oldest_wait() {
                Some(since) if since.elapsed() >= limit => return,
                Some(since) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(since + limit) => {}
                        () = changed => {}
                    }
                }
                None => changed.await,
            }
        }
    }

    /// Admits an answer of `size` bytes (`None`: a stream of unknown length) for `payer`, or
    /// says which budget refused it. An answer built within a reservation is admitted on it:
    /// what it did not use is given back, and what it holds beyond it (the JSON-RPC envelope
    /// around a result built within its grant) counts without being refused.
    fn admit(
        self: &Arc<Self>,
        size: Option<u64>,
        payer: Option<Payer>,
        reservation: Option<Reservation>,
    ) -> Result<Ticket, &'static str> {
        let prepaid = size.map_or(0, |n| usize::try_from(n).unwrap_or(usize::MAX));
        let payer = payer.or_else(|| reservation.as_ref().map(|r| r.payer.clone()));
        let reserved = match reservation {
            Some(reservation) if Arc::ptr_eq(&reservation.ledger, self) => reservation.spend(),
            // Reserved on another connection's ledger (never by the routes): given back.
            _ => 0,
        };
        if prepaid >= reserved {
            let enforce = reserved == 0 && prepaid > ALWAYS_ADMITTED;
            if let Err(scope) = self.take(prepaid - reserved, enforce, payer.as_ref()) {
                self.give_back(reserved, payer.as_ref());
                return Err(scope);
            }
        } else {
            self.give_back(reserved - prepaid, payer.as_ref());
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        // Handed over: the answer waits for hyper to take its first part.
        self.wait_starts(id);
        Ok(Ticket {
            ledger: self.clone(),
            payer,
            id,
            prepaid,
        })
    }
}

/// An admitted answer's place in its connection's ledger.
#[derive(Debug)]
struct Ticket {
    ledger: Arc<ConnectionLedger>,
    payer: Option<Payer>,
    id: u64,
    /// Counted at admission and not yet pulled from the body.
    prepaid: usize,
}

/// Middleware: admits every answer against its connection's ledger (which the server puts in
/// the request's extensions) and wraps its body; refuses a large one that does not fit. Run by
/// [`crate::http::around::AroundLayer`].
#[derive(Clone, Copy, Default)]
pub struct AdmitAnswers;

impl Around for AdmitAnswers {
    type Kept = Option<Arc<ConnectionLedger>>;

    fn before(&self, request: &mut Request) -> Self::Kept {
        request.extensions().get::<Arc<ConnectionLedger>>().cloned()
    }

    fn after(&self, ledger: Self::Kept, mut response: Response) -> Response {
        let answer_for = response.extensions_mut().remove::<AnswerFor>();
        let Some(ledger) = ledger else {
            return response;
        };
        let (payer, reservation) = match answer_for {
            Some(AnswerFor { payer, reservation }) => {
                let reserved = reservation.lock().unwrap_or_else(|e| e.into_inner()).take();
                (Some(payer), reserved)
            }
            None => (None, None),
        };
        match ledger.admit(response.body().size_hint().exact(), payer, reservation) {
            Ok(ticket) => response.map(|body| Body::new(Budgeted::new(body, ticket))),
            Err(scope) => {
                crate::metrics::response_buffer_refused(scope);
                tracing::debug!(scope, "answer refused: its response buffer budget is full");
                HttpError::ResponseBufferFull { scope }.into_response()
            }
        }
    }
}

/// An answer's body, handed out in parts, counted until it ends.
#[derive(Debug)]
struct Budgeted {
    inner: Body,
    ticket: Ticket,
    /// Pulled from `inner` and counted, until hyper asks for more after its last part.
    held: usize,
    /// What is left of the frame being handed out.
    rest: Bytes,
    /// A part was handed out and hyper has not asked for the next one yet.
    handed: bool,
}

impl Budgeted {
    fn new(inner: Body, ticket: Ticket) -> Self {
        Budgeted {
            inner,
            ticket,
            held: 0,
            rest: Bytes::new(),
            handed: false,
        }
    }

    fn hand_out(&mut self) -> Frame<Bytes> {
        let n = self.rest.len().min(CHUNK);
        self.handed = true;
        self.ticket.ledger.wait_starts(self.ticket.id);
        Frame::data(self.rest.split_to(n))
    }
}

impl hyper::body::Body for Budgeted {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        // Asked again: the part handed out before was taken.
        this.handed = false;
        this.ticket.ledger.wait_ends(this.ticket.id);
        if !this.rest.is_empty() {
            return Poll::Ready(Some(Ok(this.hand_out())));
        }
        let ticket = &mut this.ticket;
        ticket
            .ledger
            .give_back(std::mem::take(&mut this.held), ticket.payer.as_ref());
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) if !data.is_empty() => {
                    let n = data.len();
                    let prepaid = n.min(this.ticket.prepaid);
                    this.ticket.prepaid -= prepaid;
                    // A stream's frames are never refused: their producer is bounded already.
                    let _ = this
                        .ticket
                        .ledger
                        .take(n - prepaid, false, this.ticket.payer.as_ref());
                    this.held = n;
                    this.rest = data;
                    Poll::Ready(Some(Ok(this.hand_out())))
                }
                Ok(empty) => Poll::Ready(Some(Ok(Frame::data(empty)))),
                Err(other) => Poll::Ready(Some(Ok(other))),
            },
            Poll::Ready(None) => {
                let ticket = &mut this.ticket;
                ticket
                    .ledger
                    .give_back(std::mem::take(&mut ticket.prepaid), ticket.payer.as_ref());
                Poll::Ready(None)
            }
            other => other,
        }
    }

    /// Never true right after a part was handed out: hyper then asks once more (and gets the
    /// end) only when the client took that part, so a last part the client never takes still
    /// counts as waiting.
    fn is_end_stream(&self) -> bool {
        !self.handed && self.rest.is_empty() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let inner = self.inner.size_hint();
        let rest = self.rest.len() as u64;
        let mut hint = SizeHint::new();
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper + rest);
        }
        hint.set_lower(inner.lower() + rest);
        hint
    }
}

impl Drop for Budgeted {
    fn drop(&mut self) {
        let ledger = &self.ticket.ledger;
        ledger.wait_ends(self.ticket.id);
        ledger.give_back(self.held + self.ticket.prepaid, self.ticket.payer.as_ref());
    }
}

#[cfg(test)]
mod tests;
