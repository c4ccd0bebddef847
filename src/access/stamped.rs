//! Cached access answers that cannot outlive a change they raced, and invalidation without a
//! scan.
//!
//! Every fetch from Q and every applied change takes a number from one counter (a *stamp*),
//! so the two are totally ordered. An entry keeps the stamp its fetch took *before* asking Q;
//! a change leaves its stamp on what it names (a [`Mark`]: a principal, an agent, a run's grant
//! for a principal), and forgetting everything leaves a stamp for every entry. An entry is
//! valid only while no mark it falls under, and no forget, is newer than its own stamp. So:
//!
//! - a fill that raced a change cannot survive it, whatever the order of the insert and the
//!   change: the change's stamp is newer than the fill's, and the entry is invalid from the
//!   moment the mark is set (no check-then-insert window);
//! - invalidation is one insert of a mark (by principal, by tenant + agent, by run + principal),
//!   never a scan of the cache, so a membership change costs the same with a million entries;
//! - marks expire with the entries' hard time-to-live (an entry older than that is gone
//!   anyway). A mark pushed out by the marks' own capacity would let older entries stand
//!   again, so such an eviction forgets everything instead.
//!
//! Marks are kept by a keyed hash of what they name: two names that collide only make an entry
//! look invalid (a needless question to Q), never make one look valid.

use std::borrow::Borrow;
use std::cell::RefCell;
use std::fmt::Write;
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use moka::notification::RemovalCause;
use moka::sync::Cache;

/// Bytes an entry of typical size takes: cache capacities are counted in such entries, and a
/// larger entry counts for more.
pub const TYPICAL_ENTRY_BYTES: u64 = 256;

/// What an access change names, and what an entry falls under.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum Mark<'a> {
    /// Every agent access answer of a principal (a membership change).
    Principal(&'a str),
    /// Every principal's access to one agent of a tenant (an agent change).
    Agent(&'a str, &'a str),
    /// One principal's evidence grant on one run.
    Grant(&'a str, &'a str),
}

/// When a fetch started, in both clocks: the stamp orders it against changes, the instant
/// ages it.
#[derive(Debug, Clone, Copy)]
pub struct Stamp {
    seq: u64,
    at: Instant,
}

/// The stamps of changes, and of the last forget.
pub struct Invalidations {
    /// The next stamp; starts at 1, so 0 means "never".
    next: Arc<AtomicU64>,
    forgotten: Arc<AtomicU64>,
    /// Mark hash → stamp of its newest change.
    marks: Cache<u64, u64>,
    hasher: std::collections::hash_map::RandomState,
}

impl Stamp {
    /// When the fetch this stamp dates was sent.
    pub fn at(&self) -> Instant {
        self.at
    }
}

impl Invalidations {
    /// Marks live for `max_age` (the entries' hard time-to-live); at most `capacity` of them.
    pub fn new(max_age: Duration, capacity: u64) -> Self {
        let next = Arc::new(AtomicU64::new(1));
        let forgotten = Arc::new(AtomicU64::new(0));
        let (evict_next, evict_forgotten) = (next.clone(), forgotten.clone());
        let marks = Cache::builder()
            .max_capacity(capacity.max(1))
            .time_to_live(max_age)
            .eviction_listener(move |_, _, cause| {
                if cause == RemovalCause::Size {
                    // A change's mark is gone before its time: forget everything rather than
                    // let an entry it invalidated stand again.
                    let stamp = evict_next.fetch_add(1, Ordering::AcqRel);
                    evict_forgotten.fetch_max(stamp, Ordering::AcqRel);
                }
            })
            .build();
        Invalidations {
            next,
            forgotten,
            marks,
            hasher: Default::default(),
        }
    }

    fn take(&self) -> u64 {
        self.next.fetch_add(1, Ordering::AcqRel)
    }

    fn key(&self, mark: &Mark<'_>) -> u64 {
        self.hasher.hash_one(mark)
    }

    /// The stamp of a fetch about to ask Q.
    pub fn begin(&self) -> Stamp {
        Stamp {
            seq: self.take(),
            at: Instant::now(),
        }
    }

    /// A change of what `mark` names: every entry under it fetched before now is invalid.
    pub fn mark(&self, mark: Mark<'_>) {
        let stamp = self.take();
        self.marks.insert(self.key(&mark), stamp);
    }

    /// Every entry fetched before now is invalid.
    pub fn forget_all(&self) {
        let stamp = self.take();
        self.forgotten.fetch_max(stamp, Ordering::AcqRel);
    }

