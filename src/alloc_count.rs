//! The benchmark build's counting allocator (`cargo build --features alloc-count`, which
//! `scripts/bench` uses): every allocation, zeroed allocation and reallocation of the process is
//! counted, with its bytes, before it goes to the real allocator. It lives in the binary (the
//! library forbids `unsafe`), which hands [`totals`] to `metrics::count_allocations_with`;
//! `GET /metrics` then exports `a2a_allocations_total` and `a2a_allocated_bytes_total`, and the benchmark divides their
//! growth over a scenario by the requests it answered (the background work of the process,
//! feed polls and upkeep, is counted with it, as its CPU time is).
//!
//! The cost is two relaxed atomic additions per allocation; a shipped build has no counter.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

/// Counts what it hands to `A`, the allocator that does the work.
pub struct Counting<A>(pub A);

fn count(bytes: usize) {
    ALLOCATIONS.fetch_add(1, Relaxed);
    BYTES.fetch_add(bytes as u64, Relaxed);
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
    (ALLOCATIONS.load(Relaxed), BYTES.load(Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_what_it_passes_on() {
        let counting = Counting(std::alloc::System);
        let before = ALLOCATIONS.load(Relaxed);
        let layout = Layout::from_size_align(100, 8).unwrap();
        // SAFETY: a non-zero layout, freed with the same layout; the reallocation keeps it.
        unsafe {
            let p = counting.alloc(layout);
            assert!(!p.is_null());
            let p = counting.realloc(p, layout, 300);
            counting.dealloc(p, Layout::from_size_align(300, 8).unwrap());
        }
        // Other tests of this binary use the system allocator directly, so only ours count.
        assert_eq!(ALLOCATIONS.load(Relaxed) - before, 2);
        let (n, bytes) = totals();
        assert!(n >= 2 && bytes >= 400);
    }
}
