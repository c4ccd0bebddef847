//! The freshness rule, and the only way past it.
//!
//! **Content** (a task's history, Q's status text, its artifacts) goes out only if Q confirmed
//! that the caller may see it now: the caller's access to the agent's workspace and, once the
//! task has a run, the caller's evidence grant on that run, each within the bound:
//!
//! - **1 s while the access feed is caught up and confirmed** (`auth.access_feed_trust_ms`, at
//!   most 1000): a cached answer serves while this replica's access follower read the whole
//!   feed (its position at the head) in a poll *sent* at most that long ago, and no change on
//!   the feed since the answer was fetched names it. A revocation Q committed before that poll
//!   was sent is in that poll's answer, so no revocation is served past the bound;
//! - **never more than 5 s otherwise** (`auth.access_direct_ttl_ms`, default 1000, at most
//!   5000): while the feed is behind, failing, stalled or has lost its place, a cached answer
//!   serves only if this replica fetched it from Q at most that long ago (fetches are timed from
//!   when they were sent); past that, Q is asked again;
//! - whatever the feed says, no cached answer is older than `auth.access_cache_max_age_ms`
//!   (default and at most 60 s), and an answer fetched before a change that names it never
//!   serves, whichever reached the cache first (`super::stamped`).
//!
//! When Q cannot confirm, the request fails closed (HTTP 503 / -32603) — except that an
//! operator may opt in to a short outage grace (`auth.outage_read_grace_seconds`, default 0, at
//! most 60): while Q is *down* for this replica (`crate::upstream::Reachability`) and was last
//! heard from within the grace, GetTask and ListTasks answer **content-free receipts** (id,
//! context, state and its timestamp) to a caller known from before the outage. Content never
//! goes out under the grace.
//!
//! The rule is enforced by a type: a [`Clearance`] is the only thing that lets content into an
//! answer (`crate::a2a::task_view::render` takes one; the stream's status and artifact frames
//! each take a new one), and only [`super::AccessCache`] makes one, under this rule. A method
//! that forgets to ask cannot put content in its answer.

/// Q's confirmation, within the freshness bound, that a caller may see one task's content now.
/// Made only by [`super::AccessCache::clearance`] and [`super::Clearances::of`], consumed by
/// whatever renders content; it is not kept: every answer and every content frame takes a new
/// one.
#[derive(Debug)]
pub struct Clearance {
    _confirmed: (),
}

impl Clearance {
    pub(super) fn confirmed() -> Clearance {
        Clearance { _confirmed: () }
    }

    /// A clearance for unit tests of what renders content (never compiled into the gateway).
    #[cfg(test)]
    pub(crate) fn for_unit_tests() -> Clearance {
        Clearance::confirmed()
    }
}
