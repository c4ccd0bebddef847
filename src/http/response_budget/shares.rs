//! Who pays for an answer and what it holds before it is built: the caller an answer counts
//! against ([`Payer`]), each tenant's and principal's share of the process budget
//! ([`Shares`], [`ShareFractions`]), and the bytes a request reserves for its answer before
//! building it ([`AnswerSpace`], [`Reservation`]), handed to the answer in its extensions
//! ([`AnswerFor`]). The ledger that counts them is the parent module's.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::response::Response;

use super::ConnectionLedger;
use crate::error::HttpError;

/// Who an answer is for: the tenant and the principal whose shares it counts against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Payer {
    pub(super) tenant: Arc<str>,
    /// The principal within its tenant (`tenant` NUL `principal`).
    pub(super) principal: Arc<str>,
}

impl Payer {
    pub fn new(tenant_id: &str, principal_id: &str) -> Self {
        Payer {
            tenant: Arc::from(tenant_id),
            principal: Arc::from(format!("{tenant_id}\0{principal_id}")),
        }
    }
}

/// The bytes counted for each key of one scope, against one cap; a key's entry lives while it
/// counts anything.
#[derive(Debug)]
pub(super) struct Shares {
    pub(super) scope: &'static str,
    cap: usize,
    used: Mutex<HashMap<Arc<str>, usize>>,
}

impl Shares {
    pub(super) fn new(scope: &'static str, cap: usize) -> Self {
        Shares {
            scope,
            cap,
            used: Mutex::default(),
        }
    }

    pub(super) fn map(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, usize>> {
        self.used.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn take(&self, key: &Arc<str>, n: usize, enforce: bool) -> bool {
        let mut map = self.map();
        let used = map.get(key).copied().unwrap_or(0);
        if enforce && used + n > self.cap {
            return false;
        }
        map.insert(key.clone(), used + n);
        true
    }

    pub(super) fn give_back(&self, key: &Arc<str>, n: usize) {
        let mut map = self.map();
        if let Some(used) = map.get_mut(key) {
            *used = used.saturating_sub(n);
            if *used == 0 {
                map.remove(key);
            }
        }
    }

    pub(super) fn room(&self, key: &Arc<str>) -> usize {
        self.cap
            .saturating_sub(self.map().get(key).copied().unwrap_or(0))
    }
}

/// The tenant's and the principal's share of the process budget, as fractions of it.
#[derive(Debug, Clone, Copy)]
pub struct ShareFractions {
    pub tenant: f64,
    pub principal: f64,
}

impl ShareFractions {
    /// No shares: every caller may use the whole process budget.
    pub const WHOLE: ShareFractions = ShareFractions {
        tenant: 1.0,
        principal: 1.0,
    };
}

/// Bytes reserved for an answer not built yet; given back when dropped unspent.
#[derive(Debug)]
pub struct Reservation {
    pub(super) ledger: Arc<ConnectionLedger>,
    pub(super) payer: Payer,
    pub(super) bytes: usize,
}

impl Reservation {
    /// The bytes reserved, now counted by whoever spends them.
    pub(super) fn spend(mut self) -> usize {
        std::mem::take(&mut self.bytes)
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.ledger.give_back(self.bytes, Some(&self.payer));
    }
}

/// One request's room for its answer: who pays, on which connection, and what it reserved.
/// A method that builds a large answer reserves its bytes here first ([`Self::reserve`]); the
/// route hands the reservation to the answer ([`Self::into_extension`]).
#[derive(Debug)]
pub struct AnswerSpace {
    ledger: Option<Arc<ConnectionLedger>>,
    payer: Payer,
    reserved: Mutex<Option<Reservation>>,
}

impl AnswerSpace {
    pub fn new(ledger: Option<Arc<ConnectionLedger>>, payer: Payer) -> Self {
        AnswerSpace {
            ledger,
            payer,
            reserved: Mutex::default(),
        }
    }

    /// Reserves up to `want` bytes more for this request's answer, at least `at_least`, and
    /// says how many were granted; refuses with HTTP 503 `response_buffer_full` (counted as
    /// `a2a_response_buffer_refusals_total{scope}`) when not even `at_least` is left. Without
    /// a connection (a call from within the process), everything asked is granted.
    pub fn reserve(&self, want: usize, at_least: usize) -> Result<usize, HttpError> {
        self.grant(want, at_least).map_err(|scope| {
            crate::metrics::response_buffer_refused(scope);
            tracing::debug!(
                scope,
                "answer refused before it was built: its response buffer share is full"
            );
            HttpError::ResponseBufferFull { scope }
        })
    }

    /// `n` bytes more for an answer that can do without them (a list page that then ends
    /// sooner): whether they were granted. A refusal here refuses no answer, and is not
    /// counted.
    pub fn top_up(&self, n: usize) -> bool {
        self.grant(n, n).is_ok()
    }

    fn grant(&self, want: usize, at_least: usize) -> Result<usize, &'static str> {
        let Some(ledger) = &self.ledger else {
            return Ok(want);
        };
        let mut reserved = self.reserved.lock().unwrap_or_else(|e| e.into_inner());
        let already = reserved.as_ref().map_or(0, |held| held.bytes);
        let more = ledger.reserve(&self.payer, already, want, at_least)?;
        let granted = more.bytes;
        match reserved.as_mut() {
            Some(held) => held.bytes += more.spend(),
            None => *reserved = Some(more),
        }
        Ok(granted)
    }

    /// What the answer carries to [`AdmitAnswers`]: its payer and its reservation.
    pub fn into_extension(self) -> AnswerFor {
        let reserved = self
            .reserved
            .into_inner()
            .unwrap_or_else(|e| e.into_inner());
        AnswerFor {
            payer: self.payer,
            reservation: Arc::new(Mutex::new(reserved)),
        }
    }
}

/// `response` counted, once handed to its connection, against the shares of `tenant_id`'s
/// principal `principal_id` (for routes whose answers are built without a reservation: the
/// outbound registrations and delegations, bounded by their own limits).
pub fn charged_to(mut response: Response, tenant_id: &str, principal_id: &str) -> Response {
    let space = AnswerSpace::new(None, Payer::new(tenant_id, principal_id));
    response.extensions_mut().insert(space.into_extension());
    response
}

/// In an answer's extensions: who it is for, and the bytes reserved for it.
#[derive(Debug, Clone)]
pub struct AnswerFor {
    pub(super) payer: Payer,
    pub(super) reservation: Arc<Mutex<Option<Reservation>>>,
}