    /// Whether an entry fetched at `stamp`, falling under `marks`, was invalidated since.
    fn valid(&self, stamp: &Stamp, marks: &[Mark<'_>]) -> bool {
        stamp.seq > self.forgotten.load(Ordering::Acquire)
            && marks.iter().all(|mark| {
                self.marks
                    .get(&self.key(mark))
                    .is_none_or(|changed| changed < stamp.seq)
            })
    }
}

/// A cache whose entries carry the stamp of their fetch.
pub struct Stamped<K, V> {
    entries: Cache<K, (V, Stamp)>,
}

/// A cache key made of several names (tenant, agent, principal; run, principal) as one
/// string: each name but the last prefixed by its length, so no two lists of names share a
/// key. Borrowed as that string, so a lookup needs no key of its own
/// ([`Key::lookup`]); only an insert allocates one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key(Box<str>);

impl Borrow<str> for Key {
    fn borrow(&self) -> &str {
        &self.0
    }
}

thread_local! {
    /// Where lookups write their key: one buffer per thread, reused.
    static LOOKUP: RefCell<String> = const { RefCell::new(String::new()) };
}

impl Key {
    pub fn new(names: &[&str]) -> Key {
        let mut key = String::new();
        Self::write(&mut key, names);
        Key(key.into_boxed_str())
    }

    /// Runs `f` with the key of `names`, written into this thread's lookup buffer.
    pub fn lookup<R>(names: &[&str], f: impl FnOnce(&str) -> R) -> R {
        LOOKUP.with(|buffer| match buffer.try_borrow_mut() {
            Ok(mut key) => {
                Self::write(&mut key, names);
                f(&key)
            }
            // Only if `f` looked up another key through here: never the case, but not a panic.
            Err(_) => f(&Key::new(names).0),
        })
    }

    fn write(out: &mut String, names: &[&str]) {
        out.clear();
        if let Some((last, before)) = names.split_last() {
            for name in before {
                let _ = write!(out, "{}:", name.len());
                out.push_str(name);
            }
            out.push_str(last);
        }
    }

    /// Bytes the key takes.
    pub fn len(&self) -> usize {
        self.0.len()
    }
}

/// How fresh a cached answer must be to serve.
#[derive(Debug, Clone, Copy)]
pub enum Freshness {
    /// Any valid entry (its age is bounded by the hard time-to-live alone): the access feed
    /// vouches for every entry it has not invalidated.
    Vouched,
    /// A valid entry fetched at most this long ago: nothing vouches for it beyond Q's own
    /// answer.
    FetchedWithin(Duration),
}

impl<K, V> Stamped<K, V>
where
    K: Hash + Eq + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// At most `capacity` entries of typical size (weighed by `bytes`), none older than
    /// `max_age`.
    pub fn new(capacity: u64, max_age: Duration, bytes: fn(&K, &V) -> usize) -> Self {
        Stamped {
            entries: Cache::builder()
                .max_capacity(capacity.max(1).saturating_mul(TYPICAL_ENTRY_BYTES))
                .weigher(move |k, (v, _)| u32::try_from(bytes(k, v)).unwrap_or(u32::MAX))
                .time_to_live(max_age)
                .build(),
        }
    }

