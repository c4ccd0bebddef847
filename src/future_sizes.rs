//! The futures every request allocates stay small.
//!
//! axum boxes each handler's future and every request in flight holds one, sized for the
//! largest state it can ever be in: a rare step awaited inline (connecting to PostgreSQL when
//! the pool has no connection, an introspection when the token is not cached) made every
//! request carry it, also while it only waits for a pooled connection. Those steps are boxed
//! where they are awaited (`store::PgManager::create`, `auth::TokenCache::principal`). The
//! sizes are the same in the test build and the release build.

use std::mem::size_of;

use axum::http::HeaderMap;

use crate::auth::Authenticator;
use crate::store::PgPool;

/// The size of the future `f` returns, without calling it.
fn output_size<A, Fut>(_: impl FnOnce(A) -> Fut) -> usize {
    size_of::<Fut>()
}

fn output_size_2<A, B, Fut>(_: impl FnOnce(A, B) -> Fut) -> usize {
    size_of::<Fut>()
}

fn output_size_3<A, B, C, Fut>(_: impl FnOnce(A, B, C) -> Fut) -> usize {
    size_of::<Fut>()
}

#[test]
fn request_futures_do_not_carry_their_rare_steps() {
    let pool_get = output_size::<&'static PgPool, _>(PgPool::get);
    let authenticate =
        output_size_2::<&'static Authenticator, &'static HeaderMap, _>(Authenticator::authenticate);
    let rpc = output_size_3(crate::a2a::rpc::serve);
    let card = output_size_3(crate::a2a::card::serve);
    let sizes = format!(
        "PgPool::get {pool_get} B, Authenticator::authenticate {authenticate} B, \
         rpc::serve {rpc} B, card::serve {card} B"
    );
    // Before the boxes: 10,912, 13,920, 16,248 and 14,360 bytes.
    assert!(pool_get <= 2 * 1024, "{sizes}");
    assert!(authenticate <= 2 * 1024, "{sizes}");
    assert!(rpc <= 8 * 1024, "{sizes}");
    assert!(card <= 4 * 1024, "{sizes}");
}
