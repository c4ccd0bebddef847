//! The benchmark build's counting allocator (`cargo build --features alloc-count`, which
//! `scripts/bench` uses): every allocation, zeroed allocation and reallocation of the process is
//! counted, with its bytes, before it goes to the real allocator. It lives in the binary (the
//! library forbids `unsafe`), which hands [`totals`] to `metrics::count_allocations_with`;
//! `GET /metrics` then exports `a2a_allocations_total` and `a2a_allocated_bytes_total`, and the benchmark divides their
//! growth over a scenario by the requests it answered (the background work of the process,
//! feed polls and upkeep, is counted with it, as its CPU time is).
//!
//! The cost is two relaxed atomic additions per allocation on the thread's own counters; a
//! shipped build has no counter.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

/// Counters per thread, each on its own cache lines: one pair shared by every thread made each
/// allocation of one worker take the line from the other (measured: the counted card at
/// 0.498x raw hyper in a full run, the uncounted one 0.50–0.54x in pairs the same day).
/// Threads past `SHARDS` share them round-robin; the counts stay exact either way.
const SHARDS: usize = 16;

#[repr(align(128))]
struct Shard {
    allocations: AtomicU64,
    bytes: AtomicU64,
}

static COUNTS: [Shard; SHARDS] = [const {
    Shard {
        allocations: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
    }
}; SHARDS];

/// The next thread's shard.
static NEXT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's shard, `usize::MAX` until its first allocation. A `const` thread local
    /// of a type without `Drop`: reading it neither allocates nor registers a destructor.
    static SLOT: Cell<usize> = const { Cell::new(usize::MAX) };
}

fn shard() -> &'static Shard {
    let at = SLOT
        .try_with(|slot| {
            if slot.get() == usize::MAX {
                slot.set(NEXT.fetch_add(1, Relaxed) % SHARDS);
            }
            slot.get()
        })
        // A thread being torn down: any shard counts as well.
        .unwrap_or(0);
    &COUNTS[at]
}

/// Counts what it hands to `A`, the allocator that does the work.
pub struct Counting<A>(pub A);

fn count(bytes: usize) {
    let shard = shard();
    shard.allocations.fetch_add(1, Relaxed);
    shard.bytes.fetch_add(bytes as u64, Relaxed);
}

// SAFETY: every call is passed on unchanged to `A`, which upholds `GlobalAlloc`'s contract; the
// counters neither allocate nor touch the memory.
unsafe impl<A: GlobalAlloc> GlobalAlloc for Counting<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: the caller's contract, passed on.
        unsafe { self.0.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: the caller's contract, passed on.
        unsafe { self.0.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { self.0.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        // SAFETY: the caller's contract, passed on.
        unsafe { self.0.realloc(ptr, layout, new_size) }
    }
}

/// Allocations and bytes allocated since the process started.
pub fn totals() -> (u64, u64) {
    COUNTS.iter().fold((0, 0), |(n, bytes), shard| {
        (
            n + shard.allocations.load(Relaxed),
            bytes + shard.bytes.load(Relaxed),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One test, so no other test's counting runs between its reads.
    #[test]
    fn counts_what_it_passes_on_from_every_thread() {
        static COUNTING: Counting<std::alloc::System> = Counting(std::alloc::System);
        fn alloc_realloc_free() {
            let layout = Layout::from_size_align(100, 8).unwrap();
            // SAFETY: a non-zero layout, freed with the same layout; the reallocation keeps it.
            unsafe {
                let p = COUNTING.alloc(layout);
                assert!(!p.is_null());
                let p = COUNTING.realloc(p, layout, 300);
                COUNTING.dealloc(p, Layout::from_size_align(300, 8).unwrap());
            }
        }
        let before = totals();
        alloc_realloc_free();
        // Other tests of this binary use the system allocator directly, so only ours count.
        let (n, bytes) = totals();
        assert_eq!((n - before.0, bytes - before.1), (2, 400));
        // More threads than shards: every count lands, whichever shard it went to.
        let threads: Vec<_> = (0..2 * SHARDS)
            .map(|_| std::thread::spawn(|| (0..10).for_each(|_| alloc_realloc_free())))
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        let (m, more_bytes) = totals();
        assert_eq!(
            (m - n, more_bytes - bytes),
            (2 * 10 * 2 * SHARDS as u64, 400 * 10 * 2 * SHARDS as u64)
        );
    }
}
