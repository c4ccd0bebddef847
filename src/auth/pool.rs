//! The introspection pool: the introspections a replica runs at once, and who may hold them.
//!
//! | token | slots it may take |
//! |---|---|
//! | known: Q said it is active, on this replica, within `auth.known_token_seconds` | any free slot of the whole pool (`auth.max_introspections_in_flight`) |
//! | stranger: any other | a free slot of the whole pool, while strangers together hold fewer than `auth.stranger_introspections_in_flight` |
//!
//! A request with no slot is shed at once (HTTP 503 `identity_unavailable`, `Retry-After: 1`;
//! `a2a_introspections_shed_total{token}`): nothing queues, so nothing waits behind a flood.
//! The share is below the whole pool (configuration refuses otherwise), so made-up tokens, which
//! Q never calls active, can take at most the strangers' share, and the rest is always there for
//! known tokens: the requests of callers already served, and the re-checks of their open
//! streams and blocking sends, which ask Q again every half token bound. A per-flow cap rather
//! than a fair queue: it needs no queue, no per-caller state beyond the known set, and answers
//! a stranger at once.
//!
//! The known set holds sha256 hashes, never tokens, of at most [`KNOWN_TOKENS_CAPACITY`]
//! tokens (bounded by moka, whose TinyLFU admission keeps frequently seen tokens when it is
//! full); each is forgotten `auth.known_token_seconds` after its last active answer, or at once
//! when Q calls it inactive. A forgotten token is a stranger again until Q next calls it active.

use std::time::Duration;

use moka::sync::Cache;
use tokio::sync::{Semaphore, SemaphorePermit};

use super::TokenKey;

/// Most token hashes the known set holds (about 100 bytes each with the cache's overhead).
pub const KNOWN_TOKENS_CAPACITY: u64 = 100_000;

/// The pool's sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolBounds {
    /// Introspections in flight at once, all tokens together.
    pub max_in_flight: usize,
    /// Of those, at most this many for strangers.
    pub stranger_in_flight: usize,
    /// How long after its last active answer a token stays known.
    pub known_for: Duration,
}

/// Whether the replica knows a token (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    Known,
    Stranger,
}

impl Standing {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Standing::Known => "known",
            Standing::Stranger => "stranger",
        }
    }
}

/// A slot of the pool, held while one introspection runs.
pub(super) struct Slot<'a> {
    _pool: SemaphorePermit<'a>,
    _strangers: Option<SemaphorePermit<'a>>,
}

pub(super) struct IntrospectionPool {
    all: Semaphore,
    strangers: Semaphore,
    known: Cache<TokenKey, ()>,
}

impl IntrospectionPool {
    pub(super) fn new(bounds: PoolBounds) -> Self {
        let all = bounds.max_in_flight.max(1);
        IntrospectionPool {
            all: Semaphore::new(all),
            strangers: Semaphore::new(bounds.stranger_in_flight.clamp(1, all)),
            known: Cache::builder()
                .max_capacity(KNOWN_TOKENS_CAPACITY)
                .time_to_live(bounds.known_for)
                .build(),
        }
    }

    pub(super) fn standing(&self, key: &TokenKey) -> Standing {
        if self.known.contains_key(key) {
            Standing::Known
        } else {
            Standing::Stranger
        }
    }

    /// A slot for a token of `standing`, or `None` at once when its share is in use.
    pub(super) fn try_take(&self, standing: Standing) -> Option<Slot<'_>> {
        // The strangers' share first: a stranger refused there never holds a pool slot.
        let strangers = match standing {
            Standing::Known => None,
            Standing::Stranger => Some(self.strangers.try_acquire().ok()?),
        };
        Some(Slot {
            _pool: self.all.try_acquire().ok()?,
            _strangers: strangers,
        })
    }

    /// Q said the token is active: known for the next `known_for`.
    pub(super) fn active(&self, key: TokenKey) {
        self.known.insert(key, ());
    }

    /// Q said the token is inactive: a stranger from now on.
    pub(super) fn inactive(&self, key: &TokenKey) {
        self.known.invalidate(key);
    }
}