    /// The cached answer for `key` if valid and as fresh as `freshness` asks.
    pub fn get<Q: Hash + Eq + ?Sized>(
        &self,
        key: &Q,
        marks: &[Mark<'_>],
        invalidations: &Invalidations,
        freshness: Freshness,
    ) -> Option<V>
    where
        K: Borrow<Q>,
    {
        self.get_dated(key, marks, invalidations, freshness)
            .map(|(value, _)| value)
    }

    /// [`Stamped::get`], with when the answer's fetch was sent.
    pub fn get_dated<Q: Hash + Eq + ?Sized>(
        &self,
        key: &Q,
        marks: &[Mark<'_>],
        invalidations: &Invalidations,
        freshness: Freshness,
    ) -> Option<(V, Instant)>
    where
        K: Borrow<Q>,
    {
        let (value, stamp) = self.entries.get(key)?;
        let fresh = match freshness {
            Freshness::Vouched => true,
            Freshness::FetchedWithin(ttl) => stamp.at.elapsed() <= ttl,
        };
        (fresh && invalidations.valid(&stamp, marks)).then_some((value, stamp.at))
    }

    /// Keeps Q's answer, fetched at `stamp`.
    pub fn insert(&self, key: K, value: V, stamp: Stamp) {
        self.entries.insert(key, (value, stamp));
    }

    /// Drops every entry (the memory; validity is the marks' business).
    pub fn clear(&self) {
        self.entries.invalidate_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Cache = Stamped<(String, String), bool>;

    fn caches() -> (Cache, Invalidations) {
        (
            Stamped::new(100, Duration::from_secs(60), |_, _| 64),
            Invalidations::new(Duration::from_secs(60), 100),
        )
    }

    fn key(run: &str, principal: &str) -> (String, String) {
        (run.into(), principal.into())
    }

    /// Names that run together differently never share a key, and a lookup finds what an
    /// insert of the same names put.
    #[test]
    fn keys_tell_their_names_apart_and_lookups_need_no_key_of_their_own() {
        let key = |names: &[&str]| Key::new(names);
        assert_ne!(key(&["ab", "c"]), key(&["a", "bc"]));
        assert_ne!(key(&["t", "1:a", "p"]), key(&["t1", "a", "p"]));
        assert_ne!(key(&["", "ab"]), key(&["ab", ""]));
        assert_eq!(key(&["t", "a", "p"]), key(&["t", "a", "p"]));

        let cache: Stamped<Key, u32> = Stamped::new(100, Duration::from_secs(60), |_, _| 64);
        let inv = Invalidations::new(Duration::from_secs(60), 100);
        cache.insert(key(&["t1", "ag", "alice"]), 7, inv.begin());
        let found =
            |names: &[&str]| Key::lookup(names, |k| cache.get(k, &[], &inv, Freshness::Vouched));
        assert_eq!(found(&["t1", "ag", "alice"]), Some(7));
        assert_eq!(found(&["t1a", "g", "alice"]), None);
        assert_eq!(found(&["t1", "ag", "alic"]), None);
    }

    #[test]
    fn a_fill_that_raced_a_change_cannot_survive_it() {
        let (cache, inv) = caches();
        let marks = [Mark::Grant("run-1", "alice")];
        // The fill asks Q, Q answers "granted", the revocation is applied, then the fill
        // inserts its (older) answer.
        let stamp = inv.begin();
        inv.mark(Mark::Grant("run-1", "alice"));
        cache.insert(key("run-1", "alice"), true, stamp);
        assert_eq!(
            cache.get(&key("run-1", "alice"), &marks, &inv, Freshness::Vouched),
            None
        );
        // Inserted first, revoked after: the same.
        let stamp = inv.begin();
        cache.insert(key("run-1", "alice"), true, stamp);
        assert_eq!(
            cache.get(&key("run-1", "alice"), &marks, &inv, Freshness::Vouched),
            Some(true)
        );
        inv.mark(Mark::Grant("run-1", "alice"));
        assert_eq!(
            cache.get(&key("run-1", "alice"), &marks, &inv, Freshness::Vouched),
            None
        );
        // A fill that starts after the change stands.
        let stamp = inv.begin();
        cache.insert(key("run-1", "alice"), false, stamp);
        assert_eq!(
            cache.get(&key("run-1", "alice"), &marks, &inv, Freshness::Vouched),
            Some(false)
        );
    }

    #[test]
    fn a_mark_invalidates_only_what_falls_under_it_and_forget_all_everything() {
        let (cache, inv) = caches();
        for (run, principal) in [("run-1", "alice"), ("run-1", "bob"), ("run-2", "alice")] {
            cache.insert(key(run, principal), true, inv.begin());
        }
        inv.mark(Mark::Grant("run-1", "bob"));
        let get = |run, principal| {
            cache.get(
                &key(run, principal),
                &[Mark::Grant(run, principal)],
                &inv,
                Freshness::Vouched,
            )
        };
        assert_eq!(get("run-1", "alice"), Some(true));
        assert_eq!(get("run-1", "bob"), None);
        assert_eq!(get("run-2", "alice"), Some(true));
        inv.forget_all();
        assert_eq!(get("run-1", "alice"), None);
        assert_eq!(get("run-2", "alice"), None);
    }

    #[test]
    fn without_the_feed_an_entry_serves_only_within_its_fetch_age() {
        let (cache, inv) = caches();
        cache.insert(key("run-1", "alice"), true, inv.begin());
        let marks = [Mark::Grant("run-1", "alice")];
        let within = |ms| Freshness::FetchedWithin(Duration::from_millis(ms));
        assert_eq!(
            cache.get(&key("run-1", "alice"), &marks, &inv, within(1_000)),
            Some(true)
        );
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(
            cache.get(&key("run-1", "alice"), &marks, &inv, within(10)),
            None
        );
        assert_eq!(
            cache.get(&key("run-1", "alice"), &marks, &inv, Freshness::Vouched),
            Some(true)
        );
    }

    #[test]
    fn a_mark_evicted_for_room_forgets_everything() {
        let cache: Cache = Stamped::new(100, Duration::from_secs(60), |_, _| 64);
        let inv = Invalidations::new(Duration::from_secs(60), 2);
        cache.insert(key("run-1", "alice"), true, inv.begin());
        for i in 0..50 {
            inv.mark(Mark::Grant("other", &format!("p-{i}")));
            inv.marks.run_pending_tasks();
        }
        assert_eq!(
            cache.get(
                &key("run-1", "alice"),
                &[Mark::Grant("run-1", "alice")],
                &inv,
                Freshness::Vouched
            ),
            None
        );
    }
}
