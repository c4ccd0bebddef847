//! What a failed store call says about its connection, whether its statement may have
//! committed, and the words it is logged and counted with.
//!
//! | failure | what PostgreSQL or the socket said | the connection | committed? |
//! |---|---|---|---|
//! | [`Failure::WrongServer`] | SQLSTATE 25006 (read-only transaction: a standby, a demoted primary, `default_transaction_read_only`), 57P03 (cannot connect now), "the database system is in recovery" | discarded, and every connection made before it | no: the server refused before doing anything |
//! | [`Failure::Lost`] | 57P01 / 57P02 (the server is shutting down), class 08 (connection exception), the socket broke or the answer deadline passed | discarded | maybe: a commit can be cut off waiting for its standby |
//! | [`Failure::NoConnection`] | no pooled connection within the acquire timeout, no host that accepts writes, or the caller's share of the pool in use for the acquire timeout (`super::share`) | none was lent | no: nothing was sent |
//! | [`Failure::Statement`] | anything else: a constraint, the statement's own timeout, a row the store cannot read | kept | no |
//!
//! How the pool acts on each (discard, repeat once) is [`super::pool`]'s; the descriptions
//! here carry the SQLSTATE and the server's message, never a statement's parameters (the
//! server's `DETAIL`, which can quote a row's values, is left out) and never the URL.

use std::error::Error as _;

use super::{ConnectError, StoreError};

/// How a store call failed, as far as its connection is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The connection is on a server that does not take writes: nothing was done.
    WrongServer,
    /// The connection ended under the call: what it sent may or may not have committed.
    Lost,
    /// No connection was lent: nothing was sent.
    NoConnection,
    /// The statement failed on a healthy connection.
    Statement,
}

/// SQLSTATEs that mean the server refused because of what it is now, not what was asked.
const WRONG_SERVER: &[&str] = &["25006", "57P03"];
/// SQLSTATEs that end the session: the server is shutting down or crashed.
const SESSION_ENDED: &[&str] = &["57P01", "57P02"];

impl Failure {
    pub fn of(e: &StoreError) -> Failure {
        match e {
            StoreError::Db(e) => Failure::of_db(e),
            StoreError::ReadOnly => Failure::WrongServer,
            StoreError::Pool(_)
            | StoreError::AcquireTimeout(_)
            | StoreError::ShareExhausted(..) => Failure::NoConnection,
            StoreError::Setup(_) | StoreError::Corrupt(_) | StoreError::TaskGone => {
                Failure::Statement
            }
        }
    }

    pub fn of_db(e: &tokio_postgres::Error) -> Failure {
        if let Some(db) = e.as_db_error() {
            let code = db.code().code();
            return if WRONG_SERVER.contains(&code) || db.message().contains("in recovery") {
                Failure::WrongServer
            } else if SESSION_ENDED.contains(&code) || code.starts_with("08") {
                Failure::Lost
            } else {
                Failure::Statement
            };
        }
        let io = e
            .source()
            .and_then(|s| s.downcast_ref::<std::io::Error>())
            .is_some();
        if e.is_closed() || io {
            Failure::Lost
        } else {
            Failure::Statement
        }
    }

    /// Whether the connection must leave the pool.
    pub fn discards(self) -> bool {
        matches!(self, Failure::WrongServer | Failure::Lost)
    }
}

/// A database error in words: `SQLSTATE 25006: cannot execute INSERT in a read-only
/// transaction` for the server's errors (its `DETAIL` and `HINT` left out: they may quote
/// values), the error and its causes otherwise (`connection closed`).
pub fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("SQLSTATE {}: {}", db.code().code(), db.message()),
        None => crate::upstream::error_chain(e),
    }
}

/// The label of `a2a_store_errors_total`: the SQLSTATE's class (its first two characters,
/// e.g. `25` invalid transaction state, `57` operator intervention, `08` connection
/// exception, `23` integrity constraint), or `connection` (the socket broke or closed),
/// `connect` (no host took a connection), `acquire_timeout`, `other`.
pub fn class(e: &StoreError) -> String {
    match e {
        StoreError::Db(e) => match e.code() {
            Some(code) => code.code().get(..2).unwrap_or("other").to_string(),
            None if Failure::of_db(e) == Failure::Lost => "connection".into(),
            None => "other".into(),
        },
        StoreError::Pool(deadpool::managed::PoolError::Backend(ConnectError::Db(e))) => {
            match e.code() {
                Some(code) => code.code().get(..2).unwrap_or("other").to_string(),
                None => "connect".into(),
            }
        }
        StoreError::Pool(_) => "connect".into(),
        StoreError::AcquireTimeout(_) => "acquire_timeout".into(),
        // Counted by `a2a_store_share_refusals_total{scope}`, never as a store call.
        StoreError::ShareExhausted(..) => "share".into(),
        // What SQLSTATE 25006 would say: the server's read-only state, seen by asking it.
        StoreError::ReadOnly => "25".into(),
        StoreError::Setup(_) | StoreError::Corrupt(_) | StoreError::TaskGone => "other".into(),
    }
}

/// Whether the caller may simply send the same request again: the store could not be
/// reached, or its server is not the writable primary right now (a failover, a restart).
pub fn unavailable(e: &StoreError) -> bool {
    match e {
        StoreError::Pool(_)
        | StoreError::AcquireTimeout(_)
        | StoreError::ShareExhausted(..)
        | StoreError::ReadOnly => true,
        StoreError::Db(_) => matches!(Failure::of(e), Failure::WrongServer | Failure::Lost),
        StoreError::Setup(_) | StoreError::Corrupt(_) | StoreError::TaskGone => false,
    }
}
